#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "baton/scheduler/shard_kernels.h"

namespace baton::scheduler_internal {
namespace {

__device__ float Load(const void* p, size_t i, int dtype) {
  if (dtype == 1) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  if (dtype == 2) return __half2float(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

__device__ void Store(void* p, size_t i, int dtype, float v) {
  if (dtype == 1) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  } else if (dtype == 2) {
    static_cast<__half*>(p)[i] = __float2half_rn(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

__global__ void CastKernel(void* __restrict__ out,
                           const float* __restrict__ master, size_t n,
                           int dtype) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    Store(out, i, dtype, master[i]);
  }
}

__global__ void AccumulateKernel(void* __restrict__ dst,
                                 const void* __restrict__ src, size_t n,
                                 int dtype) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    Store(dst, i, dtype, Load(dst, i, dtype) + Load(src, i, dtype));
  }
}

unsigned Blocks(size_t n) {
  const size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 4096 ? (b == 0 ? 1 : b) : 4096);
}

}  // namespace

int LaunchCastFromF32(void* out, const float* master, size_t n, int dtype,
                      void* stream) {
  if (n == 0) return 0;
  CastKernel<<<Blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      out, master, n, dtype);
  return static_cast<int>(cudaGetLastError());
}

int LaunchAccumulate(void* dst, const void* src, size_t n, int dtype,
                     void* stream) {
  if (n == 0) return 0;
  AccumulateKernel<<<Blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      dst, src, n, dtype);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::scheduler_internal
