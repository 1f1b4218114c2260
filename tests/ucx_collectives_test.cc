// The ucx backend with real processes on loopback, started through the
// launcher. The test binary is also the rank program: with --child=NAME it
// runs that scenario as one rank (RANK/WORLD_SIZE/MASTER_* from the
// launcher) and exits 0 when the rank saw what it should.
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/testing/collective_check.h"
#include "baton/comm/testing/split_check.h"
#include "baton/comm/factory.h"
#include "baton/comm/bootstrap/launch_env.h"
#include "baton/comm/bootstrap/launcher.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/tests/ucx_child.h"
#include "gtest/gtest.h"
#include "baton/runtime/device.h"

namespace baton {
namespace {

constexpr absl::Duration kFaultTimeout = absl::Seconds(2);

// ---------------------------------------------------------------- children


int ChildSweep(bool big) {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  // Small chunks so that large counts run many pipelined chunks per step.
  auto comm = MakeUcxComm(env, absl::Seconds(60), 64 << 10);
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  const int n = env.info.world_size;
  const int r = env.info.rank;
  std::vector<size_t> counts = {0, 1, 7, 1000};
  counts.push_back(big ? (size_t{1} << 20) + 3 : 65539);
  int seed = 0;
  for (CollectiveKind kind :
       {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
        CollectiveKind::kAllReduce, CollectiveKind::kBroadcast}) {
    const bool reduces = kind == CollectiveKind::kReduceScatter ||
                         kind == CollectiveKind::kAllReduce;
    for (size_t count : counts) {
      for (DataType type : {DataType::kF32, DataType::kBF16, DataType::kF16,
                            DataType::kI32}) {
        for (bool in_place : {false, true}) {
          for (int variant = 0; variant < 4; ++variant) {
            // 0: sum; 1: avg; 2: fp32 accumulation (16-bit reductions);
            // 3: max.
            if (variant > 0 && (!reduces || count != 1000)) continue;
            if (variant == 2 && DataTypeSize(type) != 2) continue;
            CheckCase c;
            c.kind = kind;
            c.type = type;
            c.op = variant == 1   ? ReduceOp::kAvg
                   : variant == 3 ? ReduceOp::kMax
                                  : ReduceOp::kSum;
            c.nranks = n;
            c.count = count;
            c.root = (seed + 1) % n;
            c.seed = seed++;
            CollectiveOptions o;
            o.accumulate_fp32 = variant == 2;
            auto wrong = RunChecked(**comm, *env.device, *env.stream, c, in_place, o);
            CHILD_CHECK(wrong.ok(), wrong.status().ToString());
            CHILD_CHECK(*wrong == 0, *wrong, " wrong in ",
                        CollectiveName(kind), " count=", count, " ",
                        DataTypeName(type), " in_place=", in_place,
                        " variant=", variant, " rank=", r);
          }
        }
      }
    }
  }
  // A barrier, then the limit probe (every rank gets the same figure).
  CHILD_CHECK((*comm)->Barrier(*env.stream, {}).ok(), "barrier");
  CHILD_CHECK(env.stream->Synchronize().ok(), "barrier sync");
  if (n > 1) {
    auto limit = (*comm)->MeasureLimit(1 << 20, 2);
    CHILD_CHECK(limit.ok(), limit.status().ToString());
    CHILD_CHECK(limit->gbps > 0 && limit->medium == "ucx-tag", limit->gbps);
  }
  comm->reset();
  s = env.store->Barrier("end", absl::Seconds(30));
  CHILD_CHECK(s.ok(), s.ToString());
  return 0;
}

// Every surviving rank must fail with one of `codes` within 2 x timeout.
int ExpectFailure(ChildEnv& env, Communicator& comm, size_t count_mine,
                  std::initializer_list<absl::StatusCode> codes,
                  const char* must_mention) {
  const int n = env.info.world_size;
  std::vector<float> in(count_mine, 1.0f), out(count_mine * n);
  const absl::Time t0 = absl::Now();
  Status s = comm.AllGather(in.data(), out.data(), count_mine, DataType::kF32,
                            *env.stream, {});
  if (s.ok()) s = env.stream->Synchronize();
  const absl::Duration took = absl::Now() - t0;
  std::fprintf(stderr, "rank %d: %s after %s\n", env.info.rank,
               s.ToString().c_str(), absl::FormatDuration(took).c_str());
  bool code_ok = false;
  for (absl::StatusCode c : codes) code_ok |= s.code() == c;
  CHILD_CHECK(code_ok, "unexpected status ", s.ToString());
  CHILD_CHECK(absl::StrContains(s.message(), must_mention), "message lacks '",
              must_mention, "': ", s.ToString());
  CHILD_CHECK(took < 2 * kFaultTimeout, "took ", absl::FormatDuration(took));
  CHILD_CHECK(!comm.health().ok(), "health still ok");
  return 0;
}

int ChildMismatch() {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  auto comm = MakeUcxComm(env, kFaultTimeout, 64 << 10);
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  // Rank 2 disagrees on the count; every rank hears of it via the ring.
  const size_t count = env.info.rank == 2 ? 100001 : 100000;
  int rc = ExpectFailure(env, **comm, count,
                         {absl::StatusCode::kInvalidArgument}, "rank 2");
  comm->reset();
  s = env.store->Barrier("end", absl::Seconds(30));
  CHILD_CHECK(s.ok(), s.ToString());
  return rc;
}

int ChildKilled() {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  auto comm = MakeUcxComm(env, kFaultTimeout, 64 << 10);
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  // Everyone finishes one collective, so rank 1 dies mid-run, not at start.
  std::vector<float> a(1000), b(3000);
  CHILD_CHECK((*comm)->AllGather(a.data(), b.data(), 1000, DataType::kF32,
                                 *env.stream, {}).ok(), "first");
  CHILD_CHECK(env.stream->Synchronize().ok(), "first sync");
  if (env.info.rank == 1) {
    std::thread([] {
      absl::SleepFor(absl::Milliseconds(20));
      ::raise(SIGKILL);
    }).detach();
    // A large collective that is in flight when the process dies.
    std::vector<float> in(8 << 20), out(3 * (8 << 20));
    (void)(*comm)->AllGather(in.data(), out.data(), in.size(), DataType::kF32,
                             *env.stream, {});
    (void)env.stream->Synchronize();
    absl::SleepFor(absl::Seconds(10));
    return 3;  // not reached
  }
  return ExpectFailure(env, **comm, 8 << 20,
                       {absl::StatusCode::kDeadlineExceeded,
                        absl::StatusCode::kUnavailable},
                       "rank");
}

int ChildNeverStarts() {
  LaunchInfo info = *LaunchInfoFromEnv();
  if (info.rank == 2) return 0;  // this rank never shows up
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  const absl::Time t0 = absl::Now();
  auto comm = MakeUcxComm(env, kFaultTimeout, 64 << 10);
  const absl::Duration took = absl::Now() - t0;
  std::fprintf(stderr, "rank %d: %s after %s\n", info.rank,
               comm.status().ToString().c_str(),
               absl::FormatDuration(took).c_str());
  CHILD_CHECK(!comm.ok(), "created a communicator without rank 2");
  CHILD_CHECK(comm.status().code() == absl::StatusCode::kDeadlineExceeded,
              comm.status().ToString());
  CHILD_CHECK(took < 2 * kFaultTimeout, absl::FormatDuration(took));
  return 0;
}

int ChildNeverIssues() {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  auto comm = MakeUcxComm(env, kFaultTimeout, 64 << 10);
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  int rc = 0;
  if (env.info.rank != 1) {
    rc = ExpectFailure(env, **comm, 1000,
                       {absl::StatusCode::kDeadlineExceeded}, "rank");
  } else {
    absl::SleepFor(3 * kFaultTimeout);
  }
  comm->reset();
  s = env.store->Barrier("end", absl::Seconds(30));
  CHILD_CHECK(s.ok(), s.ToString());
  return rc;
}

// Sub-communicators: 8 ranks as `groups` x (8 / groups)
// (comm/testing/split_check.h).
int ChildSplit(int groups) {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  auto comm = MakeUcxComm(env, absl::Seconds(60), 64 << 10);
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  s = RunSplitScenario(**comm, *env.device, groups);
  CHILD_CHECK(s.ok(), s.ToString());
  comm->reset();
  s = env.store->Barrier("end", absl::Seconds(30));
  CHILD_CHECK(s.ok(), s.ToString());
  return 0;
}

int RunChild(const std::string& name) {
  if (name == "split_2x4") return ChildSplit(2);
  if (name == "split_4x2") return ChildSplit(4);
  if (name == "sweep") return ChildSweep(true);
  if (name == "sweep_small") return ChildSweep(false);
  if (name == "mismatch") return ChildMismatch();
  if (name == "killed") return ChildKilled();
  if (name == "never_starts") return ChildNeverStarts();
  if (name == "never_issues") return ChildNeverIssues();
  std::fprintf(stderr, "unknown child %s\n", name.c_str());
  return 2;
}

// ------------------------------------------------------------------ parent

LaunchResult Launch(int n, const std::string& child, bool stop_all = true) {
  LaunchOptions o;
  o.nproc = n;
  o.argv = {SelfPath(), "--child=" + child};
  o.timeout = absl::Seconds(240);
  o.stop_all_on_failure = stop_all;
  auto r = LaunchLocal(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : LaunchResult{99};
}

class UcxSweepTest : public ::testing::TestWithParam<int> {};

TEST_P(UcxSweepTest, EveryCollectiveCountTypeAndPlacementIsExact) {
  const int n = GetParam();
  // 8 processes on a 2-core machine: the 2^20+3 count is swept up to 4
  // ranks; 8 ranks use 65539 (still many chunks per step).
  const LaunchResult r = Launch(n, n <= 4 ? "sweep" : "sweep_small");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, UcxSweepTest,
                         ::testing::Values(1, 2, 3, 4, 8));

TEST(UcxSplitTest, EightRanksAsTwoGroupsOfFour) {
  const LaunchResult r = Launch(8, "split_2x4");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

TEST(UcxSplitTest, EightRanksAsFourGroupsOfTwo) {
  const LaunchResult r = Launch(8, "split_4x2");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

TEST(UcxFaultTest, MismatchedCountsGiveInvalidArgumentOnEveryRank) {
  const LaunchResult r = Launch(4, "mismatch");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

TEST(UcxFaultTest, KilledRankMakesTheOthersFailWithinTwiceTheTimeout) {
  const LaunchResult r = Launch(3, "killed", /*stop_all=*/false);
  ASSERT_EQ(r.exit_codes.size(), 3u);
  EXPECT_EQ(r.exit_codes[0], 0) << r.summary;
  EXPECT_EQ(r.exit_codes[1], 128 + SIGKILL) << r.summary;
  EXPECT_EQ(r.exit_codes[2], 0) << r.summary;
}

TEST(UcxFaultTest, RankThatNeverStartsFailsCreationWithinBound) {
  const LaunchResult r = Launch(3, "never_starts", /*stop_all=*/false);
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

TEST(UcxFaultTest, RankThatNeverIssuesGivesDeadlineExceeded) {
  const LaunchResult r = Launch(3, "never_issues");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

TEST(LauncherTest, FailsAsAWholeWhenOneRankFails) {
  LaunchOptions o;
  o.nproc = 3;
  o.argv = {"/bin/sh", "-c",
            "if [ \"$RANK\" = 1 ]; then exit 7; fi; sleep 30"};
  o.grace = absl::Seconds(1);
  const absl::Time t0 = absl::Now();
  auto r = LaunchLocal(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 7);
  EXPECT_EQ(r->first_failed_rank, 1);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(10));
}

TEST(LauncherTest, SetsTheLaunchEnvironment) {
  LaunchOptions o;
  o.nproc = 2;
  o.argv = {"/bin/sh", "-c",
            "[ \"$WORLD_SIZE\" = 2 ] && [ -n \"$MASTER_PORT\" ] && "
            "[ \"$RANK\" = \"$LOCAL_RANK\" ] && "
            // The store has its own port (not torchrun's) and a token.
            "[ -n \"$BATON_STORE_PORT\" ] && "
            "[ \"$BATON_STORE_PORT\" != \"$MASTER_PORT\" ] && "
            "[ ${#BATON_STORE_TOKEN} = 32 ]"};
  auto r = LaunchLocal(o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->summary;
  o.nproc = 0;
  EXPECT_FALSE(LaunchLocal(o).ok());
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  return baton::ChildOrTestsMain(argc, argv, baton::RunChild);
}
