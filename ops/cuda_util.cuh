// Device-side helpers shared by the ops' .cu files (plain CUDA; no abseil).
#ifndef BATON_OPS_CUDA_UTIL_CUH_
#define BATON_OPS_CUDA_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace baton::ops_internal {

// dtype codes are DataType's values: 0 f32, 1 bf16.
__device__ __forceinline__ float Ld(const void* p, int64_t i, int dtype) {
  return dtype == 1 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                    : static_cast<const float*>(p)[i];
}

__device__ __forceinline__ void St(void* p, int64_t i, int dtype, float v) {
  if (dtype == 1) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// Sum (or max) over a block of kThreads threads; every thread gets it.
template <int kThreads, bool kMax = false>
__device__ float BlockReduce(float v) {
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = partial[0];
  for (int i = 1; i < kThreads / 32; ++i) {
    total = kMax ? fmaxf(total, partial[i]) : total + partial[i];
  }
  __syncthreads();
  return total;
}

inline unsigned Blocks(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace baton::ops_internal

#endif  // BATON_OPS_CUDA_UTIL_CUH_
