#include "baton/comm/flight_recorder.h"

#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

CollectiveCall Call(CollectiveKind kind, uint32_t tag, uint64_t seq,
                    uint64_t count = 16) {
  CollectiveCall c;
  c.kind = kind;
  c.tag = tag;
  c.seq = seq;
  c.count = count;
  c.type = DataType::kBF16;
  return c;
}

SchedulePosition Pos(int64_t step, int node, int bucket, uint8_t group = 0) {
  SchedulePosition p;
  p.step = step;
  p.node = node;
  p.bucket = bucket;
  p.group = group;
  return p;
}

TEST(FlightRecorderTest, RecordsIssueArrivalAndCompletionPerCommunicatorAndTag) {
  FlightRecorder rec;
  const int world = rec.AddCommunicator("job", 2, {0, 1, 2, 3}, "inproc");
  const int child = rec.AddCommunicator("job/split0/1", 1, {1, 3}, "inproc");
  EXPECT_EQ(world, 0);
  EXPECT_EQ(child, 1);
  EXPECT_EQ(rec.world_rank(), 2);
  EXPECT_EQ(rec.world_size(), 4);
  EXPECT_EQ(rec.world_key(), "job");
  EXPECT_EQ(rec.world_ranks(child), (std::vector<int>{1, 3}));

  const uint64_t a = rec.Issue(world, Call(CollectiveKind::kAllGather, 1, 0),
                               Pos(0, 3, 1, 0x0c));
  const uint64_t b = rec.Issue(child, Call(CollectiveKind::kAllReduce, 2, 0),
                               Pos(0, 7, 1, 0x02));
  const uint64_t c = rec.Issue(world, Call(CollectiveKind::kAllGather, 1, 1),
                               Pos(0, 4, 2, 0x0c));
  rec.Start(a);
  rec.Complete(a, true);
  rec.Start(b);
  rec.Complete(b, false);  // failed: its tag's completed count stays

  const RankState st = rec.Snapshot();
  EXPECT_EQ(st.world_rank, 2);
  EXPECT_EQ(st.world_size, 4);
  EXPECT_EQ(st.backend, "inproc");
  ASSERT_EQ(st.records.size(), 3u);
  const CollectiveRecord& ra = st.records[0];
  EXPECT_EQ(ra.index, a);
  EXPECT_EQ(ra.kind, CollectiveKind::kAllGather);
  EXPECT_EQ(ra.type, DataType::kBF16);
  EXPECT_EQ(ra.count, 16u);
  EXPECT_EQ(ra.position.node, 3);
  EXPECT_EQ(ra.position.bucket, 1);
  EXPECT_EQ(ra.position.group, 0x0c);
  EXPECT_GT(ra.issue_ns, 0);
  EXPECT_GE(ra.start_ns, ra.issue_ns);
  EXPECT_GE(ra.done_ns, ra.start_ns);
  EXPECT_FALSE(ra.failed);
  EXPECT_EQ(st.records[1].comm, child);
  EXPECT_TRUE(st.records[1].failed);
  EXPECT_EQ(st.records[2].index, c);
  EXPECT_EQ(st.records[2].done_ns, 0);
  EXPECT_EQ(st.records[2].arrival_ns(), st.records[2].issue_ns);

  ASSERT_EQ(st.comms.size(), 2u);
  ASSERT_EQ(st.comms[0].tags.size(), 1u);
  EXPECT_EQ(st.comms[0].tags[0].tag, 1u);
  EXPECT_EQ(st.comms[0].tags[0].issued, 2u);
  EXPECT_EQ(st.comms[0].tags[0].completed, 1u);
  ASSERT_EQ(st.comms[1].tags.size(), 1u);
  EXPECT_EQ(st.comms[1].tags[0].issued, 1u);
  EXPECT_EQ(st.comms[1].tags[0].completed, 0u);
  EXPECT_EQ(st.comms[1].world_ranks, (std::vector<int>{1, 3}));
}

TEST(FlightRecorderTest, TheRingKeepsTheNewestAndDropsLateUpdatesOfOverwrittenRecords) {
  FlightRecorder rec(16);
  EXPECT_EQ(rec.capacity(), 16u);
  const int w = rec.AddCommunicator("job", 0, {0, 1}, "ucx");
  const uint64_t first = rec.Issue(w, Call(CollectiveKind::kBarrier, 0, 0), {});
  for (uint64_t s = 1; s < 40; ++s) {
    rec.Issue(w, Call(CollectiveKind::kBarrier, 0, s), {});
  }
  rec.Complete(first, true);  // overwritten: dropped
  const std::vector<CollectiveRecord> all = rec.Records();
  ASSERT_EQ(all.size(), 16u);
  EXPECT_EQ(all.front().seq, 24u);
  EXPECT_EQ(all.back().seq, 39u);
  for (const CollectiveRecord& r : all) EXPECT_EQ(r.done_ns, 0);
  EXPECT_EQ(rec.Snapshot(4).records.size(), 4u);
  // Not registered: nothing recorded, and Start / Complete ignore it.
  EXPECT_EQ(rec.Issue(7, Call(CollectiveKind::kBarrier, 0, 0), {}),
            FlightRecorder::kNoRecord);
  rec.Complete(FlightRecorder::kNoRecord, true);
}

TEST(FlightRecorderTest, ConcurrentIssuersAndReadersNeverSeeATornRecord) {
  FlightRecorder rec(64);
  const int w = rec.AddCommunicator("job", 0, {0}, "inproc");
  std::atomic<bool> stop{false};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      for (uint64_t s = 0; s < 20000; ++s) {
        // Every field derives from seq, so a torn record is detectable.
        CollectiveCall c = Call(CollectiveKind::kAllReduce, t, s, s * 3);
        const uint64_t i = rec.Issue(w, c, Pos(static_cast<int64_t>(s),
                                               static_cast<int>(s % 1000), t));
        rec.Complete(i, true);
      }
    });
  }
  int checked = 0;
  std::thread reader([&] {
    while (!stop.load()) {
      for (const CollectiveRecord& r : rec.Records()) {
        ASSERT_EQ(r.count, r.seq * 3);
        ASSERT_EQ(r.position.step, static_cast<int64_t>(r.seq));
        ASSERT_EQ(r.position.node, static_cast<int>(r.seq % 1000));
        ASSERT_EQ(r.position.bucket, static_cast<int>(r.tag));
        ++checked;
      }
    }
  });
  for (auto& t : writers) t.join();
  stop = true;
  reader.join();
  EXPECT_GT(checked, 0);
  const RankState st = rec.Snapshot();
  ASSERT_EQ(st.comms[0].tags.size(), 3u);
  for (const RankState::Tag& t : st.comms[0].tags) {
    EXPECT_EQ(t.issued, 20000u);
    EXPECT_EQ(t.completed, 20000u);
  }
}

TEST(FlightRecorderTest, TextRoundTripsAndBadTextIsRefusedNamingTheLine) {
  FlightRecorder rec;
  rec.AddCommunicator("train tiny", 1, {0, 1, 2}, "ucx");  // a space in the key
  rec.AddCommunicator("train tiny/split0/0", 0, {1, 2}, "ucx");
  SchedulePosition p = Pos(5, 12, 3, 0x0c);
  p.peer = 2;
  p.check = true;
  CollectiveCall call = Call(CollectiveKind::kBroadcast, 1, 9, 4096);
  call.root = 2;
  call.op = ReduceOp::kAvg;
  const uint64_t i = rec.Issue(0, call, p);
  rec.Start(i);
  rec.MarkAborted();
  const RankState st = rec.Snapshot();
  StatusOr<RankState> back = ParseRankState(SerializeRankState(st));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->world_rank, 1);
  EXPECT_EQ(back->world_size, 3);
  EXPECT_EQ(back->backend, "ucx");
  EXPECT_EQ(back->now_ns, st.now_ns);
  EXPECT_EQ(back->aborted_ns, st.aborted_ns);
  EXPECT_GT(back->aborted_ns, 0);
  ASSERT_EQ(back->comms.size(), 2u);
  EXPECT_EQ(back->comms[0].key, "train tiny");
  EXPECT_EQ(back->comms[1].key, "train tiny/split0/0");
  EXPECT_EQ(back->comms[1].world_ranks, (std::vector<int>{1, 2}));
  ASSERT_EQ(back->comms[0].tags.size(), 1u);
  EXPECT_EQ(back->comms[0].tags[0].issued, 10u);
  ASSERT_EQ(back->records.size(), 1u);
  const CollectiveRecord& r = back->records[0];
  EXPECT_EQ(r.kind, CollectiveKind::kBroadcast);
  EXPECT_EQ(r.op, ReduceOp::kAvg);
  EXPECT_EQ(r.root, 2);
  EXPECT_EQ(r.count, 4096u);
  EXPECT_EQ(r.seq, 9u);
  EXPECT_EQ(r.position.step, 5);
  EXPECT_EQ(r.position.node, 12);
  EXPECT_EQ(r.position.bucket, 3);
  EXPECT_EQ(r.position.peer, 2);
  EXPECT_EQ(r.position.group, 0x0c);
  EXPECT_TRUE(r.position.check);
  EXPECT_EQ(r.issue_ns, st.records[0].issue_ns);
  EXPECT_EQ(r.start_ns, st.records[0].start_ns);

  const std::string good = SerializeRankState(st);
  struct Bad {
    std::string text;
    std::string why;
  };
  const std::vector<Bad> bad = {
      {"", "baton-flight 1"},
      {"hello\n", "baton-flight 1"},
      {"baton-flight 1\n", "no 'rank' line"},
      {"baton-flight 1\nrank 5 3 0 0 ucx\n", "line 2: bad 'rank'"},
      {"baton-flight 1\nrank 0 3 0 0 ucx\ncomm 0 0,7 k\n", "outside the world"},
      {"baton-flight 1\nrank 0 3 0 0 ucx\ntag 0 1 1 1\n", "line 3: unexpected"},
      {absl::StrReplaceAll(good, {{"rec ", "rec x"}}), "bad 'rec' line"},
      {absl::StrReplaceAll(good, {{" 12 3 ", " 12 3 99 "}}), "bad 'rec' line"},
      {"baton-flight 1\nrank 0 3 0 0 ucx\nwhat\n", "unexpected 'what'"},
  };
  for (const Bad& b : bad) {
    StatusOr<RankState> s = ParseRankState(b.text);
    ASSERT_FALSE(s.ok()) << b.text;
    EXPECT_TRUE(absl::StrContains(s.status().message(), b.why))
        << s.status() << " for:\n" << b.text;
  }
}

TEST(FlightRecorderTest, OneThreadReportsAndTheOthersWaitForItsVerdict) {
  FlightRecorder rec;
  std::string verdict = "unset";
  ASSERT_TRUE(rec.StartReport(absl::Seconds(1), &verdict));
  EXPECT_EQ(verdict, "unset");  // the reporter gets nothing
  std::string seen;
  bool second = true;
  std::thread waiter([&] { second = rec.StartReport(absl::Seconds(30), &seen); });
  absl::SleepFor(absl::Milliseconds(20));
  rec.FinishReport("rank 2 lags");
  waiter.join();
  EXPECT_FALSE(second);
  EXPECT_EQ(seen, "rank 2 lags");
  // A report that never finishes: waiters give up empty-handed.
  FlightRecorder stuck;
  ASSERT_TRUE(stuck.StartReport(absl::Seconds(1), &verdict));
  std::string none = "unset";
  EXPECT_FALSE(stuck.StartReport(absl::Milliseconds(10), &none));
  EXPECT_EQ(none, "");
}

TEST(FlightRecorderTest, MeshGroupBitsAreNamedInMeshOrder) {
  EXPECT_EQ(MeshGroupBitsName(0), "none");
  EXPECT_EQ(MeshGroupBitsName(0x0c), "dp_shard+hpz");
  EXPECT_EQ(MeshGroupBitsName(0x02), "dp_replicate");
  EXPECT_EQ(MeshGroupBitsName(0x21), "pp+tp");
}

}  // namespace
}  // namespace baton
