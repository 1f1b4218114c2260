#include "baton/ops/cudnn_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/attention.h"
#include "baton/ops/test_util.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Fetch;
using testing::Pack;
using testing::Poisoned;
using testing::Random;
using testing::Round;
using testing::Upload;

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// Float64 causal GQA attention, forward and its analytic backward
// (ops/attention.h's formulas).
Reference Float64(const AttentionShape& s, const std::vector<double>& q,
                  const std::vector<double>& k, const std::vector<double>& v,
                  const std::vector<double>& dout) {
  const int64_t d = s.head_dim, qw = s.heads * d, kw = s.kv_heads * d;
  Reference r;
  r.out.assign(s.batch * s.seq * qw, 0);
  r.dq.assign(r.out.size(), 0);
  r.dk.assign(s.batch * s.seq * kw, 0);
  r.dv.assign(r.dk.size(), 0);
  r.lse.assign(s.batch * s.heads * s.seq, 0);
  const double c = 1 / std::sqrt(static_cast<double>(d));
  auto Q = [&](int64_t b, int64_t i, int64_t h) { return (b * s.seq + i) * qw + h * d; };
  auto K = [&](int64_t b, int64_t j, int64_t g) { return (b * s.seq + j) * kw + g * d; };
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / (s.heads / s.kv_heads);
      for (int64_t i = 0; i < s.seq; ++i) {
        std::vector<double> p(i + 1);
        double m = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += q[Q(b, i, h) + e] * k[K(b, j, g) + e];
          m = std::max(m, p[j] = c * dot);
        }
        double l = 0;
        for (double& x : p) l += (x = std::exp(x - m));
        for (double& x : p) x /= l;
        r.lse[(b * s.heads + h) * s.seq + i] = m + std::log(l);
        double dd = 0;
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < d; ++e) r.out[Q(b, i, h) + e] += p[j] * v[K(b, j, g) + e];
        for (int64_t e = 0; e < d; ++e) dd += dout[Q(b, i, h) + e] * r.out[Q(b, i, h) + e];
        for (int64_t j = 0; j <= i; ++j) {
          double dpv = 0;
          for (int64_t e = 0; e < d; ++e) dpv += dout[Q(b, i, h) + e] * v[K(b, j, g) + e];
          const double ds = p[j] * (dpv - dd);
          for (int64_t e = 0; e < d; ++e) {
            r.dq[Q(b, i, h) + e] += c * ds * k[K(b, j, g) + e];
            r.dk[K(b, j, g) + e] += c * ds * q[Q(b, i, h) + e];
            r.dv[K(b, j, g) + e] += p[j] * dout[Q(b, i, h) + e];
          }
        }
      }
    }
  return r;
}

TEST(CudnnAttentionTest, RefusesWhatItDoesNotTake) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const Status st = CudnnAttentionApplies(*stream, {1, 4, 2, 1, 64, DataType::kBF16});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("needs a CUDA stream"), std::string::npos) << st;
  // On a host stream AttentionForward never reaches cuDNN: the CPU runs it.
  std::vector<uint16_t> ones(4 * 2 * 64, 0x3f80), out(4 * 2 * 64);  // bf16 1.0
  std::vector<float> lse(2 * 4);
  ASSERT_TRUE(AttentionForward(*stream, {1, 4, 2, 1, 64, DataType::kBF16}, ones.data(),
                               ones.data(), ones.data(), out.data(), lse.data()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_NEAR(lse[3], std::log(4.0) + 8.0, 1e-5);  // 4 keys, each score 64 / sqrt(64)
}

// cuDNN checks every tensor and operation of both graphs when they are
// finalized; that needs the library, not a GPU.
TEST(CudnnAttentionTest, EveryOperationOfBothGraphsIsAccepted) {
  if (Status why = CudnnAttentionAvailable(); !why.ok()) GTEST_SKIP() << why;
  const DataType t = DataType::kBF16;
  for (AttentionShape s : {AttentionShape{1, 1, 2, 1, 8, t}, AttentionShape{2, 64, 8, 2, 128, t},
                           AttentionShape{8, 1024, 16, 4, 64, t}, AttentionShape{1, 9, 6, 6, 64, t}}) {
    const Status st = CudnnAttentionCheckOps(s);
    EXPECT_TRUE(st.ok()) << s.seq << " " << s.heads << "/" << s.kv_heads << ": " << st;
  }
}

// cuDNN's forward and backward against float64, for the shapes the model
// uses (GQA, head_dim 64/128) and small odd ones; AttentionForward and
// AttentionBackward then take the same path (bitwise the same results).
TEST(CudnnAttentionTest, ForwardAndBackwardMatchTheFloat64Reference) {
  bool ran = false;
  for (auto& device : testing::TestDevices()) {
    if (device->kind() != DeviceKind::kCuda) continue;
    if (Status why = CudnnAttentionAvailable(); !why.ok()) GTEST_SKIP() << why;
    ran = true;
    const DataType t = DataType::kBF16;
    for (AttentionShape s : {AttentionShape{1, 1, 2, 1, 8, t}, AttentionShape{2, 5, 4, 2, 16, t},
                             AttentionShape{1, 9, 6, 3, 64, t}, AttentionShape{2, 64, 8, 2, 128, t},
                             AttentionShape{1, 200, 4, 4, 64, t}}) {
      SCOPED_TRACE(::testing::Message() << s.batch << "x" << s.seq << " heads " << s.heads
                                        << "/" << s.kv_heads << " d " << s.head_dim);
      auto stream = *device->CreateStream();
      const int64_t rows = s.batch * s.seq, nq = rows * s.heads * s.head_dim,
                    nk = rows * s.kv_heads * s.head_dim;
      const auto q = Round(Random(nq, 1 + nq), t), k = Round(Random(nk, 2 + nq), t),
                 v = Round(Random(nk, 3 + nq), t), dout = Round(Random(nq, 4 + nq), t);
      DeviceBuffer bq = Upload(*device, *stream, Pack(q, t)),
                   bk = Upload(*device, *stream, Pack(k, t)),
                   bv = Upload(*device, *stream, Pack(v, t)),
                   bdo = Upload(*device, *stream, Pack(dout, t));
      DeviceBuffer bo = Poisoned(*device, *stream, nq * 2),
                   blse = Poisoned(*device, *stream, s.batch * s.heads * s.seq * 4),
                   bdq = Poisoned(*device, *stream, nq * 2),
                   bdk = Poisoned(*device, *stream, nk * 2),
                   bdv = Poisoned(*device, *stream, nk * 2);
      const Status fwd = CudnnAttentionForward(*stream, s, bq.data(), bk.data(), bv.data(),
                                               bo.data(), static_cast<float*>(blse.data()));
      ASSERT_TRUE(fwd.ok()) << fwd;
      const Status bwd = CudnnAttentionBackward(
          *stream, s, bdo.data(), bq.data(), bk.data(), bv.data(), bo.data(),
          static_cast<const float*>(blse.data()), bdq.data(), bdk.data(), bdv.data());
      ASSERT_TRUE(bwd.ok()) << bwd;
      const Reference r = Float64(s, q, k, v, dout);
      const double tol = testing::Tolerance(t);
      const auto out = Fetch(*stream, bo, nq, t);
      EXPECT_EQ(Compare("out", out, r.out, tol), "");
      EXPECT_EQ(Compare("lse", Fetch(*stream, blse, r.lse.size(), DataType::kF32), r.lse, 1e-4),
                "");
      // The backward reads cuDNN's bf16 out; its rounding dominates (as in
      // attention_test's bf16 case).
      EXPECT_EQ(Compare("dq", Fetch(*stream, bdq, nq, t), r.dq, 3e-2), "");
      EXPECT_EQ(Compare("dk", Fetch(*stream, bdk, nk, t), r.dk, 3e-2), "");
      EXPECT_EQ(Compare("dv", Fetch(*stream, bdv, nk, t), r.dv, 3e-2), "");

      SetCudnnAttentionEnabled(true);
      DeviceBuffer bo2 = Poisoned(*device, *stream, nq * 2),
                   blse2 = Poisoned(*device, *stream, s.batch * s.heads * s.seq * 4);
      ASSERT_TRUE(AttentionForward(*stream, s, bq.data(), bk.data(), bv.data(), bo2.data(),
                                   static_cast<float*>(blse2.data())).ok());
      EXPECT_EQ(Fetch(*stream, bo2, nq, t), out) << "AttentionForward took another path";
    }
  }
  if (!ran) GTEST_SKIP() << "no GPU";
}

}  // namespace
}  // namespace baton::ops
