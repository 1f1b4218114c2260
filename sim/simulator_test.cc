#include "sim/simulator.h"

#include <cstdio>

#include "gtest/gtest.h"

namespace baton::sim {
namespace {

using scheduler::ModelPreset;

SimResult Sim(const char* model, const char* cluster, Workload w,
              const std::string& policy, int recompute = kAutoRecompute,
              SimOptions o = {}, ClusterSpec* override_cluster = nullptr) {
  ClusterSpec c = override_cluster ? *override_cluster : *ClusterPreset(cluster);
  auto r = Simulate(*ModelPreset(model), c, w, policy, recompute, o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : SimResult{};
}

// REFERENCE.md section 7: MaxText Llama 3 70B, 128 H100, seq 8192, global
// batch 256: 15.563 s/step, 51.2% MFU.
TEST(ValidationTest, MaxTextLlama3_70bOn128H100) {
  Workload w;
  w.gpus = 128;
  w.seq = 8192;
  w.global_batch = 256;
  const SimResult r = Sim("llama3-70b", "h100", w, "baton");
  std::printf("maxtext: step %.3f s, mfu %.3f, recompute %d, exposed %.3f s, "
              "peak %.1f GiB\n",
              r.step_s, r.mfu, r.recompute_blocks, r.exposed_comm_s(),
              r.memory.peak() / 1073741824.0);
  EXPECT_NEAR(r.step_s, 15.563, 0.10 * 15.563);
  EXPECT_NEAR(r.mfu, 0.512, 0.05);
  EXPECT_TRUE(r.fits);
}

// torchtitan Llama 3 70B, full recompute, 64 A100-80G, local batch 1:
// 331 tokens/s/GPU.
TEST(ValidationTest, TorchtitanLlama3_70bOn64A100) {
  Workload w;
  w.gpus = 64;
  w.seq = 8192;
  w.global_batch = 64;
  const SimResult r = Sim("llama3-70b", "a100", w, "fsdp2", -1);
  std::printf("torchtitan: %.1f tokens/s/GPU, mfu %.3f, exposed %.3f s\n",
              r.tokens_per_s_per_gpu, r.mfu, r.exposed_comm_s());
  EXPECT_NEAR(r.tokens_per_s_per_gpu, 331, 0.15 * 331);
}

}  // namespace
}  // namespace baton::sim
