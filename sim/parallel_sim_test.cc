// Consistency of the simulated pipeline, tensor and context parallelism:
// with free communication and uniform stages the bubble that emerges from
// running the stages' graphs together is the schedule's formula (1F1B
// (p-1)/(m+p-1), interleaved (p-1)/(v m+p-1)) within 2 points, ZB-H1's is
// about a third of 1F1B's; each stage holds the micro-batches its schedule
// says; tensor parallelism divides the compute, its exposed collectives
// cost time that overlap by decomposition hides; memory per stage follows
// Megatron's accounting.
#include "baton/sim/parallel_sim.h"
#include "baton/sim/node_cost.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "gtest/gtest.h"

namespace baton::sim {
namespace {

using scheduler::PipelineSchedule;

// Llama-3-8B's blocks with a tiny vocabulary: the embedding and head cost
// next to nothing, so the stages are uniform.
scheduler::ModelSpec Uniform(int layers) {
  scheduler::ModelSpec m = *scheduler::ModelPreset("llama3-8b");
  m.name = "uniform";
  m.layers = layers;
  m.vocab = 256;
  return m;
}

SimResult Sim(const scheduler::ModelSpec& m, Workload w, bool free_comm = true,
              int recompute = 0) {
  SimOptions o;
  o.free_comm = free_comm;
  auto p = SimPolicy("baton", w, 8);
  EXPECT_TRUE(p.ok()) << p.status();
  auto r = SimulatePolicy(m, *ClusterPreset("h100"), w, *p, recompute, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

Workload Pipeline(int pp, int m, PipelineSchedule s = PipelineSchedule::k1F1B, int vpp = 1) {
  Workload w;
  w.gpus = pp;
  w.seq = 2048;
  w.global_batch = m;
  w.micro_batch = 1;
  w.pp = pp;
  w.vpp = vpp;
  w.schedule = s;
  return w;
}

TEST(ParallelSimTest, OneFOneBBubbleIsTheFormula) {
  for (auto [p, m] : {std::pair{4, 8}, {4, 16}, {8, 16}}) {
    const SimResult r = Sim(Uniform(32), Pipeline(p, m));
    const double want = (p - 1.0) / (m + p - 1.0);
    std::printf("1f1b p=%d m=%d: bubble %.4f, formula %.4f\n", p, m, r.bubble, want);
    EXPECT_NEAR(r.bubble, want, 0.02) << p << " " << m;
    ASSERT_EQ(r.stages.size(), static_cast<size_t>(p));
    for (int s = 0; s < p; ++s) {
      EXPECT_EQ(r.stages[s].in_flight, std::min(m, p - s)) << "stage " << s;
    }
  }
}

TEST(ParallelSimTest, InterleavedBubbleIsTheFormula) {
  for (auto [p, m, v] : {std::tuple{4, 8, 2}, {4, 8, 4}, {2, 8, 4}}) {
    const SimResult r = Sim(Uniform(32), Pipeline(p, m, PipelineSchedule::kInterleaved, v));
    const double want = (p - 1.0) / (v * m + p - 1.0);
    std::printf("interleaved p=%d m=%d v=%d: bubble %.4f, formula %.4f\n", p, m, v, r.bubble,
                want);
    EXPECT_NEAR(r.bubble, want, 0.02) << p << " " << m << " " << v;
  }
}

// ZB-H1's bubble (idle time per stage) against 1F1B's is (F + B - W) /
// (F + B + W) in the zero-bubble paper (Qi et al. 2023; a third when the
// three passes take equal times: PipelineOrderTest shows exactly that with
// unit times). Here the block's passes are unequal (the input-gradient
// pass holds the attention backward and the element-wise backwards), so
// the bound is about a half; the simulated schedule is within 0.1 of it.
TEST(ParallelSimTest, ZeroBubbleH1BubbleFollowsThePaper) {
  auto c = ComputeModel::Create(*H100KernelTable(), *ClusterPreset("h100"), Uniform(32), 2048,
                                1, 2048);
  ASSERT_TRUE(c.ok()) << c.status();
  const BlockSegments& seg = c->Segments();
  double f = seg.Forward().seconds, b = 0, w = seg.weight.seconds;
  for (const KernelSum& k : seg.bwd_input) b += k.seconds;
  const double paper = (f + b - w) / (f + b + w);
  for (auto [p, m] : {std::pair{4, 8}, {8, 16}}) {
    const SimResult a = Sim(Uniform(32), Pipeline(p, m));
    const SimResult z = Sim(Uniform(32), Pipeline(p, m, PipelineSchedule::kZbH1));
    const double ratio = (z.bubble * z.pipeline_span_s) / (a.bubble * a.pipeline_span_s);
    std::printf("zb-h1 p=%d m=%d: idle %.4f s vs 1f1b %.4f s, ratio %.3f (paper %.3f); "
                "step %.4f s vs %.4f s\n",
                p, m, z.bubble * z.pipeline_span_s, a.bubble * a.pipeline_span_s, ratio, paper,
                z.step_s, a.step_s);
    EXPECT_NEAR(ratio, paper, 0.1) << p << " " << m;
    EXPECT_LT(z.step_s, a.step_s);
    // Activations held: 1F1B's p - s awaiting their input gradient, and at
    // most p more awaiting their weight pass.
    for (int s = 0; s < p; ++s) {
      EXPECT_LE(z.stages[s].in_flight, std::min(m, 2 * p - s)) << "stage " << s;
      EXPECT_GE(z.stages[s].in_flight, a.stages[s].in_flight) << "stage " << s;
    }
  }
}

// ScheduleBubble on the stage graphs an executor runs (the micro model,
// planned for it): with equal block passes, 1F1B's stages idle (p-1) /
// (m+p-1) of the span and ZB-H1's (p-1)(F+B-W) / (3m + (p-1)(F+B-W)).
TEST(ParallelSimTest, ScheduleBubbleOfExecutedStageGraphs) {
  scheduler::ModelSpec spec = *scheduler::ModelPreset("micro");
  spec.layers = 4;
  for (auto sched : {PipelineSchedule::k1F1B, PipelineSchedule::kZbH1}) {
    for (auto [p, m] : {std::pair{2, 4}, {4, 8}}) {
      scheduler::Policy policy = *scheduler::PolicyPreset("fsdp2");
      policy.pipeline_parallel = p;
      policy.micro_steps = m;
      policy.pipeline_schedule = sched;
      auto step = scheduler::BuildParallelStep(spec, policy, p, 4, 1, {}, {}, true);
      ASSERT_TRUE(step.ok()) << step.status();
      std::vector<const scheduler::StepGraph*> stages;
      for (const scheduler::StepGraph& g : step->stages) stages.push_back(&g);
      auto bubble = ScheduleBubble(stages, {});
      ASSERT_TRUE(bubble.ok()) << bubble.status();
      ASSERT_EQ(bubble->size(), static_cast<size_t>(p));
      const bool zb = sched == PipelineSchedule::kZbH1;
      const double want = zb ? (p - 1.0) / (3.0 * m + p - 1.0) : (p - 1.0) / (m + p - 1.0);
      for (int s = 0; s < p; ++s) {
        std::printf("%s p=%d m=%d stage %d: bubble %.4f, formula %.4f\n", zb ? "zb-h1" : "1f1b",
                    p, m, s, (*bubble)[s], want);
        EXPECT_NEAR((*bubble)[s], want, 1e-9) << p << " " << m << " stage " << s;
      }
    }
  }
  auto step = scheduler::BuildParallelStep(spec, [] {
    scheduler::Policy q = *scheduler::PolicyPreset("fsdp2");
    q.pipeline_parallel = 2;
    return q;
  }(), 2, 4, 1, {}, {}, true);
  ASSERT_TRUE(step.ok()) << step.status();
  EXPECT_EQ(ScheduleBubble({&step->stages[0]}, {}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScheduleBubble({&step->stages[0], &step->stages[1]}, {1, 0, 1}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ParallelSimTest, TensorParallelismDividesComputeAndItsCommIsExposedOrHidden) {
  const scheduler::ModelSpec m = *scheduler::ModelPreset("llama3-70b");
  Workload w;
  w.gpus = 8;
  w.seq = 4096;
  w.global_batch = 1;
  w.micro_batch = 1;
  w.tp = 8;
  w.sp = true;
  const SimResult free = Sim(m, w, true, -1);
  const SimResult exposed = Sim(m, w, false, -1);
  w.tp_overlap = true;
  const SimResult hidden = Sim(m, w, false, -1);
  std::printf("tp8 sp: free %.3f s, exposed %.3f s, overlapped %.3f s\n", free.step_s,
              exposed.step_s, hidden.step_s);
  EXPECT_GT(exposed.step_s, free.step_s * 1.05);
  EXPECT_LT(hidden.step_s, exposed.step_s);
  EXPECT_GE(hidden.step_s, free.step_s * 0.999);
  // Memory: 2 + 4 bytes per parameter of this rank's slice, 12 over one
  // data rank: 18 bytes x 70.6B / 8.
  EXPECT_NEAR(free.memory.states / (18.0 * scheduler::ParameterCount(m) / 8), 1, 0.02);
}

TEST(ParallelSimTest, ContextParallelismDividesAttention) {
  const scheduler::ModelSpec m = *scheduler::ModelPreset("llama3-8b");
  Workload w;
  w.gpus = 1;
  w.seq = 32768;
  w.global_batch = 1;
  w.micro_batch = 1;
  Workload c = w;
  c.gpus = 4;
  c.cp = 4;
  c.global_batch = 1;
  const SimResult one = Sim(m, w, true, -1);
  const SimResult four = Sim(m, c, true, -1);
  std::printf("cp4 at 32k: %.3f s vs %.3f s on one GPU\n", four.step_s, one.step_s);
  EXPECT_LT(four.step_s, one.step_s / 3);
  EXPECT_GT(four.step_s, one.step_s / 5);
}

}  // namespace
}  // namespace baton::sim

namespace baton::sim {
namespace {

// Megatron's activation accounting (Korthikanti et al. 2022, REFERENCE
// section 12) per stage: 1F1B stage s holds min(m, p - s) micro-batches of
// its blocks' 34 t h / tp bytes (TP with SP), t h (10 + 24 / tp) without
// SP; interleaved's first stage holds 1 + (p - 1) / (p v) times 1F1B's.
TEST(ParallelSimTest, StageMemoryIsMegatrons) {
  const scheduler::ModelSpec m = Uniform(32);
  Workload w = Pipeline(4, 8);
  w.gpus = 32;
  w.tp = 8;
  w.sp = true;
  w.global_batch = 8;
  const double t = 2048, h = static_cast<double>(m.hidden);
  const SimResult sp = Sim(m, w, false, 0);
  ASSERT_EQ(sp.stages.size(), 4u);
  for (int s = 0; s < 4; ++s) {
    EXPECT_NEAR(sp.stages[s].memory.activations, (4 - s) * 8 * 34 * t * h / 8, 1) << s;
  }
  w.sp = false;
  const SimResult no_sp = Sim(m, w, false, 0);
  EXPECT_NEAR(no_sp.stages[0].memory.activations, 4 * 8 * t * h * (10 + 24.0 / 8), 1);
  // Interleaved, v = 2: the first stage holds 4 x 8 x (1 + 3 / 8) blocks'.
  w.sp = true;
  w.vpp = 2;
  w.schedule = PipelineSchedule::kInterleaved;
  const SimResult inter = Sim(m, w, false, 0);
  EXPECT_NEAR(inter.stages[0].memory.activations / sp.stages[0].memory.activations,
              1 + 3.0 / 8, 1e-9);
  // States: the gathered parameters and the fp32 gradient of this rank's
  // slice whole, 12 bytes of optimizer state over the 1 data rank.
  EXPECT_GT(sp.stages[0].memory.states, 0);
  // The last stage holds the logits (bf16 and fp32) of one micro-batch.
  EXPECT_NEAR(sp.stages[3].memory.logits, t * (256.0 / 8) * 6, 1);
  EXPECT_EQ(sp.stages[0].memory.logits, 0);
}

}  // namespace
}  // namespace baton::sim

namespace baton::sim {
namespace {

// A recomputed block costs its forward again, tensor collectives included:
// the R node's time is the block's forward nodes' and all-reduces' (no SP,
// no overlap) or, with SP, its gathers' and reduce-scatters'.
TEST(ParallelSimTest, RecomputeCostsTheForwardWithItsCollectives) {
  const scheduler::ModelSpec m = *scheduler::ModelPreset("llama3-8b");
  const ClusterSpec h100 = *ClusterPreset("h100");
  for (bool sp : {false, true}) {
    Workload w;
    w.gpus = 8;
    w.seq = 4096;
    w.global_batch = 1;
    w.tp = 8;
    w.sp = sp;
    scheduler::Policy p = *SimPolicy("baton", w, 8);
    p.recompute_blocks = -1;
    auto step = scheduler::BuildParallelStep(m, p, 8, 4096, 1);
    ASSERT_TRUE(step.ok()) << step.status();
    const scheduler::StepGraph& g = step->stages[0];
    ShardShape shard;
    shard.tp = 8;
    shard.sp = sp;
    auto k = ComputeModel::Create(*H100KernelTable(), h100, m, 4096, 1, 4096, {}, {}, shard);
    ASSERT_TRUE(k.ok());
    const SimOptions o;
    const NodeCoster coster(g, h100, o, *k);
    const int block = 3;  // unit of block2
    double forward = 0, recompute = -1;
    for (const scheduler::Node& n : g.nodes) {
      const bool tensor = n.group == scheduler::kTensorGroup && n.micro_step == 0;
      const NodeCost c = coster.Cost(n);
      if ((n.kind == scheduler::NodeKind::kForward && n.unit == block) ||
          (tensor && n.name.find("block2.") != std::string::npos &&
           n.name.find(".d") == std::string::npos)) {
        forward += c.latency_s + c.work_s;
      }
      if (n.kind == scheduler::NodeKind::kRecompute && n.unit == block) recompute = c.latency_s;
    }
    EXPECT_NEAR(recompute, forward, 1e-9) << "sp " << sp;
  }
}

}  // namespace
}  // namespace baton::sim

namespace baton::sim {
namespace {

// gather_per_micro_batch: the stage holds about two units' gathered
// parameters instead of all of its own, and gathers 2 x m times per bucket
// instead of once, which the same graph's run costs in time.
TEST(ParallelSimTest, GatherPerMicroBatchHoldsLessAndGathersMore) {
  const scheduler::ModelSpec m = Uniform(8);
  Workload w = Pipeline(2, 8);
  w.gpus = 16;  // 8 data ranks per stage
  w.global_batch = 64;
  const ClusterSpec h100 = *ClusterPreset("h100");
  scheduler::Policy p = *SimPolicy("baton", w, 8);
  const SimOptions o;
  auto once = SimulatePolicy(m, h100, w, p, 0, o);
  p.gather_per_micro_batch = true;
  auto micro = SimulatePolicy(m, h100, w, p, 0, o);
  ASSERT_TRUE(once.ok() && micro.ok()) << once.status() << micro.status();
  // A llama3-8b block's bf16 parameters: 218M x 2 bytes; a stage holds its
  // 4 blocks gathered once per step, 2 (computing, prefetched) per
  // micro-batch pass.
  const double block = 2.0 * 218.1e6;
  for (int s = 0; s < 2; ++s) {
    const double saved = once->stages[s].memory.states - micro->stages[s].memory.states;
    EXPECT_GT(saved, 1.9 * block) << s;
    EXPECT_LT(saved, 2.1 * block) << s;
  }
  EXPECT_GE(micro->step_s, once->step_s);
  EXPECT_GT(micro->exposed_ag_s, once->exposed_ag_s);
}

}  // namespace
}  // namespace baton::sim
