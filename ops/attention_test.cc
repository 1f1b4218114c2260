#include "baton/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/cudnn_attention.h"
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

// Float64 causal GQA attention: out and lse.
void Reference(const AttentionShape& s, const std::vector<double>& q,
               const std::vector<double>& k, const std::vector<double>& v,
               std::vector<double>& out, std::vector<double>& lse) {
  const int64_t d = s.head_dim, qw = s.heads * d, kw = s.kv_heads * d;
  out.assign(s.batch * s.seq * qw, 0);
  lse.assign(s.batch * s.heads * s.seq, 0);
  const double c = 1 / std::sqrt(static_cast<double>(d));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / (s.heads / s.kv_heads);
      for (int64_t i = 0; i < s.seq; ++i) {
        std::vector<double> sc(i + 1);
        double m = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += q[(b * s.seq + i) * qw + h * d + e] * k[(b * s.seq + j) * kw + g * d + e];
          sc[j] = c * dot;
          m = std::max(m, sc[j]);
        }
        double l = 0;
        for (double& x : sc) l += (x = std::exp(x - m));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < d; ++e)
            out[(b * s.seq + i) * qw + h * d + e] += sc[j] / l * v[(b * s.seq + j) * kw + g * d + e];
        lse[(b * s.heads + h) * s.seq + i] = m + std::log(l);
      }
    }
}

double Loss(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v, const std::vector<double>& g) {
  std::vector<double> out, lse;
  Reference(s, q, k, v, out, lse);
  double l = 0;
  for (size_t i = 0; i < out.size(); ++i) l += out[i] * g[i];
  return l;
}

// baton's own kernels: cuDNN's path (which AttentionForward/Backward take on
// a GPU with cuDNN, for bf16) has its own test, cudnn_attention_test.cc.
class AttentionTest : public ::testing::TestWithParam<DataType> {
 protected:
  void SetUp() override { SetCudnnAttentionEnabled(false); }
  void TearDown() override { SetCudnnAttentionEnabled(true); }
};

// Forward against float64; backward against float64 central differences of
// L = sum(out * dout) (the reference is exact enough for that).
TEST_P(AttentionTest, ForwardAndBackwardMatchTheFloat64Reference) {
  const DataType t = GetParam();
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    for (AttentionShape s : {AttentionShape{1, 1, 1, 1, 2, t}, AttentionShape{2, 5, 4, 2, 4, t},
                             AttentionShape{1, 9, 6, 3, 8, t}, AttentionShape{2, 64, 8, 2, 32, t}}) {
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
      const size_t es = DataTypeSize(t);
      DeviceBuffer bo = Poisoned(*device, *stream, nq * es),
                   blse = Poisoned(*device, *stream, s.batch * s.heads * s.seq * 4),
                   bdq = Poisoned(*device, *stream, nq * es),
                   bdk = Poisoned(*device, *stream, nk * es),
                   bdv = Poisoned(*device, *stream, nk * es);
      ASSERT_TRUE(AttentionForward(*stream, s, bq.data(), bk.data(), bv.data(), bo.data(),
                                   static_cast<float*>(blse.data())).ok());
      ASSERT_TRUE(AttentionBackward(*stream, s, bdo.data(), bq.data(), bk.data(), bv.data(),
                                    bo.data(), static_cast<const float*>(blse.data()),
                                    bdq.data(), bdk.data(), bdv.data()).ok());
      std::vector<double> ro, rlse;
      Reference(s, q, k, v, ro, rlse);
      const double tol = testing::Tolerance(t);
      EXPECT_EQ(Compare("out", Fetch(*stream, bo, nq, t), ro, tol), "");
      EXPECT_EQ(Compare("lse", Fetch(*stream, blse, rlse.size(), DataType::kF32), rlse, 1e-5), "");
      if (s.seq > 16) continue;  // finite differences on the small shapes
      const auto fq = testing::FiniteDifference([&](const auto& x) { return Loss(s, x, k, v, dout); }, q);
      const auto fk = testing::FiniteDifference([&](const auto& x) { return Loss(s, q, x, v, dout); }, k);
      const auto fv = testing::FiniteDifference([&](const auto& x) { return Loss(s, q, k, x, dout); }, v);
      // fp32: 1e-5 plus the finite-difference error; bf16: its rounding of
      // out (which the backward reads) dominates.
      const double gtol = t == DataType::kF32 ? 2e-5 : 3e-2;
      EXPECT_EQ(Compare("dq", Fetch(*stream, bdq, nq, t), fq, gtol), "");
      EXPECT_EQ(Compare("dk", Fetch(*stream, bdk, nk, t), fk, gtol), "");
      EXPECT_EQ(Compare("dv", Fetch(*stream, bdv, nk, t), fv, gtol), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return DataTypeName(info.param); });

// The larger shape's backward against the CPU implementation's own float64
// analogue would repeat the op; instead check a property that any wrong
// index breaks: dv sums to sum over queries of dout (each row of p sums to 1).
TEST(AttentionGradTest, ValueGradientConservesTheOutputGradient) {
  const AttentionShape s{2, 64, 8, 2, 32, DataType::kF32};
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const int64_t rows = s.batch * s.seq, nq = rows * s.heads * s.head_dim,
                nk = rows * s.kv_heads * s.head_dim;
  auto to_f = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  auto q = to_f(Random(nq, 1)), k = to_f(Random(nk, 2)), v = to_f(Random(nk, 3)),
       dout = to_f(Random(nq, 4));
  std::vector<float> out(nq), lse(s.batch * s.heads * s.seq), dq(nq), dk(nk), dv(nk);
  ASSERT_TRUE(AttentionForward(*stream, s, q.data(), k.data(), v.data(), out.data(), lse.data()).ok());
  ASSERT_TRUE(AttentionBackward(*stream, s, dout.data(), q.data(), k.data(), v.data(), out.data(),
                                lse.data(), dq.data(), dk.data(), dv.data()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  const int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t g = 0; g < s.kv_heads; ++g)
      for (int64_t e = 0; e < d; ++e) {
        double want = 0, got = 0;
        for (int64_t i = 0; i < s.seq; ++i) {
          for (int64_t h = g * group; h < (g + 1) * group; ++h)
            want += dout[(b * s.seq + i) * s.heads * d + h * d + e];
          got += dv[(b * s.seq + i) * s.kv_heads * d + g * d + e];
        }
        ASSERT_NEAR(got, want, 1e-4 * (1 + std::abs(want))) << b << " " << g << " " << e;
      }
}

TEST(AttentionTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[64] = {};
  const Status st = AttentionForward(*stream, {1, 2, 4, 3, 2, DataType::kF32}, buf, buf, buf,
                                     buf, buf);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("kv_heads 3 does not divide heads 4"), std::string::npos) << st;
  EXPECT_EQ(AttentionForward(*stream, {1, 2, 2, 1, 2, DataType::kF32}, buf, nullptr, buf, buf,
                             buf).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AttentionBackward(*stream, {1, 2, 2, 1, 0, DataType::kF32}, buf, buf, buf, buf, buf,
                              buf, buf, buf, buf).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
