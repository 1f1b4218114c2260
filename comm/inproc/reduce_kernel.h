// Device reduction for the inproc backend on one GPU: out[i] = (sum over q of
// srcs[q][i]) / divisor. Floats and 16-bit types accumulate in fp32 on the
// device (one rounding at the end); int32 in int32. `out` may alias any
// source (each thread reads index i of every source before writing out[i]).
// Plain header: included by nvcc.
#ifndef BATON_COMM_INPROC_REDUCE_KERNEL_H_
#define BATON_COMM_INPROC_REDUCE_KERNEL_H_

#include <cstddef>

namespace baton::inproc_internal {

constexpr int kMaxReduceSources = 64;

// dtype: 0 f32, 1 bf16, 2 f16, 3 i32 (DataType's values). `stream` is a
// cudaStream_t. Returns a cudaError_t value (0 = success).
int LaunchReduce(void* out, const void* const* srcs, int nsrc, size_t count,
                 int dtype, int divisor, void* stream);

}  // namespace baton::inproc_internal

#endif  // BATON_COMM_INPROC_REDUCE_KERNEL_H_
