// The CUDA kernels behind runtime/stream_ops.h. Plain header: included by
// nvcc. dtype: DataType's code (0 f32, 1 bf16, 2 f16); `stream` is a
// cudaStream_t. Each returns a cudaError_t value (0 = success).
#ifndef BATON_RUNTIME_STREAM_KERNELS_H_
#define BATON_RUNTIME_STREAM_KERNELS_H_

#include <cstddef>

namespace baton::runtime_internal {

// out[i] = (dtype) src[i]  (round to nearest even)
int LaunchCastFromF32(void* out, const float* src, size_t n, int dtype,
                      void* stream);
// dst[i] = dst[i] + src[i], in fp32 for 16-bit types.
int LaunchAccumulate(void* dst, const void* src, size_t n, int dtype,
                     void* stream);

}  // namespace baton::runtime_internal

#endif  // BATON_RUNTIME_STREAM_KERNELS_H_
