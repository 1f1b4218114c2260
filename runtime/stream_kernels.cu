#include <cuda_runtime.h>

#include "baton/runtime/dtype_device.cuh"
#include "baton/runtime/stream_kernels.h"

namespace baton::runtime_internal {
namespace {

using dtype_device::Load;
using dtype_device::Store;

__global__ void CastKernel(void* __restrict__ out, const float* __restrict__ src,
                           size_t n, int dtype) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    Store(out, static_cast<int64_t>(i), dtype, src[i]);
  }
}

// No __restrict__: src may equal dst.
__global__ void AccumulateKernel(void* dst, const void* src, size_t n,
                                 int dtype) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const int64_t k = static_cast<int64_t>(i);
    Store(dst, k, dtype, Load(dst, k, dtype) + Load(src, k, dtype));
  }
}

unsigned Blocks(size_t n) {
  const size_t b = (n + 255) / 256;
  return static_cast<unsigned>(b < 4096 ? (b == 0 ? 1 : b) : 4096);
}

}  // namespace

int LaunchCastFromF32(void* out, const float* src, size_t n, int dtype,
                      void* stream) {
  if (n == 0) return 0;
  CastKernel<<<Blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      out, src, n, dtype);
  return static_cast<int>(cudaGetLastError());
}

int LaunchAccumulate(void* dst, const void* src, size_t n, int dtype,
                     void* stream) {
  if (n == 0) return 0;
  AccumulateKernel<<<Blocks(n), 256, 0, static_cast<cudaStream_t>(stream)>>>(
      dst, src, n, dtype);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::runtime_internal
