// Offload as published (issue 36): the simulator against the step times,
// ratios, stall fraction and PCIe traffic that DeepSpeed's ZenFlow blog and
// its zenflow-corebinding study publish, on the hardware they state, with
// one set of host constants per host type (sim/cluster.cc, sim/host_cost.h).
// docs/offload.md holds the same table with its sources. Each row prints its
// error; the test fails when a row leaves its bound. The bounds are the aim
// (20%) where the model reaches it and the error as measured, with a margin
// of 5 points, where it does not (said so in the row): a change that moves
// a row shows here.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "baton/sim/host_cost.h"
#include "baton/sim/offload_cost.h"
#include "baton/sim/simulator.h"

namespace baton::sim {
namespace {

using scheduler::ModelSpec;
using scheduler::Policy;

// Qwen2.5-1.5B and -3B (their Hugging Face config.json: hidden, MLP, layers,
// heads, KV heads, vocab; tied embeddings). The attention projections'
// biases (3 x hidden per block) are left out: 0.02% of the parameters.
ModelSpec Qwen(int64_t hidden, int64_t intermediate, int64_t layers, int64_t heads) {
  ModelSpec m;
  m.name = "qwen2.5";
  m.hidden = hidden;
  m.intermediate = intermediate;
  m.layers = layers;
  m.heads = heads;
  m.kv_heads = 2;
  m.head_dim = 128;
  m.vocab = 151936;
  m.tie_embeddings = true;
  m.norm_eps = 1e-6;
  m.rope_theta = 1e6;
  return m;
}
ModelSpec Qwen15B() { return Qwen(1536, 8960, 28, 12); }
ModelSpec Qwen3B() { return Qwen(2048, 11008, 36, 16); }

// The corebinding study's host: 2 x A100-SXM4-40GB of a DGX A100, 2 x AMD
// EPYC 7742 (the a100 preset's host), DeepSpeed's executor.
ClusterSpec CorebindingHost() {
  ClusterSpec c = *ClusterPreset("a100");
  c.name = "dgx-a100-40gb";
  c.memory_gib = 40;
  c.hbm_gbps = 1555;
  c.offload_executor = OffloadExecutor::kDeepSpeed;
  return c;
}

// finetune_llama.py (DeepSpeedExamples, DeepSpeed-ZenFlow/finetuning): Alpaca
// padded to 512 tokens; train_batch_size 8 on 2 GPUs, no accumulation.
Workload Corebinding() {
  Workload w;
  w.gpus = 2;
  w.seq = 512;
  w.global_batch = 8;
  w.micro_batch = 4;
  return w;
}

// The ZenFlow blog's shape as issue 36 states it: one 2048-token sequence
// per GPU on 4 A100s (0.5 s per step without offload).
Workload SevenB() {
  Workload w;
  w.gpus = 4;
  w.seq = 2048;
  w.global_batch = 4;
  w.micro_batch = 1;
  return w;
}

// DeepSpeed's ZenFlow as the corebinding configs run it: topk_ratio 0.1,
// update_interval 4, overlap_step true (staleness: update_interval - 1).
Policy DeepSpeedZenFlow(const Workload& w) {
  Policy p = *SimPolicy("zenflow", w);
  p.zenflow_topk_ratio = 0.1;
  return p;
}

SimResult Simulated(const ModelSpec& m, const ClusterSpec& c, const Workload& w,
              const Policy& p, scheduler::StepGraph* graph = nullptr) {
  SimOptions o;
  o.timeline = true;
  auto r = SimulatePolicy(m, c, w, p, 0, o, graph);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

// The fraction of the step the GPU's kernels are idle: 1 - compute-stream
// time spent in anything but host-link copies, over the step.
double StallFraction(const SimResult& r, const scheduler::StepGraph& g) {
  double busy = 0;
  for (const Interval& i : r.timeline) {
    const scheduler::Node& n = g.nodes[i.node];
    if (!i.stream.is_compute() || n.kind == scheduler::NodeKind::kD2H ||
        n.kind == scheduler::NodeKind::kH2D) {
      continue;
    }
    busy += i.end_s - i.start_s;
  }
  return 1 - busy / r.step_s;
}

// Seconds the host stream is busy (the CPU path of an offloaded step), and
// the backward as the GPU sees it: from its first backward node to the end
// of the last gradient copy (serial under DeepSpeed's executor).
double HostSeconds(const SimResult& r, const scheduler::StepGraph& g) {
  double busy = 0;
  for (const Interval& i : r.timeline) {
    if (OnHostStream(g, g.nodes[i.node])) busy += i.end_s - i.start_s;
  }
  return busy;
}
double BackwardSeconds(const SimResult& r, const scheduler::StepGraph& g) {
  double start = r.step_s, end = 0;
  for (const Interval& i : r.timeline) {
    const scheduler::NodeKind k = g.nodes[i.node].kind;
    if (k == scheduler::NodeKind::kBackward) start = std::min(start, i.start_s);
    if (k == scheduler::NodeKind::kBackward || k == scheduler::NodeKind::kD2H) {
      end = std::max(end, i.end_s);
    }
  }
  return end - start;
}

struct Row {
  std::string figure;
  std::string source;
  double published;
  double simulated;
  // Bound on |error|: kAim, or (beyond the aim, said so in docs/offload.md)
  // the measured error plus 5 points.
  double bound;
  bool over = false;  // published "over X": only a shortfall is an error
};

constexpr double kAim = 0.20;

void Check(const std::vector<Row>& rows) {
  std::printf("%-56s %9s %9s %7s %6s  %s\n", "figure", "published", "simulated",
              "error", "bound", "source");
  for (const Row& r : rows) {
    double err = r.simulated / r.published - 1;
    if (r.over && err > 0) err = 0;
    std::printf("%-56s %9.3f %9.3f %+6.1f%% %5.0f%%%s  %s\n", r.figure.c_str(),
                r.published, r.simulated, 100 * err, 100 * r.bound,
                r.bound > kAim ? " (beyond the aim)" : "", r.source.c_str());
    EXPECT_LE(std::abs(err), r.bound) << r.figure;
  }
}

// The zenflow-corebinding study (DeepSpeed blogs/zenflow-corebinding:
// 2 x A100-SXM4-40GB, 2 x AMD EPYC 7742, 1 TB; DeepSpeed core binding on)
// and DeepSpeed PR 7474 (the same model on 2 A100-40GB and a 128-core host).
TEST(OffloadValidationTest, CorebindingStudy) {
  const ClusterSpec host = CorebindingHost();
  const Workload w = Corebinding();
  const char* kBlog = "DeepSpeed blogs/zenflow-corebinding";
  const ModelSpec q15 = Qwen15B(), q3 = Qwen3B();
  const SimResult q15_z2 = Simulated(q15, host, w, *SimPolicy("baton", w));
  const SimResult q15_off = Simulated(q15, host, w, *SimPolicy("zero_offload", w));
  const SimResult q15_zf = Simulated(q15, host, w, DeepSpeedZenFlow(w));
  const SimResult q3_off = Simulated(q3, host, w, *SimPolicy("zero_offload", w));
  const SimResult q3_zf = Simulated(q3, host, w, DeepSpeedZenFlow(w));
  Check({
      {"Qwen2.5-1.5B ZeRO-Offload - ZeRO-2 s (calibration)", kBlog, 1.125,
       q15_off.step_s - q15_z2.step_s, 0.05},
      {"Qwen2.5-1.5B 2 x A100 ZeRO-2 step s", kBlog, 0.240, q15_z2.step_s, 0.35},
      {"Qwen2.5-1.5B ZeRO-Offload step s", kBlog, 1.365, q15_off.step_s, kAim},
      {"Qwen2.5-1.5B ZenFlow step s", kBlog, 0.569, q15_zf.step_s, kAim},
      {"Qwen2.5-3B ZeRO-Offload step s", kBlog, 2.497, q3_off.step_s, kAim},
      {"Qwen2.5-3B ZeRO-Offload step s", "DeepSpeed PR 7474", 2.383, q3_off.step_s, kAim},
      {"Qwen2.5-3B ZenFlow step s", kBlog, 1.116, q3_zf.step_s, kAim},
      {"Qwen2.5-3B ZenFlow speedup over ZeRO-Offload", kBlog, 2.24,
       q3_off.step_s / q3_zf.step_s, 0.27},
  });
}

// DeepSpeed's ZenFlow blog (blogs/deepspeed-zenflow): Llama 2-7B on 4 A100s,
// PCIe 4.0; the CPU is not stated there (nor in any source read), so the
// a100 preset's DGX A100 host stands in for it.
TEST(OffloadValidationTest, ZenFlowBlogSevenB) {
  ClusterSpec a100 = *ClusterPreset("a100");
  a100.offload_executor = OffloadExecutor::kDeepSpeed;
  const Workload w = SevenB();
  const ModelSpec l7 = *scheduler::ModelPreset("llama2-7b");
  const char* kBlog = "DeepSpeed blogs/deepspeed-zenflow";
  scheduler::StepGraph g_off, g_zf;
  const SimResult none = Simulated(l7, a100, w, *SimPolicy("baton", w));
  const SimResult off = Simulated(l7, a100, w, *SimPolicy("zero_offload", w), &g_off);
  const SimResult zf = Simulated(l7, a100, w, DeepSpeedZenFlow(w), &g_zf);
  const double shard = static_cast<double>(scheduler::ParameterCount(l7)) / w.gpus;
  Check({
      {"Llama2-7B 4 x A100 step s, no offload", kBlog, 0.5, none.step_s, kAim},
      {"Llama2-7B ZeRO-Offload step s (over 7)", kBlog, 7.0, off.step_s, 0.38, true},
      {"Llama2-7B ZeRO-Offload / no offload (14x)", kBlog, 14.0, off.step_s / none.step_s,
       0.41},
      {"Llama2-7B ZeRO-Offload GPU idle fraction (over 0.6)", kBlog, 0.6,
       StallFraction(off, g_off), kAim, true},
      {"Llama2-7B ZeRO-Offload CPU path s (over 4)", kBlog, 4.0, HostSeconds(off, g_off),
       kAim, true},
      {"Llama2-7B ZeRO-Offload backward s (about 2)", kBlog, 2.0,
       BackwardSeconds(off, g_off), 0.55},
      {"PCIe traffic per step, ZeRO-Offload (model sizes)", kBlog, 2.0,
       OffloadLinkElementsPerStep(g_off, a100) / shard, 0.02},
      {"PCIe traffic per step, ZenFlow (model sizes)", kBlog, 1.13,
       OffloadLinkElementsPerStep(g_zf, a100) / shard, 0.02},
  });
  // "Up to 5x" faster and "over 85%" less GPU stall are the blog's best
  // cases over shapes it does not list: printed, not errors.
  const double stall_off = StallFraction(off, g_off) * off.step_s;
  const double stall_zf = StallFraction(zf, g_zf) * zf.step_s;
  std::printf("Llama2-7B ZenFlow: %.3f s, %.2fx over ZeRO-Offload (published: up to 5x), "
              "GPU stall %.3f -> %.3f s, %.0f%% less (published: over 85%%)\n",
              zf.step_s, off.step_s / zf.step_s, stall_off, stall_zf,
              100 * (1 - stall_zf / stall_off));
  EXPECT_LT(off.step_s / zf.step_s, 5.0);
  EXPECT_GT(off.step_s / zf.step_s, 2.0);
}

}  // namespace
}  // namespace baton::sim
