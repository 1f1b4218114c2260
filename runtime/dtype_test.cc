#include "baton/runtime/dtype.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

TEST(DtypeTest, Sizes) {
  EXPECT_EQ(DataTypeSize(DataType::kF32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kBF16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kF16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kI32), 4u);
}

TEST(DtypeTest, ParseNamesAndRejectsUnknown) {
  EXPECT_EQ(*ParseDataType("float"), DataType::kF32);
  EXPECT_EQ(*ParseDataType("bf16"), DataType::kBF16);
  EXPECT_EQ(*ParseDataType("half"), DataType::kF16);
  EXPECT_EQ(*ParseDataType("int32"), DataType::kI32);
  auto bad = ParseDataType("float8");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("float8"), std::string::npos);
}

TEST(DtypeTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(FloatToBf16(1.0f), 0x3f80);
  EXPECT_EQ(Bf16ToFloat(0x3f80), 1.0f);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1.0).
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is halfway between 1+2^-7 (odd) and 1+2^-6: rounds up.
  EXPECT_EQ(FloatToBf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(Bf16ToFloat(FloatToBf16(NAN))));
}

TEST(DtypeTest, F16MatchesExactValuesAndRounding) {
  EXPECT_EQ(FloatToF16(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16(65504.0f), 0x7bff);
  EXPECT_EQ(FloatToF16(1e6f), 0x7c00);               // overflow -> inf
  EXPECT_EQ(FloatToF16(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToF16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie, even
  // Every f16 bit pattern (finite) survives a round trip through float.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    if (((h >> 10) & 0x1f) == 0x1f) continue;
    ASSERT_EQ(FloatToF16(F16ToFloat(h)), h) << std::hex << b;
  }
}

}  // namespace
}  // namespace baton
