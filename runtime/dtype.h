// Element types of baton's buffers and their host conversions. Every layer
// uses them (collectives, the step graph, ops), so they live at the bottom.
//
// bf16 and f16 are stored as raw 16-bit patterns; host code widens them to
// float and rounds back to nearest-even.
//
// Pure functions; thread-safe.
#ifndef BATON_RUNTIME_DTYPE_H_
#define BATON_RUNTIME_DTYPE_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"

namespace baton {

enum class DataType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3 };

size_t DataTypeSize(DataType t);
// "float", "bfloat16", "half", "int32" (nccl-tests names).
const char* DataTypeName(DataType t);
// Accepts the names above and short forms f32, bf16, f16, i32, int;
// InvalidArgument naming the unknown name otherwise.
StatusOr<DataType> ParseDataType(absl::string_view name);

float Bf16ToFloat(uint16_t v);
uint16_t FloatToBf16(float f);  // round to nearest even; NaN stays NaN
float F16ToFloat(uint16_t v);
uint16_t FloatToF16(float f);   // round to nearest even; overflow -> inf

// Reads element i of `data` (of type t) as double / writes it from double.
// For tests and checks; exact for every value the types can hold.
double LoadAsDouble(const void* data, DataType t, size_t i);
void StoreFromDouble(void* data, DataType t, size_t i, double v);

// Widening / narrowing copies between a buffer of type t and float.
// For kI32 the "float" side holds the int32 bits unchanged (no conversion),
// so fp32 accumulation is only meaningful for floating types.
void WidenToF32(float* dst, const void* src, DataType t, size_t count);
void NarrowFromF32(void* dst, const float* src, DataType t, size_t count);
// dst[i] += src[i] where dst is float and src of type t (kI32: integer add
// with wrap-around on the int32 bits dst holds).
void AccumulateF32(float* dst, const void* src, DataType t, size_t count);

// dst[i] = a[i] + b[i] for `count` elements of type t (dst may alias a or
// b); 16-bit types add in float and round once; kI32 wraps around.
void AddInto(void* dst, const void* a, const void* b, DataType t, size_t count);

}  // namespace baton

#endif  // BATON_RUNTIME_DTYPE_H_
