// Tiny kernels for the runtime's tests and benchmarks on a GPU. Plain C++
// interface (no abseil) so that the .cu side stays nvcc-only.
#ifndef BATON_RUNTIME_CUDA_TEST_KERNELS_H_
#define BATON_RUNTIME_CUDA_TEST_KERNELS_H_

#include <cuda_runtime_api.h>

namespace baton::testing {

// One thread spins for about `cycles` GPU clock cycles, then stores `value`
// to *dst. Makes a stream busy long enough that missing waits show.
cudaError_t LaunchSpinThenWrite(int* dst, int value, long long cycles,
                                cudaStream_t stream);

// One thread copies *src to *dst.
cudaError_t LaunchCopyInt(const int* src, int* dst, cudaStream_t stream);

// One thread spins until *flag (mapped host memory, set by a host thread)
// is non-zero, or for at most `max_ns` nanoseconds of GPU time. Holds a
// stream without host work (runtime/device.h, rule 7).
cudaError_t LaunchSpinUntilFlag(const int* flag, unsigned long long max_ns,
                                cudaStream_t stream);

// An empty kernel: the launch cost alone.
cudaError_t LaunchEmpty(cudaStream_t stream);

}  // namespace baton::testing

#endif  // BATON_RUNTIME_CUDA_TEST_KERNELS_H_
