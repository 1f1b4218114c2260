#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "baton/comm/inproc/reduce_kernel.h"
#include "baton/runtime/dtype_device.cuh"

namespace baton::inproc_internal {
namespace {

using dtype_device::FromFloat;
using dtype_device::ToFloat;

struct Sources {
  const void* p[kMaxReduceSources];
};

template <typename T>
__global__ void ReduceFloat(T* out, Sources s, int nsrc, size_t n,
                            int divisor) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float acc = 0.f;
    for (int q = 0; q < nsrc; ++q) acc += ToFloat(static_cast<const T*>(s.p[q])[i]);
    if (divisor != 1) acc /= static_cast<float>(divisor);
    out[i] = FromFloat<T>(acc);
  }
}

__global__ void ReduceInt(int* out, Sources s, int nsrc, size_t n,
                          int divisor) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       i < n; i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned acc = 0;
    for (int q = 0; q < nsrc; ++q) {
      acc += static_cast<unsigned>(static_cast<const int*>(s.p[q])[i]);
    }
    int v = static_cast<int>(acc);
    if (divisor != 1) v /= divisor;
    out[i] = v;
  }
}

}  // namespace

int LaunchReduce(void* out, const void* const* srcs, int nsrc, size_t count,
                 int dtype, int divisor, void* stream) {
  if (count == 0) return 0;
  if (nsrc < 1 || nsrc > kMaxReduceSources) return cudaErrorInvalidValue;
  Sources s;
  for (int q = 0; q < nsrc; ++q) s.p[q] = srcs[q];
  const int threads = 256;
  const size_t want = (count + threads - 1) / threads;
  const int blocks = static_cast<int>(want < 4096 ? want : 4096);
  auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0:
      ReduceFloat<<<blocks, threads, 0, st>>>(static_cast<float*>(out), s,
                                              nsrc, count, divisor);
      break;
    case 1:
      ReduceFloat<<<blocks, threads, 0, st>>>(
          static_cast<__nv_bfloat16*>(out), s, nsrc, count, divisor);
      break;
    case 2:
      ReduceFloat<<<blocks, threads, 0, st>>>(static_cast<__half*>(out), s,
                                              nsrc, count, divisor);
      break;
    case 3:
      ReduceInt<<<blocks, threads, 0, st>>>(static_cast<int*>(out), s, nsrc,
                                            count, divisor);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::inproc_internal
