// CUDA kernel of ops/cross_entropy.h (math there).
//
// Launch shape: one 512-thread block per token row (vocab 32000..128256 at
// Llama shapes: 4000+ 16-byte vectors per bf16 row, so every thread has
// several; thousands of rows fill 132 SMs). Two passes over the row instead
// of three: an online softmax pass (running max and rescaled sum of exp per
// thread, merged by warp shuffles and shared memory) gives the log-sum-exp;
// the gradient pass re-reads the row (mostly from L2: a row is 64-256 KB)
// and writes dlogits. 16-byte vectors (8 bf16 / 4 f32) when the logits and
// dlogits are 16-byte aligned and a row is a multiple of 16 bytes (checked);
// otherwise one element per access. dlogits may be the logits (in place):
// every thread reads z[row + y] (for the loss) before the block barrier
// that precedes the first write.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 512;

// (m, s) with s = sum exp(z - m), merged with (m2, s2).
__device__ __forceinline__ void Merge(float& m, float& s, float m2, float s2) {
  const float mm = fmaxf(m, m2);
  // A side whose max equals the merged one (both -inf included) needs no
  // rescale: exp(-inf - -inf) would be NaN.
  s = (m == mm ? s : s * expf(m - mm)) + (m2 == mm ? s2 : s2 * expf(m2 - mm));
  m = mm;
}

__device__ __forceinline__ void Add(float& m, float& s, float z) {
  if (z > m) {
    s = s * expf(m - z) + 1.0f;  // m = -inf: s is 0 and exp(-inf) is 0
    m = z;
  } else if (!(z == -INFINITY && m == -INFINITY)) {  // -inf adds exp(-inf) = 0
    s += expf(z - m);
  }
}

template <typename T, int kW>
__global__ void __launch_bounds__(kThreads)
    Xent(const T* z, const int32_t* __restrict__ targets, float* __restrict__ loss,
         T* dz, float scale, int64_t vocab) {
  __shared__ float ms[kThreads / 32], ss[kThreads / 32];
  const int64_t row = static_cast<int64_t>(blockIdx.x) * vocab;
  const int32_t y = targets[blockIdx.x];
  const int64_t nvec = vocab / kW;
  float m = -INFINITY, s = 0;
  for (int64_t j = threadIdx.x; j < nvec; j += kThreads) {
    float v[kW];
    LoadVec<T, kW>(z + row + j * kW, v);
#pragma unroll
    for (int k = 0; k < kW; ++k) Add(m, s, v[k]);
  }
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    Merge(m, s, __shfl_xor_sync(0xffffffffu, m, o), __shfl_xor_sync(0xffffffffu, s, o));
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    ms[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  m = ms[0];
  s = ss[0];
  for (int i = 1; i < kThreads / 32; ++i) Merge(m, s, ms[i], ss[i]);
  const float lse = m + logf(s);
  const bool ok = y >= 0 && y < vocab;
  if (threadIdx.x == 0) {
    loss[blockIdx.x] = ok ? lse - dtype_device::ToFloat(z[row + y])
                          : __int_as_float(0x7fc00000);
  }
  if (dz == nullptr) return;
  __syncthreads();  // every read of z[row + y] is done before an in-place write
  for (int64_t j = threadIdx.x; j < nvec; j += kThreads) {
    float v[kW], o[kW];
    LoadVec<T, kW>(z + row + j * kW, v);
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      o[k] = scale * (expf(v[k] - lse) - (j * kW + k == y ? 1.0f : 0.0f));
    }
    StoreVec<T, kW>(dz + row + j * kW, o);
  }
}

template <typename T>
int Run(const void* logits, const int32_t* targets, float* loss, void* dlogits,
        float scale, int64_t tokens, int64_t vocab, cudaStream_t s) {
  auto* z = static_cast<const T*>(logits);
  auto* dz = static_cast<T*>(dlogits);
  const unsigned grid = static_cast<unsigned>(tokens);
  if (vocab % VecWidth<T>() == 0 && Aligned16({logits, dlogits})) {
    Xent<T, VecWidth<T>()><<<grid, kThreads, 0, s>>>(z, targets, loss, dz, scale, vocab);
  } else {
    Xent<T, 1><<<grid, kThreads, 0, s>>>(z, targets, loss, dz, scale, vocab);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchCrossEntropy(const void* logits, const int32_t* targets, float* loss,
                       void* dlogits, float grad_scale, int64_t tokens,
                       int64_t vocab, int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    return Run<__nv_bfloat16>(logits, targets, loss, dlogits, grad_scale, tokens, vocab, s);
  }
  return Run<float>(logits, targets, loss, dlogits, grad_scale, tokens, vocab, s);
}

}  // namespace baton::ops_internal
