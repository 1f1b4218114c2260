// The executor's collectives as a schedule (issue 38): positions, check
// mode's comparison of whole schedules, a host stall inside a step named
// by the hang report with the executor's positions, and straggler
// measurement with one slow rank. Ranks are inproc threads.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "baton/comm/factory.h"
#include "baton/comm/flight_recorder.h"
#include "baton/scheduler/arrivals.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/schedule_check.h"
#include "baton/scheduler/testing/toy_model.h"
#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

using testing::RunRanks;
using testing::ToyModel;

ModelSpec Micro() { return *ModelPreset("micro"); }

// `bf16`: parameters in bfloat16 (gathers of another type and size).
Policy Baton(bool bf16 = false) {
  Policy p = *PolicyPreset("baton");
  p.param_dtype = bf16 ? DataType::kBF16 : DataType::kF32;
  return p;
}

struct Ranks {
  std::unique_ptr<Device> device;
  std::vector<std::unique_ptr<Communicator>> comms;
  std::vector<std::string> reports;
  absl::Mutex mu;
};

// n inproc ranks with `timeout`, their hang reports collected.
std::unique_ptr<Ranks> MakeRanks(int n, absl::Duration timeout) {
  auto r = std::make_unique<Ranks>();
  r->device = *CreateHostDevice();
  CommConfig cfg;
  cfg.device = r->device.get();
  cfg.group = "";
  cfg.timeout = timeout;
  Ranks* raw = r.get();
  cfg.on_hang_report = [raw](const std::string& text) {
    absl::MutexLock lock(&raw->mu);
    raw->reports.push_back(text);
  };
  auto comms = baton::CreateInprocGroup(n, cfg);
  EXPECT_TRUE(comms.ok()) << comms.status();
  if (comms.ok()) r->comms = std::move(*comms);
  return r;
}

TEST(ScheduleCheckTest, TheScheduleListsTheCollectivesWithTheirPositions) {
  const StepGraph g = *BuildStepGraph(Micro(), Baton(), 4);
  const std::vector<ScheduleEntry> s = CollectiveSchedule(g);
  ASSERT_FALSE(s.empty());
  int collectives = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (IsCollective(g.nodes[i])) ++collectives;
  }
  EXPECT_EQ(static_cast<int>(s.size()), collectives);
  for (const ScheduleEntry& e : s) {
    const SchedulePosition p = NodePosition(g, e.node, 7, true);
    EXPECT_EQ(p.step, 7);
    EXPECT_EQ(p.node, e.node);
    EXPECT_EQ(p.bucket, g.nodes[e.node].bucket);
    EXPECT_EQ(p.group, g.nodes[e.node].group.bits());
    EXPECT_TRUE(p.check);
  }
  EXPECT_EQ(ScheduleHash(s), ScheduleHash(CollectiveSchedule(g)));
  const StepGraph other = *BuildStepGraph(Micro(), Baton(true), 4);
  EXPECT_NE(ScheduleHash(s), ScheduleHash(CollectiveSchedule(other)));
  EXPECT_TRUE(absl::StartsWith(DescribeEntry(s[0]), "all_gather of bucket "))
      << DescribeEntry(s[0]);
}

// The mesh names the executor fills in agree with the flight recorder's.
TEST(ScheduleCheckTest, MeshGroupNamesAgreeWithTheFlightRecorders) {
  const MeshGroup groups[] = {
      kDataShardGroup, kReplicaGroup, kHpzGroup, kTensorGroup, kContextGroup,
      kPipelineGroup, MeshGroup{MeshDim::kReplicate, MeshDim::kShard},
      MeshGroup{MeshDim::kPipeline, MeshDim::kTensor},
      MeshGroup{MeshDim::kPipeline, MeshDim::kReplicate, MeshDim::kShard,
                MeshDim::kHpz, MeshDim::kContext, MeshDim::kTensor},
      MeshGroup{}};
  for (MeshGroup g : groups) EXPECT_EQ(MeshGroupBitsName(g.bits()), g.name());
}

TEST(ScheduleCheckTest, CheckModeNamesTheRankWhoseScheduleDiffers) {
  const int n = 4;
  auto ranks = MakeRanks(n, absl::Seconds(20));
  std::vector<Status> got(n);
  RunRanks(n, [&](int r) {
    // Rank 2 was started with bf16 parameters: its gathers differ.
    const StepGraph g = *BuildStepGraph(Micro(), Baton(r == 2), n);
    ExecutorOptions o;
    o.check_schedule = true;
    got[r] = Executor::Create(g, *ranks->device, *ranks->comms[r], o).status();
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(absl::IsInvalidArgument(got[r])) << got[r];
    EXPECT_EQ(got[r].message(), got[0].message()) << "rank " << r;
  }
  EXPECT_TRUE(absl::StartsWith(got[0].message(),
                               "schedule check: rank 2's schedule differs from "
                               "rank 0's (held by ranks 0,1,3) at collective "))
      << got[0];
  EXPECT_TRUE(absl::StrContains(got[0].message(), ": rank 0 has all_gather of bucket "))
      << got[0];
  // The same graphs pass.
  RunRanks(n, [&](int r) {
    const StepGraph g = *BuildStepGraph(Micro(), Baton(), n);
    ExecutorOptions o;
    o.check_schedule = true;
    got[r] = Executor::Create(g, *ranks->device, *ranks->comms[r], o).status();
  });
  for (int r = 0; r < n; ++r) EXPECT_TRUE(got[r].ok()) << got[r];
}

TEST(ScheduleCheckTest, AHostStallInsideAStepIsNamedWithTheExecutorsPosition) {
  const int n = 3;
  const absl::Duration timeout = absl::Seconds(1);
  auto ranks = MakeRanks(n, timeout);
  const StepGraph graph = *BuildStepGraph(Micro(), Baton(), n);
  // Rank 1 stalls in the host inside the first backward node of step 1:
  // the first collective after that node is the one it never issues.
  int stall = -1;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (graph.nodes[i].kind == NodeKind::kBackward && stall < 0) stall = static_cast<int>(i);
  }
  ASSERT_GE(stall, 0);
  int next = -1;
  for (size_t i = stall + 1; i < graph.nodes.size() && next < 0; ++i) {
    if (IsCollective(graph.nodes[i])) next = static_cast<int>(i);
  }
  ASSERT_GE(next, 0);
  ToyModel toy(n);
  absl::Notification release;
  std::vector<Status> got(n);
  std::vector<absl::Duration> took(n);
  std::atomic<int> done{0};
  RunRanks(n, [&](int r) {
    auto exec = Executor::Create(graph, *ranks->device, *ranks->comms[r]);
    ASSERT_TRUE(exec.ok()) << exec.status();
    StepCallbacks cb = toy.Callbacks(r);
    auto compute = cb.compute;
    int64_t step = 0;
    cb.compute = [&, compute, r](const ComputeContext& ctx) -> Status {
      if (r == 1 && step == 1 && ctx.kind == NodeKind::kBackward &&
          ctx.unit == graph.nodes[stall].unit &&
          ctx.micro_step == graph.nodes[stall].micro_step) {
        release.WaitForNotificationWithTimeout(absl::Seconds(30));
      }
      return compute(ctx);
    };
    Status s = (*exec)->InitParameters([](const ParamSlot& p, float* out) {
      for (int64_t i = 0; i < p.numel; ++i) out[i] = testing::InitialValue(p, i);
    });
    for (step = 0; s.ok() && step < 2; ++step) {
      s = (*exec)->Step(cb);
      const absl::Time t0 = absl::Now();
      if (s.ok()) s = (*exec)->Synchronize();
      took[r] = absl::Now() - t0;
    }
    got[r] = s;
    if (++done == n - 1) release.Notify();
  });
  const Node& stuck = graph.nodes[next];
  const std::string want = absl::StrCat(
      "hang report: rank 1 lags: it has not issued ",
      stuck.kind == NodeKind::kAllGather ? "all_gather" : "reduce_scatter");
  const std::string where = absl::StrCat("step 1 node ", next, " bucket ",
                                         stuck.bucket, " group ",
                                         stuck.group.name());
  for (int r : {0, 2}) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(got[r])) << got[r];
    EXPECT_TRUE(absl::StrContains(got[r].message(), want)) << got[r];
    EXPECT_TRUE(absl::StrContains(got[r].message(), where))
        << "wants '" << where << "': " << got[r];
    EXPECT_TRUE(absl::StrContains(got[r].message(), "ranks 0,2 issued it and wait"))
        << got[r];
    EXPECT_LT(took[r], 2 * timeout);
  }
  absl::MutexLock lock(&ranks->mu);
  ASSERT_EQ(ranks->reports.size(), 1u);
}

TEST(ArrivalsTest, ASlowRankIsTheSlowestAndEveryRankSeesTheSameFigures) {
  const int n = 4;
  auto ranks = MakeRanks(n, absl::Seconds(30));
  const StepGraph graph = *BuildStepGraph(Micro(), Baton(), n);
  ToyModel toy(n);
  std::vector<std::vector<StepArrivals>> got(n);
  std::vector<Status> status(n);
  RunRanks(n, [&](int r) {
    auto exec = Executor::Create(graph, *ranks->device, *ranks->comms[r]);
    ASSERT_TRUE(exec.ok()) << exec.status();
    ArrivalMonitor monitor(graph, *ranks->comms[r], *ranks->device);
    StepCallbacks cb = toy.Callbacks(r);
    auto compute = cb.compute;
    // Rank 2's compute takes 3 ms longer per node.
    cb.compute = [compute, r](const ComputeContext& ctx) -> Status {
      if (r == 2) {
        BATON_RETURN_IF_ERROR(ctx.stream->Enqueue([] {
          absl::SleepFor(absl::Milliseconds(3));
          return absl::OkStatus();
        }));
      }
      return compute(ctx);
    };
    Status s = (*exec)->InitParameters([](const ParamSlot& p, float* out) {
      for (int64_t i = 0; i < p.numel; ++i) out[i] = testing::InitialValue(p, i);
    });
    for (int64_t step = 0; s.ok() && step < 3; ++step) {
      s = (*exec)->Step(cb);
      if (s.ok()) s = (*exec)->Synchronize();
      if (!s.ok()) break;
      auto a = monitor.Collect(step);
      s = a.status();
      if (s.ok()) got[r].push_back(*a);
    }
    status[r] = s;
  });
  for (int r = 0; r < n; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
  const size_t collectives = CollectiveSchedule(graph).size();
  for (size_t step = 0; step < 3; ++step) {
    const StepArrivals& a = got[0][step];
    std::printf("%s", FormatStepArrivals(a).c_str());
    EXPECT_EQ(a.step, static_cast<int64_t>(step));
    EXPECT_EQ(a.collectives.size(), collectives);
    EXPECT_EQ(a.slowest_rank, 2);
    EXPECT_GE(a.slowest_count[2], static_cast<int>(collectives) / 2);
    EXPECT_GT(a.max_skew_ms, 2.0);
    EXPECT_GT(a.straggler_ms, 2.0);
    for (const CollectiveArrival& c : a.collectives) EXPECT_EQ(c.ranks, n);
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(FormatStepArrivals(got[r][step]), FormatStepArrivals(a));
    }
  }
}

}  // namespace
}  // namespace baton::scheduler
