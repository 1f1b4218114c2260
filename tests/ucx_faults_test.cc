// Faults of the ucx backend with real processes (issue 16): a forged worker
// address in the store, a killed rank seen by ranks that are not its
// neighbours, and a loop of kill-one-rank trials that must never hang. The
// test binary is also the rank program (--child=NAME).
#include <signal.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/bootstrap/launch_env.h"
#include "baton/comm/bootstrap/launcher.h"
#include "baton/comm/bootstrap/sealed_value.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/factory.h"
#include "baton/runtime/device.h"
#include "baton/tests/ucx_child.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

// The backend's failure paths run with small ring chunks.
StatusOr<std::unique_ptr<Communicator>> MakeComm(ChildEnv& env,
                                                 absl::Duration timeout) {
  return MakeUcxComm(env, timeout, 64 << 10);
}

int EnvInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  int out = fallback;
  if (v != nullptr && !absl::SimpleAtoi(v, &out)) return fallback;
  return out;
}

// Rank 1 of 2 publishes garbage under its address key instead of joining;
// rank 0 must refuse it naming the key and the rank, not crash in UCX.
int ChildForgedAddress() {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  const std::string key = "default/ucx/addr/1";
  if (env.info.rank == 1) {
    const bool sealed_lie = EnvInt("FORGE_SEALED", 0) != 0;
    // Either raw bytes, or a well-formed seal naming another rank.
    s = env.store->Set(key, sealed_lie
                                ? SealValue("ucx-worker-address", 0, "\x01\x02")
                                : std::string("\x00\x13garbage address", 17));
    CHILD_CHECK(s.ok(), s.ToString());
  } else {
    const absl::Time t0 = absl::Now();
    auto comm = MakeComm(env, absl::Seconds(20));
    std::fprintf(stderr, "rank %d: %s\n", env.info.rank,
                 comm.status().ToString().c_str());
    CHILD_CHECK(!comm.ok(), "joined with a forged address");
    CHILD_CHECK(comm.status().code() == absl::StatusCode::kInvalidArgument,
                comm.status().ToString());
    CHILD_CHECK(absl::StrContains(comm.status().message(), "'" + key + "'"),
                comm.status().ToString());
    CHILD_CHECK(absl::StrContains(comm.status().message(), "rank 1"),
                comm.status().ToString());
    CHILD_CHECK(absl::Now() - t0 < absl::Seconds(20), "slow");
  }
  s = env.store->Barrier("end", absl::Seconds(30));
  CHILD_CHECK(s.ok(), s.ToString());
  return 0;
}

// VICTIM dies (SIGKILL) while the others run an all-gather that needs it.
// Every survivor must fail within 2 x timeout naming VICTIM as the rank
// that failed, before any other rank.
int ChildKillOne() {
  const absl::Duration timeout = absl::Milliseconds(EnvInt("FAULT_TIMEOUT_MS", 2000));
  const int victim = EnvInt("VICTIM", 2);
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  // Creation gets a generous timeout (4 processes start on a loaded
  // machine); the collective that loses a rank gets `timeout`.
  auto comm = MakeComm(env, absl::Seconds(20));
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  const int n = env.info.world_size;
  std::vector<float> a(1000, 1.0f), b(1000 * n);
  CHILD_CHECK((*comm)->AllGather(a.data(), b.data(), 1000, DataType::kF32,
                                 *env.stream, {}).ok(), "first");
  CHILD_CHECK(env.stream->Synchronize().ok(), "first sync");
  if (env.info.rank == victim) {
    absl::SleepFor(absl::Milliseconds(50));
    ::raise(SIGKILL);
    return 3;  // not reached
  }
  const size_t count = 1 << 16;
  std::vector<float> in(count, 1.0f), out(count * n);
  const absl::Time t0 = absl::Now();
  CollectiveOptions o;
  o.timeout = timeout;
  s = (*comm)->AllGather(in.data(), out.data(), count, DataType::kF32,
                         *env.stream, o);
  if (s.ok()) s = env.stream->Synchronize();
  const absl::Duration took = absl::Now() - t0;
  std::fprintf(stderr, "rank %d: %s after %s\n", env.info.rank,
               s.ToString().c_str(), absl::FormatDuration(took).c_str());
  CHILD_CHECK(!s.ok(), "the all-gather succeeded without rank ", victim);
  CHILD_CHECK(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s),
              s.ToString());
  const std::string named = absl::StrCat("rank ", victim, " ");
  CHILD_CHECK(absl::StartsWith(s.message(), named), "blames another rank: ",
              s.ToString());
  CHILD_CHECK(took < 2 * timeout, "took ", absl::FormatDuration(took));
  return 0;
}

int RunChild(const std::string& name) {
  if (name == "forged_address") return ChildForgedAddress();
  if (name == "kill_one") return ChildKillOne();
  std::fprintf(stderr, "unknown child %s\n", name.c_str());
  return 2;
}

// ------------------------------------------------------------------ parent

LaunchResult Launch(int n, const std::string& child,
                    std::map<std::string, std::string> env,
                    absl::Duration limit = absl::Seconds(60)) {
  LaunchOptions o;
  o.nproc = n;
  o.argv = {SelfPath(), "--child=" + child};
  o.timeout = limit;
  o.stop_all_on_failure = false;
  o.extra_env = std::move(env);
  auto r = LaunchLocal(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : LaunchResult{99};
}

TEST(UcxFaultsTest, ForgedAddressIsAnErrorNamingTheKeyAndRank) {
  for (const char* sealed : {"0", "1"}) {
    const LaunchResult r = Launch(2, "forged_address", {{"FORGE_SEALED", sealed}});
    EXPECT_EQ(r.exit_code, 0) << "FORGE_SEALED=" << sealed << "\n" << r.summary;
  }
}

TEST(UcxFaultsTest, NonNeighboursOfAKilledRankNameItNotALiveRank) {
  // Rank 2 of 6: ranks 0, 4 and 5 are not its neighbours.
  const LaunchResult r = Launch(6, "kill_one", {{"VICTIM", "2"}});
  ASSERT_EQ(r.exit_codes.size(), 6u);
  for (int q = 0; q < 6; ++q) {
    EXPECT_EQ(r.exit_codes[q], q == 2 ? 128 + SIGKILL : 0) << r.summary;
  }
}

// The fault soak: 20 kill-one-rank trials over 4 processes (every rank in
// turn is the victim, rank 0 and its store included), each bounded by the
// launcher's time limit; a hang fails the trial with exit code 124.
TEST(UcxFaultsTest, TwentyKillOneRankTrialsWithoutAHang) {
  const absl::Time t0 = absl::Now();
  int failed = 0;
  for (int trial = 0; trial < 20; ++trial) {
    const int victim = trial % 4;
    const LaunchResult r =
        Launch(4, "kill_one",
               {{"VICTIM", absl::StrCat(victim)}, {"FAULT_TIMEOUT_MS", "1000"}},
               absl::Seconds(20));
    ASSERT_EQ(r.exit_codes.size(), 4u);
    for (int q = 0; q < 4; ++q) {
      const int want = q == victim ? 128 + SIGKILL : 0;
      if (r.exit_codes[q] != want) {
        ++failed;
        ADD_FAILURE() << "trial " << trial << " victim " << victim << ": rank "
                      << q << " exit " << r.exit_codes[q] << "\n" << r.summary;
      }
    }
  }
  std::printf("kill soak: 20 trials in %s, %d unexpected exits\n",
              absl::FormatDuration(absl::Now() - t0).c_str(), failed);
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  return baton::ChildOrTestsMain(argc, argv, baton::RunChild);
}
