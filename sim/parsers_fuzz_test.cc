// Fuzz (seeded random mutation, fixed time budget per parser): the
// simulator's input parsers (cluster file, calibration JSON, nccl-tests
// text) return OK or InvalidArgument on mutated inputs, never crash, throw
// or hang, and what they accept is finite and in range.
#include <cmath>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "baton/runtime/testing/fuzz.h"
#include "baton/sim/calibration.h"
#include "baton/sim/cluster.h"
#include "gtest/gtest.h"

namespace baton::sim {
namespace {

constexpr absl::Duration kBudget = absl::Seconds(3);

TEST(ParsersFuzzTest, ClusterFile) {
  const std::vector<std::string> corpus = {
      R"({"name": "mine", "gpus_per_node": 4, "peak_tflops": 312,
          "hbm_gbps": 1800, "memory_gib": 40,
          "reserved_gib": 0, "nvlink_gbps": 230, "nic_gbps": 25,
          "base_latency_us": 8.4, "nvlink_hop_us": 3.4, "net_hop_us": 14,
          "host_issue_us": 4})",
      R"({"nic_gbps": 12.5})",
      R"({})",
  };
  const auto stats = baton::testing::FuzzFor(corpus, kBudget, [](const std::string& t) {
    ClusterSpec c = *ClusterPreset("h100");
    Status s = ApplyClusterJson(t, c);
    if (s.ok()) {
      EXPECT_TRUE(ValidateCluster(c).ok());
    }
    return s;
  });
  EXPECT_GT(stats.ok, 0);
  EXPECT_GT(stats.refused, 0);
}

Status CheckTables(const Calibration& c) {
  for (const auto& [name, table] : c.tables) {
    for (const auto& [bytes, busbw] : table.points) {
      EXPECT_TRUE(std::isfinite(bytes) && bytes >= 1) << name;
      EXPECT_TRUE(std::isfinite(busbw) && busbw > 0) << name;
    }
    EXPECT_TRUE(std::isfinite(table.Busbw(12345.0)));
  }
  return absl::OkStatus();
}

TEST(ParsersFuzzTest, CalibrationJson) {
  const std::vector<std::string> corpus = {
      R"({"collective": "all_gather", "nranks": 8, "results": [
          {"size": 1048576, "count": 32768, "type": "float",
           "out_of_place": {"time_us": 30.1, "algbw_gbps": 34.8, "busbw_gbps": 30.5, "wrong": 0},
           "in_place": {"time_us": 29.8, "algbw_gbps": 35.2, "busbw_gbps": 30.8, "wrong": 0}},
          {"size": 268435456, "count": 8388608, "type": "float",
           "out_of_place": {"time_us": 1012, "algbw_gbps": 265, "busbw_gbps": 232, "wrong": 0}}]})",
      R"({"collective": "all_reduce", "results": [{"size": 4096, "out_of_place": {"busbw_gbps": 1.5}}]})",
  };
  const auto stats = baton::testing::FuzzFor(corpus, kBudget, [](const std::string& t) {
    Calibration c;
    Status s = AddCalibration(t, "fuzz.json", c);
    if (s.ok()) {
      CheckTables(c).IgnoreError();
    }
    return s;
  });
  EXPECT_GT(stats.ok, 0);
  EXPECT_GT(stats.refused, 0);
}

TEST(ParsersFuzzTest, NcclTestsText) {
  const std::vector<std::string> corpus = {
      "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 268435456 step: 2(factor)\n"
      "# Collective test starting: all_gather_perf\n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
      "     1048576         32768     float    none      -1    30.1   34.8   30.5      0    29.8   35.2   30.8      0\n"
      "   268435456       8388608     float    none      -1    1012    265    232      0    1010    265    232      0\n"
      "# Avg bus bandwidth    : 131.4\n",
      "# Collective test starting: reduce_scatter_perf\n"
      "  4096 1024 float sum -1 10.0 0.41 0.36 0 9.9 0.41 0.36 0\n",
  };
  const auto stats = baton::testing::FuzzFor(corpus, kBudget, [](const std::string& t) {
    Calibration c;
    Status s = AddCalibration(t, "fuzz.log", c);
    if (s.ok()) {
      CheckTables(c).IgnoreError();
    }
    return s;
  });
  EXPECT_GT(stats.ok, 0);
  EXPECT_GT(stats.refused, 0);
}

}  // namespace
}  // namespace baton::sim
