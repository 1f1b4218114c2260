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
