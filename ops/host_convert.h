// Host conversions between float and the ops' element types (f32, bf16) for
// the CPU paths of ops/: inline forms of runtime/dtype.h's Bf16ToFloat and
// FloatToBf16 (the same bits for every input: round to nearest even, NaN to
// the quiet NaN 0x7fc0), and whole-row conversions that use AVX2 when the
// CPU has it (checked at run time; the project compiles for baseline
// x86-64) and a scalar loop otherwise, with identical results.
//
// Pure functions; thread-safe.
#ifndef BATON_OPS_HOST_CONVERT_H_
#define BATON_OPS_HOST_CONVERT_H_

#include <cstdint>
#include <cstring>

#include "baton/runtime/dtype.h"

namespace baton::ops {

inline float Bf16BitsToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

inline uint16_t FloatToBf16Bits(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

// Element i of p (dtype t, f32 or bf16) as a pointer.
inline const void* ElementAt(const void* p, DataType t, int64_t i) {
  return static_cast<const char*>(p) + i * (t == DataType::kBF16 ? 2 : 4);
}
inline void* ElementAt(void* p, DataType t, int64_t i) {
  return static_cast<char*>(p) + i * (t == DataType::kBF16 ? 2 : 4);
}

// out[i] = p[i] widened to float, for i < n (p: f32 or bf16).
void WidenRow(const void* p, DataType t, int64_t n, float* out);
// p[i] = in[i] rounded to t (f32 or bf16), for i < n.
void NarrowRow(const float* in, int64_t n, DataType t, void* p);

// True when the row conversions use AVX2 on this CPU.
bool HostConvertUsesAvx2();

}  // namespace baton::ops

#endif  // BATON_OPS_HOST_CONVERT_H_
