// Device kernels the executor runs itself (the trainer's kernels live in
// ops/): the fp32 master -> parameter-dtype cast that feeds the all-gather,
// and the gradient-shard accumulation after a micro-step's reduce-scatter.
// Plain header: included by nvcc.
#ifndef BATON_SCHEDULER_SHARD_KERNELS_H_
#define BATON_SCHEDULER_SHARD_KERNELS_H_

#include <cstddef>

namespace baton::scheduler_internal {

// dtype: 0 f32, 1 bf16, 2 f16 (DataType's values). `stream`: cudaStream_t.
// Return a cudaError_t value (0 = success).
// out[i] = (dtype) master[i]  (round to nearest even)
int LaunchCastFromF32(void* out, const float* master, size_t n, int dtype,
                      void* stream);
// dst[i] = dst[i] + src[i], in fp32 for 16-bit types.
int LaunchAccumulate(void* dst, const void* src, size_t n, int dtype,
                     void* stream);

}  // namespace baton::scheduler_internal

#endif  // BATON_SCHEDULER_SHARD_KERNELS_H_
