// SimulateTensorExposure on the graphs a run executes (BuildParallelStep
// with tensor slices and a memory plan, as train_tiny builds them): tensor
// communication is exposed without decomposition, less of it with
// tp_comm_overlap, none when collectives are free; the nodes' part is
// SimulateParallel's exposed_tp on its own graph; bad input is refused.
#include "baton/sim/tensor_exposure.h"

#include <cstdio>

#include "gtest/gtest.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/policy.h"
#include "baton/sim/parallel_sim.h"

namespace baton::sim {
namespace {

// Two of Llama-3-8B's blocks with a small vocabulary, 2 x 1024 tokens per
// micro-batch: on the H100 preset the blocks' GEMMs outlast their tensor
// collectives, so decomposition has something to hide them behind.
scheduler::ModelSpec Model() {
  scheduler::ModelSpec m = *scheduler::ModelPreset("llama3-8b");
  m.name = "tp-test";
  m.layers = 2;
  m.vocab = 1024;
  return m;
}

constexpr int64_t kSeq = 1024;

scheduler::ParallelStep Build(bool sp, bool overlap, int pp = 1, int tp = 4) {
  auto policy = scheduler::PolicyPreset("baton");
  EXPECT_TRUE(policy.ok()) << policy.status();
  scheduler::Policy p = *policy;
  p.tensor_parallel = tp;
  p.sequence_parallel = sp;
  p.tp_comm_overlap = overlap;
  p.pipeline_parallel = pp;
  p.micro_steps = pp > 1 ? 4 : 1;
  auto step = scheduler::BuildParallelStep(Model(), p, tp * pp, kSeq, 2, {}, {},
                                           /*plan_memory=*/true, /*tensor_slices=*/true);
  EXPECT_TRUE(step.ok()) << step.status();
  return step.ok() ? *std::move(step) : scheduler::ParallelStep{};
}

std::vector<const scheduler::StepGraph*> Graphs(const scheduler::ParallelStep& step) {
  std::vector<const scheduler::StepGraph*> g;
  for (const scheduler::StepGraph& s : step.stages) g.push_back(&s);
  return g;
}

TensorExposure Exposure(const scheduler::ParallelStep& step, bool free_comm = false) {
  SimOptions o;
  o.free_comm = free_comm;
  auto r = SimulateTensorExposure(Graphs(step), Model(), *ClusterPreset("h100"), kSeq, 2, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() && !r->empty() ? r->front() : TensorExposure{};
}

TEST(TensorExposureTest, DecompositionHidesSomeOfIt) {
  for (bool sp : {false, true}) {
    const TensorExposure plain = Exposure(Build(sp, false));
    const TensorExposure overlap = Exposure(Build(sp, true));
    std::printf("tp 4, sp=%d: nodes %.2f us, inside %.2f us of %.2f us; tp_overlap: nodes %.2f us, "
                "inside %.2f us of %.2f us\n",
                sp, plain.nodes_s * 1e6, plain.inside_s * 1e6, plain.step_s * 1e6,
                overlap.nodes_s * 1e6, overlap.inside_s * 1e6, overlap.step_s * 1e6);
    // Without decomposition the forward's collectives are nodes the
    // compute stream waits for.
    EXPECT_GT(plain.nodes_s, 0) << sp;
    EXPECT_LT(plain.total_s(), plain.step_s) << sp;
    // With it there are no tensor nodes; what is left is inside the parts.
    EXPECT_EQ(overlap.nodes_s, 0) << sp;
    EXPECT_GT(overlap.inside_s, 0) << sp;
    EXPECT_LT(overlap.total_s(), plain.total_s()) << sp;
    EXPECT_LT(overlap.step_s, plain.step_s) << sp;
  }
}

TEST(TensorExposureTest, FreeCollectivesExposeNothing) {
  for (bool overlap : {false, true}) {
    const TensorExposure e = Exposure(Build(true, overlap), /*free_comm=*/true);
    EXPECT_EQ(e.nodes_s, 0) << overlap;
    EXPECT_EQ(e.inside_s, 0) << overlap;
    EXPECT_GT(e.step_s, 0) << overlap;
  }
}

// The nodes' part is the simulator's own exposed_tp on the graph it builds
// itself for the same model and policy (no tensor slices, no memory plan:
// the same nodes and costs).
TEST(TensorExposureTest, NodesAreTheSimulatorsExposedTp) {
  Workload w;
  w.gpus = 2;
  w.seq = kSeq;
  w.global_batch = 2;
  w.micro_batch = 2;
  w.tp = 2;
  auto policy = SimPolicy("baton", w, 8);
  ASSERT_TRUE(policy.ok()) << policy.status();
  scheduler::ParallelStep step;
  auto r = SimulateParallel(Model(), *ClusterPreset("h100"), w, *policy, 0, {}, &step);
  ASSERT_TRUE(r.ok()) << r.status();
  auto e = SimulateTensorExposure(Graphs(step), Model(), *ClusterPreset("h100"), kSeq, 2);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_GT(r->exposed_tp_s, 0);
  EXPECT_NEAR(e->front().nodes_s, r->exposed_tp_s, 1e-9);
  EXPECT_NEAR(e->front().step_s, r->step_s - r->straggler_s, 1e-9);
}

TEST(TensorExposureTest, EveryPipelineStageHasItsOwn) {
  const scheduler::ParallelStep step = Build(false, false, /*pp=*/2);
  auto e = SimulateTensorExposure(Graphs(step), Model(), *ClusterPreset("h100"), kSeq, 2);
  ASSERT_TRUE(e.ok()) << e.status();
  ASSERT_EQ(e->size(), 2u);
  for (const TensorExposure& s : *e) EXPECT_GT(s.nodes_s, 0);
}

TEST(TensorExposureTest, RefusesBadInput) {
  const ClusterSpec h100 = *ClusterPreset("h100");
  const scheduler::ParallelStep tp2 = Build(false, false);
  auto refused = [&](const std::vector<const scheduler::StepGraph*>& g,
                     const scheduler::ModelSpec& m, const ClusterSpec& c, int64_t seq,
                     const char* want) {
    auto r = SimulateTensorExposure(g, m, c, seq, 2);
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(std::string(r.status().message()).find(want), std::string::npos)
        << r.status();
  };
  refused({}, Model(), h100, kSeq, "no stage graphs");
  refused({nullptr}, Model(), h100, kSeq, "is null");
  const scheduler::ParallelStep pp_only = Build(false, false, /*pp=*/2, /*tp=*/1);
  refused(Graphs(pp_only), Model(), h100, kSeq, "tensor parallelism 1");
  scheduler::ModelSpec odd = Model();
  odd.intermediate = 14338;
  refused(Graphs(tp2), odd, h100, kSeq, "does not divide");
  refused(Graphs(tp2), Model(), h100, 0, "seq 0");
  ClusterSpec bad = h100;
  bad.nvlink_gbps = -1;
  refused(Graphs(tp2), Model(), bad, kSeq, "nvlink_gbps");
  scheduler::StepGraph flat;  // not a parallel graph
  refused({&flat}, Model(), h100, kSeq, "not a parallel graph");
}

}  // namespace
}  // namespace baton::sim
