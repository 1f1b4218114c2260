// CUDA side of ops/rmsnorm.h. Plain header: included by nvcc.
#ifndef BATON_OPS_RMSNORM_KERNEL_H_
#define BATON_OPS_RMSNORM_KERNEL_H_

#include <cstdint>

namespace baton::ops_internal {

// dtype codes: 0 f32, 1 bf16 (DataType's values). Return cudaError_t values.
int LaunchRmsNormForward(const void* x, const void* w, void* y, float* rstd,
                         int64_t tokens, int64_t hidden, int dtype, float eps,
                         void* stream);
int LaunchRmsNormBackward(const void* dy, const void* x, const void* w,
                          const float* rstd, void* dx, void* dw, int dw_dtype,
                          bool accumulate_dw, int64_t tokens, int64_t hidden,
                          int dtype, void* stream);

}  // namespace baton::ops_internal

#endif  // BATON_OPS_RMSNORM_KERNEL_H_
