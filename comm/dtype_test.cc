#include "comm/dtype.h"

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
  EXPECT_EQ(*ParseReduceOp("avg"), ReduceOp::kAvg);
  EXPECT_FALSE(ParseReduceOp("max").ok());
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

TEST(DtypeTest, ReduceSourcesSumsAvgAndAliases) {
  for (DataType t : {DataType::kF32, DataType::kBF16, DataType::kF16,
                     DataType::kI32}) {
    for (bool acc : {false, true}) {
      const size_t n = 20000;  // spans several internal pieces
      const size_t es = DataTypeSize(t);
      std::vector<char> a(n * es), b(n * es), c(n * es);
      for (size_t i = 0; i < n; ++i) {
        StoreFromDouble(a.data(), t, i, static_cast<double>(i % 7));
        StoreFromDouble(b.data(), t, i, static_cast<double>(i % 5));
        StoreFromDouble(c.data(), t, i, -1.0);
      }
      // Out aliases the second source (the in-place reduce-scatter case).
      const void* srcs[3] = {a.data(), b.data(), c.data()};
      ReduceSources(b.data(), srcs, 3, n, t, acc, 1);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(LoadAsDouble(b.data(), t, i),
                  static_cast<double>(i % 7 + i % 5) - 1.0)
            << DataTypeName(t) << " i=" << i;
      }
      ReduceSources(a.data(), srcs, 1, n, t, acc, 2);  // avg of one over 2
      for (size_t i = 0; i < n; i += 97) {
        const double want = t == DataType::kI32
                                ? static_cast<double>((i % 7) / 2)
                                : (i % 7) / 2.0;
        ASSERT_EQ(LoadAsDouble(a.data(), t, i), want) << DataTypeName(t);
      }
    }
  }
}

TEST(DtypeTest, Fp32AccumulationKeepsSmallAddends) {
  // 256 + 1 + 1 in bf16: rounding after each add loses both ones (ties to
  // even), fp32 accumulation keeps them (258 is representable).
  uint16_t big = FloatToBf16(256.0f), one = FloatToBf16(1.0f), out;
  const void* srcs[3] = {&big, &one, &one};
  ReduceSources(&out, srcs, 3, 1, DataType::kBF16, false, 1);
  EXPECT_EQ(Bf16ToFloat(out), 256.0f);
  ReduceSources(&out, srcs, 3, 1, DataType::kBF16, true, 1);
  EXPECT_EQ(Bf16ToFloat(out), 258.0f);
}

}  // namespace
}  // namespace baton
