// CUDA kernels of ops/embedding.h (math and conventions there).
//
// Forward launch shape: 256-thread blocks; a token's row is copied by a
// group of 32..256 threads (the smallest power of two with group * 4 >= the
// row's vectors), block / group tokens per block, so hidden 512..8192 rows
// all keep 256-thread blocks busy. Rows move as 16-byte vectors (8 bf16 / 4
// f32) when the table and y are 16-byte aligned and a row is a multiple of
// 16 bytes (checked); otherwise one element per access.
//
// Backward: an fp32 accumulator (the f32 dtable itself, else a scratch
// buffer) is cleared with cudaMemsetAsync (=) or filled from dtable (+=),
// then every token's dy row is added into its id's row with atomics: float4
// atomicAdd (sm_90+; built for an older GPU, four scalar atomicAdds) per 4
// elements when dy and the accumulator allow
// 16-byte access, else scalar atomicAdd; then the accumulator is rounded
// into a bf16 dtable. The conversions are grid-stride over 4-element
// vectors (float4 on the fp32 side), 256-thread blocks, at most SMs x 16.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;

int GroupFor(int64_t nvec) {
  int g = 32;
  while (g < kThreads && int64_t{g} * 4 < nvec) g *= 2;
  return g;
}

template <typename T, int kW>
__global__ void __launch_bounds__(kThreads)
    Lookup(const int32_t* __restrict__ ids, const T* __restrict__ table,
           T* __restrict__ y, int64_t tokens, int64_t vocab, int64_t hidden, int group) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (kThreads / group) + threadIdx.x / group;
  if (t >= tokens) return;
  const int lane = threadIdx.x % group;
  const int32_t id = ids[t];
  const bool ok = id >= 0 && id < vocab;
  const int64_t nvec = hidden / kW;
  using V = Pack<T, kW>;
  V nan;
#pragma unroll
  for (int k = 0; k < kW; ++k) nan.e[k] = dtype_device::FromFloat<T>(__int_as_float(0x7fc00000));
  const V* src = reinterpret_cast<const V*>(table + (ok ? int64_t{id} : 0) * hidden);
  V* dst = reinterpret_cast<V*>(y + t * hidden);
  for (int64_t j = lane; j < nvec; j += group) dst[j] = ok ? src[j] : nan;
}

// dst[i] = src[i] converted, grid-stride over kW-element vectors plus a
// scalar tail.
template <typename S, typename D, int kW>
__global__ void __launch_bounds__(kThreads)
    Convert(const S* __restrict__ src, D* __restrict__ dst, int64_t n) {
  const int64_t nvec = n / kW;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; j < nvec;
       j += static_cast<int64_t>(gridDim.x) * kThreads) {
    float v[kW];
    LoadVec<S, kW>(src + j * kW, v);
    StoreVec<D, kW>(dst + j * kW, v);
  }
  if (blockIdx.x == 0 && threadIdx.x < n - nvec * kW) {
    const int64_t i = nvec * kW + threadIdx.x;
    dst[i] = dtype_device::FromFloat<D>(dtype_device::ToFloat(src[i]));
  }
}

// acc[id * hidden + ...] += dy[t * hidden + ...], one group per token.
// kVec: 4-element float4 atomics (dy loaded 4 at a time).
template <typename T, bool kVec>
__global__ void __launch_bounds__(kThreads)
    Scatter(const int32_t* __restrict__ ids, const T* __restrict__ dy,
            float* __restrict__ acc, int64_t tokens, int64_t vocab, int64_t hidden,
            int group) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * (kThreads / group) + threadIdx.x / group;
  if (t >= tokens) return;
  const int lane = threadIdx.x % group;
  const int32_t id = ids[t];
  if (id < 0 || id >= vocab) return;
  const T* g = dy + t * hidden;
  float* a = acc + int64_t{id} * hidden;
  if constexpr (kVec) {
    for (int64_t j = lane; j < hidden / 4; j += group) {
      float v[4];
      LoadVec<T, 4>(g + j * 4, v);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float4*>(a) + j, make_float4(v[0], v[1], v[2], v[3]));
#else  // float4 atomicAdd is sm_90+: four scalar atomics, the same sums
#pragma unroll
      for (int k = 0; k < 4; ++k) atomicAdd(a + j * 4 + k, v[k]);
#endif
    }
  } else {
    for (int64_t i = lane; i < hidden; i += group) atomicAdd(a + i, dtype_device::ToFloat(g[i]));
  }
}

unsigned StrideGrid(int64_t items) {
  const int64_t cap = int64_t{SmCount()} * 16;
  int64_t b = (items + kThreads - 1) / kThreads;
  if (b > cap) b = cap;
  return static_cast<unsigned>(b < 1 ? 1 : b);
}

// dst (n elements) = src converted; 4-wide when both allow it.
template <typename S, typename D>
void ConvertAll(const S* src, D* dst, int64_t n, cudaStream_t s) {
  if (Aligned16({src, dst})) {
    Convert<S, D, 4><<<StrideGrid(n / 4), kThreads, 0, s>>>(src, dst, n);
  } else {
    Convert<S, D, 1><<<StrideGrid(n), kThreads, 0, s>>>(src, dst, n);
  }
}

template <typename T>
int Forward(const int32_t* ids, const void* table, void* y, int64_t tokens, int64_t vocab,
            int64_t hidden, cudaStream_t s) {
  constexpr int kW = VecWidth<T>();
  const bool vec = hidden % kW == 0 && Aligned16({table, y});
  const int group = GroupFor(vec ? hidden / kW : hidden);
  const unsigned grid = static_cast<unsigned>((tokens + kThreads / group - 1) / (kThreads / group));
  auto* tt = static_cast<const T*>(table);
  auto* yt = static_cast<T*>(y);
  if (vec) {
    Lookup<T, kW><<<grid, kThreads, 0, s>>>(ids, tt, yt, tokens, vocab, hidden, group);
  } else {
    Lookup<T, 1><<<grid, kThreads, 0, s>>>(ids, tt, yt, tokens, vocab, hidden, group);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int Backward(const int32_t* ids, const void* dy, void* dtable, int dtable_dtype,
             bool accumulate, int64_t tokens, int64_t vocab, int64_t hidden,
             cudaStream_t s) {
  const int64_t n = vocab * hidden;
  float* acc = nullptr;
  if (dtable_dtype == dtype_device::kF32) {
    acc = static_cast<float*>(dtable);  // accumulate in place
  } else if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&acc), n * sizeof(float), s);
             e != cudaSuccess) {
    return e;
  }
  cudaError_t e = cudaSuccess;
  if (!accumulate) {
    e = cudaMemsetAsync(acc, 0, n * sizeof(float), s);
  } else if (dtable_dtype != dtype_device::kF32) {
    ConvertAll(static_cast<const __nv_bfloat16*>(dtable), acc, n, s);
    e = cudaGetLastError();
  }
  if (e == cudaSuccess) {
    const bool vec = hidden % 4 == 0 && Aligned16({acc}) &&
                     (reinterpret_cast<uintptr_t>(dy) & (4 * sizeof(T) - 1)) == 0;
    const int group = GroupFor(vec ? hidden / 4 : hidden);
    const unsigned grid =
        static_cast<unsigned>((tokens + kThreads / group - 1) / (kThreads / group));
    auto* dyt = static_cast<const T*>(dy);
    if (vec) {
      Scatter<T, true><<<grid, kThreads, 0, s>>>(ids, dyt, acc, tokens, vocab, hidden, group);
    } else {
      Scatter<T, false><<<grid, kThreads, 0, s>>>(ids, dyt, acc, tokens, vocab, hidden, group);
    }
    e = cudaGetLastError();
  }
  if (e == cudaSuccess && dtable_dtype != dtype_device::kF32) {
    ConvertAll(static_cast<const float*>(acc), static_cast<__nv_bfloat16*>(dtable), n, s);
    e = cudaGetLastError();
  }
  if (dtable_dtype != dtype_device::kF32) cudaFreeAsync(acc, s);
  return static_cast<int>(e);
}

}  // namespace

int LaunchEmbeddingForward(const int32_t* ids, const void* table, void* y,
                           int64_t tokens, int64_t vocab, int64_t hidden,
                           int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    return Forward<__nv_bfloat16>(ids, table, y, tokens, vocab, hidden, s);
  }
  return Forward<float>(ids, table, y, tokens, vocab, hidden, s);
}

int LaunchEmbeddingBackward(const int32_t* ids, const void* dy, void* dtable,
                            int dtable_dtype, bool accumulate, int64_t tokens,
                            int64_t vocab, int64_t hidden, int dtype,
                            void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    return Backward<__nv_bfloat16>(ids, dy, dtable, dtable_dtype, accumulate, tokens, vocab,
                                   hidden, s);
  }
  return Backward<float>(ids, dy, dtable, dtable_dtype, accumulate, tokens, vocab, hidden, s);
}

}  // namespace baton::ops_internal
