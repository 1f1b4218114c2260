// The host optimizer of ZeRO-Offload: AdamW over an fp32 master shard and
// its two moments held in host memory, fused with the cast of the updated
// master into the parameter-dtype shard that feeds the next all-gather (one
// pass over memory), split over a HostPool's threads and vectorized (AVX2
// when the CPU has it, checked at run time; a portable loop otherwise).
//
// Math: exactly ops/adamw.h (decoupled weight decay, bias corrections at the
// 1-based `step`, grad * grad_scale first), with the same float operations in
// the same order, so the results are bit-identical to AdamWStep's CPU path
// for every thread count and either code path: the divisions and square
// roots are IEEE-exact in both, no FMA contraction is used, and the work runs
// with subnormals flushed (FTZ/DAZ) as AdamWStep's host work does.
//
// Memory (per element): reads master, moment1, moment2 (fp32) and grad
// (f32 or bf16); writes master, moment1, moment2 and param (if given):
// 24 + gradient + param bytes: 28 with a bf16 gradient and a bf16 param,
// 32 with f32 for both.
//
// Buffers are host memory (plain or pinned, runtime/pinned_host.h), must not
// overlap, and need no alignment. `args.param` may be null (no cast).
#ifndef BATON_OPS_HOST_ADAMW_H_
#define BATON_OPS_HOST_ADAMW_H_

#include <cstdint>

#include "baton/ops/adamw.h"
#include "baton/ops/host_pool.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

// Which inner loop HostAdamW uses.
enum class HostSimd {
  kAuto,      // AVX2 when the CPU supports it, else portable
  kPortable,  // plain C++ loop (the compiler may still vectorize it)
  kAvx2,      // FailedPrecondition when the CPU lacks AVX2
};

// "avx2" or "portable": what kAuto picks on this machine.
const char* HostSimdName();

// Runs the update on the calling thread and `pool`'s threads (null: the
// calling thread only) and returns when it is done. Elements are split into
// fixed ranges of whole cache lines; each range is one task, so the result
// does not depend on the pool. Errors: CheckAdamWArgs (ops/adamw.h), and
// FailedPrecondition for kAvx2 on a CPU without it; nothing is written then.
Status HostAdamW(const AdamWConfig& config, const AdamWArgs& args,
                 HostPool* pool, HostSimd simd = HostSimd::kAuto);

// HostAdamW over the elements whose column is not skipped: args.n elements
// of a row-major matrix with `cols` columns, element i of the buffers being
// element first + i of the matrix, in column (first + i) % cols; elements
// whose column has skip_column[column] != 0 are neither read nor written
// (their moments stay as they are). The update of every other element is
// bit-identical to HostAdamW's. ZenFlow's host path (ops/zenflow.h) uses it
// for the unselected columns. InvalidArgument for cols < 1, first < 0 or a
// null skip_column, besides HostAdamW's errors.
Status HostAdamWSkipping(const AdamWConfig& config, const AdamWArgs& args,
                         const uint8_t* skip_column, int64_t first,
                         int64_t cols, HostPool* pool,
                         HostSimd simd = HostSimd::kAuto);

// HostAdamW as host work on `stream` (runtime/device.h "Work"): the
// arguments are checked now, the update runs in stream order. On a CUDA
// stream it runs through the driver's host-function thread, so it can follow
// the device-to-host copy of the gradient shard on the same stream; the
// buffers must be host memory either way. `pool` (may be null) and the
// buffers must stay valid until it has run. The pool's workers are threads
// of the caller, which rule 7 allows host work to wait for.
Status HostAdamWOnStream(Stream& stream, const AdamWConfig& config,
                         const AdamWArgs& args, HostPool* pool);

}  // namespace baton::ops

#endif  // BATON_OPS_HOST_ADAMW_H_
