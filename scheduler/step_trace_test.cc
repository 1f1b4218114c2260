#include "baton/scheduler/step_trace.h"

#include <string>

#include "baton/scheduler/testing/step_trace_check.h"
#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

// Two inproc ranks run two steps of the toy model with a recorder each
// (testing::CheckStepTraceOfToyRun). ZenFlow's case: optim/zenflow_exec_test.
class StepTraceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(StepTraceTest, RecordsEveryNodeOnItsStreamInStreamOrder) {
  testing::CheckStepTraceOfToyRun(GetParam(), {});
}

INSTANTIATE_TEST_SUITE_P(Presets, StepTraceTest,
                         ::testing::Values("baton", "zero_offload"));

TEST(StepTraceWriteTest, AnUnwritablePathIsNamed) {
  StepTrace trace;
  const Status st = trace.Write("/nonexistent-dir/trace.json");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(st.message().find("/nonexistent-dir/trace.json"), std::string::npos) << st;
  EXPECT_EQ(trace.Write("/dev/full").code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace baton::scheduler
