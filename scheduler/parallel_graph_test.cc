#include "baton/scheduler/parallel_graph.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/nf4_layout.h"
#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

using Kind = PipelinePass::Kind;

// Replays the orders with unit-time passes (a chunk's forward 1, its
// backward `b`, the weight pass 1) and returns the makespan: each pass
// starts when its stage is free and its inputs are done (forward after the
// previous virtual stage's forward, backward after the next one's
// backward or, on the last, its own forward; weight after backward).
int Makespan(const std::vector<std::vector<PipelinePass>>& order, int p, int v, int m, int b) {
  const int nv = p * v;
  std::map<std::tuple<int, int, int>, int> done;  // (kind, vstage, micro) -> end
  std::vector<size_t> next(p, 0);
  std::vector<int> free_at(p, 0);
  int end = 0;
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      if (next[s] >= order[s].size()) continue;
      const PipelinePass& x = order[s][next[s]];
      const int vs = x.chunk * p + s;
      int ready = free_at[s];
      auto need = [&](int kind, int at) {
        auto it = done.find({kind, at, x.micro});
        if (it == done.end()) return false;
        ready = std::max(ready, it->second);
        return true;
      };
      bool ok = true;
      if (x.kind == Kind::kForward && vs > 0) ok = need(0, vs - 1);
      if (x.kind == Kind::kBackward) ok = vs == nv - 1 ? need(0, vs) : need(1, vs + 1);
      if (x.kind == Kind::kWeight) ok = need(1, vs);
      if (!ok) continue;
      const int dur = x.kind == Kind::kBackward ? b : 1;
      free_at[s] = ready + dur;
      done[{static_cast<int>(x.kind), vs, x.micro}] = ready + dur;
      end = std::max(end, ready + dur);
      ++next[s];
      progress = true;
    }
  }
  for (int s = 0; s < p; ++s) EXPECT_EQ(next[s], order[s].size()) << "stage " << s << " stuck";
  return end;
}

TEST(PipelineOrderTest, OneFOneBIsNarayanans) {
  auto o = PipelineOrder(PipelineSchedule::k1F1B, 4, 8, 1);
  ASSERT_TRUE(o.ok()) << o.status();
  // Stage 0: three warm-up forwards, then pairs, then three backwards.
  const std::vector<PipelinePass>& s0 = (*o)[0];
  ASSERT_EQ(s0.size(), 16u);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(s0[i] == (PipelinePass{Kind::kForward, i, 0}));
  EXPECT_TRUE(s0[3] == (PipelinePass{Kind::kForward, 3, 0}));
  EXPECT_TRUE(s0[4] == (PipelinePass{Kind::kBackward, 0, 0}));
  EXPECT_TRUE(s0.back() == (PipelinePass{Kind::kBackward, 7, 0}));
  // The last stage alternates from the start.
  EXPECT_TRUE((*o)[3][1] == (PipelinePass{Kind::kBackward, 0, 0}));
  // Unit times (F 1, B 2): (m + p - 1) (F + B), the bubble (p-1)/(m+p-1).
  for (auto [p, m] : {std::pair{4, 8}, {8, 16}, {16, 16}, {4, 2}}) {
    auto order = PipelineOrder(PipelineSchedule::k1F1B, p, m, 1);
    ASSERT_TRUE(order.ok());
    EXPECT_EQ(Makespan(*order, p, 1, m, 2), 3 * (m + p - 1)) << p << " " << m;
  }
}

TEST(PipelineOrderTest, InterleavedIsMegatrons) {
  for (auto [p, m, v] : {std::tuple{4, 8, 2}, {4, 8, 4}, {8, 16, 5}, {2, 4, 3}}) {
    auto order = PipelineOrder(PipelineSchedule::kInterleaved, p, m, v);
    ASSERT_TRUE(order.ok()) << order.status();
    for (int s = 0; s < p; ++s) {
      EXPECT_EQ((*order)[s].size(), static_cast<size_t>(2 * m * v));
      // Warm-up: 2 (p - s - 1) + (v - 1) p forwards before the first backward.
      int warm = 0;
      while ((*order)[s][warm].kind == Kind::kForward) ++warm;
      EXPECT_EQ(warm, std::min(2 * (p - s - 1) + (v - 1) * p, m * v) + (warm < m * v ? 1 : 0))
          << p << " " << m << " " << v << " stage " << s;
    }
    // Per chunk F 1, B 2: v m (F + B) + (p - 1)(F + B), the bubble
    // (p-1)/(v m + p - 1) of the step.
    EXPECT_EQ(Makespan(*order, p, v, m, 2), 3 * (v * m + p - 1)) << p << " " << m << " " << v;
  }
  EXPECT_EQ(PipelineOrder(PipelineSchedule::kInterleaved, 4, 6, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PipelineOrder(PipelineSchedule::k1F1B, 4, 8, 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PipelineOrderTest, ZeroBubbleH1HasAThirdOfTheBubble) {
  for (auto [p, m] : {std::pair{2, 4}, {4, 8}, {4, 16}, {8, 16}, {16, 16}, {16, 32}}) {
    auto order = PipelineOrder(PipelineSchedule::kZbH1, p, m, 1);
    ASSERT_TRUE(order.ok()) << order.status();
    for (int s = 0; s < p; ++s) {
      int f = 0, b = 0, w = 0, in_flight = 0;
      for (const PipelinePass& x : (*order)[s]) {
        f += x.kind == Kind::kForward;
        b += x.kind == Kind::kBackward;
        w += x.kind == Kind::kWeight;
        EXPECT_LE(w, b);
        in_flight = std::max(in_flight, f - b);
      }
      EXPECT_EQ(f, m);
      EXPECT_EQ(b, m);
      EXPECT_EQ(w, m);
      EXPECT_LE(in_flight, p - s);  // 1F1B's in-flight micro-batches
    }
    // F = B = W = 1: 3 m + (p - 1), where 1F1B takes 3 m + 3 (p - 1).
    EXPECT_EQ(Makespan(*order, p, 1, m, 1), 3 * m + p - 1) << p << " " << m;
  }
}

Policy Parallel(int tp, bool sp, int cp, int pp, int micro_steps) {
  Policy p = *PolicyPreset("baton");
  p.tensor_parallel = tp;
  p.sequence_parallel = sp;
  p.context_parallel = cp;
  p.pipeline_parallel = pp;
  p.micro_steps = micro_steps;
  return p;
}

TEST(ParallelGraphTest, StagesPairTheirSendsAndReceives) {
  const ModelSpec tiny = *ModelPreset("tiny");  // 4 blocks, 8 heads, 2 KV heads
  for (bool sp : {false, true}) {
    for (bool overlap : {false, true}) {
      Policy p = Parallel(2, sp, 2, 2, 4);
      p.tp_comm_overlap = overlap;
      p.recompute_blocks = 1;
      auto step = BuildParallelStep(tiny, p, 16, 64, 1);
      ASSERT_TRUE(step.ok()) << step.status();
      ASSERT_EQ(step->stages.size(), 2u);
      EXPECT_EQ(step->mesh.ToString(), "pp=2 dp_replicate=1 dp_shard=2 hpz=1 cp=2 tp=2");
      std::map<int64_t, std::pair<int, int>> sends, recvs;  // tag -> (stage, peer)
      for (const StepGraph& g : step->stages) {
        ASSERT_TRUE(VerifyStepGraph(g).ok()) << VerifyStepGraph(g);
        EXPECT_EQ(g.stream_names().back(), "pp_recv");
        int tensor = 0, fused = 0, ring = 0;
        for (const Node& n : g.nodes) {
          if (n.kind == NodeKind::kSend) sends[n.tag] = {g.stage, n.peer};
          if (n.kind == NodeKind::kRecv) recvs[n.tag] = {g.stage, n.peer};
          if (n.group == kTensorGroup) ++tensor;
          for (const FusedComm& f : n.fused) {
            ++fused;
            ring += f.kind == FusedComm::Kind::kRing;
          }
        }
        // 2 blocks x 4 micro-batches: forward 2 (AR) or 4 (AG + RS)
        // collectives per block, backward 0 or 2 (AG of the gradient).
        const int per_block = overlap ? 0 : sp ? 6 : 2;
        EXPECT_EQ(tensor, 2 * 4 * per_block) << sp << overlap;
        EXPECT_EQ(ring, 2 * 4 * 2);  // attention forward and backward
        EXPECT_GT(fused, ring);
      }
      // Every send has its receive on the peer, and back.
      ASSERT_EQ(sends.size(), 8u);  // 4 activations down, 4 gradients up
      for (const auto& [tag, where] : sends) {
        ASSERT_EQ(recvs.count(tag), 1u) << tag;
        EXPECT_EQ(recvs[tag].first, where.second);
        EXPECT_EQ(recvs[tag].second, where.first);
      }
      EXPECT_EQ(recvs.size(), sends.size());
    }
  }
}

TEST(ParallelGraphTest, ZeroBubbleSplitsTheBackward) {
  const ModelSpec tiny = *ModelPreset("tiny");
  Policy p = Parallel(1, false, 1, 2, 4);
  p.pipeline_schedule = PipelineSchedule::kZbH1;
  auto step = BuildParallelStep(tiny, p, 2, 64, 1);
  ASSERT_TRUE(step.ok()) << step.status();
  for (const StepGraph& g : step->stages) {
    ASSERT_TRUE(VerifyStepGraph(g).ok()) << VerifyStepGraph(g);
    int w = 0;
    for (const Node& n : g.nodes) {
      w += n.kind == NodeKind::kBackwardWeight;
      // Input-gradient passes write no parameter gradient.
      if (n.kind == NodeKind::kBackward) {
        EXPECT_TRUE(n.grad_accumulate.empty()) << n.name;
      }
    }
    EXPECT_EQ(w, 4 * static_cast<int>(g.chunk_units[0].size()));
  }
}

// Declared saved activations: one buffer per (unit, micro-batch), whose
// plan holds the schedule's in-flight count.
std::vector<int64_t> BlockBytes(const ModelSpec& spec, int64_t bytes) {
  std::vector<int64_t> saved(spec.layers + 3, 0);  // embedding, blocks, norm, head
  for (int64_t b = 1; b <= spec.layers; ++b) saved[b] = bytes;
  return saved;
}

int StageBlocks(const StepGraph& g) {
  int n = 0;
  for (const std::vector<int>& units : g.chunk_units) {
    for (int u : units) n += g.layout.units[u].kind == UnitKind::kBlock;
  }
  return n;
}

TEST(ParallelGraphTest, SavedActivationsHoldTheInFlightMicroBatches) {
  const ModelSpec tiny = *ModelPreset("tiny");  // 4 blocks
  constexpr int64_t kBytes = 1 << 20;  // dwarfs the graph's other buffers
  for (int pp : {2, 4}) {
    for (int m : {1, 3, 8}) {
      const Policy p = Parallel(1, false, 1, pp, m);
      auto plain = BuildParallelStep(tiny, p, pp, 64, 1, {}, {}, true);
      auto step = BuildParallelStep(tiny, p, pp, 64, 1, {}, {}, true, false,
                                    BlockBytes(tiny, kBytes));
      ASSERT_TRUE(plain.ok()) << plain.status();
      ASSERT_TRUE(step.ok()) << step.status();
      for (int s = 0; s < pp; ++s) {
        const StepGraph& g = step->stages[s];
        ASSERT_TRUE(VerifyStepGraph(g).ok()) << VerifyStepGraph(g);
        const int64_t per_micro = StageBlocks(g) * kBytes;
        int saved = 0;
        for (const GraphBuffer& b : g.buffers) saved += b.role == BufferRole::kSavedActivation;
        EXPECT_EQ(saved, StageBlocks(g) * m);
        // 1F1B stage s: min(m, p - s) micro-batches in flight.
        const int64_t peak = std::min(m, pp - s) * per_micro;
        EXPECT_EQ(SavedActivationPeak(g), peak) << "pp " << pp << " m " << m << " stage " << s;
        EXPECT_EQ(SavedActivationPeak(plain->stages[s]), 0);
        // Placed, reusing: the arena grows by less than one more
        // micro-batch than the in-flight ones (all m: m x per_micro).
        const int64_t grew = static_cast<int64_t>(g.plan.arena_bytes) -
                             static_cast<int64_t>(plain->stages[s].plan.arena_bytes);
        EXPECT_GE(static_cast<int64_t>(g.plan.arena_bytes), peak);
        EXPECT_LT(grew, peak + per_micro) << "pp " << pp << " m " << m << " stage " << s;
      }
    }
  }
  // Interleaved, p = 2, v = 2, m = 4 (a block per chunk): the first stage's
  // 2 (p - 1) + (v - 1) p = 4 warm-up forwards and the first steady
  // forward are in flight at once; the last stage's 2 + 1.
  Policy p = Parallel(1, false, 1, 2, 4);
  p.pipeline_schedule = PipelineSchedule::kInterleaved;
  p.virtual_stages = 2;
  auto step = BuildParallelStep(tiny, p, 2, 64, 1, {}, {}, true, false,
                                BlockBytes(tiny, kBytes));
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(SavedActivationPeak(step->stages[0]), 5 * kBytes);
  EXPECT_EQ(SavedActivationPeak(step->stages[1]), 3 * kBytes);
  // ZB-H1: the weight pass reads it last.
  p = Parallel(1, false, 1, 2, 4);
  p.pipeline_schedule = PipelineSchedule::kZbH1;
  step = BuildParallelStep(tiny, p, 2, 64, 1, {}, {}, true, false, BlockBytes(tiny, kBytes));
  ASSERT_TRUE(step.ok()) << step.status();
  for (const StepGraph& g : step->stages) {
    for (size_t i = 0; i < g.buffers.size(); ++i) {
      if (g.buffers[i].role != BufferRole::kSavedActivation) continue;
      EXPECT_EQ(g.nodes[g.last_use[i]].kind, NodeKind::kBackwardWeight) << g.buffers[i].name;
    }
    EXPECT_GE(SavedActivationPeak(g), 2 * kBytes);
  }
  // Bad declarations: one line each.
  const Policy p2 = Parallel(1, false, 1, 2, 4);
  auto bad = BuildParallelStep(tiny, p2, 2, 64, 1, {}, {}, true, false, {1, 2});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<int64_t> negative = BlockBytes(tiny, 8);
  negative[1] = -1;
  bad = BuildParallelStep(tiny, p2, 2, 64, 1, {}, {}, true, false, negative);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
}

// Tensor parallelism: a block is several compute nodes (its norms on
// sequence shards under sequence_parallel, attention and MLP), each of
// which gets the block's saved activation of the micro-batch, and the plan
// holds 1F1B's in-flight count as without it.
TEST(ParallelGraphTest, SavedActivationsOfTensorParallelBlockParts) {
  const ModelSpec tiny = *ModelPreset("tiny");  // 4 blocks
  constexpr int64_t kBytes = 1 << 20;
  constexpr int kMicro = 4;
  for (bool sp : {false, true}) {
    for (bool overlap : {false, true}) {
      Policy p = Parallel(2, sp, 1, 2, kMicro);
      p.tp_comm_overlap = overlap;
      p.recompute_blocks = 1;  // the recompute node writes it too
      auto step = BuildParallelStep(tiny, p, 4, 64, 1, {}, {}, true, true,
                                    BlockBytes(tiny, kBytes));
      ASSERT_TRUE(step.ok()) << step.status();
      for (int s = 0; s < 2; ++s) {
        const StepGraph& g = step->stages[s];
        ASSERT_TRUE(VerifyStepGraph(g).ok()) << VerifyStepGraph(g);
        // Every compute node of a block names exactly one saved buffer:
        // forward and recompute parts write it, backward parts read it.
        std::map<int, std::vector<std::string>> users;  // buffer -> its nodes
        std::map<NodeKind, int> parts;
        for (const Node& n : g.nodes) {
          if (n.unit < 0 || g.layout.units[n.unit].kind != UnitKind::kBlock) continue;
          if (n.kind != NodeKind::kForward && n.kind != NodeKind::kBackward &&
              n.kind != NodeKind::kRecompute) {
            continue;
          }
          const std::vector<int>& where = n.kind == NodeKind::kBackward ? n.reads : n.writes;
          std::vector<int> sv;
          for (int b : where) {
            if (g.buffers[b].role == BufferRole::kSavedActivation) sv.push_back(b);
          }
          ASSERT_EQ(sv.size(), 1u) << n.name;
          users[sv[0]].push_back(n.name);
          ++parts[n.kind];
        }
        EXPECT_EQ(static_cast<int>(users.size()), StageBlocks(g) * kMicro);
        // Forward: 2 parts (4 with the norms as nodes of their own under
        // sequence parallelism without overlap); backward: 2.
        const int fwd = sp && !overlap ? 4 : 2;
        EXPECT_EQ(parts[NodeKind::kForward], StageBlocks(g) * kMicro * fwd) << sp << overlap;
        EXPECT_EQ(parts[NodeKind::kBackward], StageBlocks(g) * kMicro * 2) << sp << overlap;
        EXPECT_EQ(parts[NodeKind::kRecompute], kMicro) << sp << overlap;  // the first block's
        for (const auto& [b, names] : users) {
          EXPECT_EQ(names.front().rfind("F ", 0), 0u) << names.front();
          EXPECT_EQ(names.back().rfind("B ", 0), 0u) << names.back();
          EXPECT_EQ(g.nodes[g.last_use[b]].name, names.back());
        }
        const int64_t peak = std::min(kMicro, 2 - s) * StageBlocks(g) * kBytes;
        EXPECT_EQ(SavedActivationPeak(g), peak) << "sp " << sp << " ov " << overlap << " s " << s;
      }
    }
  }
}

// ZB-H1 with tensor parallelism: each backward part of a block (the MLP
// with its norm, the attention with its norm) gets its deferred weight
// pass, a compute node with no tensor collective, issued after its part's
// input-gradient pass; the input-gradient parts keep every tensor
// collective of the 1F1B graph's backward; each saved activation lives
// until the block's last weight pass; the data-parallel reduction of a
// block's bucket follows its last weight pass. A stage's first block's
// backward reads the received input (attention part), as an unsplit block.
TEST(ParallelGraphTest, ZeroBubbleWeightPassesOfTensorParallelBlockParts) {
  const ModelSpec tiny = *ModelPreset("tiny");  // 4 blocks
  constexpr int64_t kBytes = 1 << 20;
  constexpr int kMicro = 4;
  const uint8_t mlp = SegmentBit(BlockSegment::kMlpNorm) | SegmentBit(BlockSegment::kMlp);
  const uint8_t attn =
      SegmentBit(BlockSegment::kAttnNorm) | SegmentBit(BlockSegment::kAttention);
  for (bool sp : {false, true}) {
    for (bool overlap : {false, true}) {
      Policy p = Parallel(2, sp, 1, 2, kMicro);
      p.tp_comm_overlap = overlap;
      auto one = BuildParallelStep(tiny, p, 8, 64, 1, {}, {}, true, true,
                                   BlockBytes(tiny, kBytes));
      p.pipeline_schedule = PipelineSchedule::kZbH1;
      auto zb = BuildParallelStep(tiny, p, 8, 64, 1, {}, {}, true, true,
                                  BlockBytes(tiny, kBytes));
      ASSERT_TRUE(one.ok()) << one.status();
      ASSERT_TRUE(zb.ok()) << zb.status();
      for (int s = 0; s < 2; ++s) {
        const StepGraph& g = zb->stages[s];
        SCOPED_TRACE(::testing::Message() << "sp " << sp << " overlap " << overlap << " stage "
                                          << s);
        ASSERT_TRUE(VerifyStepGraph(g).ok()) << VerifyStepGraph(g);
        // The same tensor collectives (nodes and fused) as 1F1B's graph.
        auto tensor_comm = [](const StepGraph& graph) {
          int nodes = 0, fused = 0;
          for (const Node& n : graph.nodes) {
            nodes += n.group == kTensorGroup;
            for (const FusedComm& f : n.fused) fused += f.group == kTensorGroup;
          }
          return std::make_pair(nodes, fused);
        };
        EXPECT_EQ(tensor_comm(g), tensor_comm(one->stages[s]));
        std::map<std::string, int> at;  // node name -> issue index
        for (size_t i = 0; i < g.nodes.size(); ++i) at[g.nodes[i].name] = static_cast<int>(i);
        int weights = 0;
        for (size_t i = 0; i < g.nodes.size(); ++i) {
          const Node& n = g.nodes[i];
          if (n.kind == NodeKind::kBackward) {
            EXPECT_TRUE(n.grad_accumulate.empty()) << n.name;  // input gradient only
          }
          if (n.kind != NodeKind::kBackwardWeight ||
              g.layout.units[n.unit].kind != UnitKind::kBlock) {
            continue;
          }
          ++weights;
          ASSERT_TRUE(n.segments == mlp || n.segments == attn) << n.name;
          EXPECT_TRUE(n.fused.empty()) << n.name;
          EXPECT_EQ(n.stream, kComputeStream) << n.name;
          // After its part's input-gradient pass ("W u.mlp m1" / "B u.mlp m1").
          const std::string b = "B" + n.name.substr(1);
          ASSERT_EQ(at.count(b), 1u) << n.name;
          EXPECT_LT(at[b], static_cast<int>(i)) << n.name;
          EXPECT_EQ(g.nodes[at[b]].segments, n.segments) << n.name;
          // Writes its segments' gradients only: the first micro-batch's
          // pass starts them, later ones accumulate.
          const std::vector<ParamRef>& refs = g.layout.unit_params[n.unit];
          ASSERT_EQ(n.grad_accumulate.size(), refs.size()) << n.name;
          for (size_t k = 0; k < refs.size(); ++k) {
            const ParamSlot& slot = g.layout.buckets[refs[k].bucket].params[refs[k].slot];
            const std::string param = slot.name.substr(slot.name.find('.') + 1);
            const bool mine = (n.segments == mlp) == (param.rfind("mlp_norm", 0) == 0 ||
                                                      param.rfind("w_", 0) == 0);
            EXPECT_EQ(static_cast<bool>(n.grad_accumulate[k]), mine && n.micro_step > 0)
                << n.name << " " << slot.name;
          }
          // The saved activation of its (block, micro-batch) is a read.
          int saved = 0;
          for (int r : n.reads) saved += g.buffers[r].role == BufferRole::kSavedActivation;
          EXPECT_EQ(saved, 1) << n.name;
        }
        EXPECT_EQ(weights, StageBlocks(g) * kMicro * 2);
        // Each saved buffer's last use is a weight pass (the block's last).
        for (size_t b = 0; b < g.buffers.size(); ++b) {
          if (g.buffers[b].role != BufferRole::kSavedActivation) continue;
          const Node& last = g.nodes[g.last_use[b]];
          EXPECT_EQ(last.kind, NodeKind::kBackwardWeight) << g.buffers[b].name;
          EXPECT_EQ(last.segments, attn) << g.buffers[b].name;
        }
        // A block bucket's reduction after its last weight pass.
        for (const Node& r : g.nodes) {
          if (r.kind != NodeKind::kReduceScatter || r.group == kTensorGroup) continue;
          int last_w = -1;
          for (size_t i = 0; i < g.nodes.size(); ++i) {
            const Node& n = g.nodes[i];
            if (n.kind != NodeKind::kBackwardWeight) continue;
            for (const ParamRef& ref : g.layout.unit_params[n.unit]) {
              if (ref.bucket == r.bucket) last_w = static_cast<int>(i);
            }
          }
          ASSERT_GE(last_w, 0) << r.name;
          EXPECT_GT(at[r.name], last_w) << r.name;
          bool edge = false;  // and waits for it (the gradient buffer's data edge)
          for (const GraphEdge& e : g.edges) edge |= e.from == last_w && e.to == at[r.name];
          EXPECT_TRUE(edge) << r.name;
        }
        // The received input (stage 1): read last by its first block's
        // attention backward part, under 1F1B too.
        for (const StepGraph* h : {&g, static_cast<const StepGraph*>(&one->stages[s])}) {
          for (size_t b = 0; b < h->buffers.size(); ++b) {
            if (h->buffers[b].name.rfind("recv.act", 0) != 0) continue;
            const Node& last = h->nodes[h->last_use[b]];
            EXPECT_EQ(last.kind, NodeKind::kBackward) << h->buffers[b].name;
            EXPECT_EQ(last.segments, attn) << h->buffers[b].name;
            EXPECT_EQ(last.unit, h->chunk_units[0].front()) << h->buffers[b].name;
          }
        }
      }
    }
  }
}

// gather_per_micro_batch: every pass gathers its chunk's buckets into
// buffers of its own (the weight pass reads its backward's), so a stage
// gathers 2 x m times per bucket instead of once and its plan holds less.
TEST(ParallelGraphTest, GatherPerMicroBatchRegathersEveryPass) {
  const ModelSpec tiny = *ModelPreset("tiny");
  for (PipelineSchedule schedule : {PipelineSchedule::k1F1B, PipelineSchedule::kZbH1}) {
    Policy p = Parallel(1, false, 1, 2, 4);
    p.pipeline_schedule = schedule;
    auto step = BuildParallelStep(tiny, p, 4, 64, 1, {}, {}, /*plan_memory=*/true);
    p.gather_per_micro_batch = true;
    auto micro = BuildParallelStep(tiny, p, 4, 64, 1, {}, {}, /*plan_memory=*/true);
    ASSERT_TRUE(step.ok() && micro.ok()) << step.status() << micro.status();
    for (int s = 0; s < 2; ++s) {
      const StepGraph& g = micro->stages[s];
      ASSERT_TRUE(VerifyStepGraph(g).ok()) << VerifyStepGraph(g);
      std::map<int, int> gathers;       // bucket -> all-gathers
      std::map<int, int> gathered_by;   // gathered buffer -> the all-gather writing it
      for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
        const Node& n = g.nodes[i];
        if (n.kind != NodeKind::kAllGather) continue;
        ++gathers[n.bucket];
        gathered_by[n.writes[0]] = i;
      }
      ASSERT_FALSE(gathers.empty());
      // Forward and backward (zb-h1: and the weight pass) of 4 micro-batches.
      const int passes = schedule == PipelineSchedule::kZbH1 ? 3 : 2;
      for (const auto& [bucket, n] : gathers) EXPECT_EQ(n, passes * 4) << bucket;
      int computes = 0;
      for (const Node& n : g.nodes) {
        if (n.kind != NodeKind::kForward && n.kind != NodeKind::kBackward &&
            n.kind != NodeKind::kBackwardWeight && n.kind != NodeKind::kRecompute) {
          continue;
        }
        for (int r : n.reads) {
          if (g.buffers[r].role != BufferRole::kGathered) continue;
          ++computes;
          // Gathered for this micro-batch and pass.
          const Node& ag = g.nodes[gathered_by.at(r)];
          EXPECT_EQ(ag.micro_step, n.micro_step) << n.name;
          const char* pass = n.kind == NodeKind::kForward          ? " fwd"
                             : n.kind == NodeKind::kBackwardWeight ? " wgt"
                                                                   : " bwd";
          EXPECT_NE(g.buffers[r].name.find(pass), std::string::npos)
              << n.name << " reads " << g.buffers[r].name;
        }
      }
      EXPECT_GT(computes, 0);
      const StepGraph& once = step->stages[s];
      EXPECT_LT(g.plan.arena_bytes + g.persistent_bytes,
                once.plan.arena_bytes + once.persistent_bytes)
          << "stage " << s << " " << PipelineScheduleName(schedule);
    }
  }
  Policy alone = Parallel(1, false, 1, 1, 4);
  alone.tensor_parallel = 2;
  alone.gather_per_micro_batch = true;
  auto bad = BuildParallelStep(tiny, alone, 4, 64, 1);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("gather_per_micro_batch needs pipeline_parallel > 1"),
            std::string::npos) << bad.status();
}

// LoRA: a stage gathers its frozen base buckets and never reduces or
// updates them; its adapter buckets are reduced and updated.
TEST(ParallelGraphTest, FrozenBucketsAreGatheredNeverReduced) {
  const ModelSpec tiny = *ModelPreset("tiny");
  Policy p = Parallel(1, false, 1, 2, 4);
  p.layout.lora_rank = 4;
  auto step = BuildParallelStep(tiny, p, 4, 64, 1, {}, {}, /*plan_memory=*/true);
  ASSERT_TRUE(step.ok()) << step.status();
  for (const StepGraph& g : step->stages) {
    ASSERT_TRUE(VerifyStepGraph(g).ok()) << VerifyStepGraph(g);
    int frozen_gathers = 0, adapter_updates = 0;
    for (const Node& n : g.nodes) {
      if (n.bucket < 0) continue;
      const bool frozen = g.layout.buckets[n.bucket].frozen;
      if (n.kind == NodeKind::kAllGather) frozen_gathers += frozen;
      if (n.kind == NodeKind::kReduceScatter || n.kind == NodeKind::kOptimizer ||
          n.kind == NodeKind::kCast) {
        EXPECT_FALSE(frozen) << n.name;
        adapter_updates += n.kind == NodeKind::kOptimizer;
      }
    }
    EXPECT_GT(frozen_gathers, 0);
    EXPECT_EQ(adapter_updates, 2);  // the stage's 2 blocks' adapters
  }
}

// NF4 base weights: a stage keeps and gathers its frozen buckets' packings
// and, in every pass that reads them (backward and zb-h1's weight pass
// too; per pass with gather_per_micro_batch, after that pass's gather),
// dequantizes them into weights of the pass before the first compute that
// reads them; no compute reads a packing (VerifyStepGraph).
TEST(ParallelGraphTest, Nf4BucketsAreDequantizedBeforeEveryPassReadsThem) {
  const ModelSpec tiny = *ModelPreset("tiny");
  for (PipelineSchedule schedule : {PipelineSchedule::k1F1B, PipelineSchedule::kZbH1}) {
    for (bool micro : {false, true}) {
      SCOPED_TRACE(absl::StrCat(PipelineScheduleName(schedule), micro ? " per pass" : " per step"));
      Policy p = Parallel(1, false, 1, 2, 4);
      p.pipeline_schedule = schedule;
      p.gather_per_micro_batch = micro;
      p.recompute_blocks = 1;
      p.layout.lora_rank = 4;
      p.layout.base_dtype = BaseDtype::kNf4;
      auto step = BuildParallelStep(tiny, p, 4, 64, 1, {}, {}, /*plan_memory=*/true);
      ASSERT_TRUE(step.ok()) << step.status();
      for (const StepGraph& g : step->stages) {
        ASSERT_TRUE(VerifyStepGraph(g).ok()) << VerifyStepGraph(g);
        std::vector<int> writer(g.buffers.size(), -1);  // the last so far, in issue order
        std::map<int, int> dequantizes;                 // NF4 bucket -> DQ nodes
        int nf4_reads = 0;
        for (int i = 0; i < static_cast<int>(g.nodes.size()); ++i) {
          const Node& n = g.nodes[i];
          if (n.kind == NodeKind::kDequantize) {
            ++dequantizes[n.bucket];
            const Bucket& bk = g.layout.buckets[n.bucket];
            EXPECT_TRUE(bk.nf4 && bk.frozen) << n.name;
            EXPECT_EQ(n.stream, kComputeStream) << n.name;
            // Reads a packing an all-gather of the packed shard wrote.
            const GraphBuffer& packed = g.buffers[n.reads[0]];
            EXPECT_EQ(packed.role, BufferRole::kPacked) << n.name;
            ASSERT_GE(writer[n.reads[0]], 0) << n.name;
            const Node& ag = g.nodes[writer[n.reads[0]]];
            ASSERT_EQ(ag.kind, NodeKind::kAllGather) << n.name;
            const GraphBuffer& shard = g.buffers[ag.reads[0]];
            EXPECT_EQ(shard.numel, Nf4PackedWords(bk.shard_numel)) << shard.name;
            EXPECT_EQ(shard.dtype, DataType::kF32) << shard.name;
            EXPECT_EQ(packed.numel, 2 * shard.numel) << packed.name;  // 2 data ranks
            if (micro) {
              EXPECT_EQ(ag.micro_step, n.micro_step) << ag.name << " / " << n.name;
            }
            const GraphBuffer& out = g.buffers[n.writes[0]];
            EXPECT_EQ(out.role, BufferRole::kGathered);
            EXPECT_EQ(out.numel, bk.padded_numel) << out.name;
            EXPECT_EQ(out.dtype, p.param_dtype) << out.name;
            EXPECT_GE(out.plan_id, 0) << out.name << " not planned";
          }
          if (IsCompute(n.kind)) {
            for (int r : n.reads) {
              if (g.buffers[r].bucket < 0 || !g.layout.buckets[g.buffers[r].bucket].nf4) continue;
              ++nf4_reads;
              // This pass's and micro-batch's dequantize, issued before it.
              ASSERT_GE(writer[r], 0) << n.name << " reads " << g.buffers[r].name;
              const Node& dq = g.nodes[writer[r]];
              EXPECT_EQ(dq.kind, NodeKind::kDequantize) << n.name;
              EXPECT_LT(writer[r], i);
              EXPECT_EQ(dq.micro_step, n.micro_step) << dq.name << " / " << n.name;
              const char* pass = n.kind == NodeKind::kForward          ? " fwd"
                                 : n.kind == NodeKind::kBackwardWeight ? " wgt"
                                                                       : " bwd";
              EXPECT_NE(dq.name.find(pass), std::string::npos) << dq.name << " / " << n.name;
            }
          }
          for (int w : n.writes) writer[w] = i;
        }
        EXPECT_GT(nf4_reads, 0);
        // Each NF4 bucket once per pass: forward, backward (zb-h1: and
        // weight) of 4 micro-batches.
        ASSERT_EQ(dequantizes.size(), 2u);  // the stage's 2 blocks' base weights
        const int passes = schedule == PipelineSchedule::kZbH1 ? 3 : 2;
        for (const auto& [bucket, count] : dequantizes) EXPECT_EQ(count, passes * 4) << bucket;
      }
    }
  }
}

TEST(ParallelGraphTest, StageLayers) {
  const ModelSpec m405 = *ModelPreset("llama3-405b");
  Policy p = Parallel(8, true, 1, 16, 16);
  auto n = VirtualStageLayers(m405, p);
  ASSERT_TRUE(n.ok()) << n.status();
  std::vector<int> want(16, 8);
  want[0] = want[15] = 7;
  EXPECT_EQ(*n, want);
  p.pipeline_first_layers = 6;
  p.pipeline_last_layers = 0;
  auto bad = VirtualStageLayers(m405, p);  // 120 over 15 stages: 8 each
  ASSERT_TRUE(bad.ok()) << bad.status();
  EXPECT_EQ((*bad)[0], 6);
  EXPECT_EQ((*bad)[1], 8);
  p.pipeline_first_layers = 5;
  EXPECT_EQ(VirtualStageLayers(m405, p).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ParallelGraphTest, BadCombinationsAreOneLine) {
  const ModelSpec m70 = *ModelPreset("llama3-70b");  // 64 heads, 8 KV heads, 80 blocks
  struct Case {
    Policy p;
    int world;
    int64_t seq;
    std::string want;
  } cases[] = {
      {Parallel(16, false, 1, 1, 1), 16, 4096, "KV heads"},
      {Parallel(3, false, 1, 1, 1), 3, 4096, "64 heads"},
      {Parallel(1, false, 1, 81, 81), 81, 4096, "more than the model's 80 blocks"},
      {Parallel(8, false, 1, 2, 1), 8, 4096, "does not divide them"},
      {Parallel(1, false, 3, 1, 1), 3, 4096, "2 x --cp"},
  };
  for (const Case& c : cases) {
    auto s = BuildParallelStep(m70, c.p, c.world, c.seq, 1);
    ASSERT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << c.want;
    EXPECT_NE(s.status().message().find(c.want), std::string::npos) << s.status();
    EXPECT_EQ(s.status().message().find('\n'), std::string::npos);
  }
  Policy inter = Parallel(1, false, 1, 4, 6);
  inter.pipeline_schedule = PipelineSchedule::kInterleaved;
  inter.virtual_stages = 2;
  auto s = BuildParallelStep(m70, inter, 4, 4096, 1);
  EXPECT_NE(s.status().message().find("multiple of --pp"), std::string::npos) << s.status();
  Policy sp = Parallel(1, true, 1, 2, 2);
  EXPECT_NE(ValidatePolicy(sp).message().find("sequence_parallel"), std::string::npos);
  ModelSpec tied = *ModelPreset("tiny");
  tied.tie_embeddings = true;
  auto t = BuildParallelStep(tied, Parallel(1, false, 1, 2, 2), 2, 64, 1);
  EXPECT_NE(t.status().message().find("tied"), std::string::npos) << t.status();
  // The data-parallel builder refuses a parallel policy.
  EXPECT_EQ(BuildStepGraph(m70, Parallel(2, false, 1, 1, 1), 2).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(BalancedStageLayersTest, MinimisesTheLargestStage) {
  // Unit costs: embedding, 6 blocks, norm, head.
  auto costs = [](double embedding, double head) {
    std::vector<double> c = {embedding, 1, 1, 1, 1, 1, 1, 0, head};
    return c;
  };
  // Nothing at the ends: even.
  EXPECT_EQ(*BalancedStageLayers(6, 2, costs(0, 0)), (std::vector<int>{3, 3}));
  EXPECT_EQ(*BalancedStageLayers(6, 3, costs(0, 0)), (std::vector<int>{2, 2, 2}));
  // A head worth two blocks: the last stage takes fewer.
  EXPECT_EQ(*BalancedStageLayers(6, 2, costs(0, 2)), (std::vector<int>{4, 2}));
  // A head worth ten blocks: the last stage keeps one block only (the
  // others tie under it; the earlier holds fewer).
  EXPECT_EQ(*BalancedStageLayers(6, 3, costs(0, 10)), (std::vector<int>{2, 3, 1}));
  // A head worth half a block: moving a block off the last stage makes
  // another stage of 3.
  EXPECT_EQ(*BalancedStageLayers(6, 3, costs(0, 0.5)), (std::vector<int>{2, 2, 2}));
  // Ties (1 | 2 and 2 | 1 both cost 2): the earlier stage holds fewer.
  EXPECT_EQ(*BalancedStageLayers(3, 2, {0, 1, 1, 1, 0, 0}), (std::vector<int>{1, 2}));
  EXPECT_EQ(*BalancedStageLayers(5, 2, {0, 1, 1, 1, 1, 1, 0, 0}), (std::vector<int>{2, 3}));
  // The model's own FLOPs: tiny's head (vocab 512) is cheaper than a block.
  const ModelSpec tiny = *ModelPreset("tiny");
  const std::vector<double> f = UnitTrainingFlops(tiny, 128);
  ASSERT_EQ(f.size(), static_cast<size_t>(tiny.layers) + 3);
  EXPECT_EQ(f[0], 0);
  EXPECT_GT(f[1], f.back());
  EXPECT_EQ(*BalancedStageLayers(tiny.layers, 2, f), (std::vector<int>{2, 2}));
  // Bad input.
  EXPECT_EQ(BalancedStageLayers(6, 7, costs(0, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BalancedStageLayers(6, 0, costs(0, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BalancedStageLayers(5, 2, costs(0, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BalancedStageLayers(6, 2, costs(-1, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::scheduler
