// CUDA kernels of ops/nf4.h (packing and math there).
//
// Pack: one 256-thread block per group of 256 quantization blocks (thread
// t owns block t of the group: its absmax, then its 64 codes as 32 bytes);
// the group's scale is a block max-reduction. Dequantize: one thread per
// code byte (two elements), grid-stride. Every float operation is an
// explicitly rounded intrinsic, so both compute the CPU path's bits.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kBlock = 64;    // ops::kNf4Block
constexpr int kGroup = 256;   // ops::kNf4Group, also the threads of Pack

struct Tables {
  float c4[16];
  float c8[256];
};

// Number of the 15 NF4 midpoints below x.
__device__ __forceinline__ uint8_t Nearest4(const float* mid4, float x) {
  uint8_t q = 0;
#pragma unroll
  for (int i = 0; i < 15; ++i) q += mid4[i] < x ? 1 : 0;
  return q;
}

// Number of the 255 code8 midpoints below x (binary search).
__device__ __forceinline__ uint8_t Nearest8(const float* mid8, float x) {
  int lo = 0, hi = 255;
  while (lo < hi) {
    const int m = (lo + hi) >> 1;
    if (mid8[m] < x) {
      lo = m + 1;
    } else {
      hi = m;
    }
  }
  return static_cast<uint8_t>(lo);
}

__global__ void __launch_bounds__(kGroup)
    PackGroups(const float* __restrict__ x, int64_t n, uint8_t* __restrict__ base,
               int64_t absmax_at, int64_t scales_at, Tables t) {
  __shared__ float mid4[16], mid8[256], c4[16], c8[256];
  const int tid = threadIdx.x;
  c8[tid] = t.c8[tid];
  if (tid < 16) c4[tid] = t.c4[tid];
  __syncthreads();
  if (tid < 255) mid8[tid] = __fmul_rn(0.5f, __fadd_rn(c8[tid], c8[tid + 1]));
  if (tid < 15) mid4[tid] = __fmul_rn(0.5f, __fadd_rn(c4[tid], c4[tid + 1]));
  __syncthreads();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  const int64_t b = int64_t{blockIdx.x} * kGroup + tid;
  const int64_t begin = b * kBlock;
  const int64_t end = b < blocks ? min(n, begin + kBlock) : begin;
  float m = 0.0f;
  for (int64_t i = begin; i < end; ++i) m = fmaxf(m, fabsf(x[i]));
  const float scale = BlockReduce<kGroup, true>(m);
  if (tid == 0) reinterpret_cast<float*>(base + scales_at)[blockIdx.x] = scale;
  if (b >= blocks) return;
  const uint8_t q = scale > 0.0f ? Nearest8(mid8, __fdiv_rn(m, scale)) : Nearest8(mid8, 0.0f);
  base[absmax_at + b] = q;
  const float a = __fmul_rn(c8[q], scale);
  const uint8_t zero = Nearest4(mid4, 0.0f);
  for (int64_t i = begin; i < end; i += 2) {
    const uint8_t lo = a > 0.0f ? Nearest4(mid4, __fdiv_rn(x[i], a)) : zero;
    const uint8_t hi =
        i + 1 < end ? (a > 0.0f ? Nearest4(mid4, __fdiv_rn(x[i + 1], a)) : zero) : 0;
    base[i / 2] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

template <typename T>
__global__ void Unpack(const uint8_t* __restrict__ base, int64_t n, int64_t absmax_at,
                           int64_t scales_at, T* __restrict__ out, Tables t) {
  const uint8_t* absmax = base + absmax_at;
  const float* scales = reinterpret_cast<const float*>(base + scales_at);
  const int64_t pairs = (n + 1) / 2;
  for (int64_t p = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; p < pairs;
       p += int64_t{gridDim.x} * blockDim.x) {
    const int64_t i = 2 * p, b = i / kBlock;  // 2p and 2p + 1 share a block
    const float a = __fmul_rn(t.c8[absmax[b]], scales[b / kGroup]);
    const uint8_t byte = base[p];
    out[i] = dtype_device::FromFloat<T>(__fmul_rn(t.c4[byte & 0xF], a));
    if (i + 1 < n) out[i + 1] = dtype_device::FromFloat<T>(__fmul_rn(t.c4[byte >> 4], a));
  }
}

Tables MakeTables(const float* code4, const float* code8) {
  Tables t;
  for (int i = 0; i < 16; ++i) t.c4[i] = code4[i];
  for (int i = 0; i < 256; ++i) t.c8[i] = code8[i];
  return t;
}

}  // namespace

int LaunchNf4Pack(const float* values, int64_t n, void* packed, int64_t absmax_at,
                  int64_t scales_at, int64_t bytes, const float* code4, const float* code8,
                  void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  // The alignment pad between absmax and scales is zero, as on the host.
  cudaError_t e = cudaMemsetAsync(packed, 0, static_cast<size_t>(bytes), s);
  if (e != cudaSuccess) return static_cast<int>(e);
  const int64_t groups = (n + int64_t{kBlock} * kGroup - 1) / (int64_t{kBlock} * kGroup);
  PackGroups<<<static_cast<unsigned>(groups), kGroup, 0, s>>>(
      values, n, static_cast<uint8_t*>(packed), absmax_at, scales_at, MakeTables(code4, code8));
  return static_cast<int>(cudaGetLastError());
}

int LaunchNf4Dequantize(const void* packed, int64_t n, int64_t absmax_at, int64_t scales_at,
                        void* out, int out_dtype, const float* code4, const float* code8,
                        void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  constexpr int kThreads = 256;
  const int64_t pairs = (n + 1) / 2;
  int64_t grid = (pairs + kThreads - 1) / kThreads;
  const int64_t cap = int64_t{SmCount()} * 16;
  if (grid > cap) grid = cap;
  const Tables t = MakeTables(code4, code8);
  const auto* base = static_cast<const uint8_t*>(packed);
  if (out_dtype == dtype_device::kBF16) {
    Unpack<__nv_bfloat16><<<static_cast<unsigned>(grid), kThreads, 0, s>>>(
        base, n, absmax_at, scales_at, static_cast<__nv_bfloat16*>(out), t);
  } else {
    Unpack<float><<<static_cast<unsigned>(grid), kThreads, 0, s>>>(
        base, n, absmax_at, scales_at, static_cast<float*>(out), t);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
