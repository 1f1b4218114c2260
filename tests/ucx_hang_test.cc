// Hangs injected into ucx ranks that are processes (issue 38). Each ends
// within the timeout with one hang report whose verdict every failing rank
// carries, naming the right rank, collective and bucket:
//   stall    rank 2 stops issuing before step 1 node 3 (a host stall): it
//            never reports, and the others wait in that reduce-scatter;
//   diverge  three communicators in one launch: check mode's schedule hash
//            (rank 2 built its graph with bf16 parameters), a skipped
//            all-gather caught by check mode's positions, and a different
//            count caught by the ring's header check.
// The test binary is also the rank program (--child=NAME).
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/bootstrap/launcher.h"
#include "baton/comm/factory.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/step_graph.h"
#include "baton/tests/ucx_child.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

// The stall waits this long; check failures end at once. A failure must
// end (error and report) within three of them after the last issue.
const absl::Duration kTimeout = absl::Seconds(2);
constexpr size_t kCount = 64;
constexpr int kNodes = 6;

struct Fault {
  enum Kind { kNone, kStall, kSkip, kResize } kind = kNone;
  int rank = -1;
  int64_t step = 1;
  int node = 0;
  bool check = false;
};

StatusOr<std::unique_ptr<Communicator>> MakeComm(ChildEnv& env,
                                                 const std::string& group,
                                                 absl::Duration timeout) {
  CommConfig cfg;
  cfg.backend = "ucx";
  cfg.rank = env.info.rank;
  cfg.size = env.info.world_size;
  cfg.device = env.device.get();
  cfg.store = env.store.get();
  cfg.timeout = timeout;
  cfg.group = group;
  cfg.chunk_bytes = 64 << 10;
  return CreateCommunicator(cfg);
}

// Two steps of the toy schedule of comm/hang_test.cc (node k: bucket k/2,
// an all-gather on tag 1 for even k, a reduce-scatter on tag 2 for odd
// k, each tag on its own stream) with `f` applied on its rank; returns the
// first error and sets `*last_issue` to when it last issued a collective.
// `stalled` runs where the stalled rank stops.
Status RunSchedule(Communicator& comm, Device& device, const Fault& f,
                   const std::function<void()>& stalled,
                   absl::Time* last_issue) {
  const int r = comm.rank(), n = comm.size();
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Stream> a, device.CreateStream());
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<Stream> b, device.CreateStream());
  std::vector<std::vector<float>> send(2 * kNodes), recv(2 * kNodes);
  Status s;
  for (int64_t step = 0; step < 2 && s.ok(); ++step) {
    for (int k = 0; k < kNodes && s.ok(); ++k) {
      size_t count = kCount;
      if (r == f.rank && step == f.step && k == f.node) {
        if (f.kind == Fault::kStall) {
          stalled();
          return Status();
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
      std::vector<float>& out = recv[step * kNodes + k];
      in.assign(count * n, 1.0f);
      out.assign(count * n, 0.0f);
      if (k % 2 == 0) {
        o.tag = 1;
        s = comm.AllGather(in.data(), out.data(), count, DataType::kF32, *a, o);
      } else {
        o.tag = 2;
        s = comm.ReduceScatter(in.data(), out.data(), count, DataType::kF32,
                               ReduceOp::kSum, *b, o);
      }
      *last_issue = absl::Now();
    }
    if (s.ok()) s = a->Synchronize();
    Status sb = b->Synchronize();
    if (s.ok()) s = sb;
  }
  return s;
}

// 0 when `s` failed with `code` within `limit` of `t0` (its last issue, or
// the call that failed) and its message
// holds every one of `want`; else says why and returns 1.
int CheckVerdict(int rank, const Status& s, absl::StatusCode code,
                 absl::Time t0, absl::Duration limit,
                 const std::vector<std::string>& want) {
  std::fprintf(stderr, "rank %d: %s\n", rank, s.ToString().c_str());
  CHILD_CHECK(s.code() == code, "wrong code: ", s.ToString());
  for (const std::string& w : want) {
    CHILD_CHECK(absl::StrContains(s.message(), w), "lacks '", w, "'");
  }
  CHILD_CHECK(absl::Now() - t0 < limit, "took ",
              absl::FormatDuration(absl::Now() - t0));
  return 0;
}

int ChildStall() {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  auto comm = MakeComm(env, "stall", kTimeout);
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  Fault f;
  f.kind = Fault::kStall;
  f.rank = 2;
  f.node = 3;
  absl::Time t0 = absl::Now();
  s = RunSchedule(
      **comm, *env.device, f,
      [&] {
        // Stopped until the others have their verdict (or 30 s).
        (void)env.store->Get("stall/released", absl::Seconds(30));
      },
      &t0);
  if (env.info.rank == 2) {
    (*comm)->Abort();  // leave without the closing barrier
    return 0;
  }
  if (int e = CheckVerdict(
          env.info.rank, s, absl::StatusCode::kDeadlineExceeded, t0,
          3 * kTimeout,
          {"hang report: rank 2 did not report (stalled, dead, or its store "
           "connection is gone) and every rank that did is waiting in "
           "reduce_scatter #4 (tag 2) step 1 node 3 bucket 1 group "
           "dp_shard+hpz",
           "in communicator 'stall' (world ranks 0-2); ranks 0,1 issued it and "
           "wait"})) {
    return e;
  }
  if (env.info.rank == 0) {
    CHILD_CHECK(env.store->Set("stall/released", "1").ok(), "release");
  }
  return 0;
}

int ChildDiverge() {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  const int rank = env.info.rank, n = env.info.world_size;
  {
    // 1. Check mode's schedule hash: rank 2's graph has bf16 parameters.
    auto comm = MakeComm(env, "sched", absl::Seconds(20));
    CHILD_CHECK(comm.ok(), comm.status().ToString());
    scheduler::Policy p = *scheduler::PolicyPreset("baton");
    p.param_dtype = rank == 2 ? DataType::kBF16 : DataType::kF32;
    auto graph =
        scheduler::BuildStepGraph(*scheduler::ModelPreset("micro"), p, n);
    CHILD_CHECK(graph.ok(), graph.status().ToString());
    scheduler::ExecutorOptions o;
    o.check_schedule = true;
    const absl::Time t0 = absl::Now();
    s = scheduler::Executor::Create(*graph, *env.device, **comm, o).status();
    if (int e = CheckVerdict(
            env.info.rank, s, absl::StatusCode::kInvalidArgument, t0, kTimeout,
            {"schedule check: rank 2's schedule differs from rank 0's "
             "(held by ranks 0,1) at collective 0 of ",
             ": rank 0 has all_gather of bucket ", "x float",
             "rank 2 has all_gather of bucket ", "x bfloat16"})) {
      return e;
    }
  }
  {
    // 2. Rank 1 skips step 1 node 2; check mode's positions catch it.
    auto comm = MakeComm(env, "skip", kTimeout);
    CHILD_CHECK(comm.ok(), comm.status().ToString());
    Fault f;
    f.kind = Fault::kSkip;
    f.rank = 1;
    f.node = 2;
    f.check = true;
    absl::Time t0 = absl::Now();
    s = RunSchedule(**comm, *env.device, f, [] {}, &t0);
    if (int e = CheckVerdict(
            env.info.rank, s, absl::StatusCode::kInvalidArgument, t0,
            3 * kTimeout,
            {"mismatched calls: rank ",
             "hang report: rank 1 diverged from the schedule in "
             "communicator 'skip' (world ranks 0-2): where ranks 0,2 "
             "issued all_gather #4 (tag 1) step 1 node 2 bucket 1",
             "it issued all_gather #4 (tag 1) step 1 node 4 bucket 2"})) {
      return e;
    }
  }
  {
    // 3. Rank 2 gathers 80 elements where the others gather 64.
    auto comm = MakeComm(env, "count", kTimeout);
    CHILD_CHECK(comm.ok(), comm.status().ToString());
    Fault f;
    f.kind = Fault::kResize;
    f.rank = 2;
    f.step = 0;
    f.node = 4;
    absl::Time t0 = absl::Now();
    s = RunSchedule(**comm, *env.device, f, [] {}, &t0);
    if (int e = CheckVerdict(
            env.info.rank, s, absl::StatusCode::kInvalidArgument, t0,
            3 * kTimeout,
            {"hang report: rank 2 diverged from the schedule",
             "all_gather #2 (tag 1) step 0 node 4 bucket 2 group "
             "dp_shard+hpz, 64 x float, it issued all_gather #2 (tag 1) "
             "step 0 node 4 bucket 2 group dp_shard+hpz, 80 x float"})) {
      return e;
    }
  }
  s = env.store->Barrier("end", absl::Seconds(30));
  CHILD_CHECK(s.ok(), s.ToString());
  return 0;
}

int RunChild(const std::string& name) {
  if (name == "stall") return ChildStall();
  if (name == "diverge") return ChildDiverge();
  std::fprintf(stderr, "unknown child %s\n", name.c_str());
  return 2;
}

LaunchResult Launch(const std::string& child) {
  LaunchOptions o;
  o.nproc = 3;
  o.argv = {SelfPath(), "--child=" + child};
  o.timeout = absl::Seconds(60);
  o.stop_all_on_failure = false;
  auto r = LaunchLocal(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : LaunchResult{99};
}

TEST(UcxHangTest, AHostStallIsNamedWithTheCollectiveTheOthersWaitIn) {
  const LaunchResult r = Launch("stall");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

TEST(UcxHangTest, ScheduleCheckSkipAndCountMismatchFailFastNamingTheRank) {
  const LaunchResult r = Launch("diverge");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  return baton::ChildOrTestsMain(argc, argv, baton::RunChild);
}
