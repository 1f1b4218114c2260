// Element types and reductions of the collectives, plus the host reduction
// loops shared by the host-memory backends (inproc, ucx).
//
// bf16 and f16 are stored as raw 16-bit patterns; host code widens them to
// float, adds, and rounds back to nearest-even. A reduction may accumulate in
// fp32 (`Accumulator`): partial sums then stay float until the final store.
#ifndef BATON_COMM_DTYPE_H_
#define BATON_COMM_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "runtime/status.h"

namespace baton {

enum class DataType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3 };
enum class ReduceOp : uint8_t { kSum = 0, kAvg = 1 };

size_t DataTypeSize(DataType t);
// "float", "bfloat16", "half", "int32" (nccl-tests names).
const char* DataTypeName(DataType t);
const char* ReduceOpName(ReduceOp op);
// Accepts the names above and short forms f32, bf16, f16, i32, int.
StatusOr<DataType> ParseDataType(absl::string_view name);
StatusOr<ReduceOp> ParseReduceOp(absl::string_view name);

float Bf16ToFloat(uint16_t v);
uint16_t FloatToBf16(float f);  // round to nearest even; NaN stays NaN
float F16ToFloat(uint16_t v);
uint16_t FloatToF16(float f);   // round to nearest even; overflow -> inf

// Reads element i of `data` (of type t) as double / writes it from double.
// For tests and checks; exact for every value the types can hold.
double LoadAsDouble(const void* data, DataType t, size_t i);
void StoreFromDouble(void* data, DataType t, size_t i, double v);

// dst[i] = a[i] + b[i] for `count` elements of type t (dst may alias a or b).
void AddInto(void* dst, const void* a, const void* b, DataType t, size_t count);

// Widening / narrowing copies between a buffer of type t and float.
// For kI32 the "float" side holds the int32 bits unchanged (no conversion),
// so fp32 accumulation is only meaningful for floating types.
void WidenToF32(float* dst, const void* src, DataType t, size_t count);
void NarrowFromF32(void* dst, const float* src, DataType t, size_t count);
// dst[i] += src[i] where dst is float and src of type t.
void AccumulateF32(float* dst, const void* src, DataType t, size_t count);

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

// memcpy for host collectives: copies of at least 1 MiB between
// non-overlapping buffers use non-temporal stores, which keep several
// ranks copying at once from contending for the destination lines
// (measured here: 2 concurrent 32 MiB copies ran at 6.0-7.0 GB/s each this
// way vs 5.1-5.3 with memcpy). Smaller or overlapping copies are memcpy.
void CopyBytes(void* dst, const void* src, size_t bytes);

}  // namespace baton

#endif  // BATON_COMM_DTYPE_H_
