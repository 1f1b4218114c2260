#include "baton/ops/adamw.h"

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

struct Want {
  std::vector<double> master, m, v;
};

// Float64 AdamW, several steps.
Want Reference(const AdamWConfig& c, std::vector<double> master, std::vector<double> m,
               std::vector<double> v, const std::vector<std::vector<double>>& grads,
               double scale, int64_t first_step) {
  for (size_t k = 0; k < grads.size(); ++k) {
    const int64_t step = first_step + k;
    const double bc1 = 1 - std::pow(double{c.beta1}, step), bc2 = 1 - std::pow(double{c.beta2}, step);
    for (size_t i = 0; i < master.size(); ++i) {
      const double g = grads[k][i] * scale;
      m[i] = c.beta1 * m[i] + (1 - double{c.beta1}) * g;
      v[i] = c.beta2 * v[i] + (1 - double{c.beta2}) * g * g;
      master[i] = master[i] * (1 - double{c.lr} * c.weight_decay) -
                  c.lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + c.eps);
    }
  }
  return {master, m, v};
}

class AdamWTest : public ::testing::TestWithParam<DataType> {};

// Three steps with a gradient in the param dtype; master and moments
// against float64, and the fused cast against the master rounded.
TEST_P(AdamWTest, StepsMatchTheFloat64Reference) {
  const DataType t = GetParam();  // gradient and param dtype
  const AdamWConfig c{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    // n % 4 != 0 (the scalar tail of ops/adamw.cu), a large n, and the
    // state (s) or the gradient and param (g) one element off their vector
    // alignment (the scalar kernel).
    std::vector<std::tuple<int64_t, size_t, size_t>> cases = {
        {1, 0, 0}, {7, 0, 0}, {4099, 0, 0}, {300007, 0, 0},
        {4099, 4, 0}, {4099, 0, DataTypeSize(t)}};
    // On a GPU, more elements than one pass of the capped grid covers
    // (ops/adamw.cu), so the grid-stride loop takes a second pass.
    if (device->kind() == DeviceKind::kCuda) {
      cases.push_back({4400003, 0, 0});
      cases.push_back({4400003, 4, 0});
    }
    for (auto [n, s_shift, g_shift] : cases) {
      SCOPED_TRACE(::testing::Message() << n << " shifts " << s_shift << " " << g_shift);
      auto stream = *device->CreateStream();
      const auto master = Random(n, 1 + n);
      const auto m0 = Random(n, 2 + n, 0.01);
      std::vector<double> v0 = Random(n, 3 + n, 0.01);
      for (double& e : v0) e = e * e;
      std::vector<std::vector<double>> grads;
      for (int k = 0; k < 3; ++k) grads.push_back(Round(Random(n, 10 + k + n), t));
      const auto want = Reference(c, Round(master, DataType::kF32), Round(m0, DataType::kF32),
                                  Round(v0, DataType::kF32), grads, 0.25, 5);
      Shifted bm = Upload(*device, *stream, Pack(master, DataType::kF32), s_shift),
              bm1 = Upload(*device, *stream, Pack(m0, DataType::kF32), s_shift),
              bm2 = Upload(*device, *stream, Pack(v0, DataType::kF32), s_shift),
              bp = Poisoned(*device, *stream, n * DataTypeSize(t), g_shift);
      std::vector<Shifted> bg;
      for (const auto& g : grads) bg.push_back(Upload(*device, *stream, Pack(g, t), g_shift));
      for (int k = 0; k < 3; ++k) {
        AdamWArgs a;
        a.n = n;
        a.step = 5 + k;
        a.grad_scale = 0.25f;
        a.master = static_cast<float*>(bm.data());
        a.grad = bg[k].data();
        a.grad_dtype = t;
        a.moment1 = static_cast<float*>(bm1.data());
        a.moment2 = static_cast<float*>(bm2.data());
        a.param = k == 2 ? bp.data() : nullptr;
        a.param_dtype = t;
        ASSERT_TRUE(AdamWStep(*stream, c, a).ok());
      }
      EXPECT_EQ(Compare("master", Fetch(*stream, bm, n, DataType::kF32), want.master, 1e-5), "");
      EXPECT_EQ(Compare("moment1", Fetch(*stream, bm1, n, DataType::kF32), want.m, 1e-5), "");
      EXPECT_EQ(Compare("moment2", Fetch(*stream, bm2, n, DataType::kF32), want.v, 1e-5), "");
      const auto got_master = Fetch(*stream, bm, n, DataType::kF32);
      EXPECT_EQ(Compare("param", Fetch(*stream, bp, n, t), Round(got_master, t), 0), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AdamWTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return DataTypeName(info.param); });

TEST(AdamWTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[4] = {};
  AdamWArgs a;
  a.n = 4;
  a.master = a.moment1 = a.moment2 = buf;
  a.grad = buf;
  EXPECT_TRUE(AdamWStep(*stream, {}, a).ok());
  AdamWConfig bad;
  bad.beta2 = 1.0f;
  EXPECT_EQ(AdamWStep(*stream, bad, a).code(), absl::StatusCode::kInvalidArgument);
  a.step = 0;
  EXPECT_EQ(AdamWStep(*stream, {}, a).code(), absl::StatusCode::kInvalidArgument);
  a.step = 1;
  a.grad = nullptr;
  EXPECT_EQ(AdamWStep(*stream, {}, a).code(), absl::StatusCode::kInvalidArgument);
  a.grad = buf;
  a.grad_dtype = DataType::kI32;
  EXPECT_EQ(AdamWStep(*stream, {}, a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
