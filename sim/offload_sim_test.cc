// The simulated shape of optimizer offload (DeepSpeed's ZenFlow
// announcement: fine-tuning Llama 2-7B on 4 A100s takes ~0.5 s per step on
// the GPUs and over 7 s with ZeRO-Offload; ZenFlow is up to 5x faster than
// ZeRO-Offload), and the pricing of the offload nodes at the host rates of
// sim/host_cost.h.
#include <cstdio>
#include <utility>

#include "gtest/gtest.h"
#include "baton/sim/host_cost.h"
#include "baton/sim/offload_cost.h"
#include "baton/sim/simulator.h"

namespace baton::sim {
namespace {

Workload FineTune() {
  Workload w;
  w.gpus = 4;
  w.seq = 2048;
  w.global_batch = 4;  // one sequence per GPU
  w.micro_batch = 1;
  return w;
}

// The published shape (DeepSpeed's ZenFlow blog) with DeepSpeed's executor
// on the a100 preset's host (sim/offload_validation_test has the errors):
// ZeRO-Offload many times slower than no offload, ZenFlow several times
// faster than ZeRO-Offload. baton's executor on the same host: the copies
// overlapped, the host update fused and started per bucket.
TEST(OffloadSimTest, SevenBOnFourA100sHasThePublishedShape) {
  const scheduler::ModelSpec m = *scheduler::ModelPreset("llama2-7b");
  ClusterSpec published = *ClusterPreset("a100");
  published.offload_executor = OffloadExecutor::kDeepSpeed;
  auto none = Simulate(m, published, FineTune(), "baton");
  auto off = Simulate(m, published, FineTune(), "zero_offload");
  auto zf = Simulate(m, published, FineTune(), "zenflow");
  ASSERT_TRUE(none.ok()) << none.status();
  ASSERT_TRUE(off.ok()) << off.status();
  ASSERT_TRUE(zf.ok()) << zf.status();
  std::printf("7B on 4 x A100, DeepSpeed's executor: no offload %.3f s, "
              "zero_offload %.3f s, zenflow %.3f s per step; device state %.1f / %.1f / "
              "%.1f GiB, host %.1f / %.1f GiB\n",
              none->step_s, off->step_s, zf->step_s, none->memory.states / 1073741824.0,
              off->memory.states / 1073741824.0, zf->memory.states / 1073741824.0,
              off->host_bytes / 1073741824.0, zf->host_bytes / 1073741824.0);
  // Staleness: the preset's auto (update_interval - 1 = 3, select = update:
  // the update hides behind one step, the selection step waits for it),
  // against 0 (every window's update exposed) and select = 2 x update
  // (every other window hides behind 3 steps).
  ClusterSpec slow = published;  // a host slow enough that the update
  slow.host_adam_gparams = 0.25;  // outlasts 3 steps
  scheduler::Policy sync = *scheduler::PolicyPreset("zenflow");
  sync.zenflow_staleness = 0;
  scheduler::Policy wide = *scheduler::PolicyPreset("zenflow");
  wide.zenflow_select_interval = 8;
  auto zf_slow = Simulate(m, slow, FineTune(), "zenflow");
  auto zf_sync = SimulatePolicy(m, slow, FineTune(), sync);
  auto zf_wide = SimulatePolicy(m, slow, FineTune(), wide);
  ASSERT_TRUE(zf_slow.ok() && zf_sync.ok() && zf_wide.ok());
  std::printf("host update at 0.25e9/s: zenflow staleness 0: %.3f s; auto (3): %.3f s; "
              "auto with select_interval 8: %.3f s\n",
              zf_sync->step_s, zf_slow->step_s, zf_wide->step_s);
  EXPECT_GT(zf_sync->step_s, zf_slow->step_s);
  EXPECT_GT(zf_slow->step_s, zf_wide->step_s);
  // The update (about 6.4 s) outlasts 3 steps: each window hides one step's
  // device time behind it under auto, and every other window two more with
  // select_interval 8, the same step per window again.
  EXPECT_NEAR(zf_sync->step_s - zf_slow->step_s, zf_slow->step_s - zf_wide->step_s, 2e-3);
  // ZeRO-Offload is many times slower than no offload...
  EXPECT_GT(off->step_s, 8 * none->step_s);
  // ... and ZenFlow several times faster than ZeRO-Offload.
  EXPECT_GT(off->step_s, 2.5 * zf->step_s);
  EXPECT_GT(zf->step_s, none->step_s);

  const ClusterSpec a100 = *ClusterPreset("a100");
  auto own_none = Simulate(m, a100, FineTune(), "baton");
  auto own_off = Simulate(m, a100, FineTune(), "zero_offload");
  auto own_zf = Simulate(m, a100, FineTune(), "zenflow");
  ASSERT_TRUE(own_none.ok() && own_off.ok() && own_zf.ok());
  std::printf("... with baton's executor: %.3f / %.3f / %.3f s\n", own_none->step_s,
              own_off->step_s, own_zf->step_s);
  EXPECT_GT(own_off->step_s, 1.5 * own_none->step_s);
  EXPECT_LT(own_off->step_s, off->step_s / 3);
  EXPECT_LT(own_zf->step_s, zf->step_s);
  // The host step is what DeepSpeed's offloaded step waits for.
  EXPECT_GT(off->exposed_offload_s, 0.5 * off->step_s);
  EXPECT_EQ(none->exposed_offload_s, 0);
  // Device state shrinks from 18 to 6 bytes per parameter (shard + gradient
  // shard stay); ZenFlow adds the H2D staging shard (2 bytes a parameter)
  // and 12 bytes per selected element (at most topk_ratio of a matrix's
  // elements, plus the rows a shard cuts) on the device.
  EXPECT_NEAR(off->memory.states / none->memory.states, 6.0 / 18, 0.01);
  EXPECT_GT(zf->memory.states, off->memory.states * (1 + 2.0 / 6));
  EXPECT_LT(zf->memory.states, off->memory.states * (1 + (2 + 12 * 0.05) / 6 + 0.01));
  // Host: master, moments (12 B) and the host gradient and parameter
  // shards (6 B) per parameter of the shard.
  EXPECT_NEAR(static_cast<double>(off->host_bytes), none->memory.states,
              0.01 * none->memory.states);
  EXPECT_EQ(none->host_bytes, 0u);
}

TEST(OffloadSimTest, NodesArePricedFromTheClusterConstants) {
  const scheduler::ModelSpec m = *scheduler::ModelPreset("llama2-7b");
  ClusterSpec c = *ClusterPreset("a100");
  scheduler::StepGraph g;
  ASSERT_TRUE(Simulate(m, c, FineTune(), "zero_offload", 0, {}, &g).ok());
  auto seconds = [&](const ClusterSpec& cl) {
    double link = 0, host = 0;
    const ComputeModel k = *ComputeModel::Create(
        *H100KernelTable(), cl, m, 2048, 1, 2048);
    for (const scheduler::Node& n : g.nodes) {
      const auto s = OffloadNodeSeconds(g, n, cl, k);
      if (n.kind == scheduler::NodeKind::kD2H || n.kind == scheduler::NodeKind::kH2D) {
        link += s.value_or(-1e9);
      } else if (OnHostStream(g, n)) {
        host += s.value_or(-1e9);
      } else {
        EXPECT_FALSE(s.has_value()) << n.name;
      }
    }
    return std::make_pair(link, host);
  };
  const auto base = seconds(c);
  // Gradient shard (fp32) down, parameter shard (bf16) up: 6 bytes each.
  const double params = scheduler::ParameterCount(m) / 4.0;
  const HostRates h = ResolveHostRates(c, 4);
  EXPECT_NEAR(base.first, params * 6 / (h.link_gbps * 1e9), 0.02 * base.first);
  EXPECT_NEAR(base.second, params / (h.opt_gparams * 1e9), 0.02 * base.second);
  c.pcie_gen = 5;          // twice the link
  c.host_mem_gbps *= 4;    // four times the memory-bound host optimizer
  const auto faster = seconds(c);
  EXPECT_NEAR(faster.first, base.first / 2, 1e-9 * base.first);
  EXPECT_NEAR(faster.second, base.second / 4, 1e-9 * base.second);
}

}  // namespace
}  // namespace baton::sim
