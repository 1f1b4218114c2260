#include "baton/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/testing/attention_reference.h"
#include "baton/ops/cudnn_attention.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Fetch;
using testing::Random;

double Loss(const AttentionShape& s, const std::vector<double>& q, const std::vector<double>& k,
            const std::vector<double>& v, const std::vector<double>& g) {
  const std::vector<double> out = testing::Float64Attention(s, q, k, v).out;
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
      testing::AttentionCase c = testing::MakeAttentionCase(*device, *stream, s);
      const int64_t nq = c.nq, nk = c.nk;
      const auto &q = c.q, &k = c.k, &v = c.v, &dout = c.dout;
      ASSERT_TRUE(AttentionForward(*stream, s, c.bq.data(), c.bk.data(), c.bv.data(),
                                   c.bo.data(), static_cast<float*>(c.blse.data())).ok());
      ASSERT_TRUE(AttentionBackward(*stream, s, c.bdo.data(), c.bq.data(), c.bk.data(),
                                    c.bv.data(), c.bo.data(),
                                    static_cast<const float*>(c.blse.data()), c.bdq.data(),
                                    c.bdk.data(), c.bdv.data()).ok());
      const testing::AttentionReference r = testing::Float64Attention(s, q, k, v);
      const double tol = testing::Tolerance(t);
      EXPECT_EQ(Compare("out", Fetch(*stream, c.bo, nq, t), r.out, tol), "");
      EXPECT_EQ(Compare("lse", Fetch(*stream, c.blse, r.lse.size(), DataType::kF32), r.lse, 1e-5), "");
      if (s.seq > 16) continue;  // finite differences on the small shapes
      const auto fq = testing::FiniteDifference([&](const auto& x) { return Loss(s, x, k, v, dout); }, q);
      const auto fk = testing::FiniteDifference([&](const auto& x) { return Loss(s, q, x, v, dout); }, k);
      const auto fv = testing::FiniteDifference([&](const auto& x) { return Loss(s, q, k, x, dout); }, v);
      // fp32: 1e-5 plus the finite-difference error; bf16: its rounding of
      // out (which the backward reads) dominates.
      const double gtol = t == DataType::kF32 ? 2e-5 : 3e-2;
      EXPECT_EQ(Compare("dq", Fetch(*stream, c.bdq, nq, t), fq, gtol), "");
      EXPECT_EQ(Compare("dk", Fetch(*stream, c.bdk, nk, t), fk, gtol), "");
      EXPECT_EQ(Compare("dv", Fetch(*stream, c.bdv, nk, t), fv, gtol), "");
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
