// The host cost model (sim/host_cost.h): each rate from the hardware fields
// it states it depends on.
#include "baton/sim/host_cost.h"

#include "gtest/gtest.h"

namespace baton::sim {
namespace {

TEST(HostCostTest, ThePresetsRatesFollowFromTheirHardware) {
  const ClusterSpec a100 = *ClusterPreset("a100");
  // 4 of a DGX A100's 8 GPUs: the host's 409.6 GB/s x 0.75 over 4 ranks;
  // Gen4 x16 (31.5 GB/s) x 0.75, two GPUs per switch.
  const HostRates r = ResolveHostRates(a100, 4);
  EXPECT_EQ(r.ranks_on_node, 4);
  EXPECT_NEAR(r.stream_gbps, 409.6 * 0.75 / 4, 1e-9);
  EXPECT_NEAR(r.link_gbps, 31.5 * 0.75 / 2, 1e-9);
  // baton: 30 bytes at 0.93 of the stream share.
  EXPECT_NEAR(r.opt_gparams, 76.8 * 0.93 / 30, 1e-9);
  EXPECT_TRUE(r.opt_memory_bound);
  // A whole node: half the share each; one rank: the whole host, its own
  // uplink.
  EXPECT_NEAR(ResolveHostRates(a100, 64).opt_gparams, r.opt_gparams / 2, 1e-9);
  EXPECT_EQ(ResolveHostRates(a100, 64).ranks_on_node, 8);
  EXPECT_NEAR(ResolveHostRates(a100, 1).link_gbps, 2 * r.link_gbps, 1e-9);
  const HostRates h = ResolveHostRates(*ClusterPreset("h100"), 8);
  EXPECT_NEAR(h.link_gbps, 63.0 * 0.75 / 2, 1e-9);
  EXPECT_NEAR(h.stream_gbps, 614.4 * 0.75 / 8, 1e-9);
}

TEST(HostCostTest, EachFieldMovesItsRate) {
  ClusterSpec c = *ClusterPreset("a100");
  const HostRates base = ResolveHostRates(c, 4);
  ClusterSpec d = c;
  d.host_mem_gbps *= 2;
  EXPECT_NEAR(ResolveHostRates(d, 4).opt_gparams, 2 * base.opt_gparams, 1e-9);
  d = c;
  d.pcie_gen = 5;
  EXPECT_NEAR(ResolveHostRates(d, 4).link_gbps, 2 * base.link_gbps, 1e-9);
  d = c;
  d.gpus_per_pcie_switch = 4;
  EXPECT_NEAR(ResolveHostRates(d, 4).link_gbps, base.link_gbps / 2, 1e-9);
  // Pageable copies are staged through a host memcpy: slower than pinned.
  d = c;
  d.host_pinned = 0;
  const double pageable = ResolveHostRates(d, 4).link_gbps;
  EXPECT_NEAR(pageable, 1 / (1 / base.link_gbps + 2 / base.stream_gbps), 1e-9);
  EXPECT_LT(pageable, base.link_gbps);
  // Few cores: the optimizer becomes core-bound (2 cores over 4 ranks).
  d = c;
  d.host_cores = 2;
  const HostRates few = ResolveHostRates(d, 4);
  EXPECT_FALSE(few.opt_memory_bound);
  EXPECT_NEAR(few.opt_gparams, 0.5 * 1.2, 1e-9);
  // DeepSpeed's CPU path: 42 bytes at kDeepSpeedHostEfficiency.
  d = c;
  d.offload_executor = OffloadExecutor::kDeepSpeed;
  EXPECT_NEAR(ResolveHostRates(d, 4).opt_gparams,
              76.8 * kDeepSpeedHostEfficiency / 42, 1e-9);
  // A cluster file's figures and overrides.
  d = c;
  d.host_opt_bytes = 60;
  d.host_opt_efficiency = 0.465;
  EXPECT_NEAR(ResolveHostRates(d, 4).opt_gparams, base.opt_gparams / 4, 1e-9);
  d.host_adam_gparams = 0.25;
  d.host_link_gbps = 7;
  EXPECT_EQ(ResolveHostRates(d, 4).opt_gparams, 0.25);
  EXPECT_EQ(ResolveHostRates(d, 4).link_gbps, 7);
}

TEST(HostCostTest, PcieGenerations) {
  EXPECT_EQ(PcieRawGbps(3), 15.75);
  EXPECT_EQ(PcieRawGbps(4), 31.5);
  EXPECT_EQ(PcieRawGbps(5), 63.0);
  EXPECT_EQ(PcieRawGbps(6), 121.0);
}

TEST(HostCostTest, ClusterFileFieldsAreTypedAndRanged) {
  ClusterSpec c = *ClusterPreset("a100");
  ASSERT_TRUE(ApplyClusterJson(R"({"host_cores": 32, "host_mem_gbps": 204.8,
      "pcie_gen": 5, "gpus_per_pcie_switch": 4, "host_pinned": 0,
      "offload_executor": "deepspeed", "host_opt_efficiency": 0.5})", c).ok());
  EXPECT_EQ(c.host_cores, 32);
  EXPECT_EQ(c.host_mem_gbps, 204.8);
  EXPECT_EQ(c.pcie_gen, 5);
  EXPECT_EQ(c.gpus_per_pcie_switch, 4);
  EXPECT_EQ(c.host_pinned, 0);
  EXPECT_EQ(c.offload_executor, OffloadExecutor::kDeepSpeed);
  EXPECT_STREQ(OffloadExecutorName(c.offload_executor), "deepspeed");
  const std::pair<const char*, const char*> bad[] = {
      {R"({"pcie_gen": 7})", "pcie_gen\" must be an integer in [3, 6]"},
      {R"({"pcie_gen": 4.5})", "pcie_gen"},
      {R"({"host_pinned": 2})", "host_pinned\" must be an integer in [0, 1]"},
      {R"({"host_cores": 0})", "host_cores\" must be an integer in [1, 100000]"},
      {R"({"pcie_efficiency": 1.5})", "pcie_efficiency\" must be a number in [0.001, 1]"},
      {R"({"host_opt_efficiency": -0.1})", "host_opt_efficiency"},
      {R"({"host_stream_fraction": 0})", "host_stream_fraction"},
      {R"({"offload_executor": "megatron"})",
       "offload_executor\" must be one of \"baton\", \"deepspeed\""},
      {R"({"offload_executor": 1})", "offload_executor"},
  };
  for (const auto& [text, want] : bad) {
    ClusterSpec fresh = *ClusterPreset("a100");
    const Status s = ApplyClusterJson(text, fresh);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_NE(s.message().find(want), std::string::npos) << s;
  }
  // Programmatic specs are held to the same ranges.
  c = *ClusterPreset("a100");
  c.pcie_efficiency = 2;
  EXPECT_NE(ValidateCluster(c).message().find("pcie_efficiency must be in [0.001, 1]"),
            std::string::npos);
  c = *ClusterPreset("a100");
  c.offload_executor = static_cast<OffloadExecutor>(7);
  EXPECT_FALSE(ValidateCluster(c).ok());
}

}  // namespace
}  // namespace baton::sim
