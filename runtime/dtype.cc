#include "baton/runtime/dtype.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace baton {

size_t DataTypeSize(DataType t) {
  switch (t) {
    case DataType::kF32:
    case DataType::kI32:
      return 4;
    case DataType::kBF16:
    case DataType::kF16:
      return 2;
  }
  return 0;
}

const char* DataTypeName(DataType t) {
  switch (t) {
    case DataType::kF32:
      return "float";
    case DataType::kBF16:
      return "bfloat16";
    case DataType::kF16:
      return "half";
    case DataType::kI32:
      return "int32";
  }
  return "?";
}

StatusOr<DataType> ParseDataType(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "float" || n == "f32" || n == "float32") return DataType::kF32;
  if (n == "bfloat16" || n == "bf16") return DataType::kBF16;
  if (n == "half" || n == "f16" || n == "float16") return DataType::kF16;
  if (n == "int32" || n == "i32" || n == "int") return DataType::kI32;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown data type '", name, "' (float, bfloat16, half, int32)"));
}

float Bf16ToFloat(uint16_t v) {
  const uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // quiet NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

float F16ToFloat(uint16_t v) {
  const uint32_t sign = (v >> 15) & 1u;
  const int exp = (v >> 10) & 0x1f;
  const uint32_t mant = v & 0x3ffu;
  float mag;
  if (exp == 0) {
    mag = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    mag = mant == 0 ? INFINITY : NAN;
  } else {
    mag = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  return sign ? -mag : mag;
}

uint16_t FloatToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to inf
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: units of 2^-24, nearest even (nearbyint honours it).
    const float units = std::nearbyint(std::ldexp(a, 24));
    return sign | static_cast<uint16_t>(units);
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  // 11 significant bits: mantissa in units of 2^(e-11).
  float units = std::nearbyint(std::ldexp(m, 11));
  if (units >= 2048.0f) {
    units /= 2;
    ++e;
  }
  const uint32_t exp_field = static_cast<uint32_t>(e - 1 + 15);
  const uint32_t mant = static_cast<uint32_t>(units) - 1024u;
  return sign | static_cast<uint16_t>((exp_field << 10) | mant);
}

double LoadAsDouble(const void* data, DataType t, size_t i) {
  switch (t) {
    case DataType::kF32:
      return static_cast<const float*>(data)[i];
    case DataType::kBF16:
      return Bf16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kF16:
      return F16ToFloat(static_cast<const uint16_t*>(data)[i]);
    case DataType::kI32:
      return static_cast<const int32_t*>(data)[i];
  }
  return 0;
}

void StoreFromDouble(void* data, DataType t, size_t i, double v) {
  switch (t) {
    case DataType::kF32:
      static_cast<float*>(data)[i] = static_cast<float>(v);
      return;
    case DataType::kBF16:
      static_cast<uint16_t*>(data)[i] = FloatToBf16(static_cast<float>(v));
      return;
    case DataType::kF16:
      static_cast<uint16_t*>(data)[i] = FloatToF16(static_cast<float>(v));
      return;
    case DataType::kI32:
      static_cast<int32_t*>(data)[i] = static_cast<int32_t>(v);
      return;
  }
}

namespace {

template <float (*Load)(uint16_t)>
void Widen16(float* out, const uint16_t* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Load(in[i]);
}

template <float (*Load)(uint16_t)>
void Accumulate16(float* out, const uint16_t* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] += Load(in[i]);
}

template <uint16_t (*Store)(float)>
void Narrow16(uint16_t* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Store(in[i]);
}

}  // namespace

void WidenToF32(float* dst, const void* src, DataType t, size_t count) {
  switch (t) {
    case DataType::kF32:
    case DataType::kI32:
      std::memcpy(dst, src, count * 4);
      return;
    case DataType::kBF16:
      Widen16<Bf16ToFloat>(dst, static_cast<const uint16_t*>(src), count);
      return;
    case DataType::kF16:
      Widen16<F16ToFloat>(dst, static_cast<const uint16_t*>(src), count);
      return;
  }
}

void NarrowFromF32(void* dst, const float* src, DataType t, size_t count) {
  switch (t) {
    case DataType::kF32:
    case DataType::kI32:
      std::memcpy(dst, src, count * 4);
      return;
    case DataType::kBF16:
      Narrow16<FloatToBf16>(static_cast<uint16_t*>(dst), src, count);
      return;
    case DataType::kF16:
      Narrow16<FloatToF16>(static_cast<uint16_t*>(dst), src, count);
      return;
  }
}

void AccumulateF32(float* dst, const void* src, DataType t, size_t count) {
  switch (t) {
    case DataType::kF32:
      for (size_t i = 0; i < count; ++i) {
        dst[i] += static_cast<const float*>(src)[i];
      }
      return;
    case DataType::kI32:
      // The float side holds int32 bits (see the header); wrap-around like
      // NCCL (unsigned add avoids UB on overflow).
      for (size_t i = 0; i < count; ++i) {
        int32_t* d = static_cast<int32_t*>(static_cast<void*>(dst));
        d[i] = static_cast<int32_t>(
            static_cast<uint32_t>(d[i]) +
            static_cast<uint32_t>(static_cast<const int32_t*>(src)[i]));
      }
      return;
    case DataType::kBF16:
      Accumulate16<Bf16ToFloat>(dst, static_cast<const uint16_t*>(src), count);
      return;
    case DataType::kF16:
      Accumulate16<F16ToFloat>(dst, static_cast<const uint16_t*>(src), count);
      return;
  }
}

namespace {

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void Add16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Store(Load(a[i]) + Load(b[i]));
}

}  // namespace

void AddInto(void* dst, const void* a, const void* b, DataType t,
             size_t count) {
  switch (t) {
    case DataType::kF32:
      // dst may alias a or b, so no __restrict__ here.
      for (size_t i = 0; i < count; ++i) {
        static_cast<float*>(dst)[i] = static_cast<const float*>(a)[i] +
                                      static_cast<const float*>(b)[i];
      }
      return;
    case DataType::kI32:
      for (size_t i = 0; i < count; ++i) {
        // Wrap-around like NCCL (unsigned add avoids UB on overflow).
        static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(
            static_cast<uint32_t>(static_cast<const int32_t*>(a)[i]) +
            static_cast<uint32_t>(static_cast<const int32_t*>(b)[i]));
      }
      return;
    case DataType::kBF16:
      Add16<Bf16ToFloat, FloatToBf16>(static_cast<uint16_t*>(dst),
                                      static_cast<const uint16_t*>(a),
                                      static_cast<const uint16_t*>(b), count);
      return;
    case DataType::kF16:
      Add16<F16ToFloat, FloatToF16>(static_cast<uint16_t*>(dst),
                                    static_cast<const uint16_t*>(a),
                                    static_cast<const uint16_t*>(b), count);
      return;
  }
}

}  // namespace baton
