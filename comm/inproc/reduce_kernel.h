// Device kernels of the inproc backend on one GPU: the whole data movement
// of one collective for all ranks in one or two launches (the event
// protocol of inproc.h enqueues it on one stream).
//
// LaunchReduce: for b in [0, nblocks), i in [0, count):
//   v = (sum over q of srcs[q][b * count + i]) / divisor
//   (with `max` set: the maximum over q instead, divisor unused)
//   all_outputs == 0: outs[b][i] = v            (reduce-scatter)
//   all_outputs == 1: outs[o][i] = v for every o (all-reduce, nblocks 1)
// Floats and 16-bit types accumulate in fp32 on the device (one rounding at
// the end); int32 in int32. An output may alias the source element it
// replaces (each thread reads index (b, i) of every source before writing
// it), which makes in-place calls exact.
//
// LaunchCopies: `n` byte copies (dst[k] <- src[k], bytes[k]) in one launch;
// copies must not overlap one another's destinations or a destination and
// a source of another copy.
//
// Plain header: included by nvcc.
#ifndef BATON_COMM_INPROC_REDUCE_KERNEL_H_
#define BATON_COMM_INPROC_REDUCE_KERNEL_H_

#include <cstddef>

namespace baton::inproc_internal {

constexpr int kMaxReduceSources = 64;
// Copies per launch of LaunchCopies (the caller splits larger batches).
constexpr int kMaxCopies = 64;

// dtype: 0 f32, 1 bf16, 2 f16, 3 i32 (DataType's values). `stream` is a
// cudaStream_t. Return a cudaError_t value (0 = success).
int LaunchReduce(void* const* outs, int nout, const void* const* srcs,
                 int nsrc, size_t count, int nblocks, int all_outputs,
                 int dtype, int divisor, int max, void* stream);

int LaunchCopies(void* const* dst, const void* const* src,
                 const size_t* bytes, int n, void* stream);

}  // namespace baton::inproc_internal

#endif  // BATON_COMM_INPROC_REDUCE_KERNEL_H_
