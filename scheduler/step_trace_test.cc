#include "baton/scheduler/step_trace.h"

#include <chrono>
#include <memory>
#include <string>
#include <thread>

#include "baton/runtime/device.h"
#include "baton/scheduler/testing/step_trace_check.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

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

// A span a node records of its own work (WorkSpanSink) is timed when the
// host stream runs that work, not when it is issued, and lands on the
// track of its stream class.
TEST(StepTraceSpanTest, TimesTheWorkWhenTheStreamRunsIt) {
  StepGraph graph;  // compute + comm streams
  StepTrace trace;
  WorkSpanSink* sink = trace.ForRank(0, graph)->spans();
  ASSERT_NE(sink, nullptr);
  std::unique_ptr<Device> device = *CreateHostDevice();
  std::unique_ptr<Stream> stream = *device->CreateStream();
  auto sleep_ms = [](int ms) {
    return [ms]() {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      return absl::OkStatus();
    };
  };
  ASSERT_TRUE(stream->Enqueue(sleep_ms(60)).ok());  // the stream is busy first
  int issued = 0;
  ASSERT_TRUE(sink->Span(*stream, StreamClass::kAllGather, "AG chunk", 1, 7, [&] {
                   ++issued;
                   return stream->Enqueue(sleep_ms(30));
                 }).ok());
  EXPECT_EQ(issued, 1);
  ASSERT_TRUE(stream->Synchronize().ok());
  const nlohmann::json j = nlohmann::json::parse(trace.Json());
  int found = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e.value("name", "") != "AG chunk 1") continue;
    ++found;
    EXPECT_EQ(e["ph"], "X");
    EXPECT_EQ(e["tid"], graph.stream_for(StreamClass::kAllGather).index());
    EXPECT_EQ(e["cat"], "copy");
    EXPECT_EQ(e["args"]["step"], 7);
    EXPECT_EQ(e["args"]["chunk"], 1);
    EXPECT_GE(e["ts"].get<double>(), 55e3);  // after the 60 ms already queued
    EXPECT_GE(e["dur"].get<double>(), 28e3);  // the 30 ms of its own work
  }
  EXPECT_EQ(found, 1) << j.dump();
}

// Without a sink RecordSpan only issues the work; an error is returned.
TEST(StepTraceSpanTest, WithoutASinkTheWorkIsOnlyIssued) {
  struct Plain : NodeObserver {
    Status Observe(int, int64_t, Point, Stream&) override { return absl::OkStatus(); }
  } plain;
  EXPECT_EQ(plain.spans(), nullptr);
  std::unique_ptr<Device> device = *CreateHostDevice();
  std::unique_ptr<Stream> stream = *device->CreateStream();
  int issued = 0;
  EXPECT_TRUE(RecordSpan(nullptr, *stream, StreamClass::kTensor, "AR chunk", 0, 0, [&] {
                ++issued;
                return absl::OkStatus();
              }).ok());
  EXPECT_EQ(issued, 1);
  EXPECT_EQ(RecordSpan(nullptr, *stream, StreamClass::kTensor, "AR chunk", 0, 0,
                       [] { return absl::InternalError("x"); })
                .code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace baton::scheduler
