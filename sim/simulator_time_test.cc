// The simulator's clock: integer nanoseconds that always advance, steps past
// the simulated range refused with the reason, and long steps computed as
// exactly as short ones.
#include <string>

#include "baton/sim/simulator.h"
#include "gtest/gtest.h"

namespace baton::sim {
namespace {

using scheduler::ModelPreset;

Workload Small() {
  Workload w;
  w.gpus = 64;  // 8 nodes: both link levels
  w.seq = 4096;
  w.global_batch = 64;
  return w;
}

StatusOr<SimResult> SimLlama8b(const ClusterSpec& c, const Workload& w,
                        const SimOptions& o = {}) {
  return Simulate(*ModelPreset("llama3-8b"), c, w, "baton", 0, o);
}

// On a double clock these never returned: past ~8.4e6 s a 1 ns step no
// longer changes t.
TEST(SimClockTest, AnAbsurdlySlowNetworkIsRefusedNamingTheNode) {
  ClusterSpec c = *ClusterPreset("h100");
  c.nic_gbps = 1e-300;
  auto r = SimLlama8b(c, Small());
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("outside the simulated range"),
            std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("AG"), std::string::npos) << r.status();
}

TEST(SimClockTest, AStepPastTheRangeIsRefused) {
  // The longest sequence any route takes (scheduler/limits.h) on a GPU a
  // tenth as fast: every node is in range, the step is not.
  Workload w = Small();
  w.seq = scheduler::kMaxSeq;
  ClusterSpec slow = *ClusterPreset("h100");
  slow.peak_tflops *= 0.1;
  slow.hbm_gbps *= 0.1;
  auto r = SimLlama8b(slow, w);
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("s of simulated time"), std::string::npos)
      << r.status();
  ClusterSpec c = *ClusterPreset("h100");
  c.host_issue_us = 1e11;  // each node alone is in range, their sum is not
  r = SimLlama8b(c, Small());
  ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
}

// Compute 1e6x slower: every node's cost scales by 1e6 and so must the
// step, to the nanosecond rounding of each node. (Kernel launches cost
// host time, which does not scale with the GPU: off here.)
TEST(SimClockTest, LongComputeStepsScaleExactly) {
  ClusterSpec c = *ClusterPreset("h100");
  c.host_issue_us = 0;
  KernelTable no_launch = *H100KernelTable();
  no_launch.launch_us = 0;
  SimOptions o;
  o.free_comm = true;
  o.kernels = &no_launch;
  auto fast = SimLlama8b(c, Small(), o);
  ASSERT_TRUE(fast.ok()) << fast.status();
  c.peak_tflops *= 1e-6;
  c.hbm_gbps *= 1e-6;
  auto slow = SimLlama8b(c, Small(), o);
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_GT(slow->step_s, 1e5);
  EXPECT_NEAR(slow->step_s, fast->step_s * 1e6, 1e-6 * slow->step_s);
  EXPECT_NEAR(slow->compute_s, fast->compute_s * 1e6, 1e-6 * slow->compute_s);
}

// Communication only (compute and latencies ~free): halving every link
// doubles the step, with collectives sharing the links over long spans.
TEST(SimClockTest, LongSharedCommunicationScalesExactly) {
  ClusterSpec c = *ClusterPreset("h100");
  c.peak_tflops = 1e12;
  c.hbm_gbps = 1e12;
  c.host_issue_us = 0;
  c.base_latency_us = c.nvlink_hop_us = c.net_hop_us = 0;
  c.nvlink_gbps *= 2e-5;
  c.nic_gbps *= 2e-5;
  Workload w = Small();
  w.global_batch = 128;  // two micro-steps: gathers overlap reductions
  auto fast = SimLlama8b(c, w);
  ASSERT_TRUE(fast.ok()) << fast.status();
  c.nvlink_gbps /= 2;
  c.nic_gbps /= 2;
  auto slow = SimLlama8b(c, w);
  ASSERT_TRUE(slow.ok()) << slow.status();
  EXPECT_GT(slow->step_s, 1e3);
  EXPECT_NEAR(slow->step_s, 2 * fast->step_s, 1e-6 * slow->step_s);
  EXPECT_GT(slow->exposed_comm_s(), 0.9 * slow->step_s);
}

}  // namespace
}  // namespace baton::sim
