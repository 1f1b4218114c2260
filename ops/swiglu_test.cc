#include "baton/ops/swiglu.h"

#include <cmath>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Fetch;
using testing::Pack;
using testing::Poisoned;
using testing::Random;
using testing::Shifted;
using testing::Round;
using testing::Upload;

double Sig(double x) { return 1 / (1 + std::exp(-x)); }

class SwiGluTest : public ::testing::TestWithParam<DataType> {};

TEST_P(SwiGluTest, ForwardAndBackwardMatchTheFloat64Reference) {
  const DataType t = GetParam();
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    // Odd sizes (a scalar tail after the 16-byte vectors: n % 8 != 0), a
    // large n, and pointers one element off 16-byte alignment (the scalar
    // kernels of ops/swiglu.cu).
    std::vector<std::tuple<int64_t, int64_t, size_t>> cases = {
        {1, 1, 0}, {3, 7, 0}, {64, 768, 0}, {5, 1001, 0}, {100, 4099, 0},
        {3, 7, DataTypeSize(t)}, {5, 1001, DataTypeSize(t)}};
    // On a GPU, more elements than one pass of the capped grid covers
    // (ops/swiglu.cu: 16 blocks x 132 SMs x 512 threads x 2 vectors), so
    // the grid-stride loop takes a second pass; vector and scalar kernels.
    if (device->kind() == DeviceKind::kCuda) {
      cases.push_back({4100, 4300, 0});
      cases.push_back({4100, 4300, DataTypeSize(t)});
    }
    for (auto [rows, width, shift] : cases) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << width << " shift " << shift);
      auto stream = *device->CreateStream();
      const int64_t n = rows * width;
      const auto g = Round(Random(n, 1 + n, 3.0), t), u = Round(Random(n, 2 + n), t),
                 dh = Round(Random(n, 3 + n), t);
      Shifted bg = Upload(*device, *stream, Pack(g, t), shift),
              bu = Upload(*device, *stream, Pack(u, t), shift),
              bdh = Upload(*device, *stream, Pack(dh, t), shift);
      const size_t bytes = n * DataTypeSize(t);
      Shifted bh = Poisoned(*device, *stream, bytes, shift),
              bdg = Poisoned(*device, *stream, bytes, shift),
              bdu = Poisoned(*device, *stream, bytes, shift);
      const SwiGluShape s{rows, width, t};
      ASSERT_TRUE(SwiGluForward(*stream, s, bg.data(), bu.data(), bh.data()).ok());
      ASSERT_TRUE(SwiGluBackward(*stream, s, bdh.data(), bg.data(), bu.data(), bdg.data(),
                                 bdu.data()).ok());
      std::vector<double> rh(n), rdg(n), rdu(n);
      for (int64_t i = 0; i < n; ++i) {
        const double sg = Sig(g[i]);
        rh[i] = g[i] * sg * u[i];
        rdg[i] = dh[i] * u[i] * sg * (1 + g[i] * (1 - sg));
        rdu[i] = dh[i] * g[i] * sg;
      }
      const double tol = testing::Tolerance(t);
      EXPECT_EQ(Compare("h", Fetch(*stream, bh, n, t), rh, tol), "");
      EXPECT_EQ(Compare("dg", Fetch(*stream, bdg, n, t), rdg, tol), "");
      EXPECT_EQ(Compare("du", Fetch(*stream, bdu, n, t), rdu, tol), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, SwiGluTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return DataTypeName(info.param); });

TEST(SwiGluGradTest, BackwardMatchesFiniteDifferences) {
  const int64_t n = 12;
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const auto g = Random(n, 5, 2.0), u = Random(n, 6), w = Random(n, 7);
  auto loss = [&](const std::vector<double>& gg, const std::vector<double>& uu) {
    double l = 0;
    for (int64_t i = 0; i < n; ++i) l += gg[i] * Sig(gg[i]) * uu[i] * w[i];
    return l;
  };
  std::vector<float> gf(g.begin(), g.end()), uf(u.begin(), u.end()), wf(w.begin(), w.end()),
      dg(n), du(n);
  ASSERT_TRUE(SwiGluBackward(*stream, {3, 4, DataType::kF32}, wf.data(), gf.data(), uf.data(),
                             dg.data(), du.data()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(Compare("dg", {dg.begin(), dg.end()},
                    testing::FiniteDifference([&](const auto& v) { return loss(v, u); }, g),
                    1e-5), "");
  EXPECT_EQ(Compare("du", {du.begin(), du.end()},
                    testing::FiniteDifference([&](const auto& v) { return loss(g, v); }, u),
                    1e-5), "");
}

TEST(SwiGluTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[4] = {};
  EXPECT_EQ(SwiGluForward(*stream, {1, 4, DataType::kF32}, buf, nullptr, buf).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SwiGluForward(*stream, {1, -1, DataType::kF32}, buf, buf, buf).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SwiGluBackward(*stream, {1, 4, DataType::kF16}, buf, buf, buf, buf, buf).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
