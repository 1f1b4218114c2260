// Element-wise work enqueued on a Stream, on either kind of device: host
// work on a host stream, a kernel on a CUDA stream, with the same results
// (16-bit types computed in float and rounded to nearest even once).
//
// RunOnStream is the one host-or-CUDA dispatch of the project: the ops'
// launchers (ops/op_util.h) and the executor's own element-wise steps go
// through it. CastFromF32 and AccumulateInto are the executor's (the
// master-to-parameter cast before an all-gather, the gradient-shard
// accumulation after a micro-step's reduce-scatter).
//
// Contract (as every launcher): arguments are checked first (InvalidArgument
// naming the op and the argument; nothing is enqueued then); the work is
// enqueued on `stream` and the call returns; pointers must stay valid, and
// be memory of the stream's device, until the work has run.
#ifndef BATON_RUNTIME_STREAM_OPS_H_
#define BATON_RUNTIME_STREAM_OPS_H_

#include <cstddef>
#include <functional>

#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"

namespace baton {

// Enqueues `host` as host work on a host stream, or calls
// `cuda(native stream)` (a kernel launch returning a cudaError_t value, 0 on
// success; an error becomes Internal naming `op`) on a CUDA stream. `cuda`
// is null in builds without CUDA: Unimplemented naming `op` then.
Status RunOnStream(Stream& stream, const char* op, std::function<Status()> host,
                   std::function<int(void*)> cuda);

// dst[i] = (t) src[i] for `count` elements; t is f32, bf16 or f16.
Status CastFromF32(Stream& stream, void* dst, const float* src, DataType t,
                   size_t count);

// dst[i] = dst[i] + src[i] for `count` elements of type t (f32, bf16 or
// f16); src may equal dst.
Status AccumulateInto(Stream& stream, void* dst, const void* src, DataType t,
                      size_t count);

}  // namespace baton

#endif  // BATON_RUNTIME_STREAM_OPS_H_
