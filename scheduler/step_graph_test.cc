#include "baton/scheduler/step_graph.h"

#include <algorithm>
#include <tuple>

#include "gtest/gtest.h"
#include "baton/memory/planner.h"

namespace baton::scheduler {
namespace {

ModelSpec Micro(bool tied) {
  ModelSpec s = *ModelPreset("micro");
  s.tie_embeddings = tied;
  return s;
}

Policy Preset(const std::string& name) { return *PolicyPreset(name); }

// (policy, world, micro_steps, reduce_every, recompute, tied)
using Case = std::tuple<std::string, int, int, bool, int, bool>;

class EveryPresetTest : public ::testing::TestWithParam<Case> {};

TEST_P(EveryPresetTest, GraphHoldsItsInvariantsAndPlanIsValid) {
  const auto [name, world, micro, every, recompute, tied] = GetParam();
  Policy p = Preset(name);
  p.micro_steps = micro;
  p.reduce_every_micro_step = every;
  p.recompute_blocks = recompute;
  auto g = BuildStepGraph(Micro(tied), p, world);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(VerifyStepGraph(*g).ok()) << VerifyStepGraph(*g);
  // The plan is valid with the edges the graph carries.
  memory::PlanInput in = g->plan_input;
  EXPECT_TRUE(memory::VerifyPlan(in, g->plan).ok())
      << memory::VerifyPlan(in, g->plan);
  EXPECT_GE(g->plan.arena_bytes, g->plan.lower_bound_bytes);
  // Deterministic: building again gives the same order, edges and plan.
  auto again = BuildStepGraph(Micro(tied), p, world);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(g->ToText(), again->ToText());
  EXPECT_EQ(g->plan.arena_bytes, again->plan.arena_bytes);
  EXPECT_EQ(g->plan.added_edges, again->plan.added_edges);
  ASSERT_EQ(g->plan.buffers.size(), again->plan.buffers.size());
  for (size_t i = 0; i < g->plan.buffers.size(); ++i) {
    EXPECT_EQ(g->plan.buffers[i].offset, again->plan.buffers[i].offset);
  }
  // Counts: one compute per unit per micro-step each way.
  int fwd = 0, bwd = 0, rec = 0, ag = 0, reduce = 0, opt = 0;
  for (const Node& n : g->nodes) {
    fwd += n.kind == NodeKind::kForward;
    bwd += n.kind == NodeKind::kBackward;
    rec += n.kind == NodeKind::kRecompute;
    ag += n.kind == NodeKind::kAllGather;
    reduce += n.kind == NodeKind::kReduceScatter || n.kind == NodeKind::kAllReduce;
    opt += n.kind == NodeKind::kOptimizer;
  }
  const int units = static_cast<int>(g->layout.units.size());
  const int buckets = static_cast<int>(g->layout.buckets.size());
  EXPECT_EQ(fwd, units * micro);
  EXPECT_EQ(bwd, units * micro);
  EXPECT_EQ(rec, recompute < 0 ? 2 * micro : recompute * micro);
  EXPECT_EQ(opt, buckets);
  if (p.all_reduce) {
    EXPECT_EQ(ag, 0);
  } else {
    const int own = buckets - (g->layout.resident_bucket >= 0 ? 1 : 0);
    const int per_micro = own * (p.reshard_after_forward ? 2 : 1);
    EXPECT_EQ(ag, per_micro * micro + (g->layout.resident_bucket >= 0));
  }
  const int own = buckets - (g->layout.resident_bucket >= 0 ? 1 : 0);
  const int reduces_per_bucket = every ? micro : 1;
  EXPECT_EQ(reduce, own * reduces_per_bucket + (g->layout.resident_bucket >= 0));
  for (const Node& n : g->nodes) {
    EXPECT_EQ(n.host_wait >= 0 && p.host_limit == 0, false) << n.name;
  }
  // Every node runs on the stream of its class.
  EXPECT_EQ(g->num_streams, NumStreams(p.shared_comm_stream));
  for (const Node& n : g->nodes) {
    ASSERT_LT(n.stream.index(), g->num_streams) << n.name;
    if (IsCompute(n.kind) || n.kind == NodeKind::kOptimizer ||
        n.kind == NodeKind::kCast) {
      EXPECT_EQ(n.stream, kComputeStream) << n.name;
    } else if (n.kind == NodeKind::kAllGather) {
      EXPECT_EQ(n.stream, g->stream_for(StreamClass::kAllGather)) << n.name;
    } else if (n.kind != NodeKind::kCopy) {
      EXPECT_EQ(n.stream, g->stream_for(StreamClass::kReduceScatter)) << n.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Presets, EveryPresetTest,
    ::testing::Combine(::testing::Values("baton", "yafsdp", "fsdp1", "fsdp2",
                                         "zero3", "ddp"),
                       ::testing::Values(1, 3, 4), ::testing::Values(1, 2),
                       ::testing::Bool(), ::testing::Values(0, -1),
                       ::testing::Bool()));

TEST(StepGraphTest, DeeperPrefetchHoldsMoreGatheredBuffers) {
  const ModelSpec spec = *ModelPreset("tiny");
  size_t previous = 0;
  for (int d = 0; d <= 3; ++d) {
    Policy p = Preset("baton");
    p.forward_prefetch = d;
    p.backward_prefetch = d;
    auto g = BuildStepGraph(spec, p, 4);
    ASSERT_TRUE(g.ok()) << g.status();
    EXPECT_GE(g->plan.lower_bound_bytes, previous) << "depth " << d;
    previous = g->plan.lower_bound_bytes;
  }
}

TEST(StepGraphTest, PrefetchWindowOrdersGathersBehindCompute) {
  Policy p = Preset("yafsdp");  // depth 1: the gather of bucket k+2 waits
  auto g = BuildStepGraph(*ModelPreset("tiny"), p, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  int window = 0;
  for (const GraphEdge& e : g->edges) {
    if (e.kind != EdgeKind::kWindow) continue;
    ++window;
    const Node& from = g->nodes[e.from];
    const Node& to = g->nodes[e.to];
    const bool reduce = from.kind == NodeKind::kReduceScatter ||
                        from.kind == NodeKind::kAllReduce ||
                        from.kind == NodeKind::kAccumulate;
    EXPECT_TRUE((IsCompute(from.kind) && to.kind == NodeKind::kAllGather) ||
                (reduce && to.kind == NodeKind::kBackward) ||
                (reduce && to.kind == NodeKind::kAllGather))
        << from.name << " -> " << to.name;
  }
  EXPECT_GT(window, 0);
  // With two weight buffers in flight, the arena stays close to the bound.
  EXPECT_LE(g->plan.ratio(), 1.25) << g->plan.ToTable(20);
}

TEST(StepGraphTest, HostLimiterOnlyForPeersThatHaveOne) {
  for (const char* name : {"baton", "yafsdp", "fsdp1", "zero3"}) {
    // zero3 merges up to 5e7 elements: it needs a real model to have more
    // than one bucket.
    auto g = BuildStepGraph(*ModelPreset("llama3-8b"), Preset(name), 2);
    ASSERT_TRUE(g.ok()) << g.status();
    int host_waits = 0;
    for (const Node& n : g->nodes) host_waits += n.host_wait >= 0;
    if (Preset(name).host_limit > 0) {
      EXPECT_GT(host_waits, 0) << name;
    } else {
      EXPECT_EQ(host_waits, 0) << name;
    }
  }
}

TEST(StepGraphTest, VerifyCatchesAMissingWait) {
  auto g = BuildStepGraph(*ModelPreset("micro"), Preset("baton"), 2);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(VerifyStepGraph(*g).ok());
  // Drop the wait of the first forward that has one (on its all-gather).
  StepGraph broken = *g;
  for (Node& n : broken.nodes) {
    if (n.kind == NodeKind::kForward && !n.waits.empty()) {
      n.waits.clear();
      break;
    }
  }
  const Status s = VerifyStepGraph(broken);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("not enforced"), std::string::npos) << s;
}

TEST(StepGraphTest, VerifyCatchesAnUnreducedGradient) {
  auto g = BuildStepGraph(*ModelPreset("micro"), Preset("baton"), 2);
  ASSERT_TRUE(g.ok()) << g.status();
  StepGraph broken = *g;
  for (Node& n : broken.nodes) {
    if (n.kind == NodeKind::kReduceScatter) {
      n.reads.clear();
      break;
    }
  }
  EXPECT_EQ(VerifyStepGraph(broken).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(StepGraphTest, IssueOrderIsTheSameForEveryWorldRank) {
  // The graph does not depend on the rank at all; across world sizes only
  // shard sizes change, never the order.
  auto a = BuildStepGraph(*ModelPreset("tiny"), Preset("baton"), 2);
  auto b = BuildStepGraph(*ModelPreset("tiny"), Preset("baton"), 8);
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->nodes.size(), b->nodes.size());
  for (size_t i = 0; i < a->nodes.size(); ++i) {
    EXPECT_EQ(a->nodes[i].name, b->nodes[i].name);
  }
}

TEST(StreamsTest, CommStreamsHaveTheirOwnTagsBelowTheTrainers) {
  for (bool shared : {false, true}) {
    const StreamId ag = StreamFor(StreamClass::kAllGather, shared);
    const StreamId rs = StreamFor(StreamClass::kReduceScatter, shared);
    EXPECT_FALSE(ag.is_compute());
    EXPECT_FALSE(rs.is_compute());
    EXPECT_EQ(ag == rs, shared);
    EXPECT_EQ(CollectiveTag(ag) == CollectiveTag(rs), shared);
    EXPECT_EQ(std::max(ag.index(), rs.index()) + 1, NumStreams(shared));
    for (StreamId s : {ag, rs}) {
      EXPECT_GT(CollectiveTag(s), 0u);
      EXPECT_LT(CollectiveTag(s), kFirstTrainerTag);
    }
  }
  EXPECT_EQ(StreamFor(StreamClass::kCompute, true), kComputeStream);
}

TEST(StepGraphTest, BadPolicyIsRefused) {
  Policy p = Preset("baton");
  p.micro_steps = 0;
  EXPECT_EQ(BuildStepGraph(*ModelPreset("micro"), p, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::scheduler
