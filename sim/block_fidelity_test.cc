// Single-GPU fidelity: the compute model against ten Llama blocks measured
// whole on one H100 (sim/data/h100_blocks_part.json, copied unchanged from
// the project's shared data; its "provenance" field says how: PyTorch 2.11
// eager, bf16 parameters, no RoPE, each call timed alone between two CUDA
// events). Each block's forward and forward + backward, simulated from the
// shipped kernel table with the same kernels (no RoPE: AttentionKernel's
// no_rope), must be within 10% of the measurement. No constant here is
// fitted to these blocks: the table's entry gap and its lookups are
// sim/kernel_table.h's.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "baton/scheduler/model.h"
#include "baton/sim/compute_model.h"
#include "baton/sim/kernel_table.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace baton::sim {
namespace {

nlohmann::json ReadBlocks() {
  std::ifstream in("sim/data/h100_blocks_part.json");
  std::stringstream s;
  s << in.rdbuf();
  return nlohmann::json::parse(s.str(), nullptr, false);
}

TEST(BlockFidelityTest, TenMeasuredBlocksWithinTenPercent) {
  const nlohmann::json j = ReadBlocks();
  ASSERT_FALSE(j.is_discarded()) << "sim/data/h100_blocks_part.json";
  ASSERT_EQ(j["blocks"].size(), 10u);
  ASSERT_NE(j["provenance"].get<std::string>().find("no RoPE"), std::string::npos);
  const StatusOr<KernelTable>& table = H100KernelTable();
  ASSERT_TRUE(table.ok()) << table.status();
  const ClusterSpec h100 = *ClusterPreset("h100");
  AttentionKernel table_attention;  // the table's flash SDPA
  table_attention.no_rope = true;   // the blocks were measured without RoPE
  double sum_f = 0, sum_fb = 0, worst = 0;
  std::printf("%-12s %6s %3s %9s %9s %7s %9s %9s %7s\n", "model", "seq", "mb", "fwd_ms",
              "sim_ms", "error", "f+b_ms", "sim_ms", "error");
  for (const nlohmann::json& b : j["blocks"]) {
    auto m = scheduler::ModelPreset(b["model"].get<std::string>());
    ASSERT_TRUE(m.ok()) << m.status();
    const int64_t seq = b["seq"].get<int64_t>(), mb = b["micro_batch"].get<int64_t>();
    auto c = ComputeModel::Create(*table, h100, *m, seq * mb, mb, seq, table_attention);
    ASSERT_TRUE(c.ok()) << c.status();
    const double f = c->BlockForward().seconds;
    const double fb = f + c->BlockBackward(false).seconds;
    const double mf = b["fwd_s"].get<double>(), mfb = b["fwd_bwd_s"].get<double>();
    const double ef = f / mf - 1, efb = fb / mfb - 1;
    std::printf("%-12s %6lld %3lld %9.3f %9.3f %+6.1f%% %9.3f %9.3f %+6.1f%%\n",
                m->name.c_str(), static_cast<long long>(seq), static_cast<long long>(mb),
                1e3 * mf, 1e3 * f, 100 * ef, 1e3 * mfb, 1e3 * fb, 100 * efb);
    EXPECT_LE(std::fabs(ef), 0.10) << m->name << " seq " << seq << " forward";
    EXPECT_LE(std::fabs(efb), 0.10) << m->name << " seq " << seq << " forward + backward";
    sum_f += std::fabs(ef);
    sum_fb += std::fabs(efb);
    worst = std::max({worst, std::fabs(ef), std::fabs(efb)});
  }
  std::printf("mean |error|: forward %.1f%%, forward + backward %.1f%%; worst %.1f%%\n",
              10 * sum_f, 10 * sum_fb, 100 * worst);
}

}  // namespace
}  // namespace baton::sim
