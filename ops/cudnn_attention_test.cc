#include "baton/ops/cudnn_attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/attention.h"
#include "baton/ops/testing/attention_reference.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Fetch;
using testing::Poisoned;

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
      testing::AttentionCase c = testing::MakeAttentionCase(*device, *stream, s);
      const int64_t nq = c.nq, nk = c.nk;
      const Status fwd = CudnnAttentionForward(*stream, s, c.bq.data(), c.bk.data(),
                                               c.bv.data(), c.bo.data(),
                                               static_cast<float*>(c.blse.data()));
      ASSERT_TRUE(fwd.ok()) << fwd;
      const Status bwd = CudnnAttentionBackward(
          *stream, s, c.bdo.data(), c.bq.data(), c.bk.data(), c.bv.data(), c.bo.data(),
          static_cast<const float*>(c.blse.data()), c.bdq.data(), c.bdk.data(), c.bdv.data());
      ASSERT_TRUE(bwd.ok()) << bwd;
      const testing::AttentionReference r = testing::Float64Attention(s, c.q, c.k, c.v, c.dout);
      const double tol = testing::Tolerance(t);
      const auto out = Fetch(*stream, c.bo, nq, t);
      EXPECT_EQ(Compare("out", out, r.out, tol), "");
      EXPECT_EQ(Compare("lse", Fetch(*stream, c.blse, r.lse.size(), DataType::kF32), r.lse, 1e-4),
                "");
      // The backward reads cuDNN's bf16 out; its rounding dominates (as in
      // attention_test's bf16 case).
      EXPECT_EQ(Compare("dq", Fetch(*stream, c.bdq, nq, t), r.dq, 3e-2), "");
      EXPECT_EQ(Compare("dk", Fetch(*stream, c.bdk, nk, t), r.dk, 3e-2), "");
      EXPECT_EQ(Compare("dv", Fetch(*stream, c.bdv, nk, t), r.dv, 3e-2), "");

      SetCudnnAttentionEnabled(true);
      DeviceBuffer bo2 = Poisoned(*device, *stream, nq * 2),
                   blse2 = Poisoned(*device, *stream, s.batch * s.heads * s.seq * 4);
      ASSERT_TRUE(AttentionForward(*stream, s, c.bq.data(), c.bk.data(), c.bv.data(), bo2.data(),
                                   static_cast<float*>(blse2.data())).ok());
      EXPECT_EQ(Fetch(*stream, bo2, nq, t), out) << "AttentionForward took another path";
    }
  }
  if (!ran) GTEST_SKIP() << "no GPU";
}

}  // namespace
}  // namespace baton::ops
