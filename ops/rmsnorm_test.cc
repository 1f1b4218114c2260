#include "baton/ops/rmsnorm.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

// Float64 reference of the forward (on float inputs).
void ReferenceForward(const std::vector<double>& x, const std::vector<double>& w,
                      int64_t tokens, int64_t hidden, double eps,
                      std::vector<double>& y, std::vector<double>& r) {
  y.assign(tokens * hidden, 0);
  r.assign(tokens, 0);
  for (int64_t t = 0; t < tokens; ++t) {
    double sum = 0;
    for (int64_t i = 0; i < hidden; ++i) sum += x[t * hidden + i] * x[t * hidden + i];
    r[t] = 1.0 / std::sqrt(sum / hidden + eps);
    for (int64_t i = 0; i < hidden; ++i) y[t * hidden + i] = x[t * hidden + i] * r[t] * w[i];
  }
}

using testing::Compare;
using testing::Fetch;
using testing::Pack;
using testing::Poisoned;
using testing::Random;
using testing::Shifted;
using testing::Unpack;
using testing::Upload;

class RmsNormTest : public ::testing::TestWithParam<DataType> {};

// dx is checked both ways: assigned (=) over poison, and added (+=) onto a
// residual gradient already in the buffer.
TEST_P(RmsNormTest, ForwardAndBackwardMatchTheFloat64Reference) {
  const DataType t = GetParam();
  const double tol = testing::Tolerance(t);
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    // Odd shapes for the CUDA kernels' launch math (ops/rmsnorm.cu): rows
    // that are not a multiple of 8 elements (scalar path), rows not
    // filling the last block, rows too long for the register cache
    // (unfused dw; scalar at 5001, vector at 32768), more rows than the
    // persistent backward grid holds; each also 1 element off 16-byte
    // alignment (scalar path).
    for (auto [tokens, hidden, shift] : std::vector<std::tuple<int64_t, int64_t, size_t>>{
             {1, 5, 0}, {3, 7, 0}, {17, 256, 0}, {5, 1000, 0}, {64, 8192, 0},
             {33, 40, 0}, {4, 1001, 0}, {3, 5001, 0}, {2, 32768, 0}, {9000, 16, 0},
             {17, 256, DataTypeSize(t)}, {5, 1000, DataTypeSize(t)},
             {9000, 16, DataTypeSize(t)}}) {
      SCOPED_TRACE(::testing::Message() << tokens << "x" << hidden << " shift " << shift);
      RmsNormShape s{tokens, hidden, t, 1e-5f};
      auto stream = *device->CreateStream();
      const int64_t n = tokens * hidden;
      const auto xs = Pack(Random(n, 1 + hidden), t);
      const auto ws = Pack(Random(hidden, 2 + hidden), t);
      const auto gs = Pack(Random(n, 3 + hidden), t);
      const auto res = Pack(Random(n, 4 + hidden), t);
      const auto x = Unpack(xs, t), w = Unpack(ws, t), g = Unpack(gs, t),
                 r0 = Unpack(res, t);
      const size_t bytes = n * DataTypeSize(t);
      Shifted dx_ = Upload(*device, *stream, xs, shift), dw_ = Upload(*device, *stream, ws, shift),
              dg = Upload(*device, *stream, gs, shift);
      Shifted dy = Poisoned(*device, *stream, bytes, shift);
      DeviceBuffer dr = Poisoned(*device, *stream, tokens * 4);
      Shifted ddx = Poisoned(*device, *stream, bytes, shift);
      Shifted ddx_acc = Upload(*device, *stream, res, shift);
      DeviceBuffer ddw = Poisoned(*device, *stream, hidden * 4);
      DeviceBuffer ddw2 = Poisoned(*device, *stream, hidden * 4);
      DeviceBuffer ddw_again = Poisoned(*device, *stream, hidden * 4);
      // dw += onto a bf16 gradient already there (the accumulating and
      // bf16 branches of the dw finish).
      const auto dw0s = Pack(Random(hidden, 5 + hidden), DataType::kBF16);
      const auto dw0 = Unpack(dw0s, DataType::kBF16);
      DeviceBuffer ddw16 = Upload(*device, *stream, dw0s);
      ASSERT_TRUE(RmsNormForward(*stream, s, dx_.data(), dw_.data(), dy.data(),
                                 static_cast<float*>(dr.data())).ok());
      ASSERT_TRUE(RmsNormBackward(*stream, s, dg.data(), dx_.data(), dw_.data(),
                                  static_cast<const float*>(dr.data()), ddx.data(),
                                  false, ddw.data(), DataType::kF32, false).ok());
      ASSERT_TRUE(RmsNormBackward(*stream, s, dg.data(), dx_.data(), dw_.data(),
                                  static_cast<const float*>(dr.data()),
                                  ddx_acc.data(), true, ddw2.data(),
                                  DataType::kF32, false).ok());
      ASSERT_TRUE(RmsNormBackward(*stream, s, dg.data(), dx_.data(), dw_.data(),
                                  static_cast<const float*>(dr.data()), ddx.data(),
                                  false, ddw_again.data(), DataType::kF32, false).ok());
      ASSERT_TRUE(RmsNormBackward(*stream, s, dg.data(), dx_.data(), dw_.data(),
                                  static_cast<const float*>(dr.data()), ddx.data(),
                                  false, ddw16.data(), DataType::kBF16, true).ok());
      std::vector<double> ry, rr;
      ReferenceForward(x, w, tokens, hidden, 1e-5, ry, rr);
      std::vector<double> rdx(n), rdw(hidden, 0);
      for (int64_t tt = 0; tt < tokens; ++tt) {
        double c = 0;
        for (int64_t i = 0; i < hidden; ++i) c += g[tt * hidden + i] * w[i] * x[tt * hidden + i];
        c /= hidden;
        for (int64_t i = 0; i < hidden; ++i) {
          const int64_t k = tt * hidden + i;
          rdx[k] = rr[tt] * (g[k] * w[i] - x[k] * rr[tt] * rr[tt] * c);
          rdw[i] += g[k] * x[k] * rr[tt];
        }
      }
      std::vector<double> rdx_acc(n);
      for (int64_t k = 0; k < n; ++k) rdx_acc[k] = r0[k] + rdx[k];
      EXPECT_EQ(Compare("y", Fetch(*stream, dy, n, t), ry, tol), "");
      EXPECT_EQ(Compare("rstd", Fetch(*stream, dr, tokens, DataType::kF32), rr, 1e-5), "");
      EXPECT_EQ(Compare("dx", Fetch(*stream, ddx, n, t), rdx, tol), "");
      EXPECT_EQ(Compare("dx (+=)", Fetch(*stream, ddx_acc, n, t), rdx_acc, tol), "");
      EXPECT_EQ(Compare("dw", Fetch(*stream, ddw, hidden, DataType::kF32), rdw, tol), "");
      EXPECT_EQ(Compare("dw", Fetch(*stream, ddw2, hidden, DataType::kF32), rdw, tol), "");
      // dw is deterministic: the same call gives the same bits.
      EXPECT_EQ(testing::Download(*stream, ddw, hidden * 4),
                testing::Download(*stream, ddw_again, hidden * 4));
      std::vector<double> rdw_acc(hidden);
      for (int64_t i = 0; i < hidden; ++i) rdw_acc[i] = dw0[i] + rdw[i];
      EXPECT_EQ(Compare("dw (bf16, +=)", Fetch(*stream, ddw16, hidden, DataType::kBF16),
                        rdw_acc, testing::Tolerance(DataType::kBF16)), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, RmsNormTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16));

// The backward is the derivative of the forward: central differences of
// L = sum(y * g) in float64 against dx and dw from the op (fp32, tiny shape).
TEST(RmsNormGradTest, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 3, hidden = 8;
  const RmsNormShape s{tokens, hidden, DataType::kF32, 1e-5f};
  std::vector<double> x = Random(tokens * hidden, 7), w = Random(hidden, 8),
                      g = Random(tokens * hidden, 9);
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww) {
    std::vector<double> y, r;
    ReferenceForward(xx, ww, tokens, hidden, 1e-5, y, r);
    double l = 0;
    for (size_t k = 0; k < y.size(); ++k) l += y[k] * g[k];
    return l;
  };
  std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()),
      gf(g.begin(), g.end()), y(tokens * hidden), r(tokens),
      dx(tokens * hidden), dw(hidden, 100.0f);
  RmsNormForwardCpu(s, xf.data(), wf.data(), y.data(), r.data());
  RmsNormBackwardCpu(s, gf.data(), xf.data(), wf.data(), r.data(), dx.data(),
                     /*accumulate_dx=*/false, dw.data(), DataType::kF32,
                     /*accumulate_dw=*/true);
  const double h = 1e-6;
  for (int64_t k = 0; k < tokens * hidden; ++k) {
    auto xp = x, xm = x;
    xp[k] += h;
    xm[k] -= h;
    const double fd = (loss(xp, w) - loss(xm, w)) / (2 * h);
    EXPECT_NEAR(dx[k], fd, 1e-4 * (1 + std::abs(fd))) << "dx[" << k << "]";
  }
  for (int64_t i = 0; i < hidden; ++i) {
    auto wp = w, wm = w;
    wp[i] += h;
    wm[i] -= h;
    const double fd = (loss(x, wp) - loss(x, wm)) / (2 * h);
    // accumulate_dw added onto the 100 that was there.
    EXPECT_NEAR(dw[i] - 100.0, fd, 1e-4 * (1 + std::abs(fd))) << "dw[" << i << "]";
  }
}

TEST(RmsNormTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[4] = {};
  RmsNormShape s{1, 4, DataType::kF32, 1e-5f};
  EXPECT_EQ(RmsNormForward(*stream, s, nullptr, buf, buf, buf).code(),
            absl::StatusCode::kInvalidArgument);
  s.hidden = 0;
  EXPECT_EQ(RmsNormForward(*stream, s, buf, buf, buf, buf).code(),
            absl::StatusCode::kInvalidArgument);
  s.hidden = 4;
  s.dtype = DataType::kI32;
  EXPECT_EQ(RmsNormForward(*stream, s, buf, buf, buf, buf).code(),
            absl::StatusCode::kInvalidArgument);
  s.dtype = DataType::kF32;
  EXPECT_EQ(RmsNormBackward(*stream, s, buf, buf, buf, buf, buf, false, buf,
                            DataType::kI32, false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
