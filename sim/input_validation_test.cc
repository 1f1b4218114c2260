// Issue 16: the simulator's inputs (calibration, cluster file) refuse
// hostile values naming the field and row, and a result that is not
// finite is refused rather than printed.
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "baton/sim/calibration.h"
#include "baton/sim/cluster.h"
#include "baton/sim/report.h"
#include "baton/sim/simulator.h"
#include "gtest/gtest.h"

namespace baton::sim {
namespace {

void ExpectRefused(const Status& s, const std::string& want) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(want), std::string::npos) << s;
}

std::string Json(const std::string& rows) {
  return R"({"collective": "all_gather", "results": [)" + rows + "]}";
}

TEST(CalibrationInputTest, JsonRowsOfTheWrongTypeNameTheRowAndField) {
  Calibration c;
  EXPECT_TRUE(AddCalibration(
      Json(R"({"size": 1024, "out_of_place": {"busbw_gbps": 3}}, {"note": 1})"),
      "ok", c).ok());
  ASSERT_EQ(c.tables["all_gather"].points.size(), 1u);
  const std::pair<std::string, std::string> cases[] = {
      {R"({"size": "1024", "out_of_place": {"busbw_gbps": 3}})", "results[0].size"},
      {R"({"size": null, "out_of_place": {"busbw_gbps": 3}})", "results[0].size"},
      {R"({"size": 1, "out_of_place": {"busbw_gbps": 3}}, {"size": [1], "out_of_place": {}})",
       "results[1].out_of_place"},
      {R"({"size": 1024, "out_of_place": 5})", "results[0].out_of_place"},
      {R"({"size": 1024, "out_of_place": {"busbw_gbps": "3"}})",
       "results[0].out_of_place.busbw_gbps"},
      {R"({"size": 1024, "out_of_place": {"busbw_gbps": 1e308}})", "busbw_gbps"},
      {R"({"size": 1e300, "out_of_place": {"busbw_gbps": 3}})", "results[0].size"},
      {R"(7)", "results[0] must be an object"},
  };
  for (const auto& [rows, want] : cases) {
    Calibration fresh;
    ExpectRefused(AddCalibration(Json(rows), "f.json", fresh), want);
  }
  Calibration fresh;
  ExpectRefused(AddCalibration(R"({"collective": 3, "results": []})", "f", fresh),
                "collective, results");
  ExpectRefused(AddCalibration(std::string(100, '{'), "f", fresh), "nested deeper");
  // A key given twice: which value wins is undefined; refused, named.
  ExpectRefused(AddCalibration(Json(R"({"size": 1024, "out_of_place": {"busbw_gbps": 3,
                                       "busbw_gbps": 300}})"), "f.json", fresh),
                "calibration f.json: duplicate key \"busbw_gbps\" at results[0].out_of_place");
  ExpectRefused(AddCalibration(R"({"collective": "all_gather", "results": [],
                                  "collective": "all_reduce"})", "f.json", fresh),
                "calibration f.json: duplicate key \"collective\"");
}

TEST(CalibrationInputTest, NcclTestsRowsMustBeFinite) {
  for (const char* busbw : {"inf", "nan", "1e309", "-3", "0"}) {
    Calibration c;
    const std::string text = absl::StrCat(
        "# Collective test starting: all_reduce_perf\n"
        "  1048576 262144 float sum -1 30.1 34.8 ", busbw, " 0 29.8 35.2 30.8 0\n");
    ExpectRefused(AddCalibration(text, "log", c), "bandwidths in");
  }
}

TEST(ClusterInputTest, FieldsAreTypedAndRanged) {
  const std::pair<std::string, std::string> cases[] = {
      {R"({"gpus_per_node": 4294967304})", "gpus_per_node\" must be an integer in [1, 4096]"},
      {R"({"gpus_per_node": 8.0})", "gpus_per_node"},
      {R"({"gpus_per_node": "8"})", "gpus_per_node"},
      {R"({"nic_gbps": 1e-300})", "nic_gbps\" must be a number in [0.001, 1e+06]"},
      {R"({"peak_tflops": 1e300})", "peak_tflops"},
      {R"({"matmul_efficiency": 0.7})", "unknown field \"matmul_efficiency\""},
      {R"({"host_issue_us": -1})", "host_issue_us"},
      {R"({"straggler_cv": 1.5})", "straggler_cv\" must be a number in [0, 1]"},
      {R"({"name": 5})", "\"name\""},
      {R"({"bogus": 1})", "unknown field \"bogus\""},
      {R"([1])", "not a JSON object"},
      {R"({"nic_gbps": 25, "nic_gbps": 400})", "cluster file: duplicate key \"nic_gbps\""},
  };
  for (const auto& [text, want] : cases) {
    ClusterSpec c = *ClusterPreset("h100");
    ExpectRefused(ApplyClusterJson(text, c), want);
  }
  ClusterSpec c = *ClusterPreset("h100");
  ASSERT_TRUE(ApplyClusterJson(R"({"gpus_per_node": 4, "nic_gbps": 25, "base_latency_us": 0})",
                               c).ok());
  EXPECT_EQ(c.gpus_per_node, 4);
  EXPECT_EQ(c.nic_gbps, 25);
  c.peak_tflops = std::numeric_limits<double>::infinity();
  ExpectRefused(ValidateCluster(c), "peak_tflops");
  c = *ClusterPreset("h100");
  c.nic_gbps = std::nan("");
  ExpectRefused(ValidateCluster(c), "nic_gbps");
}

// A cluster so fast that every node rounds to 0 ns: the step takes 0 s
// and MFU would be infinite; the result is refused.
TEST(ResultTest, AZeroOrNonFiniteResultIsRefused) {
  ClusterSpec c = *ClusterPreset("h100");
  c.peak_tflops = c.hbm_gbps = c.nvlink_gbps = c.nic_gbps = 1e300;
  c.base_latency_us = c.nvlink_hop_us = c.net_hop_us = c.host_issue_us = 0;
  Workload w;
  w.gpus = 8;
  w.seq = 16;
  w.global_batch = 8;
  auto r = Simulate(*scheduler::ModelPreset("micro"), c, w, "baton", 0, {});
  ASSERT_TRUE(r.ok()) << r.status();
  // Each kernel's launch cost (from the kernel table) keeps even an
  // infinitely fast cluster's step positive and finite.
  EXPECT_GT(r->step_s, 0);
  EXPECT_TRUE(std::isfinite(r->step_s));
  EXPECT_TRUE(ValidateResult(*r).ok());
  SimResult zero;
  zero.policy = "p";
  zero.step_s = 0;
  ExpectRefused(ValidateResult(zero), "positive, finite time");
  SimResult ok;
  ok.policy = "p";
  ok.step_s = 1;
  ok.mfu = 0.5;
  EXPECT_TRUE(ValidateResult(ok).ok());
  SimResult bad = ok;
  bad.mfu = std::numeric_limits<double>::infinity();
  ExpectRefused(ValidateResult(bad), "mfu");
  bad = ok;
  bad.memory.activations = std::nan("");
  ExpectRefused(ValidateResult(bad), "peak_memory_bytes");
}

TEST(WorkloadInputTest, MicroStepsAreCapped) {
  Workload w;
  w.gpus = 1;
  w.global_batch = scheduler::kMaxMicroSteps;
  EXPECT_TRUE(ValidateWorkload(w).ok());
  w.global_batch = scheduler::kMaxMicroSteps + 1;
  ExpectRefused(ValidateWorkload(w), "the limit is 4096");
}

// Issue 29: the API gets no further than simulate's flags
// (scheduler/limits.h).
TEST(WorkloadInputTest, SizesHaveTheFlagsBoundsThroughTheApi) {
  Workload w;
  w.seq = scheduler::kMaxSeq + 1;
  ExpectRefused(ValidateWorkload(w), "--seq = 16777217 is over the limit of 16777216");
  w = Workload{};
  w.gpus = static_cast<int>(scheduler::kMaxWorldSize) * 2;
  w.global_batch = w.gpus;
  ExpectRefused(ValidateWorkload(w), "--gpus = 2097152 is over the limit of 1048576");
  w = Workload{};
  w.global_batch = scheduler::kMaxGlobalBatch * 2;
  ExpectRefused(ValidateWorkload(w), "--global-batch");
}

}  // namespace
}  // namespace baton::sim
