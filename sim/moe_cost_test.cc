#include "baton/sim/moe_cost.h"

#include <cmath>

#include "gtest/gtest.h"
#include "baton/sim/kernel_table.h"
#include "baton/sim/parallel_sim.h"

namespace baton::sim {
namespace {

using scheduler::MoeDispatcher;

A2aShape Shape() {
  A2aShape s;
  s.tokens = 4096;
  s.copy_bytes = 7168 * 2;
  s.top_k = 8;
  s.experts = 256;
  return s;
}

TEST(MoeCostTest, AllToAllSplitsItsBytesOverTheTwoLinks) {
  const ClusterSpec c = *ClusterPreset("h100");
  const A2aShape s = Shape();
  const double sent = 4096.0 * 8 * 7168 * 2;
  // Inside a node: (g - 1) / n of the copies over NVLink.
  const CollectiveTime in = AllToAllTime(c, {8, 8, 1}, MoeDispatcher::kAllToAll, s);
  EXPECT_NEAR(in.work_s, sent * 7 / 8 / (c.nvlink_gbps * 1e9), 1e-12);
  EXPECT_NEAR(in.latency_s, (c.base_latency_us + c.nvlink_hop_us) * 1e-6, 1e-12);
  // Over 4 nodes the network share, 24 / 32 of the copies, bounds it.
  const CollectiveTime out = AllToAllTime(c, {32, 8, 4}, MoeDispatcher::kAllToAll, s);
  EXPECT_NEAR(out.work_s, sent * 24 / 32 / (c.nic_gbps * 1e9), 1e-12);
  // The busiest rank's load scales it; one rank moves nothing.
  A2aShape heavy = s;
  heavy.load = 1.5;
  EXPECT_NEAR(AllToAllTime(c, {32, 8, 4}, MoeDispatcher::kAllToAll, heavy).work_s,
              1.5 * out.work_s, 1e-12);
  EXPECT_EQ(AllToAllTime(c, {1, 1, 1}, MoeDispatcher::kAllToAll, s).work_s, 0);
  // The all-gather dispatcher is the ring of every token of the group.
  const CollectiveTime ag = AllToAllTime(c, {8, 8, 1}, MoeDispatcher::kAllGather, s);
  const CollectiveTime ring =
      RingTime(c, {8, 8, 1}, 4096.0 * 8 * 7168 * 2, CollectiveKind::kAllGather);
  EXPECT_EQ(ag.work_s, ring.work_s);
}

TEST(MoeCostTest, TokenSpreadCountsDistinctNodesAndRanks) {
  A2aShape s = Shape();
  // One node: every copy stays; top-8 of 256 over 8 ranks reaches
  // 8 (1 - C(224, 8) / C(256, 8)) ranks.
  double miss = 1;
  for (int i = 0; i < 8; ++i) miss *= (224.0 - i) / (256.0 - i);
  A2aSpread one = TokenSpread({8, 8, 1}, s);
  EXPECT_NEAR(one.ranks, 8 * (1 - miss), 1e-9);
  EXPECT_NEAR(one.remote_nodes, 0, 1e-12);
  // Group-limited to 4 of 8 nodes: at most 4 nodes, 7/8 of them remote.
  s.groups = 8;
  s.topk_groups = 4;
  A2aSpread lim = TokenSpread({64, 8, 8}, s);
  EXPECT_EQ(lim.nodes_allowed, 4);
  EXPECT_NEAR(lim.remote_nodes, lim.nodes * 7 / 8, 1e-12);
  EXPECT_LT(lim.nodes, 4);
}

TEST(MoeCostTest, ExpertKernelsFollowTokensPerExpertAndTheCapacity) {
  const KernelTable* table = *KernelTableOrH100(nullptr);
  const ClusterSpec c = *ClusterPreset("h100");
  const scheduler::ModelSpec m = *scheduler::ModelPreset("qwen3-30b-a3b");
  auto model = ComputeModel::Create(*table, c, m, 4096, 1, 4096);
  ASSERT_TRUE(model.ok()) << model.status();
  MoeShape shape;
  shape.tokens = 4096;
  shape.ep = 8;
  auto k = BuildMoeKernels(*model, m, shape, {}, c);
  ASSERT_TRUE(k.ok()) << k.status();
  // 4096 x 8 copies over 16 local experts.
  EXPECT_NEAR(k->tokens_per_expert, 4096.0 * 8 / 16, 1e-9);
  EXPECT_GT(k->fwd[2].seconds, 0);
  EXPECT_EQ(k->fwd[1].seconds, 0);  // no shared experts
  // An imbalance of 1.5 makes the busiest rank's experts slower; a
  // capacity of 1.2 caps it and drops the rest.
  shape.imbalance = 1.5;
  auto heavy = BuildMoeKernels(*model, m, shape, {}, c);
  shape.capacity = 1.2;
  auto capped = BuildMoeKernels(*model, m, shape, {}, c);
  ASSERT_TRUE(heavy.ok() && capped.ok());
  EXPECT_GT(heavy->fwd[2].seconds, capped->fwd[2].seconds);
  EXPECT_GT(capped->fwd[2].seconds, k->fwd[2].seconds);
  EXPECT_NEAR(capped->dropped, 1 - 1.2 / 1.5, 1e-12);
  // The same copies over 128 local experts (ep 1: 256 tokens each instead
  // of 2048) run at the table's lower small-m rate.
  shape = MoeShape{4096, 1, 1, 1, 0};
  auto wide = BuildMoeKernels(*model, m, shape, {}, c);
  ASSERT_TRUE(wide.ok());
  EXPECT_NEAR(wide->tokens_per_expert, 256, 1e-9);
  EXPECT_GT(wide->fwd[2].seconds, k->fwd[2].seconds);
  // Refusals.
  shape.ep = 3;
  EXPECT_FALSE(BuildMoeKernels(*model, m, shape, {}, c).ok());
  shape.ep = 1;
  shape.imbalance = 0.5;
  EXPECT_FALSE(BuildMoeKernels(*model, m, shape, {}, c).ok());
}

TEST(MoeCostTest, DispatchBytesFollowTheStack) {
  const KernelTable* table = *KernelTableOrH100(nullptr);
  const ClusterSpec c = *ClusterPreset("h800");
  const scheduler::ModelSpec m = *scheduler::ModelPreset("deepseek-v3");
  auto model = ComputeModel::Create(*table, c, m, 4096, 1, 4096);
  ASSERT_TRUE(model.ok());
  scheduler::Policy p = *scheduler::PolicyPreset("baton");
  p.expert_parallel = 64;
  KernelStack fp8;
  fp8.fp8 = true;
  auto bf = BuildMoeCost(*model, m, p, 4096, 1, {}, c);
  auto f8 = BuildMoeCost(*model, m, p, 4096, 1, fp8, c);
  ASSERT_TRUE(bf.ok() && f8.ok());
  EXPECT_EQ(bf->to_experts_bytes, 7168 * 2);
  EXPECT_NEAR(f8->to_experts_bytes, 7168 * (1 + 4.0 / 128), 1e-9);
  EXPECT_EQ(f8->from_experts_bytes, 7168 * 2);
  EXPECT_EQ(f8->a2a.topk_groups, 4);
}

}  // namespace
}  // namespace baton::sim
