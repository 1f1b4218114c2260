#include "baton/ops/linear.h"

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
using testing::Round;
using testing::Upload;

// c[m,n] = sum_p a(i,p) b(p,j) in float64 with accessors.
template <typename A, typename B>
std::vector<double> MatMul(int64_t m, int64_t n, int64_t k, A a, B b) {
  std::vector<double> c(m * n, 0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t p = 0; p < k; ++p) s += a(i, p) * b(p, j);
      c[i * n + j] = s;
    }
  }
  return c;
}

std::vector<double> Add(std::vector<double> a, const std::vector<double>& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

class LinearTest : public ::testing::TestWithParam<DataType> {};

// y, dx and dw each both ways: assigned over poison and added onto values
// already there.
TEST_P(LinearTest, ForwardAndBackwardMatchTheFloat64Reference) {
  const DataType t = GetParam();
  const double tol = testing::Tolerance(t);
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    for (auto [rows, in, out] :
         {std::tuple<int64_t, int64_t, int64_t>{1, 1, 1}, {3, 5, 7}, {17, 64, 48},
          {33, 130, 257}, {128, 256, 768}}) {
      SCOPED_TRACE(::testing::Message() << rows << "x" << in << "->" << out);
      auto stream = *device->CreateStream();
      const LinearShape s{rows, in, out, t};
      const auto x = Round(Random(rows * in, 1 + in), t);
      const auto w = Round(Random(out * in, 2 + out), t);
      const auto dy = Round(Random(rows * out, 3 + rows), t);
      const auto y0 = Round(Random(rows * out, 4), t);
      const auto dx0 = Round(Random(rows * in, 5), t);
      const auto dw0 = Random(out * in, 6);
      DeviceBuffer bx = Upload(*device, *stream, Pack(x, t)),
                   bw = Upload(*device, *stream, Pack(w, t)),
                   bdy = Upload(*device, *stream, Pack(dy, t));
      const size_t es = DataTypeSize(t);
      DeviceBuffer by = Poisoned(*device, *stream, rows * out * es);
      DeviceBuffer by_acc = Upload(*device, *stream, Pack(y0, t));
      DeviceBuffer bdx = Poisoned(*device, *stream, rows * in * es);
      DeviceBuffer bdx_acc = Upload(*device, *stream, Pack(dx0, t));
      DeviceBuffer bdw = Poisoned(*device, *stream, out * in * 4);
      DeviceBuffer bdw_acc = Upload(*device, *stream, Pack(dw0, DataType::kF32));
      ASSERT_TRUE(LinearForward(*stream, s, bx.data(), bw.data(), by.data()).ok());
      ASSERT_TRUE(LinearForward(*stream, s, bx.data(), bw.data(), by_acc.data(), true).ok());
      ASSERT_TRUE(LinearBackward(*stream, s, bdy.data(), bx.data(), bw.data(), bdx.data(),
                                 false, bdw.data(), DataType::kF32, false).ok());
      ASSERT_TRUE(LinearBackward(*stream, s, bdy.data(), bx.data(), bw.data(),
                                 bdx_acc.data(), true, bdw_acc.data(), DataType::kF32,
                                 true).ok());
      const auto ry = MatMul(rows, out, in, [&](int64_t i, int64_t p) { return x[i * in + p]; },
                             [&](int64_t p, int64_t j) { return w[j * in + p]; });
      const auto rdx = MatMul(rows, in, out, [&](int64_t i, int64_t p) { return dy[i * out + p]; },
                              [&](int64_t p, int64_t j) { return w[p * in + j]; });
      const auto rdw = MatMul(out, in, rows, [&](int64_t i, int64_t p) { return dy[p * out + i]; },
                              [&](int64_t p, int64_t j) { return x[p * in + j]; });
      EXPECT_EQ(Compare("y", Fetch(*stream, by, rows * out, t), ry, tol), "");
      EXPECT_EQ(Compare("y (+=)", Fetch(*stream, by_acc, rows * out, t), Add(y0, ry), tol), "");
      EXPECT_EQ(Compare("dx", Fetch(*stream, bdx, rows * in, t), rdx, tol), "");
      EXPECT_EQ(Compare("dx (+=)", Fetch(*stream, bdx_acc, rows * in, t), Add(dx0, rdx), tol), "");
      EXPECT_EQ(Compare("dw", Fetch(*stream, bdw, out * in, DataType::kF32), rdw, tol), "");
      EXPECT_EQ(Compare("dw (+=)", Fetch(*stream, bdw_acc, out * in, DataType::kF32),
                        Add(dw0, rdw), tol), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LinearTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return DataTypeName(info.param); });

// L = sum(y * g): dx and dw from the op against central differences.
TEST(LinearGradTest, BackwardMatchesFiniteDifferences) {
  const int64_t rows = 3, in = 4, out = 5;
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const auto x = Random(rows * in, 11), w = Random(out * in, 12), g = Random(rows * out, 13);
  auto loss = [&](const std::vector<double>& xx, const std::vector<double>& ww) {
    double l = 0;
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < out; ++j) {
        double y = 0;
        for (int64_t p = 0; p < in; ++p) y += xx[i * in + p] * ww[j * in + p];
        l += y * g[i * out + j];
      }
    return l;
  };
  std::vector<float> xf(x.begin(), x.end()), wf(w.begin(), w.end()), gf(g.begin(), g.end()),
      dx(rows * in), dw(out * in);
  ASSERT_TRUE(LinearBackward(*stream, {rows, in, out, DataType::kF32}, gf.data(), xf.data(),
                             wf.data(), dx.data(), false, dw.data(), DataType::kF32, false)
                  .ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  const auto fdx = testing::FiniteDifference([&](const auto& v) { return loss(v, w); }, x);
  const auto fdw = testing::FiniteDifference([&](const auto& v) { return loss(x, v); }, w);
  EXPECT_EQ(Compare("dx", {dx.begin(), dx.end()}, fdx, 1e-5), "");
  EXPECT_EQ(Compare("dw", {dw.begin(), dw.end()}, fdw, 1e-5), "");
}

TEST(LinearTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[16] = {};
  LinearShape s{2, 2, 2, DataType::kF32};
  auto code = [](const Status& st) { return st.code(); };
  EXPECT_EQ(code(LinearForward(*stream, s, nullptr, buf, buf)), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LinearForward(*stream, {0, 2, 2, DataType::kF32}, buf, buf, buf)),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(LinearForward(*stream, {2, 2, 2, DataType::kI32}, buf, buf, buf)),
            absl::StatusCode::kInvalidArgument);
  // dx and dw both null: nothing to compute.
  EXPECT_EQ(code(LinearBackward(*stream, s, buf, buf, buf, nullptr, false, nullptr,
                                DataType::kF32, false)),
            absl::StatusCode::kInvalidArgument);
  // A bfloat16 gradient of fp32 inputs is refused, not silently rounded.
  const Status st = LinearBackward(*stream, s, buf, buf, buf, buf, false, buf,
                                   DataType::kBF16, false);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bfloat16"), std::string::npos) << st;
  // dx may be null: only dw is computed.
  EXPECT_TRUE(LinearBackward(*stream, s, buf, buf, buf, nullptr, false, buf + 8,
                             DataType::kF32, false).ok());
  // dw may be null (a frozen weight): only dx, equal to dy w.
  float dy[4] = {1, 2, 3, 4}, w[4] = {1, 0, 0, 2}, dx[4] = {};
  EXPECT_TRUE(LinearBackward(*stream, s, dy, buf, w, dx, false, nullptr, DataType::kF32,
                             false).ok());
  EXPECT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(std::vector<float>(dx, dx + 4), (std::vector<float>{1, 4, 3, 8}));
}

}  // namespace
}  // namespace baton::ops
