#include "baton/comm/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

TEST(ReduceTest, ParseReduceOpNamesAndRejectsUnknown) {
  EXPECT_EQ(*ParseReduceOp("sum"), ReduceOp::kSum);
  EXPECT_EQ(*ParseReduceOp("avg"), ReduceOp::kAvg);
  EXPECT_EQ(*ParseReduceOp("max"), ReduceOp::kMax);
  EXPECT_STREQ(ReduceOpName(ReduceOp::kMax), "max");
  auto bad = ParseReduceOp("min");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("min"), std::string::npos);
}

TEST(ReduceTest, MaxSourcesTakesTheLargestWithNegativesAndNaN) {
  for (DataType t : {DataType::kF32, DataType::kBF16, DataType::kF16, DataType::kI32}) {
    const size_t n = 20000;  // spans several internal pieces
    const size_t es = DataTypeSize(t);
    std::vector<char> a(n * es), b(n * es), c(n * es);
    for (size_t i = 0; i < n; ++i) {
      StoreFromDouble(a.data(), t, i, static_cast<double>(i % 7) - 5.0);
      StoreFromDouble(b.data(), t, i, -static_cast<double>(i % 5));
      StoreFromDouble(c.data(), t, i, -3.0);
    }
    const void* srcs[3] = {a.data(), b.data(), c.data()};
    MaxSources(b.data(), srcs, 3, n, t);  // out aliases a source
    for (size_t i = 0; i < n; ++i) {
      const double want = std::max({static_cast<double>(i % 7) - 5.0,
                                    -static_cast<double>(i % 5), -3.0});
      ASSERT_EQ(LoadAsDouble(b.data(), t, i), want) << DataTypeName(t) << " i=" << i;
    }
  }
  float x[2] = {1.0f, std::nanf("")}, y[2] = {std::nanf(""), 2.0f}, z[2];
  MaxInto(z, x, y, DataType::kF32, 2);
  EXPECT_TRUE(std::isnan(z[0]));
  EXPECT_TRUE(std::isnan(z[1]));
}

TEST(ReduceTest, ReduceSourcesSumsAvgAndAliases) {
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

TEST(ReduceTest, Fp32AccumulationKeepsSmallAddends) {
  // 256 + 1 + 1 in bf16: rounding after each add loses both ones (ties to
  // even), fp32 accumulation keeps them (258 is representable).
  uint16_t big = FloatToBf16(256.0f), one = FloatToBf16(1.0f), out;
  const void* srcs[3] = {&big, &one, &one};
  ReduceSources(&out, srcs, 3, 1, DataType::kBF16, false, 1);
  EXPECT_EQ(Bf16ToFloat(out), 256.0f);
  ReduceSources(&out, srcs, 3, 1, DataType::kBF16, true, 1);
  EXPECT_EQ(Bf16ToFloat(out), 258.0f);
}

// The fused fp32 path (>= 1 MiB) gives the same bits as adding in order,
// out of place (streamed stores) and in place, for sum and avg, with a
// tail that is not a multiple of the vector width.
TEST(ReduceTest, LargeFloatReductionsMatchTheOrderedSum) {
  const size_t n = (size_t{1} << 18) + 5;
  for (int nsrc : {1, 2, 3, 5}) {
    for (int divisor : {1, 3}) {
      std::vector<std::vector<float>> src(nsrc, std::vector<float>(n));
      for (int q = 0; q < nsrc; ++q)
        for (size_t i = 0; i < n; ++i) src[q][i] = std::sin(0.001f * i * (q + 1)) * (q + 0.37f);
      std::vector<float> want(n);
      for (size_t i = 0; i < n; ++i) {
        float s = src[0][i];
        for (int q = 1; q < nsrc; ++q) s += src[q][i];
        want[i] = divisor == 1 ? s : s / static_cast<float>(divisor);
      }
      std::vector<const void*> ptrs;
      for (auto& s : src) ptrs.push_back(s.data());
      std::vector<float> out(n, NAN);
      ReduceSources(out.data(), ptrs.data(), nsrc, n, DataType::kF32, false, divisor);
      EXPECT_EQ(std::memcmp(out.data(), want.data(), n * 4), 0) << nsrc << " " << divisor;
      ReduceSources(src[nsrc - 1].data(), ptrs.data(), nsrc, n, DataType::kF32, false, divisor);
      EXPECT_EQ(std::memcmp(src[nsrc - 1].data(), want.data(), n * 4), 0)
          << "in place " << nsrc << " " << divisor;
    }
  }
}

TEST(ReduceTest, CopyBytesCopiesLargeUnalignedAndOverlapping) {
  const size_t n = (size_t{3} << 20) + 7;
  std::vector<unsigned char> src(n + 64), dst(n + 64, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
  for (size_t off : {0, 1, 9}) {
    std::fill(dst.begin(), dst.end(), 0);
    CopyBytes(dst.data() + off, src.data() + 3, n);
    EXPECT_EQ(std::memcmp(dst.data() + off, src.data() + 3, n), 0) << off;
    EXPECT_EQ(dst[off + n], 0) << "wrote past the end";
  }
  // Overlapping: memmove semantics.
  std::vector<unsigned char> buf(src.begin(), src.end()), want(src.begin(), src.end());
  std::memmove(want.data() + 5, want.data(), n);
  CopyBytes(buf.data() + 5, buf.data(), n);
  EXPECT_EQ(buf, want);
  CopyBytes(nullptr, nullptr, 0);  // nothing to do
}

}  // namespace
}  // namespace baton
