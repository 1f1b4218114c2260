// Mixture-of-experts blocks in the parallel step graph
// (scheduler/parallel_graph.h "experts").
#include <algorithm>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/policy.h"

namespace baton::scheduler {
namespace {

// A small MoE model: 4 blocks (the first dense), 8 experts, top-2, one
// shared expert.
ModelSpec TinyMoe() {
  ModelSpec s = *ModelPreset("micro");
  s.name = "tiny-moe";
  s.layers = 4;
  s.moe.experts = 8;
  s.moe.top_k = 2;
  s.moe.expert_intermediate = 16;
  s.moe.shared_experts = 1;
  s.moe.shared_intermediate = 16;
  s.moe.first_dense_layers = 1;
  return s;
}

Policy MoePolicy(int pp, int ep, int micro) {
  Policy p = *PolicyPreset("baton");
  p.pipeline_parallel = pp;
  p.expert_parallel = ep;
  p.micro_steps = micro;
  p.reduce_every_micro_step = false;
  return p;
}

int Count(const StepGraph& g, NodeKind k) {
  return static_cast<int>(std::count_if(g.nodes.begin(), g.nodes.end(),
                                        [&](const Node& n) { return n.kind == k; }));
}

TEST(MoeGraphTest, ExpertBlocksDispatchAndCombineOnTheExpertStream) {
  const ModelSpec spec = TinyMoe();
  // 8 ranks: pp 2, 4 per stage; ep 2 -> edp 2.
  auto step = BuildParallelStep(spec, MoePolicy(2, 2, 4), 8, 32, 1);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(step->mesh.size(kExpertGroup), 2);
  EXPECT_EQ(step->mesh.size(kExpertDataGroup), 2);
  int moe_blocks = 0;
  for (const StepGraph& g : step->stages) {
    const StreamId expert = g.stream_for(StreamClass::kExpert);
    EXPECT_EQ(g.num_streams, expert.index() + 1);
    int blocks = 0;
    for (int u : g.chunk_units[0]) {
      const UnitSpec& unit = g.layout.units[u];
      blocks += unit.kind == UnitKind::kBlock && spec.moe_block(unit.block);
    }
    moe_blocks += blocks;
    // Per MoE block and micro-batch: a dispatch and a combine forward, and
    // their gradients backward.
    EXPECT_EQ(Count(g, NodeKind::kDispatch), 2 * blocks * 4) << "stage " << g.stage;
    EXPECT_EQ(Count(g, NodeKind::kCombine), 2 * blocks * 4) << "stage " << g.stage;
    for (const Node& n : g.nodes) {
      if (n.kind == NodeKind::kDispatch || n.kind == NodeKind::kCombine) {
        EXPECT_EQ(n.stream, expert) << n.name;
        EXPECT_EQ(n.group, kExpertGroup) << n.name;
      }
      // The experts' buckets are gathered and reduced over the expert-data
      // group, the others over the data group.
      if (n.kind == NodeKind::kAllGather || n.kind == NodeKind::kReduceScatter) {
        const bool expert_bucket = g.layout.buckets[n.bucket].expert;
        EXPECT_EQ(n.group == kExpertDataGroup, expert_bucket) << n.name;
      }
    }
    // An expert bucket holds 1 / ep of the experts, sharded over edp.
    for (size_t b = 0; b < g.buffers.size(); ++b) {
      const GraphBuffer& buf = g.buffers[b];
      if (buf.role != BufferRole::kShard || !g.layout.buckets[buf.bucket].expert) continue;
      const Bucket& bk = g.layout.buckets[buf.bucket];
      EXPECT_EQ(buf.numel, ((bk.padded_numel + 1) / 2 + 1) / 2) << bk.name;
    }
  }
  EXPECT_EQ(moe_blocks, 3);
  // The layout split: each MoE block's experts in a bucket of their own.
  int expert_buckets = 0;
  for (const Bucket& b : step->layout.buckets) {
    if (!b.expert) continue;
    ++expert_buckets;
    for (const ParamSlot& p : b.params) {
      EXPECT_NE(p.name.find(".experts."), std::string::npos) << p.name;
    }
  }
  EXPECT_EQ(expert_buckets, 3);
}

TEST(MoeGraphTest, OverlapInterleavesBackwardAndForwardPasses) {
  const ModelSpec spec = TinyMoe();
  Policy plain = MoePolicy(2, 2, 4);
  Policy overlap = plain;
  overlap.moe_a2a_overlap = true;
  auto a = BuildParallelStep(spec, plain, 8, 32, 1);
  auto b = BuildParallelStep(spec, overlap, 8, 32, 1);
  ASSERT_TRUE(a.ok() && b.ok());
  for (int s = 0; s < 2; ++s) {
    const StepGraph& x = a->stages[s];
    const StepGraph& y = b->stages[s];
    ASSERT_EQ(x.nodes.size(), y.nodes.size());
    std::multiset<std::string> nx, ny;
    for (const Node& n : x.nodes) nx.insert(n.name);
    for (const Node& n : y.nodes) ny.insert(n.name);
    EXPECT_EQ(nx, ny) << "stage " << s;
    // Somewhere a forward node follows a backward dispatch or combine of
    // another micro-batch before that backward pass ends.
    bool interleaved = false;
    for (size_t i = 1; i + 1 < y.nodes.size(); ++i) {
      if (y.nodes[i - 1].name.rfind("DISPATCH-GRAD", 0) == 0 &&
          y.nodes[i].kind == NodeKind::kForward) {
        interleaved = true;
      }
    }
    EXPECT_TRUE(interleaved) << "stage " << s;
  }
}

TEST(MoeGraphTest, BadExpertLayoutsAreRefusedInOneLine) {
  const ModelSpec spec = TinyMoe();
  auto msg = [&](const Policy& p, int world) {
    auto s = BuildParallelStep(spec, p, world, 32, 1);
    EXPECT_FALSE(s.ok());
    return std::string(s.status().message());
  };
  EXPECT_NE(msg(MoePolicy(2, 3, 4), 12).find("--ep=3 must divide the model's 8 experts"),
            std::string::npos);
  EXPECT_NE(msg(MoePolicy(2, 8, 4), 8).find("does not divide the 4 ranks of a pipeline stage"),
            std::string::npos);
  Policy tp = MoePolicy(1, 2, 4);
  tp.tensor_parallel = 2;
  EXPECT_NE(msg(tp, 4).find("needs --sp"), std::string::npos);
  tp.sequence_parallel = true;
  tp.expert_tensor_parallel = 4;
  EXPECT_NE(msg(tp, 4).find("expert_tensor_parallel = 4 must be 1 or"), std::string::npos);
  auto dense = BuildParallelStep(*ModelPreset("micro"), MoePolicy(2, 2, 4), 8, 32, 1);
  EXPECT_NE(dense.status().message().find("need a mixture-of-experts model"), std::string::npos);
  // The executor's sliced graphs refuse experts.
  auto sliced = BuildParallelStep(spec, MoePolicy(2, 2, 4), 8, 32, 1, {}, {}, false, true);
  EXPECT_NE(sliced.status().message().find("executor does not run expert dispatch"),
            std::string::npos);
}

}  // namespace
}  // namespace baton::scheduler
