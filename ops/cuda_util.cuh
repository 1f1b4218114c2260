// Device-side helpers shared by the ops' .cu files (plain CUDA; no abseil).
#ifndef BATON_OPS_CUDA_UTIL_CUH_
#define BATON_OPS_CUDA_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "baton/runtime/dtype_device.cuh"

namespace baton::ops_internal {

// Element loads and stores by dtype code (DataType's values; the ops take
// f32 and bf16): the project's one device-side helper.
using dtype_device::Load;
using dtype_device::Store;

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
