// Point-to-point on the ucx backend with real processes (issue 32): a ring
// exchange and an all-to-all in one group (non-neighbours need endpoints
// made on demand), ordered ungrouped sends, a size mismatch that fails both
// sides naming both sizes, and a killed peer named within the timeout. The
// test binary is also the rank program (--child=NAME).
#include <signal.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/bootstrap/launcher.h"
#include "baton/comm/communicator.h"
#include "baton/tests/ucx_child.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

int32_t Value(int from, int to, size_t i) {
  return static_cast<int32_t>(from * 1000003 + to * 1009 + i);
}

// Ring exchange at several sizes, then every rank sends to and receives from
// every other rank in one group, then ordered ungrouped sends 0 <-> 2.
int ChildExchange() {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  auto comm = MakeUcxComm(env, absl::Seconds(20), 64 << 10);
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  Communicator& c = **comm;
  const int r = env.info.rank, n = env.info.world_size;
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  for (size_t count : {size_t{0}, size_t{7}, size_t{300000}}) {
    std::vector<int32_t> out(count), in(count, -1);
    for (size_t i = 0; i < count; ++i) out[i] = Value(r, next, i);
    const P2POp ops[] = {P2POp::Send(out.data(), count, DataType::kI32, next),
                         P2POp::Recv(in.data(), count, DataType::kI32, prev)};
    s = c.SendRecvGroup(ops, *env.stream, {});
    if (s.ok()) s = env.stream->Synchronize();
    CHILD_CHECK(s.ok(), "ring of ", count, ": ", s.ToString());
    for (size_t i = 0; i < count; ++i) {
      CHILD_CHECK(in[i] == Value(prev, r, i), "ring of ", count, " index ", i);
    }
  }
  // All-to-all in one group.
  const size_t count = 5000;
  std::vector<std::vector<int32_t>> out(n), in(n);
  std::vector<P2POp> ops;
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    out[q].resize(count);
    in[q].assign(count, -1);
    for (size_t i = 0; i < count; ++i) out[q][i] = Value(r, q, i);
    ops.push_back(P2POp::Send(out[q].data(), count, DataType::kI32, q));
    ops.push_back(P2POp::Recv(in[q].data(), count, DataType::kI32, q));
  }
  CollectiveOptions o;
  o.tag = 7;
  s = c.SendRecvGroup(ops, *env.stream, o);
  if (s.ok()) s = env.stream->Synchronize();
  CHILD_CHECK(s.ok(), "all-to-all: ", s.ToString());
  for (int q = 0; q < n; ++q) {
    if (q == r) continue;
    CHILD_CHECK(in[q][count - 1] == Value(q, r, count - 1), "from ", q);
    CHILD_CHECK(in[q][0] == Value(q, r, 0), "from ", q);
  }
  // Ordered, ungrouped: rank 0 sends twice then receives; rank 2 the
  // mirror. Ranks 0 and 2 of 4 are not ring neighbours.
  if (r == 0 || r == 2) {
    const int peer = 2 - r;
    std::vector<int32_t> a(64, r + 1), b(64, r + 2), x(64), y(64);
    if (r == 0) {
      s = c.Send(a.data(), 64, DataType::kI32, peer, *env.stream, {});
      if (s.ok()) s = c.Send(b.data(), 64, DataType::kI32, peer, *env.stream, {});
      if (s.ok()) s = c.Recv(x.data(), 64, DataType::kI32, peer, *env.stream, {});
    } else {
      s = c.Recv(x.data(), 64, DataType::kI32, peer, *env.stream, {});
      if (s.ok()) s = c.Recv(y.data(), 64, DataType::kI32, peer, *env.stream, {});
      if (s.ok()) s = c.Send(a.data(), 64, DataType::kI32, peer, *env.stream, {});
    }
    if (s.ok()) s = env.stream->Synchronize();
    CHILD_CHECK(s.ok(), "ordered: ", s.ToString());
    CHILD_CHECK(x[3] == peer + 1, "first message");
    if (r == 2) CHILD_CHECK(y[3] == peer + 2, "second message");
  }
  comm->reset();
  s = env.store->Barrier("end", absl::Seconds(30));
  CHILD_CHECK(s.ok(), s.ToString());
  return 0;
}

// Rank 0 sends 256 bytes, rank 1 receives 128: both fail with
// InvalidArgument naming both sizes, well within the timeout.
int ChildMismatch() {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  auto comm = MakeUcxComm(env, absl::Seconds(20), 64 << 10);
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  std::vector<float> buf(64);
  CollectiveOptions o;
  o.timeout = absl::Seconds(5);
  const absl::Time t0 = absl::Now();
  s = env.info.rank == 0
          ? (*comm)->Send(buf.data(), 64, DataType::kF32, 1, *env.stream, o)
          : (*comm)->Recv(buf.data(), 32, DataType::kF32, 0, *env.stream, o);
  if (s.ok()) s = env.stream->Synchronize();
  const absl::Duration took = absl::Now() - t0;
  std::fprintf(stderr, "rank %d: %s after %s\n", env.info.rank,
               s.ToString().c_str(), absl::FormatDuration(took).c_str());
  CHILD_CHECK(absl::IsInvalidArgument(s), s.ToString());
  CHILD_CHECK(absl::StrContains(s.message(), "256 bytes"), s.ToString());
  CHILD_CHECK(absl::StrContains(s.message(), "128 bytes"), s.ToString());
  CHILD_CHECK(took < o.timeout, "took ", absl::FormatDuration(took));
  s = env.store->Barrier("end", absl::Seconds(30));
  CHILD_CHECK(s.ok(), s.ToString());
  return 0;
}

// Rank 1 dies; rank 0's receive from it fails within twice the timeout,
// naming rank 1.
int ChildDeadPeer() {
  ChildEnv env;
  Status s = SetUpChild(&env);
  CHILD_CHECK(s.ok(), s.ToString());
  auto comm = MakeUcxComm(env, absl::Seconds(20), 64 << 10);
  CHILD_CHECK(comm.ok(), comm.status().ToString());
  std::vector<float> buf(1024);
  // One good exchange first, so the endpoints exist.
  const int peer = 1 - env.info.rank;
  const P2POp ops[] = {P2POp::Send(buf.data(), 16, DataType::kF32, peer),
                       P2POp::Recv(buf.data() + 16, 16, DataType::kF32, peer)};
  s = (*comm)->SendRecvGroup(ops, *env.stream, {});
  if (s.ok()) s = env.stream->Synchronize();
  CHILD_CHECK(s.ok(), s.ToString());
  if (env.info.rank == 1) {
    absl::SleepFor(absl::Milliseconds(50));
    ::raise(SIGKILL);
    return 3;  // not reached
  }
  CollectiveOptions o;
  o.timeout = absl::Seconds(2);
  const absl::Time t0 = absl::Now();
  s = (*comm)->Recv(buf.data(), 1024, DataType::kF32, 1, *env.stream, o);
  if (s.ok()) s = env.stream->Synchronize();
  const absl::Duration took = absl::Now() - t0;
  std::fprintf(stderr, "rank 0: %s after %s\n", s.ToString().c_str(),
               absl::FormatDuration(took).c_str());
  CHILD_CHECK(absl::IsUnavailable(s) || absl::IsDeadlineExceeded(s),
              s.ToString());
  CHILD_CHECK(absl::StartsWith(s.message(), "rank 1 "), s.ToString());
  CHILD_CHECK(absl::StrContains(s.message(), "recv #"), s.ToString());
  CHILD_CHECK(took < 2 * o.timeout, "took ", absl::FormatDuration(took));
  return 0;
}

int RunChild(const std::string& name) {
  if (name == "exchange") return ChildExchange();
  if (name == "mismatch") return ChildMismatch();
  if (name == "dead_peer") return ChildDeadPeer();
  std::fprintf(stderr, "unknown child %s\n", name.c_str());
  return 2;
}

LaunchResult Launch(int n, const std::string& child) {
  LaunchOptions o;
  o.nproc = n;
  o.argv = {SelfPath(), "--child=" + child};
  o.timeout = absl::Seconds(60);
  o.stop_all_on_failure = false;
  auto r = LaunchLocal(o);
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : LaunchResult{99};
}

TEST(UcxP2PTest, RingAllToAllAndOrderedExchangesAreExact) {
  const LaunchResult r = Launch(4, "exchange");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

TEST(UcxP2PTest, SizeMismatchFailsBothSidesNamingBothSizes) {
  const LaunchResult r = Launch(2, "mismatch");
  EXPECT_EQ(r.exit_code, 0) << r.summary;
}

TEST(UcxP2PTest, DeadPeerIsNamedWithinTheTimeout) {
  const LaunchResult r = Launch(2, "dead_peer");
  ASSERT_EQ(r.exit_codes.size(), 2u) << r.summary;
  EXPECT_EQ(r.exit_codes[0], 0) << r.summary;
  EXPECT_EQ(r.exit_codes[1], 128 + SIGKILL) << r.summary;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  return baton::ChildOrTestsMain(argc, argv, &baton::RunChild);
}
