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

// NF4 base weights (QLoRA): a frozen block bucket's gathers move its packed
// shards (4.127 bits a parameter: about a quarter of bf16), and a DQ node
// on the compute stream writes the weights just before the bucket's first
// compute of each phase; the adapters are gathered with it and reduced.
// Under every preset that shards (hpZ's secondary packings, FSDP2's copies,
// the frozen shards on the host under offload = params) the invariants
// hold.
TEST(StepGraphTest, Nf4BucketsGatherPackedAndDequantizeOnTheComputeSide) {
  ModelSpec spec = Micro(false);
  spec.hidden = 128;
  spec.intermediate = 256;
  spec.head_dim = 32;
  for (const char* name : {"baton", "yafsdp", "fsdp1", "fsdp2", "zero3", "hsdp", "zeropp",
                           "zero_offload", "params"}) {
    SCOPED_TRACE(name);
    const bool params = std::string(name) == "params";
    Policy p = *PolicyPreset(params ? "zero_offload" : name);
    if (params) p.offload = Offload::kParams;
    if (p.shard_group > 0) p.shard_group = 2;
    if (p.hpz_group > 0) p.hpz_group = 2;
    p.layout.lora_rank = 4;
    p.layout.base_dtype = BaseDtype::kNf4;
    p.recompute_blocks = 1;
    if (p.layout.bucket_policy == BucketPolicy::kMerge) {
      // zero3's 5e7-element buckets and 1e5-element resident rule would
      // hold this small model in one bucket with the embedding (kept in
      // bf16, as QLoRA keeps it) and resident matrices.
      p.layout.merge_target_bytes = 300000;
      p.layout.resident_max_numel = 1000;
    }
    auto g = BuildStepGraph(spec, p, 4);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(VerifyStepGraph(*g).ok()) << VerifyStepGraph(*g);
    int dq = 0, nf4_gathers = 0, adapter_reduces = 0, staged = 0;
    for (size_t i = 0; i < g->nodes.size(); ++i) {
      const Node& n = g->nodes[i];
      if (n.bucket < 0) continue;
      const Bucket& bk = g->layout.buckets[n.bucket];
      if (n.kind == NodeKind::kDequantize) {
        ++dq;
        EXPECT_TRUE(n.stream.is_compute());
        // The next compute node reads what it wrote.
        size_t j = i + 1;
        while (j < g->nodes.size() && !IsCompute(g->nodes[j].kind)) ++j;
        ASSERT_LT(j, g->nodes.size());
        const auto& reads = g->nodes[j].reads;
        EXPECT_NE(std::find(reads.begin(), reads.end(), n.writes[0]), reads.end()) << n.name;
      }
      if (n.kind == NodeKind::kAllGather && bk.nf4) {
        ++nf4_gathers;
        const double bytes = static_cast<double>(g->buffers[n.writes[0]].bytes());
        const double bf16 = 2.0 * static_cast<double>(bk.padded_numel);
        EXPECT_NEAR(bytes / bf16, 4.127 / 16, 0.002) << n.name;
      }
      if (n.kind == NodeKind::kH2D && bk.frozen) ++staged;
      if (n.kind == NodeKind::kReduceScatter) {
        EXPECT_FALSE(bk.frozen) << n.name;
        ++adapter_reduces;
      }
    }
    EXPECT_GT(dq, 0);
    EXPECT_GT(nf4_gathers, 0);
    EXPECT_GT(adapter_reduces, 0);
    EXPECT_EQ(staged > 0, params);
  }
}

TEST(StepGraphTest, BadPolicyIsRefused) {
  Policy p = Preset("baton");
  p.micro_steps = 0;
  EXPECT_EQ(BuildStepGraph(*ModelPreset("micro"), p, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Issue 29: the graph is where every route to a policy meets (files, flags,
// the Session API, Python later), so the bounds that need the model hold
// there: no more recomputed blocks than the model has (was: trained as if
// clamped), no more micro-steps x units than scheduler/limits.h allows,
// and the knobs' own bounds (micro_steps past 4096 grew memory without end).
TEST(StepGraphTest, LimitsHoldWhateverTheRoute) {
  const ModelSpec micro = *ModelPreset("micro");  // 2 blocks
  Policy p = Preset("baton");
  p.recompute_blocks = 2;
  EXPECT_TRUE(BuildStepGraph(micro, p, 2).ok());
  p.recompute_blocks = 3;
  auto r = BuildStepGraph(micro, p, 2);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "policy baton: recompute_blocks = 3 is more than the model's 2 blocks");
  auto layout = LayoutFor(micro, p, *ResolveMesh(p, 2));
  ASSERT_TRUE(layout.ok());
  EXPECT_EQ(BuildStepGraph(*layout, p, {}, 2).status().message(), r.status().message());

  p = Preset("baton");
  p.micro_steps = static_cast<int>(kMaxMicroSteps) + 1;
  auto m = BuildStepGraph(micro, p, 2);
  EXPECT_EQ(m.status().message(), "policy baton: micro_steps = 4097 is outside [1, 4096]");
  ModelSpec deep = micro;
  deep.layers = 16;  // 4096 micro-steps x 19 units
  p.micro_steps = static_cast<int>(kMaxMicroSteps);
  auto units = BuildStepGraph(deep, p, 2);
  EXPECT_EQ(units.status().message(),
            "policy baton: micro_steps = 4096: the step would run 4096 micro-steps of 19 "
            "units (77824); the limit is 32768 unit-micro-steps");
}

// Hierarchical sharding on 8 ranks: (shard_group, hpz_group, micro mode
// 0 one / 1 reduce every / 2 accumulate, copy_in_out).
using GroupCase = std::tuple<int, int, int, bool>;
class HierarchicalTest : public ::testing::TestWithParam<GroupCase> {};

TEST_P(HierarchicalTest, ReplicaAllReducesAndHpzGathersHoldTheInvariants) {
  const auto [shard, hpz, mode, copy] = GetParam();
  Policy p = Preset("baton");
  p.shard_group = shard;
  p.hpz_group = hpz;
  p.micro_steps = mode == 0 ? 1 : 2;
  p.reduce_every_micro_step = mode == 1;
  p.copy_in_out = copy;
  auto g = BuildStepGraph(Micro(true), p, 8);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_TRUE(VerifyStepGraph(*g).ok()) << VerifyStepGraph(*g);
  memory::PlanInput in = g->plan_input;
  EXPECT_TRUE(memory::VerifyPlan(in, g->plan).ok());
  EXPECT_EQ(g->world_size(), 8);
  EXPECT_EQ(g->mesh.size(kDataShardGroup), shard);
  EXPECT_EQ(g->mesh.size(kReplicaGroup), 8 / shard);
  EXPECT_EQ((UsesHpz(g->policy) ? g->mesh.size(kHpzGroup) : 0), hpz);
  EXPECT_EQ(g->layout.sharding.ranks, shard);
  int rs = 0, ar_replica = 0, ag = 0, ag_hpz = 0, hpz_copy = 0;
  for (size_t v = 0; v < g->nodes.size(); ++v) {
    const Node& n = g->nodes[v];
    rs += n.kind == NodeKind::kReduceScatter;
    ag += n.kind == NodeKind::kAllGather && n.group == kDataShardGroup;
    if (n.kind == NodeKind::kAllReduce) {
      EXPECT_EQ(n.group, kReplicaGroup) << n.name;
      ++ar_replica;
      // In place, right after its reduce-scatter on the same stream.
      EXPECT_EQ(n.reads, n.writes) << n.name;
      ASSERT_GT(v, 0u);
      EXPECT_EQ(g->nodes[v - 1].kind, NodeKind::kReduceScatter) << n.name;
      EXPECT_EQ(g->nodes[v - 1].stream, n.stream) << n.name;
      EXPECT_EQ(g->nodes[v - 1].writes, n.reads) << n.name;
    }
    if (n.kind == NodeKind::kAllGather && n.group == kHpzGroup) {
      ++ag_hpz;
      EXPECT_NE(n.name.find(" bwd"), std::string::npos) << n.name;
    }
    if (n.kind == NodeKind::kCopy && n.group == kHpzGroup) {
      ++hpz_copy;
      const GraphBuffer& out = g->buffers[n.writes[0]];
      EXPECT_EQ(out.role, BufferRole::kHpzShard);
      EXPECT_EQ(out.numel * hpz, g->layout.buckets[out.bucket].padded_numel);
      EXPECT_FALSE(out.persistent);
    }
  }
  EXPECT_EQ(ar_replica, shard < 8 ? rs : 0);
  const int own = static_cast<int>(g->layout.buckets.size()) -
                  (g->layout.resident_bucket >= 0 ? 1 : 0);
  const int micro = p.micro_steps;
  if (hpz > 0) {
    EXPECT_EQ(ag_hpz, own * micro);
    EXPECT_EQ(hpz_copy, own * micro);
    EXPECT_EQ(ag, own * micro + (g->layout.resident_bucket >= 0));
  } else {
    EXPECT_EQ(ag_hpz + hpz_copy, 0);
  }
  // Memory: the persistent state is that of full sharding over the shard
  // group; secondary shards make the arena larger than without hpZ.
  Policy flat = p;
  flat.shard_group = 0;
  flat.hpz_group = 0;
  auto over_group = BuildStepGraph(Micro(true), flat, shard);
  ASSERT_TRUE(over_group.ok());
  EXPECT_EQ(g->persistent_bytes, over_group->persistent_bytes);
  if (shard < 8) {
    auto full = BuildStepGraph(Micro(true), flat, 8);
    ASSERT_TRUE(full.ok());
    EXPECT_GT(g->persistent_bytes, full->persistent_bytes);
  }
  // Each secondary shard is planned in the arena and lives from its hpZ
  // copy (forward) to its hpZ gather (backward).
  for (size_t b = 0; b < g->buffers.size(); ++b) {
    if (g->buffers[b].role != BufferRole::kHpzShard) continue;
    ASSERT_GE(g->buffers[b].plan_id, 0);
    EXPECT_LE(g->plan.buffers[g->buffers[b].plan_id].offset +
                  g->buffers[b].bytes(),
              g->plan.arena_bytes);
    const Node& first = g->nodes[g->first_write[b]];
    const Node& last = g->nodes[g->last_use[b]];
    EXPECT_EQ(first.name.rfind("HPZ-COPY", 0), 0u) << first.name;
    if (copy) {
      EXPECT_EQ(last.name.rfind("COPY-IN", 0), 0u) << last.name;
    } else {
      EXPECT_EQ(last.name.rfind("AG-HPZ", 0), 0u) << last.name;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Groups, HierarchicalTest,
    ::testing::Values(GroupCase{4, 0, 0, false}, GroupCase{2, 0, 0, false},
                      GroupCase{4, 0, 1, false}, GroupCase{2, 0, 2, false},
                      GroupCase{4, 0, 1, true}, GroupCase{8, 4, 0, false},
                      GroupCase{8, 2, 1, false}, GroupCase{8, 4, 2, true},
                      GroupCase{4, 2, 0, false}, GroupCase{4, 2, 1, false},
                      GroupCase{2, 2, 2, false}, GroupCase{4, 4, 2, false}));

TEST(StepGraphTest, PresetsHsdpAndZeroppUseTheirGroups) {
  auto h = BuildStepGraph(Micro(false), Preset("hsdp"), 8);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ(h->mesh.size(kDataShardGroup), 4);
  EXPECT_EQ(h->mesh.size(kReplicaGroup), 2);
  EXPECT_TRUE(VerifyStepGraph(*h).ok());
  auto z = BuildStepGraph(Micro(false), Preset("zeropp"), 8);
  ASSERT_TRUE(z.ok()) << z.status();
  EXPECT_EQ(z->mesh.size(kDataShardGroup), 8);
  EXPECT_EQ((UsesHpz(z->policy) ? z->mesh.size(kHpzGroup) : 0), 4);
  EXPECT_TRUE(VerifyStepGraph(*z).ok());
}

// The reduce window waits for a bucket's reduce-scatter (the last reader
// of its full gradient buffer), never for the replica all-reduce of its
// shard, which overlaps the rest of the backward.
TEST(StepGraphTest, ReduceWindowDoesNotWaitForTheReplicaAllReduce) {
  Policy p = Preset("hsdp");
  p.reduce_window = 1;
  auto g = BuildStepGraph(Micro(false), p, 8);
  ASSERT_TRUE(g.ok()) << g.status();
  int window_from_rs = 0;
  for (const GraphEdge& e : g->edges) {
    const Node& from = g->nodes[e.from];
    const Node& to = g->nodes[e.to];
    if (e.kind != EdgeKind::kWindow || to.kind != NodeKind::kBackward) continue;
    EXPECT_NE(from.kind, NodeKind::kAllReduce) << from.name << " -> " << to.name;
    if (from.kind == NodeKind::kReduceScatter) ++window_from_rs;
  }
  EXPECT_GT(window_from_rs, 0);
}

TEST(StepGraphTest, VerifyCatchesAMissingReplicaAllReduce) {
  Policy p = Preset("hsdp");
  auto g = BuildStepGraph(Micro(false), p, 8);
  ASSERT_TRUE(g.ok()) << g.status();
  StepGraph broken = *g;
  for (Node& n : broken.nodes) {
    if (n.kind == NodeKind::kAllReduce) {
      n.kind = NodeKind::kCopy;  // the all-reduce is gone
      n.group = kDataShardGroup;
      break;
    }
  }
  Status s = VerifyStepGraph(broken);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("replica all-reduce"), std::string::npos) << s;
  // A replica collective in a graph without replicas.
  auto flat = BuildStepGraph(Micro(false), Preset("baton"), 8);
  ASSERT_TRUE(flat.ok());
  broken = *flat;
  for (Node& n : broken.nodes) {
    if (n.kind == NodeKind::kReduceScatter) {
      n.group = kReplicaGroup;
      break;
    }
  }
  s = VerifyStepGraph(broken);
  EXPECT_NE(s.message().find("replica group"), std::string::npos) << s;
}

TEST(StepGraphTest, VerifyCatchesAnHpzGatherWithoutSecondaryShard) {
  auto g = BuildStepGraph(Micro(false), Preset("zeropp"), 8);
  ASSERT_TRUE(g.ok()) << g.status();
  StepGraph broken = *g;
  int shard_buffer = -1;
  for (size_t b = 0; b < broken.buffers.size(); ++b) {
    if (broken.buffers[b].role == BufferRole::kShard) shard_buffer = b;
  }
  for (Node& n : broken.nodes) {
    if (n.kind == NodeKind::kAllGather && n.group == kHpzGroup) {
      n.reads = {shard_buffer};
      break;
    }
  }
  const Status s = VerifyStepGraph(broken);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("secondary shard"), std::string::npos) << s;
}

TEST(StepGraphTest, BadGroupsAreRefusedNamingTheKnob) {
  struct Bad {
    int world, shard, hpz;
    bool reshard;
    const char* knob;
  };
  for (const Bad& b : {Bad{8, 3, 0, true, "shard_group"},
                       Bad{8, 6, 0, true, "shard_group"},
                       Bad{8, -2, 0, true, "shard_group"},
                       Bad{8, 4, 8, true, "hpz_group"},
                       Bad{12, 6, 4, true, "hpz_group"},
                       Bad{8, 4, -1, true, "hpz_group"},
                       Bad{8, 4, 2, false, "hpz_group"}}) {
    Policy p = Preset("baton");
    p.shard_group = b.shard;
    p.hpz_group = b.hpz;
    p.reshard_after_forward = b.reshard;
    const Status s = BuildStepGraph(Micro(false), p, b.world).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << b.knob << s;
    EXPECT_NE(s.message().find(b.knob), std::string::npos) << s;
  }
  // Groups larger than the world are the world.
  Policy big = Preset("zeropp");
  big.shard_group = 16;
  big.hpz_group = 16;
  auto capped = BuildStepGraph(Micro(false), big, 2);
  ASSERT_TRUE(capped.ok()) << capped.status();
  EXPECT_EQ(capped->mesh.size(kDataShardGroup), 2);
  EXPECT_EQ((UsesHpz(capped->policy) ? capped->mesh.size(kHpzGroup) : 0), 2);
  Policy ddp = Preset("ddp");
  ddp.shard_group = 4;
  EXPECT_EQ(BuildStepGraph(Micro(false), ddp, 8).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::scheduler
