#include "baton/runtime/cuda_test_kernels.h"

namespace baton::testing {
namespace {

__global__ void SpinThenWriteKernel(int* dst, int value, long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {
  }
  *dst = value;
}

__global__ void CopyIntKernel(const int* __restrict__ src,
                              int* __restrict__ dst) {
  *dst = *src;
}

__device__ unsigned long long GlobalTimerNs() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void SpinUntilFlagKernel(const volatile int* flag,
                                    unsigned long long max_ns) {
  const unsigned long long start = GlobalTimerNs();
  while (*flag == 0 && GlobalTimerNs() - start < max_ns) {
    __nanosleep(1000);
  }
}

__global__ void EmptyKernel() {}

}  // namespace

cudaError_t LaunchSpinThenWrite(int* dst, int value, long long cycles,
                                cudaStream_t stream) {
  SpinThenWriteKernel<<<1, 1, 0, stream>>>(dst, value, cycles);
  return cudaGetLastError();
}

cudaError_t LaunchCopyInt(const int* src, int* dst, cudaStream_t stream) {
  CopyIntKernel<<<1, 1, 0, stream>>>(src, dst);
  return cudaGetLastError();
}

cudaError_t LaunchSpinUntilFlag(const int* flag, unsigned long long max_ns,
                                cudaStream_t stream) {
  SpinUntilFlagKernel<<<1, 1, 0, stream>>>(flag, max_ns);
  return cudaGetLastError();
}

cudaError_t LaunchEmpty(cudaStream_t stream) {
  EmptyKernel<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

}  // namespace baton::testing
