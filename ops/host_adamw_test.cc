#include "baton/ops/host_adamw.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

struct State {
  std::vector<float> master, m1, m2;
  std::vector<uint8_t> param;  // bytes of the cast output
};

// Random state and gradients; a few subnormal and zero values so the
// flush-to-zero behaviour must match too. `pad` elements in front make the
// pointers unaligned.
struct Case {
  State state;
  std::vector<std::vector<uint8_t>> grads;  // one per step, in grad dtype
};

Case MakeCase(int64_t n, DataType grad_t, DataType param_t, int steps) {
  Case c;
  const auto master = testing::Random(n, 11 + n), m = testing::Random(n, 12 + n, 0.01),
             v = testing::Random(n, 13 + n, 0.01);
  for (int64_t i = 0; i < n; ++i) {
    c.state.master.push_back(static_cast<float>(master[i]));
    c.state.m1.push_back(static_cast<float>(m[i]));
    c.state.m2.push_back(static_cast<float>(v[i] * v[i]));
  }
  if (n > 5) {
    c.state.m2[3] = 1e-40f;  // subnormal
    c.state.m1[4] = 0.0f;
  }
  c.state.param.assign(n * DataTypeSize(param_t), 0xAB);
  for (int s = 0; s < steps; ++s) {
    auto g = testing::Random(n, 20 + s + n, s == 1 ? 1e3 : 1.0);
    if (n > 5) {
      g[1] = 1e-39;  // subnormal in f32 (and in bf16)
      g[2] = 0.0;
    }
    c.grads.push_back(testing::Pack(g, grad_t));
  }
  return c;
}

// Runs `steps` AdamW steps from step 3 on with either the reference
// (AdamWStep on a host stream) or HostAdamW; param written at every step.
State RunSteps(const Case& c, DataType grad_t, bool with_param, DataType param_t,
          bool reference, HostPool* pool, HostSimd simd, int64_t pad) {
  const int64_t n = static_cast<int64_t>(c.state.master.size());
  auto padded = [&](const std::vector<float>& v) {
    std::vector<float> out(pad, 0.0f);
    out.insert(out.end(), v.begin(), v.end());
    return out;
  };
  std::vector<float> master = padded(c.state.master), m1 = padded(c.state.m1),
                     m2 = padded(c.state.m2);
  const size_t ps = DataTypeSize(param_t), gs = DataTypeSize(grad_t);
  std::vector<uint8_t> param(pad * ps, 0);
  param.insert(param.end(), c.state.param.begin(), c.state.param.end());
  const AdamWConfig config{3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  std::vector<std::vector<uint8_t>> grads;
  for (const auto& g : c.grads) {
    std::vector<uint8_t> b(pad * gs, 0);
    b.insert(b.end(), g.begin(), g.end());
    grads.push_back(std::move(b));
  }
  for (size_t s = 0; s < grads.size(); ++s) {
    AdamWArgs a;
    a.n = n;
    a.step = 3 + static_cast<int64_t>(s);
    a.grad_scale = 0.5f;
    a.master = master.data() + pad;
    a.moment1 = m1.data() + pad;
    a.moment2 = m2.data() + pad;
    a.grad = grads[s].data() + pad * gs;
    a.grad_dtype = grad_t;
    a.param = with_param ? param.data() + pad * ps : nullptr;
    a.param_dtype = param_t;
    if (reference) {
      EXPECT_TRUE(AdamWStep(*stream, config, a).ok());
    } else {
      EXPECT_TRUE(HostAdamW(config, a, pool, simd).ok());
    }
  }
  EXPECT_TRUE(stream->Synchronize().ok());
  State out;
  out.master.assign(master.begin() + pad, master.end());
  out.m1.assign(m1.begin() + pad, m1.end());
  out.m2.assign(m2.begin() + pad, m2.end());
  out.param.assign(param.begin() + pad * ps, param.end());
  return out;
}

// Index of the first element whose bytes differ, or -1.
template <typename T>
int64_t FirstDiff(const std::vector<T>& a, const std::vector<T>& b, size_t elem) {
  if (a.size() != b.size()) return 0;
  const auto* x = reinterpret_cast<const uint8_t*>(a.data());
  const auto* y = reinterpret_cast<const uint8_t*>(b.data());
  for (size_t i = 0; i < a.size() * sizeof(T); ++i) {
    if (x[i] != y[i]) return static_cast<int64_t>(i / elem);
  }
  return -1;
}

std::vector<HostSimd> Paths() {
  std::vector<HostSimd> p = {HostSimd::kPortable};
  if (std::string(HostSimdName()) == "avx2") p.push_back(HostSimd::kAvx2);
  return p;
}

// Bit-identical to AdamWStep's CPU path: every grad/param dtype pair, no
// param, ragged sizes around the vector width and the task size (16384),
// unaligned pointers, the caller alone and 2, 3, 5 threads, both inner
// loops.
TEST(HostAdamWTest, BitIdenticalToTheScalarOp) {
  HostPool p2(2), p3(3), p5(5);
  for (DataType grad_t : {DataType::kF32, DataType::kBF16}) {
    for (int param_case = 0; param_case < 3; ++param_case) {
      const bool with_param = param_case > 0;
      const DataType param_t = param_case == 2 ? DataType::kF32 : DataType::kBF16;
      for (int64_t n : {1, 7, 8, 9, 31, 16384 + 5, 2 * 16384 + 13}) {
        const Case c = MakeCase(n, grad_t, param_t, 3);
        const int64_t pad = n % 2;
        const State want = RunSteps(c, grad_t, with_param, param_t, true, nullptr,
                               HostSimd::kAuto, pad);
        for (HostSimd simd : Paths()) {
          for (HostPool* pool : {static_cast<HostPool*>(nullptr), &p2, &p3, &p5}) {
            SCOPED_TRACE(absl::StrCat("grad ", DataTypeName(grad_t), " param ",
                                      with_param ? DataTypeName(param_t) : "none", " n ", n,
                                      " simd ", static_cast<int>(simd), " threads ",
                                      pool ? pool->threads() : 0));
            const State got = RunSteps(c, grad_t, with_param, param_t, false, pool, simd, pad);
            EXPECT_EQ(FirstDiff(got.master, want.master, 4), -1);
            EXPECT_EQ(FirstDiff(got.m1, want.m1, 4), -1);
            EXPECT_EQ(FirstDiff(got.m2, want.m2, 4), -1);
            EXPECT_EQ(FirstDiff(got.param, want.param, DataTypeSize(param_t)), -1);
          }
        }
      }
    }
  }
}

// The comparison above can fail: a different learning rate changes the bits.
TEST(HostAdamWTest, TheComparisonSeesAOneUlpChange) {
  const Case c = MakeCase(100, DataType::kF32, DataType::kBF16, 1);
  const State want = RunSteps(c, DataType::kF32, false, DataType::kBF16, true, nullptr,
                         HostSimd::kAuto, 0);
  State got = RunSteps(c, DataType::kF32, false, DataType::kBF16, false, nullptr,
                  HostSimd::kAuto, 0);
  EXPECT_EQ(FirstDiff(got.master, want.master, 4), -1);
  got.master[42] = std::nextafter(got.master[42], 1e9f);
  EXPECT_EQ(FirstDiff(got.master, want.master, 4), 42);
}

// With lr = 0 the update leaves the master as it is, so the fused cast must
// round exactly as FloatToBf16 does: ties to even both ways, just below and
// above a tie, overflow to infinity, infinities, NaN, signed zero.
TEST(HostAdamWTest, CastRoundsLikeFloatToBf16) {
  const std::vector<uint32_t> bits = {
      0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0xbf808000u, 0xbf818000u,
      0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00001u, 0xffffffffu,
      0x00000000u, 0x80000000u, 0x3f800000u, 0x4049ffffu, 0x00018000u};
  std::vector<float> master;
  for (int rep = 0; rep < 3; ++rep) {  // past one vector, with a ragged tail
    for (uint32_t b : bits) {
      float f;
      std::memcpy(&f, &b, 4);
      master.push_back(f);
    }
  }
  const int64_t n = static_cast<int64_t>(master.size());
  for (HostSimd simd : Paths()) {
    std::vector<float> m = master, m1(n, 0.0f), m2(n, 0.0f), grad(n, 0.0f);
    std::vector<uint16_t> param(n, 0);
    AdamWArgs a;
    a.n = n;
    a.master = m.data();
    a.moment1 = m1.data();
    a.moment2 = m2.data();
    a.grad = grad.data();
    a.param = param.data();
    AdamWConfig c;
    c.lr = 0.0f;
    ASSERT_TRUE(HostAdamW(c, a, nullptr, simd).ok());
    for (int64_t i = 0; i < n; ++i) {
      uint32_t b;
      std::memcpy(&b, &master[i], 4);
      // Subnormal masters are flushed by the update (FTZ), as in AdamWStep.
      const float expect = std::fpclassify(master[i]) == FP_SUBNORMAL ? 0.0f : master[i];
      EXPECT_EQ(param[i], FloatToBf16(expect))
          << "master bits 0x" << std::hex << b << " simd " << static_cast<int>(simd);
    }
  }
}

TEST(HostAdamWTest, RunsInStreamOrder) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  HostPool pool(3);
  const int64_t n = 40000;
  std::vector<float> master(n, 1.0f), m1(n, 0.0f), m2(n, 0.0f), grad(n, 2.0f);
  std::vector<uint16_t> param(n, 0);
  AdamWArgs a;
  a.n = n;
  a.master = master.data();
  a.moment1 = m1.data();
  a.moment2 = m2.data();
  a.grad = grad.data();
  a.param = param.data();
  AdamWConfig c;
  c.lr = 0.5f;
  ASSERT_TRUE(HostAdamWOnStream(*stream, c, a, &pool).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  // Step 1 with a constant gradient moves every weight by -lr (m/bc1 = g,
  // sqrt(v/bc2) = |g|).
  for (int64_t i : {int64_t{0}, n / 2, n - 1}) {
    EXPECT_NEAR(master[i], 0.5f, 1e-6f);
    EXPECT_EQ(param[i], FloatToBf16(master[i]));
  }
}

TEST(HostAdamWTest, BadArgumentsNameTheProblem) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[4] = {};
  AdamWArgs a;
  a.n = 4;
  a.master = a.moment1 = a.moment2 = buf;
  a.grad = buf;
  EXPECT_TRUE(HostAdamW({}, a, nullptr).ok());
  AdamWConfig bad;
  bad.beta2 = 1.0f;
  Status s = HostAdamW(bad, a, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("betas"), std::string::npos) << s;
  a.step = 0;
  s = HostAdamWOnStream(*stream, {}, a, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("step"), std::string::npos) << s;
  a.step = 1;
  a.moment2 = nullptr;
  s = HostAdamW({}, a, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("moment2"), std::string::npos) << s;
  a.moment2 = buf;
  a.grad_dtype = DataType::kI32;
  EXPECT_EQ(HostAdamW({}, a, nullptr).code(), absl::StatusCode::kInvalidArgument);
  a.grad_dtype = DataType::kF32;
  a.param = buf;
  a.param_dtype = DataType::kF16;
  s = HostAdamW({}, a, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("param dtype"), std::string::npos) << s;
  a.n = 0;
  a.master = nullptr;
  EXPECT_TRUE(HostAdamW({}, a, nullptr).ok());  // nothing to do
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
