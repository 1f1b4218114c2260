#include "ops/rmsnorm.h"

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"

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

std::vector<double> Random(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0, 1);
  std::vector<double> v(n);
  for (double& e : v) e = d(rng);
  return v;
}

// Host buffers in `dtype` holding `v` (rounded for bf16), and back.
std::vector<uint8_t> Pack(const std::vector<double>& v, DataType t) {
  std::vector<uint8_t> out(v.size() * DataTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) StoreFromDouble(out.data(), t, i, v[i]);
  return out;
}
std::vector<double> Unpack(const std::vector<uint8_t>& b, DataType t) {
  std::vector<double> v(b.size() / DataTypeSize(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = LoadAsDouble(b.data(), t, i);
  return v;
}

struct Devices {
  std::vector<std::unique_ptr<Device>> list;
  Devices() {
    list.push_back(*CreateHostDevice());
    if (CudaDeviceCount() > 0) list.push_back(*CreateCudaDevice(0));
  }
};

// Copies host bytes into a fresh device buffer.
DeviceBuffer Upload(Device& d, Stream& s, const std::vector<uint8_t>& bytes) {
  DeviceBuffer b = *d.Allocate(bytes.size());
  EXPECT_TRUE(s.MemcpyAsync(b.data(), bytes.data(), bytes.size()).ok());
  EXPECT_TRUE(s.Synchronize().ok());  // `bytes` may be a temporary
  return b;
}
std::vector<uint8_t> Download(Stream& s, const DeviceBuffer& b, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  EXPECT_TRUE(s.MemcpyAsync(out.data(), b.data(), bytes).ok());
  EXPECT_TRUE(s.Synchronize().ok());
  return out;
}
std::vector<uint8_t> Poison(size_t bytes) { return std::vector<uint8_t>(bytes, 0xFF); }

class RmsNormTest : public ::testing::TestWithParam<DataType> {};

TEST_P(RmsNormTest, ForwardAndBackwardMatchTheFloat64Reference) {
  const DataType t = GetParam();
  const double tol = t == DataType::kF32 ? 1e-5 : 1e-2;
  for (auto& device : Devices().list) {
    SCOPED_TRACE(device->name());
    for (auto [tokens, hidden] : {std::pair<int64_t, int64_t>{1, 5}, {3, 7},
                                  {17, 256}, {5, 1000}, {64, 8192}}) {
      RmsNormShape s{tokens, hidden, t, 1e-5f};
      auto stream = *device->CreateStream();
      const auto xs = Pack(Random(tokens * hidden, 1 + hidden), t);
      const auto ws = Pack(Random(hidden, 2 + hidden), t);
      const auto gs = Pack(Random(tokens * hidden, 3 + hidden), t);
      const auto x = Unpack(xs, t), w = Unpack(ws, t), g = Unpack(gs, t);
      const size_t bytes = tokens * hidden * DataTypeSize(t);
      DeviceBuffer dx_ = Upload(*device, *stream, xs), dw_ = Upload(*device, *stream, ws),
                   dg = Upload(*device, *stream, gs);
      DeviceBuffer dy = Upload(*device, *stream, Poison(bytes));
      DeviceBuffer dr = Upload(*device, *stream, Poison(tokens * 4));
      DeviceBuffer ddx = Upload(*device, *stream, Poison(bytes));
      DeviceBuffer ddw = Upload(*device, *stream, Poison(hidden * 4));
      ASSERT_TRUE(RmsNormForward(*stream, s, dx_.data(), dw_.data(), dy.data(),
                                 static_cast<float*>(dr.data())).ok());
      ASSERT_TRUE(RmsNormBackward(*stream, s, dg.data(), dx_.data(), dw_.data(),
                                  static_cast<const float*>(dr.data()), ddx.data(),
                                  ddw.data(), DataType::kF32, false).ok());
      const auto y = Unpack(Download(*stream, dy, bytes), t);
      const auto dxv = Unpack(Download(*stream, ddx, bytes), t);
      const auto dwv = Unpack(Download(*stream, ddw, hidden * 4), DataType::kF32);
      std::vector<double> ry, rr;
      ReferenceForward(x, w, tokens, hidden, 1e-5, ry, rr);
      // Reference backward in float64.
      std::vector<double> rdx(tokens * hidden), rdw(hidden, 0);
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
      // Error relative to the value, or to the output's rms where terms cancel.
      auto rms = [](const std::vector<double>& v) {
        double sq = 0;
        for (double e : v) sq += e * e;
        return std::sqrt(sq / v.size());
      };
      const double y_rms = rms(ry), dx_rms = rms(rdx), dw_rms = rms(rdw);
      auto close = [&](double got, double want, double scale) {
        return std::isfinite(got) && std::abs(got - want) <= tol * (std::abs(want) + scale);
      };
      for (int64_t k = 0; k < tokens * hidden; ++k) {
        ASSERT_TRUE(close(y[k], ry[k], y_rms)) << "y[" << k << "] " << y[k] << " vs " << ry[k];
        ASSERT_TRUE(close(dxv[k], rdx[k], dx_rms)) << "dx[" << k << "] " << dxv[k] << " vs " << rdx[k];
      }
      for (int64_t i = 0; i < hidden; ++i) {
        ASSERT_TRUE(close(dwv[i], rdw[i], dw_rms))
            << "dw[" << i << "] " << dwv[i] << " vs " << rdw[i];
      }
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
                     dw.data(), DataType::kF32, /*accumulate_dw=*/true);
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
  EXPECT_EQ(RmsNormBackward(*stream, s, buf, buf, buf, buf, buf, buf,
                            DataType::kI32, false).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
