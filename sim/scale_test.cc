// Scale, issue 17 item 6 (sim/simulator.h "Scale"): from 64 to 256 GPUs at a
// fixed local batch, a step takes a little longer, as published runs do:
// MaxText Llama 3 70B on H100, 15.563 s/step on 128 GPUs and 15.898 on 2048
// (+2.2% over 16x, REFERENCE.md section 7); llm-foundry's MPT-1B on H100 at
// sequence 2048, 46037 tokens/s/GPU on 16 GPUs, 45130 on 32, 44402 on 64
// (-3.6% over 4x; https://github.com/mosaicml/llm-foundry
// scripts/train/benchmarking/README.md, "H100 80GB BF16").
#include <cstdio>
#include <string>

#include "baton/sim/simulator.h"
#include "gtest/gtest.h"

namespace baton::sim {
namespace {

SimResult Step(int gpus, const std::string& policy, const ClusterSpec& cluster,
              const SimOptions& o = {}) {
  Workload w;
  w.gpus = gpus;
  w.seq = 8192;
  w.global_batch = gpus;  // local batch 1
  auto r = Simulate(*scheduler::ModelPreset("llama3-70b"), cluster, w, policy, -1, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

TEST(ScaleTest, StepTimeRisesALittleFrom64To256Gpus) {
  const ClusterSpec h100 = *ClusterPreset("h100");
  for (const std::string policy : {"baton", "fsdp1", "fsdp2", "zero3", "yafsdp"}) {
    const SimResult small = Step(64, policy, h100);
    const SimResult large = Step(256, policy, h100);
    std::printf("%-6s step %.3f s on 64 GPUs, %.3f s on 256 (%+.2f%%), straggler "
                "%.3f -> %.3f s\n", policy.c_str(), small.step_s, large.step_s,
                100 * (large.step_s / small.step_s - 1), small.straggler_s,
                large.straggler_s);
    // Slower, by less than MaxText's 2.2% over 16x the GPUs.
    EXPECT_GT(large.step_s, small.step_s) << policy;
    EXPECT_LT(large.step_s, small.step_s * 1.022) << policy;
    EXPECT_GT(large.straggler_s, small.straggler_s) << policy;
  }
}

// The rise comes from the two modeled sources: with neither stragglers nor
// communication time, 256 GPUs are no slower than 64; with stragglers alone
// they are, and with ring / tree latency alone (free of stragglers, real
// communication) they are no faster.
TEST(ScaleTest, RiseComesFromStragglersAndCollectiveLatency) {
  ClusterSpec quiet = *ClusterPreset("h100");
  quiet.straggler_cv = 0;
  SimOptions free_comm;
  free_comm.free_comm = true;
  EXPECT_LE(Step(256, "baton", quiet, free_comm).step_s,
            Step(64, "baton", quiet, free_comm).step_s);
  const ClusterSpec h100 = *ClusterPreset("h100");
  EXPECT_GT(Step(256, "baton", h100, free_comm).step_s,
            Step(64, "baton", h100, free_comm).step_s);
  // Without stragglers, the time beyond compute (exposed collectives) grows
  // with the ring's hops across 4x the nodes.
  const SimResult small = Step(64, "fsdp2", quiet), large = Step(256, "fsdp2", quiet);
  EXPECT_GT(large.step_s - large.compute_s, small.step_s - small.compute_s);
}

}  // namespace
}  // namespace baton::sim
