#include "baton/ops/rotary.h"

#include <cmath>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Fetch;
using testing::Pack;
using testing::Random;
using testing::Shifted;
using testing::Round;
using testing::Upload;

// Float64 rotation by sign * angle, half-split layout.
std::vector<double> Rotate(const RotaryShape& s, std::vector<double> x, double sign) {
  const int64_t half = s.head_dim / 2;
  for (int64_t t = 0; t < s.batch * s.seq; ++t) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < half; ++i) {
        const double a = sign * (t % s.seq) * std::pow(s.theta, -2.0 * i / s.head_dim);
        const int64_t k = (t * s.heads + h) * s.head_dim + i;
        const double x1 = x[k], x2 = x[k + half];
        x[k] = x1 * std::cos(a) - x2 * std::sin(a);
        x[k + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    }
  }
  return x;
}

class RotaryTest : public ::testing::TestWithParam<DataType> {};

// Forward against float64; backward is the transpose (inverse) rotation.
TEST_P(RotaryTest, ForwardAndBackwardMatchTheFloat64Reference) {
  const DataType t = GetParam();
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    // head_dim / 2 not a multiple of 8 (scalar kernel of ops/rotary.cu),
    // heads not a multiple of the kernel's 8-head chunks, and x one element
    // off 16-byte alignment (scalar kernel).
    for (auto [s, shift] : std::vector<std::pair<RotaryShape, size_t>>{
             {RotaryShape{1, 1, 1, 2, 10000.0, t}, 0},
             {RotaryShape{2, 5, 3, 8, 10000.0, t}, 0},
             {RotaryShape{2, 128, 4, 64, 500000.0, t}, 0},
             {RotaryShape{1, 33, 11, 48, 10000.0, t}, 0},
             {RotaryShape{2, 17, 9, 24, 10000.0, t}, 0},
             {RotaryShape{2, 7, 5, 20, 10000.0, t}, 0},  // half 10: scalar in f32 too
             {RotaryShape{2, 128, 4, 64, 500000.0, t}, DataTypeSize(t)}}) {
      SCOPED_TRACE(::testing::Message() << s.heads << "x" << s.head_dim << " shift " << shift);
      auto stream = *device->CreateStream();
      const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
      const auto x = Round(Random(n, 1 + n), t), dy = Round(Random(n, 2 + n), t);
      Shifted bx = Upload(*device, *stream, Pack(x, t), shift),
              bdy = Upload(*device, *stream, Pack(dy, t), shift);
      ASSERT_TRUE(RotaryForward(*stream, s, bx.data()).ok());
      ASSERT_TRUE(RotaryBackward(*stream, s, bdy.data()).ok());
      const double tol = testing::Tolerance(t);
      EXPECT_EQ(Compare("y", Fetch(*stream, bx, n, t), Rotate(s, x, 1), tol), "");
      EXPECT_EQ(Compare("dx", Fetch(*stream, bdy, n, t), Rotate(s, dy, -1), tol), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RotaryTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return DataTypeName(info.param); });

TEST(RotaryGradTest, BackwardMatchesFiniteDifferences) {
  const RotaryShape s{1, 3, 2, 4, 10000.0, DataType::kF32};
  const int64_t n = 24;
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const auto x = Random(n, 3), g = Random(n, 4);
  auto loss = [&](const std::vector<double>& xx) {
    const auto y = Rotate(s, xx, 1);
    double l = 0;
    for (int64_t i = 0; i < n; ++i) l += y[i] * g[i];
    return l;
  };
  std::vector<float> gf(g.begin(), g.end());
  ASSERT_TRUE(RotaryBackward(*stream, s, gf.data()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(Compare("dx", {gf.begin(), gf.end()}, testing::FiniteDifference(loss, x), 1e-5), "");
}

TEST(RotaryTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[8] = {};
  EXPECT_EQ(RotaryForward(*stream, {1, 1, 1, 3, 10000.0, DataType::kF32}, buf).code(),
            absl::StatusCode::kInvalidArgument);  // odd head_dim
  EXPECT_EQ(RotaryForward(*stream, {1, 1, 1, 4, 0.0, DataType::kF32}, buf).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RotaryForward(*stream, {1, 1, 1, 4, 10000.0, DataType::kF32}, nullptr).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
