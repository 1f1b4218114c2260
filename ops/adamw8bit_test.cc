#include "baton/ops/adamw8bit.h"

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Download;
using testing::Fetch;
using testing::Pack;
using testing::Random;
using testing::Round;
using testing::Upload;

// The state of n elements: codes and block absmax of both moments.
struct State {
  std::vector<uint8_t> q1, q2;
  std::vector<float> a1, a2;
};

State RandomState(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  State s;
  for (int64_t i = 0; i < n; ++i) {
    s.q1.push_back(static_cast<uint8_t>(rng() % 256));
    s.q2.push_back(static_cast<uint8_t>(rng() % 256));
  }
  for (int64_t b = 0; b < AdamW8bitBlocks(n); ++b) {
    s.a1.push_back(0.01f * static_cast<float>(1 + rng() % 100));
    s.a2.push_back(1e-4f * static_cast<float>(1 + rng() % 100));
  }
  return s;
}

// One step in float64 from `s` (the same dequantization, update and
// nearest-code requantization), and for each element the normalized
// moments the requantization rounded.
struct Want {
  std::vector<double> master;
  State state;
  std::vector<double> x1, x2;  // m / absmax, v / absmax
};

uint8_t NearestDouble(const std::array<float, 256>& code, double x) {
  int q = 0;
  for (int i = 0; i < 255; ++i) {
    if ((double{code[i]} + code[i + 1]) / 2 < x) q = i + 1;
  }
  return static_cast<uint8_t>(q);
}

Want Reference(const AdamWConfig& c, std::vector<double> master, const State& s,
               const std::vector<double>& grad, double scale, int64_t step) {
  const auto& c1 = DynamicCode(true);
  const auto& c2 = DynamicCode(false);
  const double bc1 = 1 - std::pow(double{c.beta1}, step);
  const double bc2 = 1 - std::pow(double{c.beta2}, step);
  const int64_t n = static_cast<int64_t>(master.size());
  Want w;
  w.state = s;
  w.x1.resize(n);
  w.x2.resize(n);
  for (int64_t b = 0; b < AdamW8bitBlocks(n); ++b) {
    const int64_t begin = b * kAdamW8bitBlock;
    const int64_t end = std::min(n, begin + kAdamW8bitBlock);
    std::vector<double> m(end - begin), v(end - begin);
    double max1 = 0, max2 = 0;
    for (int64_t i = begin; i < end; ++i) {
      const double g = grad[i] * scale;
      m[i - begin] = c.beta1 * (double{c1[s.q1[i]]} * s.a1[b]) + (1 - double{c.beta1}) * g;
      v[i - begin] = c.beta2 * (double{c2[s.q2[i]]} * s.a2[b]) + (1 - double{c.beta2}) * g * g;
      master[i] = master[i] * (1 - double{c.lr} * c.weight_decay) -
                  c.lr * (m[i - begin] / bc1) / (std::sqrt(v[i - begin] / bc2) + c.eps);
      max1 = std::max(max1, std::abs(m[i - begin]));
      max2 = std::max(max2, v[i - begin]);
    }
    w.state.a1[b] = static_cast<float>(max1);
    w.state.a2[b] = static_cast<float>(max2);
    for (int64_t i = begin; i < end; ++i) {
      w.x1[i] = max1 > 0 ? m[i - begin] / max1 : 0;
      w.x2[i] = max2 > 0 ? v[i - begin] / max2 : 0;
      w.state.q1[i] = NearestDouble(c1, w.x1[i]);
      w.state.q2[i] = NearestDouble(c2, w.x2[i]);
    }
  }
  w.master = master;
  return w;
}

// "" when every code is the reference's, or its neighbour where the
// reference's normalized value lies within 1e-5 of the midpoint between
// them (float rounding may fall either side there).
std::string CompareCodes(const char* what, const std::array<float, 256>& code,
                         const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                         const std::vector<double>& x) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] == want[i]) continue;
    const int lo = std::min(got[i], want[i]);
    const double mid = (double{code[lo]} + code[lo + 1]) / 2;
    if (std::abs(got[i] - want[i]) == 1 && std::abs(x[i] - mid) <= 1e-5) continue;
    return ::testing::PrintToString(what) + " code " + std::to_string(i) + ": got " +
           std::to_string(got[i]) + ", want " + std::to_string(want[i]) + " (x " +
           std::to_string(x[i]) + ")";
  }
  return "";
}

TEST(AdamW8bitTest, CodesAreDynamicSortedAndNearestRounds) {
  for (bool is_signed : {true, false}) {
    SCOPED_TRACE(is_signed ? "signed" : "unsigned");
    const auto& code = DynamicCode(is_signed);
    for (int i = 0; i + 1 < 256; ++i) EXPECT_LT(code[i], code[i + 1]) << i;
    EXPECT_EQ(code[255], 1.0f);
    // Signed: 1 has no negative partner (255 values and 0), so -1 stores
    // as the largest negative value, 0.7% short.
    if (is_signed) {
      EXPECT_LT(code[0], -0.99f);
      EXPECT_GT(code[0], -1.0f);
    } else {
      EXPECT_EQ(code[0], 0.0f);
    }
    // Values per decade: signed 1, 2, ..., 64 for 1e-6 .. 1 (and the
    // 1.0); unsigned twice as many.
    int per_decade[7] = {};
    for (float v : code) {
      if (v <= 0 || v >= 1) continue;
      const int e = static_cast<int>(std::floor(-std::log10(v)));
      ASSERT_GE(e, 0);
      ASSERT_LE(e, 6);
      ++per_decade[e];
    }
    for (int e = 0; e <= 6; ++e) EXPECT_EQ(per_decade[e], (is_signed ? 64 : 128) >> e) << e;
    // Nearest: each value maps to itself, a midpoint to the smaller, just
    // past it to the larger; the ends clamp.
    for (int i = 0; i < 256; ++i) EXPECT_EQ(NearestCode(code, code[i]), i);
    for (int i = 0; i + 1 < 256; ++i) {
      const float mid = 0.5f * (code[i] + code[i + 1]);
      EXPECT_EQ(NearestCode(code, mid), i);
      EXPECT_EQ(NearestCode(code, std::nextafter(mid, 2.0f)), i + 1);
    }
    EXPECT_EQ(NearestCode(code, 5.0f), 255);
    EXPECT_EQ(NearestCode(code, -5.0f), 0);
  }
}

class AdamW8bitStepTest
    : public ::testing::TestWithParam<std::tuple<DataType, bool>> {};

// Three steps, each against the float64 reference run from the state the
// kernel left: master, absmax and codes (codes exact but where float
// rounding may fall on either side of a midpoint), and the fused cast
// against the master rounded.
TEST_P(AdamW8bitStepTest, StepsMatchTheFloat64Reference) {
  const auto [t, with_param] = GetParam();  // gradient and param dtype
  const AdamWConfig c{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    std::vector<int64_t> sizes = {1, 7, 2048, 2049, 3 * 2048 + 5, 100003};
    if (device->kind() == DeviceKind::kCuda) sizes.push_back(2048 * 2000 + 3);  // grid-stride
    for (int64_t n : sizes) {
      SCOPED_TRACE(::testing::Message() << n << " elements");
      auto stream = *device->CreateStream();
      const int64_t nb = AdamW8bitBlocks(n);
      std::vector<double> master = Round(Random(n, 1 + n), DataType::kF32);
      State s = RandomState(n, 7 + n);
      auto bytes_of = [](const auto& v) {
        std::vector<uint8_t> b(v.size() * sizeof(v[0]));
        std::memcpy(b.data(), v.data(), b.size());
        return b;
      };
      DeviceBuffer bm = Upload(*device, *stream, Pack(master, DataType::kF32));
      DeviceBuffer bq1 = Upload(*device, *stream, s.q1), bq2 = Upload(*device, *stream, s.q2);
      DeviceBuffer ba1 = Upload(*device, *stream, bytes_of(s.a1));
      DeviceBuffer ba2 = Upload(*device, *stream, bytes_of(s.a2));
      DeviceBuffer bp = testing::Poisoned(*device, *stream, n * DataTypeSize(t));
      for (int k = 0; k < 3; ++k) {
        SCOPED_TRACE(::testing::Message() << "step " << k + 1);
        const std::vector<double> grad = Round(Random(n, 10 + k + n), t);
        DeviceBuffer bg = Upload(*device, *stream, Pack(grad, t));
        const Want want = Reference(c, master, s, grad, 0.25, 5 + k);
        AdamW8bitArgs a;
        a.n = n;
        a.step = 5 + k;
        a.grad_scale = 0.25f;
        a.master = static_cast<float*>(bm.data());
        a.grad = bg.data();
        a.grad_dtype = t;
        a.moment1 = static_cast<uint8_t*>(bq1.data());
        a.moment2 = static_cast<uint8_t*>(bq2.data());
        a.absmax1 = static_cast<float*>(ba1.data());
        a.absmax2 = static_cast<float*>(ba2.data());
        a.param = with_param ? bp.data() : nullptr;
        a.param_dtype = t;
        ASSERT_TRUE(AdamW8bitStep(*stream, c, a).ok());
        master = Fetch(*stream, bm, n, DataType::kF32);
        s.q1 = Download(*stream, bq1, n);
        s.q2 = Download(*stream, bq2, n);
        std::vector<double> got_a1 = Fetch(*stream, ba1, nb, DataType::kF32);
        std::vector<double> got_a2 = Fetch(*stream, ba2, nb, DataType::kF32);
        EXPECT_EQ(Compare("master", master, want.master, 1e-5), "");
        std::vector<double> want_a1(want.state.a1.begin(), want.state.a1.end());
        std::vector<double> want_a2(want.state.a2.begin(), want.state.a2.end());
        EXPECT_EQ(Compare("absmax1", got_a1, want_a1, 1e-5), "");
        EXPECT_EQ(Compare("absmax2", got_a2, want_a2, 1e-5), "");
        EXPECT_EQ(CompareCodes("moment1", DynamicCode(true), s.q1, want.state.q1, want.x1), "");
        EXPECT_EQ(CompareCodes("moment2", DynamicCode(false), s.q2, want.state.q2, want.x2), "");
        for (int64_t b = 0; b < nb; ++b) {
          s.a1[b] = static_cast<float>(got_a1[b]);
          s.a2[b] = static_cast<float>(got_a2[b]);
        }
        if (with_param) {
          EXPECT_EQ(Compare("param", Fetch(*stream, bp, n, t), Round(master, t), 0), "");
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Dtypes, AdamW8bitStepTest,
    ::testing::Combine(::testing::Values(DataType::kF32, DataType::kBF16), ::testing::Bool()),
    [](const auto& info) {
      return absl::StrCat(DataTypeName(std::get<0>(info.param)),
                          std::get<1>(info.param) ? "_cast" : "_nocast");
    });

// The state of a block depends only on that block: stepping the first
// three blocks and the rest as two calls (two shards split at a block
// boundary) writes the same bytes as one call over everything.
TEST(AdamW8bitTest, SplittingAtABlockBoundaryChangesNothing) {
  const AdamWConfig c{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    auto stream = *device->CreateStream();
    const int64_t n = 5 * kAdamW8bitBlock + 100, split = 3 * kAdamW8bitBlock;
    const std::vector<double> master = Random(n, 3), grad = Random(n, 4);
    auto run = [&](bool halves) {
      DeviceBuffer bm = Upload(*device, *stream, Pack(master, DataType::kF32));
      DeviceBuffer bg = Upload(*device, *stream, Pack(grad, DataType::kF32));
      DeviceBuffer bq = Upload(*device, *stream, std::vector<uint8_t>(2 * n, 0));
      DeviceBuffer ba = Upload(*device, *stream, std::vector<uint8_t>(8 * 6, 0));
      for (int step = 1; step <= 3; ++step) {
        auto call = [&](int64_t first, int64_t count) {
          AdamW8bitArgs a;
          a.n = count;
          a.step = step;
          a.master = static_cast<float*>(bm.data()) + first;
          a.grad = static_cast<const float*>(bg.data()) + first;
          a.moment1 = static_cast<uint8_t*>(bq.data()) + first;
          a.moment2 = static_cast<uint8_t*>(bq.data()) + n + first;
          a.absmax1 = static_cast<float*>(ba.data()) + first / kAdamW8bitBlock;
          a.absmax2 = static_cast<float*>(ba.data()) + 6 + first / kAdamW8bitBlock;
          return AdamW8bitStep(*stream, c, a);
        };
        if (halves) {
          EXPECT_TRUE(call(0, split).ok());
          EXPECT_TRUE(call(split, n - split).ok());
        } else {
          EXPECT_TRUE(call(0, n).ok());
        }
      }
      std::vector<uint8_t> out = Download(*stream, bm, n * 4);
      const std::vector<uint8_t> q = Download(*stream, bq, 2 * n);
      const std::vector<uint8_t> a = Download(*stream, ba, 8 * 6);
      out.insert(out.end(), q.begin(), q.end());
      out.insert(out.end(), a.begin(), a.end());
      return out;
    };
    EXPECT_EQ(run(true), run(false));
  }
}

// Over many steps of the same noisy gradients the 8-bit moments track
// fp32 AdamW's: the masters stay within a small fraction of how far they
// moved (5.7% here: an element two decades below its block's largest has
// 16 code values in its decade, a 10-20% error in its first moment).
TEST(AdamW8bitTest, TracksFp32AdamW) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const int64_t n = 4 * kAdamW8bitBlock;
  const AdamWConfig c{1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f};
  std::vector<float> m8(n), m32(n), mo1(n, 0), mo2(n, 0), a(8, 0);
  const std::vector<double> start = Random(n, 11);
  for (int64_t i = 0; i < n; ++i) m8[i] = m32[i] = static_cast<float>(start[i]);
  std::vector<uint8_t> q(2 * n, 0);
  for (int step = 1; step <= 50; ++step) {
    std::vector<double> gd = Random(n, 100 + step);
    std::vector<float> g(n);
    // A per-element mean (the signal) and noise, with scales spread over
    // two decades across each block's elements (four in v). A block whose
    // gradients span many more decades stores its smallest second moments
    // as 0 (below the code's 1.6e-7 of the block's largest) and moves
    // those elements too far, as bitsandbytes' 8-bit Adam does.
    for (int64_t i = 0; i < n; ++i) {
      g[i] = static_cast<float>((start[i] + 0.5 * gd[i]) * std::pow(10.0, -0.5 * (i % 5)));
    }
    AdamW8bitArgs q8;
    q8.n = n;
    q8.step = step;
    q8.master = m8.data();
    q8.grad = g.data();
    q8.moment1 = q.data();
    q8.moment2 = q.data() + n;
    q8.absmax1 = a.data();
    q8.absmax2 = a.data() + 4;
    ASSERT_TRUE(AdamW8bitStep(*stream, c, q8).ok());
    AdamWArgs f;
    f.n = n;
    f.step = step;
    f.master = m32.data();
    f.grad = g.data();
    f.moment1 = mo1.data();
    f.moment2 = mo2.data();
    ASSERT_TRUE(AdamWStep(*stream, c, f).ok());
    ASSERT_TRUE(stream->Synchronize().ok());  // g is gone after this iteration
  }
  ASSERT_TRUE(stream->Synchronize().ok());
  double moved = 0, diff = 0;
  for (int64_t i = 0; i < n; ++i) {

    moved += std::abs(m32[i] - start[i]);
    diff += std::abs(m8[i] - m32[i]);
  }
  EXPECT_GT(moved, 0);
  EXPECT_LT(diff, 0.08 * moved) << "8-bit masters differ by " << diff / moved
                                << " of the distance moved";
}

TEST(AdamW8bitTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float f[4] = {};
  uint8_t q[8] = {};
  AdamW8bitArgs a;
  a.n = 4;
  a.master = f;
  a.grad = f;
  a.moment1 = q;
  a.moment2 = q + 4;
  a.absmax1 = f;
  a.absmax2 = f + 1;
  EXPECT_TRUE(AdamW8bitStep(*stream, {}, a).ok());
  AdamWConfig bad;
  bad.eps = 0;
  Status st = AdamW8bitStep(*stream, bad, a);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("AdamW8bitStep"), std::string::npos) << st;
  a.absmax2 = nullptr;
  st = AdamW8bitStep(*stream, {}, a);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("absmax2"), std::string::npos) << st;
  a.absmax2 = f;
  a.step = 0;
  EXPECT_EQ(AdamW8bitStep(*stream, {}, a).code(), absl::StatusCode::kInvalidArgument);
  a.step = 1;
  a.grad_dtype = DataType::kI32;
  EXPECT_EQ(AdamW8bitStep(*stream, {}, a).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
