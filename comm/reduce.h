// Reductions of the collectives (ReduceOp) and the host loops shared by the
// host-memory backends (inproc, ucx). Element types and their conversions
// are runtime/dtype.h.
//
// A reduction may accumulate in fp32: partial sums then stay float until the
// final store. Pure functions; thread-safe.
#ifndef BATON_COMM_REDUCE_H_
#define BATON_COMM_REDUCE_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"

namespace baton {

// kMax: the element-wise maximum (exact in any type: no fp32 widening,
// CollectiveOptions::accumulate_fp32 is ignored for it).
enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1, kMax = 2 };

const char* ReduceOpName(ReduceOp op);  // "sum", "avg", "max"
StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

// AddInto (dst = a + b in type t) is in runtime/dtype.h.

// x[i] /= divisor for `count` elements (kAvg). i32 divides with truncation,
// as NCCL does.
void DivideInPlace(void* x, DataType t, size_t count, int divisor);

// out[i] = (srcs[0][i] + ... + srcs[nsrc-1][i]) / divisor, summed in that
// order, for `count` elements; `out` may alias any source. Floating types
// accumulate in their own type (rounding after each add) unless
// `accumulate_fp32`, then in float with one rounding at the end. Large
// float sums run as one fused pass (non-temporal stores when `out` overlaps
// no source); the rest works in cache-sized pieces. Results are the same
// either way.
void ReduceSources(void* out, const void* const* srcs, int nsrc, size_t count,
                   DataType t, bool accumulate_fp32, int divisor);

// dst[i] = max(a[i], b[i]) in type t for `count` elements; dst may alias a
// or b. A NaN in either operand gives NaN (as NCCL's max on floats).
void MaxInto(void* dst, const void* a, const void* b, DataType t, size_t count);

// out[i] = max over q of srcs[q][i]; `out` may alias any source.
void MaxSources(void* out, const void* const* srcs, int nsrc, size_t count, DataType t);

// memcpy for host collectives: copies of at least 1 MiB between
// non-overlapping buffers use non-temporal stores, which keep several
// ranks copying at once from contending for the destination lines
// (measured here: 2 concurrent 32 MiB copies ran at 6.0-7.0 GB/s each this
// way vs 5.1-5.3 with memcpy). Smaller or overlapping copies are memcpy.
void CopyBytes(void* dst, const void* src, size_t bytes);

}  // namespace baton

#endif  // BATON_COMM_REDUCE_H_
