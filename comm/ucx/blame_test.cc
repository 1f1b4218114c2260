// AttributeFailure with threads as ranks over one store: whatever each rank
// saw of its neighbours, every survivor names the rank that failed.
#include "baton/comm/ucx/blame.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace baton::ucx_internal {
namespace {

class Ranks {
 public:
  explicit Ranks(int n) {
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

BlameOptions Opts(const std::string& prefix, int rank, int n) {
  BlameOptions o;
  o.prefix = prefix;
  o.rank = rank;
  o.size = n;
  o.grace = absl::Milliseconds(300);
  o.store_timeout = absl::Seconds(1);
  return o;
}

Status Own(int rank, const char* what, int peer) {
  return absl::UnavailableError(
      absl::StrCat("all_gather #1 on rank ", rank, ": ", what, " rank ", peer));
}

TEST(BlameTest, NonNeighboursReportTheDeadRankNotTheirLiveNeighbour) {
  const int n = 6;
  Ranks ranks(n);
  // Rank 2 died. Ranks 1 and 3 see the transport fail on their links to it.
  std::vector<Status> got(n);
  std::vector<std::thread> first;
  for (int r : {1, 3}) {
    first.emplace_back([&, r] {
      got[r] = AttributeFailure(ranks.store(r), Opts("a/", r, n),
                                Own(r, "transfer failed with", 2), {2, true});
    });
  }
  for (auto& t : first) t.join();
  // Then the consequences: rank 4 sees rank 3 close its connection, rank 0
  // sees rank 1's go, rank 5 only sees rank 4 go quiet.
  std::vector<std::thread> later;
  later.emplace_back([&] {
    got[4] = AttributeFailure(ranks.store(4), Opts("a/", 4, n),
                              Own(4, "endpoint error with", 3), {3, true});
  });
  later.emplace_back([&] {
    got[0] = AttributeFailure(ranks.store(0), Opts("a/", 0, n),
                              Own(0, "endpoint error with", 1), {1, true});
  });
  later.emplace_back([&] {
    got[5] = AttributeFailure(
        ranks.store(5), Opts("a/", 5, n),
        absl::DeadlineExceededError("waiting for data from rank 4"),
        {4, false});
  });
  for (auto& t : later) t.join();
  for (int r : {0, 1, 3, 4, 5}) {
    SCOPED_TRACE(absl::StrCat("rank ", r, ": ", got[r].ToString()));
    EXPECT_TRUE(absl::StartsWith(got[r].message(), "rank 2 failed (seen first by rank "));
    EXPECT_EQ(got[r].code(), absl::StatusCode::kUnavailable);
  }
  // The survivors' own view stays in the message.
  EXPECT_TRUE(absl::StrContains(got[4].message(), "on rank 4: "));
  EXPECT_TRUE(absl::StrContains(got[4].message(), "endpoint error with rank 3"));
}

TEST(BlameTest, WithOnlyTimeoutsTheChainOfWaitsEndsAtTheSilentRank) {
  const int n = 5;
  Ranks ranks(n);
  // Rank 2 stopped (no transport error anywhere): rank 3 waits on 2, rank 4
  // on 3, rank 0 on 4, and rank 1's data is not taken by 2.
  const int waits_on[n] = {4, 2, -1, 2, 3};
  std::vector<Status> got(n);
  std::vector<std::thread> threads;
  for (int r : {0, 1, 3, 4}) {
    threads.emplace_back([&, r] {
      // Ranks time out at slightly different moments.
      absl::SleepFor(absl::Milliseconds(40 * r));
      got[r] = AttributeFailure(
          ranks.store(r), Opts("b/", r, n),
          absl::DeadlineExceededError(absl::StrCat("no progress, waiting on rank ",
                                                   waits_on[r])),
          {waits_on[r], false});
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {0, 1, 3, 4}) {
    SCOPED_TRACE(absl::StrCat("rank ", r, ": ", got[r].ToString()));
    EXPECT_TRUE(absl::StartsWith(got[r].message(), "rank 2 went silent"));
    EXPECT_EQ(got[r].code(), absl::StatusCode::kDeadlineExceeded);
  }
}

TEST(BlameTest, ALiveRankThatWaitsIsFollowedBeforeItTimesOut) {
  const int n = 4;
  Ranks ranks(n);
  // Rank 1 stopped. Rank 3 waits on 1 and rank 2 on 3, both long enough to
  // post early (WaitNotice), neither timed out yet; rank 0 waits on 2 and
  // times out first: it follows 2 -> 3 -> 1 and names the stopped rank 1.
  WaitNotice three(ranks.store(3), Opts("e/", 3, n));
  three.Waiting(1);
  WaitNotice two(ranks.store(2), Opts("e/", 2, n));
  two.Waiting(3);
  Status zero = AttributeFailure(
      ranks.store(0), Opts("e/", 0, n),
      absl::DeadlineExceededError("waiting for data from rank 2"), {2, false});
  EXPECT_TRUE(absl::StartsWith(zero.message(), "rank 1 went silent")) << zero;
  EXPECT_EQ(zero.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_TRUE(absl::StrContains(zero.message(), "seen first by rank 0")) << zero;
}

TEST(BlameTest, AWaitThatEndedIsNoLongerFollowed) {
  const int n = 4;
  Ranks ranks(n);
  // Rank 2 waited long on 3, then its wait completed (withdrawn: "-"); it
  // is stopped now. Rank 0, waiting on 2, names 2, not the stale 3.
  {
    WaitNotice two(ranks.store(2), Opts("f/", 2, n));
    two.Waiting(3);
    EXPECT_EQ(*ranks.store(1)->Get("f/silent/2", absl::Seconds(1)), "3");
    two.Finish(/*failed=*/false);
  }
  EXPECT_EQ(*ranks.store(1)->Get("f/silent/2", absl::Seconds(1)), "-");
  Status zero = AttributeFailure(
      ranks.store(0), Opts("f/", 0, n),
      absl::DeadlineExceededError("waiting for data from rank 2"), {2, false});
  EXPECT_TRUE(absl::StartsWith(zero.message(), "rank 2 went silent")) << zero;
}

TEST(BlameTest, ConcurrentWaitsOfARankShareOneRecord) {
  const int n = 4;
  Ranks ranks(n);
  auto posted = [&] { return *ranks.store(0)->Get("g/silent/1", absl::Seconds(1)); };
  // Two streams of rank 1 wait at once: the record lists both peers, the
  // older wait's first, and drops each as its wait ends.
  auto a = std::make_unique<WaitNotice>(ranks.store(1), Opts("g/", 1, n));
  auto b = std::make_unique<WaitNotice>(ranks.store(1), Opts("g/", 1, n));
  b->Waiting(3);
  EXPECT_EQ(posted(), "3");
  a->Waiting(2);
  EXPECT_EQ(posted(), "2,3");
  a.reset();  // ended without a failure
  EXPECT_EQ(posted(), "3");
  b->Waiting(0);  // the wait moved on to another peer
  EXPECT_EQ(posted(), "0");
  b->Finish(/*failed=*/false);
  EXPECT_EQ(posted(), "-");
  // A wait that failed stays in the record; later waits come and go.
  WaitNotice c(ranks.store(1), Opts("g/", 1, n));
  c.Waiting(2);
  c.Finish(/*failed=*/true);
  {
    WaitNotice d(ranks.store(1), Opts("g/", 1, n));
    d.Waiting(3);
    EXPECT_EQ(posted(), "2,3");
  }
  EXPECT_EQ(posted(), "2");
}

TEST(BlameTest, ARankWaitingOnTwoPeersIsFollowedToTheSilentOne) {
  const int n = 4;
  Ranks ranks(n);
  // Rank 1 stopped. Rank 0 waits in two communicators: on 1 (a data-group
  // all-gather, posted early) and on 2 (a pipeline receive), and the
  // receive times out first. Rank 2 waits on 0's send, which 0 cannot
  // issue before its all-gather: 0 -> 2 -> 0 is a cycle, 0 -> 1 ends at
  // the stopped rank.
  WaitNotice gather(ranks.store(0), Opts("h/", 0, n));
  gather.Waiting(1);
  WaitNotice two(ranks.store(2), Opts("h/", 2, n));
  two.Waiting(0);
  Status zero = AttributeFailure(
      ranks.store(0), Opts("h/", 0, n),
      absl::DeadlineExceededError("recv from rank 2: it did not send it"),
      {2, false});
  EXPECT_TRUE(absl::StartsWith(zero.message(), "rank 1 went silent")) << zero;
  EXPECT_EQ(*ranks.store(3)->Get("h/silent/0", absl::Seconds(1)), "2,1");
  // Rank 2 times out later and reads rank 0's claim.
  Status later = AttributeFailure(
      ranks.store(2), Opts("h/", 2, n),
      absl::DeadlineExceededError("recv from rank 0: it did not send it"),
      {0, false});
  EXPECT_TRUE(absl::StartsWith(later.message(), "rank 1 went silent")) << later;
}

TEST(BlameTest, TheRankNameNamesTheFailedRankInEveryClaim) {
  const int n = 4;
  Ranks ranks(n);
  auto opts = [](int r) {
    BlameOptions o = Opts("d/", r, n);
    o.name = [](int w) { return absl::StrCat("rank ", w, " (pipeline stage ", w / 2, ")"); };
    return o;
  };
  // Rank 3 died: rank 2 saw it, rank 0 only waits on rank 2.
  Status two = AttributeFailure(ranks.store(2), opts(2),
                                Own(2, "transfer failed with", 3), {3, true});
  Status zero = AttributeFailure(ranks.store(0), opts(0),
                                 absl::DeadlineExceededError("waiting on rank 2"), {2, false});
  for (const Status& s : {two, zero}) {
    EXPECT_TRUE(absl::StartsWith(s.message(), "rank 3 (pipeline stage 1) failed (seen first by rank 2)"))
        << s;
  }
  ranks.KillStore();
  Status down = AttributeFailure(ranks.store(1), opts(1), Own(1, "endpoint error with", 0),
                                 {0, true});
  EXPECT_TRUE(absl::StartsWith(down.message(), "rank 0 (pipeline stage 0) failed or stopped"))
      << down;
}

TEST(BlameTest, UnreachableStoreNamesRankZeroAndNoSuspectChangesNothing) {
  const int n = 3;
  Ranks ranks(n);
  const Status own = absl::InvalidArgumentError("mismatched calls");
  EXPECT_EQ(AttributeFailure(ranks.store(1), Opts("c/", 1, n), own, {}), own);
  EXPECT_EQ(AttributeFailure(nullptr, Opts("c/", 1, n), own, {2, true}), own);
  ranks.KillStore();
  const absl::Time t0 = absl::Now();
  Status s = AttributeFailure(ranks.store(1), Opts("c/", 1, n),
                              Own(1, "endpoint error with", 0), {0, true});
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
  EXPECT_TRUE(absl::StartsWith(s.message(), "rank 0 failed")) << s;
}

}  // namespace
}  // namespace baton::ucx_internal
