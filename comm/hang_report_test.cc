// The hang report's verdicts over flight records of a small schedule, and
// its transport through the store with threads as ranks.
#include "baton/comm/hang_report.h"

#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/hang_reporting.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

// A toy schedule per step: node k is an all-gather of bucket k/2 on tag 1
// (even k) or a reduce-scatter of bucket k/2 on tag 2 (odd k), all over the
// world communicator of `n` ranks.
class Job {
 public:
  explicit Job(int n) {
    std::vector<int> world(n);
    for (int r = 0; r < n; ++r) world[r] = r;
    for (int r = 0; r < n; ++r) {
      recs_.push_back(std::make_unique<FlightRecorder>());
      recs_[r]->AddCommunicator("job", r, world, "inproc");
    }
    seq_.assign(n, std::vector<uint64_t>(256, 0));
  }
  FlightRecorder& rec(int r) { return *recs_[r]; }

  // Rank r issues node `node` of `step` (as the schedule says, or with a
  // different count) and optionally completes it.
  uint64_t Issue(int r, int step, int node, bool complete,
                 uint64_t count = 1024, int comm = 0, uint32_t tag = 0) {
    CollectiveCall c;
    c.kind = node % 2 == 0 ? CollectiveKind::kAllGather
                           : CollectiveKind::kReduceScatter;
    c.tag = tag != 0 ? tag : node % 2 == 0 ? 1 : 2;
    c.seq = seq_[r][c.tag + 8 * comm]++;
    c.count = count;
    c.type = DataType::kBF16;
    SchedulePosition p;
    p.step = step;
    p.node = node;
    p.bucket = node / 2;
    p.group = 0x0c;
    const uint64_t i = recs_[r]->Issue(comm, c, p);
    if (complete) recs_[r]->Complete(i, true);
    return i;
  }
  std::vector<std::optional<RankState>> States(std::vector<int> missing = {}) {
    std::vector<std::optional<RankState>> s(recs_.size());
    for (size_t r = 0; r < recs_.size(); ++r) {
      if (std::find(missing.begin(), missing.end(), r) == missing.end()) {
        s[r] = recs_[r]->Snapshot();
      }
    }
    return s;
  }

 private:
  std::vector<std::unique_ptr<FlightRecorder>> recs_;
  std::vector<std::vector<uint64_t>> seq_;
};

// Every rank completes nodes [0, done) of step 0.
void Prefix(Job& job, int n, int done) {
  for (int r = 0; r < n; ++r) {
    for (int k = 0; k < done; ++k) job.Issue(r, 0, k, true);
  }
}

TEST(HangReportTest, ARankThatStoppedIssuingLagsAndIsNamedWithTheCollective) {
  Job job(4);
  Prefix(job, 4, 3);
  // Rank 2 stalls in the host before node 3; the others issue 3..5 and
  // wait in node 3 (reduce-scatter of bucket 1).
  for (int r : {0, 1, 3}) {
    for (int k = 3; k < 6; ++k) job.Issue(r, 0, k, false);
  }
  const HangVerdict v = AnalyzeHang(job.States());
  EXPECT_EQ(v.kind, HangVerdict::Kind::kLagging);
  EXPECT_EQ(v.rank, 2);
  EXPECT_EQ(v.waiting, (std::vector<int>{0, 1, 3}));
  ASSERT_TRUE(v.have_collective);
  EXPECT_EQ(v.collective.kind, CollectiveKind::kReduceScatter);
  EXPECT_EQ(v.collective.position.node, 3);
  EXPECT_EQ(v.collective.position.bucket, 1);
  EXPECT_EQ(v.comm_key, "job");
  ASSERT_TRUE(v.have_theirs);
  EXPECT_EQ(v.theirs.position.node, 2);  // rank 2's last issued
  EXPECT_TRUE(absl::StartsWith(v.summary, "rank 2 lags: it has not issued "
                                          "reduce_scatter #1 (tag 2) step 0 "
                                          "node 3 bucket 1 group dp_shard+hpz"))
      << v.summary;
  EXPECT_TRUE(absl::StrContains(v.summary, "ranks 0,1,3 issued it and wait"))
      << v.summary;
  EXPECT_TRUE(absl::StrContains(v.summary, "world ranks 0-3")) << v.summary;

  // The same with rank 2 not reporting at all: it is the silent one.
  const HangVerdict s = AnalyzeHang(job.States({2}));
  EXPECT_EQ(s.kind, HangVerdict::Kind::kSilent);
  EXPECT_EQ(s.rank, 2);
  EXPECT_EQ(s.collective.position.node, 3);
  EXPECT_TRUE(absl::StartsWith(s.summary, "rank 2 did not report")) << s.summary;
}

TEST(HangReportTest, ARankThatSkippedACollectiveDiverges) {
  Job job(4);
  Prefix(job, 4, 2);
  // Rank 1 skips node 2 (all-gather of bucket 1): its next all-gather,
  // node 4, is matched with the others' node 2 (same count: NCCL and a
  // check-free run would move the wrong bucket).
  for (int r : {0, 2, 3}) {
    job.Issue(r, 0, 2, true);
    job.Issue(r, 0, 3, false);
  }
  job.Issue(1, 0, 3, false);
  job.Issue(1, 0, 4, true);
  const HangVerdict v = AnalyzeHang(job.States());
  EXPECT_EQ(v.kind, HangVerdict::Kind::kDiverged);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.culprits, (std::vector<int>{1}));
  EXPECT_EQ(v.collective.position.node, 2);
  EXPECT_EQ(v.collective.position.bucket, 1);
  EXPECT_EQ(v.theirs.position.node, 4);
  EXPECT_TRUE(absl::StrContains(v.summary, "rank 1 diverged from the schedule"))
      << v.summary;
  EXPECT_TRUE(absl::StrContains(v.summary, "where ranks 0,2,3 issued "
                                           "all_gather #1 (tag 1) step 0 node 2 "
                                           "bucket 1"))
      << v.summary;
  EXPECT_TRUE(absl::StrContains(v.summary, "it issued all_gather #1 (tag 1) "
                                           "step 0 node 4 bucket 2"))
      << v.summary;
}

TEST(HangReportTest, ADifferentCountDivergesAndTiesGoToTheSetOfRankZero) {
  Job job(4);
  Prefix(job, 4, 4);
  for (int r = 0; r < 4; ++r) job.Issue(r, 0, 4, false, r == 3 ? 1040 : 1024);
  HangVerdict v = AnalyzeHang(job.States());
  EXPECT_EQ(v.kind, HangVerdict::Kind::kDiverged);
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.collective.count, 1024u);
  EXPECT_EQ(v.theirs.count, 1040u);
  EXPECT_EQ(v.waiting, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(absl::StrContains(v.summary, "1040 x bfloat16")) << v.summary;

  Job two(2);
  two.Issue(0, 0, 0, false, 8);
  two.Issue(1, 0, 0, false, 9);
  v = AnalyzeHang(two.States());
  EXPECT_EQ(v.kind, HangVerdict::Kind::kDiverged);
  EXPECT_EQ(v.rank, 1);
}

TEST(HangReportTest, AbortsStuckCollectivesAndCleanRuns) {
  Job job(3);
  Prefix(job, 3, 2);
  for (int r = 0; r < 3; ++r) job.Issue(r, 0, 2, false);
  // Everyone is in node 2, nobody lags: no one to name.
  HangVerdict v = AnalyzeHang(job.States());
  EXPECT_EQ(v.kind, HangVerdict::Kind::kStuck);
  EXPECT_EQ(v.rank, -1);
  EXPECT_EQ(v.waiting, (std::vector<int>{0, 1, 2}));
  EXPECT_TRUE(absl::StartsWith(v.summary, "no rank lags: ranks 0-2 issued it"))
      << v.summary;
  // Rank 1 aborts: it is named first.
  job.rec(1).MarkAborted();
  v = AnalyzeHang(job.States());
  EXPECT_EQ(v.kind, HangVerdict::Kind::kAborted);
  EXPECT_EQ(v.rank, 1);
  EXPECT_EQ(v.collective.position.node, 2);
  EXPECT_TRUE(absl::StartsWith(v.summary, "rank 1 aborted while in all_gather"))
      << v.summary;

  Job clean(3);
  Prefix(clean, 3, 4);
  v = AnalyzeHang(clean.States());
  EXPECT_EQ(v.kind, HangVerdict::Kind::kNone);
  EXPECT_EQ(v.rank, -1);
}

TEST(HangReportTest, SubGroupsReportWorldRanks) {
  // World of 4; Split into {0, 2} and {1, 3}. In group {1, 3} (child rank 1
  // is world rank 3), world rank 3 never issues the all-reduce world rank 1
  // waits in; the other group finished.
  Job job(4);
  Prefix(job, 4, 2);
  const std::vector<std::vector<int>> groups = {{0, 2}, {1, 3}};
  for (int r = 0; r < 4; ++r) {
    const std::vector<int>& g = groups[r % 2];
    const int child_rank = r < 2 ? 0 : 1;
    ASSERT_EQ(job.rec(r).AddCommunicator(absl::StrCat("job/split0/", r % 2),
                                         child_rank, g, "inproc"),
              1);
  }
  for (int r : {0, 2}) job.Issue(r, 0, 6, true, 64, /*comm=*/1, /*tag=*/2);
  job.Issue(1, 0, 6, false, 64, 1, 2);
  const HangVerdict v = AnalyzeHang(job.States());
  EXPECT_EQ(v.kind, HangVerdict::Kind::kLagging);
  EXPECT_EQ(v.rank, 3);
  EXPECT_EQ(v.waiting, (std::vector<int>{1}));
  EXPECT_EQ(v.comm_key, "job/split0/1");
  EXPECT_EQ(v.comm_world_ranks, (std::vector<int>{1, 3}));
  EXPECT_TRUE(absl::StrContains(v.summary, "in communicator 'job/split0/1' "
                                           "(world ranks 1,3)"))
      << v.summary;
}

TEST(HangReportTest, TheReportMergesRanksWithTheSameLine) {
  Job job(4);
  Prefix(job, 4, 3);
  for (int r : {0, 1, 3}) job.Issue(r, 0, 3, false);
  const auto states = job.States({2});
  const HangVerdict v = AnalyzeHang(states);
  const std::string report = FormatHangReport(states, v, "a timeout");
  EXPECT_TRUE(absl::StrContains(report, "=== baton hang report (inproc, 4 ranks) ==="))
      << report;
  EXPECT_TRUE(absl::StrContains(report, "cause: a timeout")) << report;
  EXPECT_TRUE(absl::StrContains(report, "verdict: rank 2 did not report")) << report;
  EXPECT_TRUE(absl::StrContains(report, "ranks 0,1,3: waiting in reduce_scatter #1"))
      << report;
  EXPECT_TRUE(absl::StrContains(report, "rank 2: did not report")) << report;
  EXPECT_TRUE(absl::StrContains(report, "'job' tag 2: 2/1 on ranks 0,1,3")) << report;
  EXPECT_EQ(RankList({5, 0, 1, 2, 7, 8}), "0-2,5,7,8");
  EXPECT_EQ(RankList({}), "none");
}

// ---- Through the store ----

class Stores {
 public:
  explicit Stores(int n) {
    TcpStoreOptions o;
    o.port = 0;
    o.world_size = n;
    o.linger = absl::Milliseconds(200);
    stores_.push_back(std::move(*TcpStore::Create(o)));
    for (int r = 1; r < n; ++r) {
      TcpStoreOptions c = o;
      c.port = stores_[0]->port();
      c.rank = r;
      stores_.push_back(std::move(*TcpStore::Create(c)));
    }
  }
  TcpStore* store(int r) { return stores_[r].get(); }
  void KillStore() { stores_[0].reset(); }

 private:
  std::vector<std::unique_ptr<TcpStore>> stores_;
};

TEST(HangReportTest, FailingRanksAgreeOnOneVerdictThroughTheStore) {
  const int n = 3;
  Job job(n);
  Prefix(job, n, 2);
  for (int r : {0, 2}) job.Issue(r, 0, 2, false);  // rank 1 stalled
  Stores stores(n);
  absl::Mutex mu;
  std::vector<std::string> reports;
  HangStoreOptions o;
  o.collect = absl::Milliseconds(300);
  o.store_timeout = absl::Seconds(2);
  o.sink = [&](const std::string& text) {
    absl::MutexLock lock(&mu);
    reports.push_back(text);
  };
  std::vector<Status> got(n);
  std::vector<std::thread> threads;
  for (int r : {0, 2}) {
    threads.emplace_back([&, r] {
      got[r] = ReportHangThroughStore(
          stores.store(r), o, job.rec(r),
          absl::DeadlineExceededError(absl::StrCat("timeout on rank ", r)));
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(absl::StrContains(reports[0], "rank 1: did not report")) << reports[0];
  for (int r : {0, 2}) {
    EXPECT_TRUE(absl::IsDeadlineExceeded(got[r])) << got[r];
    EXPECT_TRUE(absl::StartsWith(got[r].message(),
                                 absl::StrCat("timeout on rank ", r,
                                              "; hang report: rank 1 did not "
                                              "report")))
        << got[r];
    EXPECT_TRUE(absl::StrContains(got[r].message(),
                                  "all_gather #1 (tag 1) step 0 node 2 bucket 1"))
        << got[r];
  }

  // A rank reports once: a later failure gets the first verdict.
  const Status again = ReportHangThroughStore(
      stores.store(2), o, job.rec(2), absl::UnavailableError("again"));
  EXPECT_EQ(again.message(),
            absl::StrCat("again; hang report: ",
                         got[2].message().substr(got[2].message().find(
                                                     "; hang report: ") +
                                                 15)));
  EXPECT_EQ(reports.size(), 1u);

  // Without the store, a rank writes its own records to its log.
  stores.KillStore();
  reports.clear();
  Job later(n);
  Prefix(later, n, 2);
  later.Issue(2, 0, 2, false);
  const Status alone = ReportHangThroughStore(
      stores.store(2), o, later.rec(2), absl::UnavailableError("lost rank 0"));
  EXPECT_TRUE(absl::StrContains(alone.message(),
                                "the store is unreachable; rank 2's records "
                                "are in its log"))
      << alone;
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_TRUE(absl::StrContains(reports[0], "rank 2: waiting in all_gather #1"))
      << reports[0];
}

}  // namespace
}  // namespace baton
