// Hangs injected into inproc ranks (issue 38): a rank that stops issuing
// (host stall), one that skips a collective (divergent path), one that
// issues a different count, and a stall inside a sub-group. Every rank's
// error must end within the timeout with the one verdict naming the right
// rank, collective and bucket, and the report must be written once.
//
// The toy schedule per step (like the executor's, two comm streams): node
// k moves bucket k/2, an all-gather on tag 1 (stream A) for even k and a
// reduce-scatter on tag 2 (stream B) for odd k.
#include <atomic>
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
#include "baton/runtime/device.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

constexpr int kRanks = 4;
constexpr int kNodes = 6;
constexpr size_t kCount = 64;
const absl::Duration kTimeout = absl::Seconds(1);

struct Fault {
  enum Kind { kNone, kStall, kSkip, kResize } kind = kNone;
  int rank = -1;
  int64_t step = 1;
  int node = 0;
  bool check = false;  // SchedulePosition::check on every rank
  bool event_protocol = false;
};

struct Outcome {
  std::vector<Status> status;
  std::vector<absl::Duration> took;  // from its last issue to its error
  std::vector<std::string> reports;
};

Outcome RunSchedule(const Fault& f) {
  std::unique_ptr<Device> device = *CreateHostDevice();
  Outcome out;
  out.status.resize(kRanks);
  out.took.resize(kRanks);
  absl::Mutex mu;
  CommConfig cfg;
  cfg.device = device.get();
  cfg.group = "";
  cfg.timeout = kTimeout;
  cfg.inproc_event_protocol = f.event_protocol;
  cfg.on_hang_report = [&](const std::string& text) {
    absl::MutexLock lock(&mu);
    out.reports.push_back(text);
  };
  auto comms = CreateInprocGroup(kRanks, cfg);
  EXPECT_TRUE(comms.ok()) << comms.status();
  if (!comms.ok()) return out;
  absl::Notification release;  // lets the stalled rank go on
  std::atomic<int> finished{0};
  auto body = [&](int r) {
    Communicator& comm = *(*comms)[r];
    std::unique_ptr<Stream> a = *device->CreateStream();
    std::unique_ptr<Stream> b = *device->CreateStream();
    // Per node: its own buffers (the two streams run at once).
    std::vector<std::vector<float>> send(2 * kNodes), recv(2 * kNodes);
    Status s;
    absl::Time last_issue = absl::Now();
    for (int64_t step = 0; step < 2 && s.ok(); ++step) {
      for (int k = 0; k < kNodes && s.ok(); ++k) {
        size_t count = kCount;
        if (r == f.rank && step == f.step && k == f.node) {
          if (f.kind == Fault::kStall) {
            release.WaitForNotificationWithTimeout(absl::Seconds(30));
          }
          if (f.kind == Fault::kSkip) continue;
          if (f.kind == Fault::kResize) count += 16;
        }
        CollectiveOptions o;
        o.position.step = step;
        o.position.node = k;
        o.position.bucket = k / 2;
        o.position.group = 0x0c;
        o.position.check = f.check;
        std::vector<float>& in = send[step * kNodes + k];
        std::vector<float>& res = recv[step * kNodes + k];
        in.assign(count * kRanks, 1.0f);
        res.assign(count * kRanks, 0.0f);
        if (k % 2 == 0) {
          o.tag = 1;
          s = comm.AllGather(in.data(), res.data(), count, DataType::kF32, *a, o);
        } else {
          o.tag = 2;
          s = comm.ReduceScatter(in.data(), res.data(), count, DataType::kF32,
                                 ReduceOp::kSum, *b, o);
        }
        last_issue = absl::Now();
      }
      if (s.ok()) s = a->Synchronize();
      Status sb = b->Synchronize();
      if (s.ok()) s = sb;
    }
    out.status[r] = s;
    out.took[r] = absl::Now() - last_issue;
    if (++finished == kRanks - 1 && f.kind == Fault::kStall) release.Notify();
  };
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) threads.emplace_back(body, r);
  for (auto& t : threads) t.join();
  return out;
}

// Every rank other than `except` failed with `code` within `limit`, its
// message naming `verdict`; one report holding it was written.
void ExpectVerdict(const Outcome& o, int except, absl::StatusCode code,
                   const std::vector<std::string>& verdict,
                   absl::Duration limit) {
  for (int r = 0; r < kRanks; ++r) {
    if (r == except) continue;
    EXPECT_EQ(o.status[r].code(), code) << "rank " << r << ": " << o.status[r];
    for (const std::string& v : verdict) {
      EXPECT_TRUE(absl::StrContains(o.status[r].message(), v))
          << "rank " << r << " lacks '" << v << "':\n" << o.status[r];
    }
    EXPECT_LT(o.took[r], limit) << "rank " << r;
  }
  ASSERT_EQ(o.reports.size(), 1u);
  for (std::string v : verdict) {
    // The report's verdict line: "verdict: rank 2 lags: ...".
    if (absl::StartsWith(v, "hang report: ")) v = "verdict: " + v.substr(13);
    if (absl::StrContains(v, "mismatched calls")) continue;  // the cause line
    EXPECT_TRUE(absl::StrContains(o.reports[0], v)) << o.reports[0];
  }
}

TEST(InprocHangTest, AHostStallIsNamedWithTheCollectiveItHasNotIssued) {
  for (bool events : {false, true}) {
    SCOPED_TRACE(events ? "event protocol" : "host path");
    Fault f;
    f.kind = Fault::kStall;
    f.rank = 2;
    f.node = 3;
    f.event_protocol = events;
    const Outcome o = RunSchedule(f);
    ExpectVerdict(o, 2, absl::StatusCode::kDeadlineExceeded,
                  {"hang report: rank 2 lags: it has not issued reduce_scatter "
                   "#4 (tag 2) step 1 node 3 bucket 1 group dp_shard+hpz",
                   "ranks 0,1,3 issued it and wait"},
                  2 * kTimeout);
    if (!o.reports.empty() && !events) std::printf("%s", o.reports[0].c_str());
  }
}

TEST(InprocHangTest, ASkippedCollectiveIsADivergenceAtItsPlace) {
  Fault f;
  f.kind = Fault::kSkip;
  f.rank = 1;
  f.node = 2;
  const Outcome o = RunSchedule(f);
  // Rank 1's own collectives all found partners (the others' node 2 took
  // its node 4); the others wait in their last all-gather.
  EXPECT_TRUE(o.status[1].ok()) << o.status[1];
  ExpectVerdict(o, 1, absl::StatusCode::kDeadlineExceeded,
                {"hang report: rank 1 diverged from the schedule",
                 "where ranks 0,2,3 issued all_gather #4 (tag 1) step 1 node 2 "
                 "bucket 1",
                 "it issued all_gather #4 (tag 1) step 1 node 4 bucket 2"},
                2 * kTimeout);
}

TEST(InprocHangTest, CheckModeFailsASkippedCollectiveFastNamingBothPositions) {
  Fault f;
  f.kind = Fault::kSkip;
  f.rank = 1;
  f.node = 2;
  f.check = true;
  const Outcome o = RunSchedule(f);
  ExpectVerdict(o, -1, absl::StatusCode::kInvalidArgument,
                {"mismatched calls: rank 0 is at step 1 node 2 bucket 1 group "
                 "dp_shard+hpz (all_gather) but rank 1 is at step 1 node 4 "
                 "bucket 2",
                 "hang report: rank 1 diverged from the schedule"},
                kTimeout / 2);
}

TEST(InprocHangTest, ADifferentCountFailsFastNamingTheRankAndBucket) {
  Fault f;
  f.kind = Fault::kResize;
  f.rank = 3;
  f.node = 4;
  const Outcome o = RunSchedule(f);
  ExpectVerdict(o, -1, absl::StatusCode::kInvalidArgument,
                {"rank 0 has count 64 but rank 3 has count 80",
                 "hang report: rank 3 diverged from the schedule",
                 "all_gather #5 (tag 1) step 1 node 4 bucket 2 group "
                 "dp_shard+hpz, 64 x float, it issued all_gather #5 (tag 1) "
                 "step 1 node 4 bucket 2 group dp_shard+hpz, 80 x float"},
                kTimeout / 2);
}

TEST(InprocHangTest, AStallInASubGroupIsReportedInWorldRanks) {
  std::unique_ptr<Device> device = *CreateHostDevice();
  std::vector<std::string> reports;
  absl::Mutex mu;
  CommConfig cfg;
  cfg.device = device.get();
  cfg.group = "";
  cfg.timeout = kTimeout;
  cfg.on_hang_report = [&](const std::string& text) {
    absl::MutexLock lock(&mu);
    reports.push_back(text);
  };
  auto comms = CreateInprocGroup(kRanks, cfg);
  ASSERT_TRUE(comms.ok()) << comms.status();
  std::vector<Status> got(kRanks);
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      // Groups {0, 2} and {1, 3}; world rank 3 never issues the all-reduce.
      auto child = (*comms)[r]->Split(r % 2, r);
      if (!child.ok()) {
        got[r] = child.status();
        return;
      }
      if (r == 3) return;
      std::unique_ptr<Stream> s = *device->CreateStream();
      std::vector<float> x(8, 1.0f);
      CollectiveOptions o;
      o.position.step = 0;
      o.position.node = 9;
      o.position.bucket = 4;
      o.position.group = 0x02;
      got[r] = (*child)->AllReduce(x.data(), x.data(), 8, DataType::kF32,
                                   ReduceOp::kSum, *s, o);
      if (got[r].ok()) got[r] = s->Synchronize();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE(got[0].ok()) << got[0];
  EXPECT_TRUE(got[2].ok()) << got[2];
  EXPECT_TRUE(absl::IsDeadlineExceeded(got[1])) << got[1];
  EXPECT_TRUE(absl::StrContains(
      got[1].message(),
      "hang report: rank 3 lags: it has not issued all_reduce #0 (tag 0) step "
      "0 node 9 bucket 4 group dp_replicate, 8 x float in communicator"))
      << got[1];
  EXPECT_TRUE(absl::StrContains(got[1].message(), "(world ranks 1,3); rank 1 "
                                                  "issued it and waits"))
      << got[1];
  ASSERT_EQ(reports.size(), 1u);
}

TEST(InprocHangTest, EveryRankRecordsIntoItsOwnRecorder) {
  std::unique_ptr<Device> device = *CreateHostDevice();
  CommConfig cfg;
  cfg.device = device.get();
  cfg.group = "";
  auto comms = CreateInprocGroup(2, cfg);
  ASSERT_TRUE(comms.ok()) << comms.status();
  FlightRecorder* a = (*comms)[0]->recorder();
  FlightRecorder* b = (*comms)[1]->recorder();
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_NE(a, b);
  EXPECT_EQ(a->world_rank(), 0);
  EXPECT_EQ(b->world_rank(), 1);
  EXPECT_EQ(b->world_size(), 2);
  // A child shares its parent's recorder and names its members' world ranks.
  std::vector<std::unique_ptr<Communicator>> children(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto c = (*comms)[r]->Split(0, 1 - r);  // reversed order
      if (c.ok()) children[r] = std::move(*c);
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_NE(children[0], nullptr);
  EXPECT_EQ(children[0]->recorder(), a);
  EXPECT_EQ(children[0]->rank(), 1);
  EXPECT_EQ(a->world_ranks(1), (std::vector<int>{1, 0}));
  // One recorder for every rank is refused.
  cfg.recorder = std::make_shared<FlightRecorder>();
  auto shared = CreateInprocGroup(2, cfg);
  EXPECT_TRUE(absl::IsInvalidArgument(shared.status())) << shared.status();
}

}  // namespace
}  // namespace baton
