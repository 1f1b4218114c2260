// The in-process backend through the public factory: the full sweep of
// collectives x world sizes x counts x types x in/out of place, and its
// failure modes. Ranks are threads.
#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "baton/comm/testing/collective_check.h"
#include "baton/comm/factory.h"
#include "gtest/gtest.h"
#include "baton/runtime/device.h"

namespace baton {
namespace {

struct Rank {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Stream> stream;
};

// Creates n inproc ranks (each with its own stream) and runs body(rank) on
// n threads at once.
class Group {
 public:
  Group(int n, absl::Duration timeout = absl::Seconds(30),
        bool event_protocol = false, std::unique_ptr<Device> device = nullptr)
      : n_(n) {
    device_ = device != nullptr ? std::move(device) : *CreateHostDevice();
    ranks_.resize(n);
    CommConfig cfg;
    cfg.device = device_.get();
    cfg.group = "";  // a fresh name
    cfg.timeout = timeout;
    cfg.inproc_event_protocol = event_protocol;
    auto comms = CreateInprocGroup(n, cfg);
    EXPECT_TRUE(comms.ok()) << comms.status();
    for (int r = 0; r < n && comms.ok(); ++r) {
      ranks_[r].comm = std::move((*comms)[r]);
      ranks_[r].stream = *device_->CreateStream();
    }
  }
  ~Group() {
    for (Rank& r : ranks_) {
      if (r.stream) (void)r.stream->Synchronize();
    }
  }

  void RunAll(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < n_; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }

  Rank& rank(int r) { return ranks_[r]; }
  Device& device() { return *device_; }

 private:
  int n_;
  std::unique_ptr<Device> device_;
  std::vector<Rank> ranks_;
};

using SweepParam = std::tuple<CollectiveKind, int>;

class InprocSweepTest : public ::testing::TestWithParam<SweepParam> {};

TEST_P(InprocSweepTest, EveryCountTypeAndPlacementIsExact) {
  const auto [kind, n] = GetParam();
  Group g(n);
  const size_t counts[] = {0, 1, 7, 1000, (size_t{1} << 20) + 3};
  const DataType types[] = {DataType::kF32, DataType::kBF16, DataType::kF16,
                            DataType::kI32};
  g.RunAll([&](int r) {
    int seed = 0;
    for (size_t count : counts) {
      for (DataType type : types) {
        for (bool in_place : {false, true}) {
          for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
            const bool reduces = kind == CollectiveKind::kReduceScatter ||
                                 kind == CollectiveKind::kAllReduce;
            if (!reduces && op != ReduceOp::kSum) continue;
            // avg and max only at one mid-size count, to keep the sweep short.
            if (op != ReduceOp::kSum && count != 1000) continue;
            for (bool acc : {false, true}) {
              if (acc && (!reduces || DataTypeSize(type) != 2)) continue;
              CheckCase c;
              c.kind = kind;
              c.type = type;
              c.op = op;
              c.nranks = n;
              c.count = count;
              c.root = n - 1;
              c.seed = seed++;
              CollectiveOptions o;
              o.accumulate_fp32 = acc;
              auto wrong = RunChecked(*g.rank(r).comm, g.device(),
                                      *g.rank(r).stream, c, in_place, o);
              ASSERT_TRUE(wrong.ok()) << wrong.status();
              ASSERT_EQ(*wrong, 0u)
                  << CollectiveName(kind) << " n=" << n << " count=" << count
                  << " " << DataTypeName(type) << " in_place=" << in_place
                  << " op=" << ReduceOpName(op) << " acc=" << acc
                  << " rank=" << r;
            }
          }
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    All, InprocSweepTest,
    ::testing::Combine(::testing::Values(CollectiveKind::kAllGather,
                                         CollectiveKind::kReduceScatter,
                                         CollectiveKind::kAllReduce,
                                         CollectiveKind::kBroadcast),
                       ::testing::Values(1, 2, 3, 4, 8)),
    [](const ::testing::TestParamInfo<SweepParam>& info) {
      return absl::StrCat(CollectiveName(std::get<0>(info.param)), "_n",
                          std::get<1>(info.param));
    });

// The device-memory protocol (rendezvous at issue, events, copies on the
// ranks' streams), run on host streams, and on a GPU when there is one.
void EventProtocolSweep(Group& g, int n) {
  g.RunAll([&](int r) {
    int seed = 0;
    for (CollectiveKind kind :
         {CollectiveKind::kAllGather, CollectiveKind::kReduceScatter,
          CollectiveKind::kAllReduce, CollectiveKind::kBroadcast}) {
      for (size_t count : {size_t{0}, size_t{7}, size_t{1000}, size_t{65539}}) {
        for (DataType type : {DataType::kF32, DataType::kBF16, DataType::kF16,
                              DataType::kI32}) {
          for (bool in_place : {false, true}) {
            for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
              const bool reduces = kind == CollectiveKind::kReduceScatter ||
                                   kind == CollectiveKind::kAllReduce;
              if (op != ReduceOp::kSum && (!reduces || count != 1000)) continue;
              CheckCase c{kind, type, op, n, count, (seed + 1) % n, seed};
              ++seed;
              auto wrong = RunChecked(*g.rank(r).comm, g.device(),
                                      *g.rank(r).stream, c, in_place);
              ASSERT_TRUE(wrong.ok()) << wrong.status();
              ASSERT_EQ(*wrong, 0u)
                  << CollectiveName(kind) << " n=" << n << " count=" << count
                  << " " << DataTypeName(type) << " in_place=" << in_place
                  << " rank=" << r;
            }
          }
        }
      }
    }
  });
}

TEST(InprocEventProtocolTest, HostStreamsSweep) {
  for (int n : {1, 2, 3, 4}) {
    Group g(n, absl::Seconds(30), /*event_protocol=*/true);
    EventProtocolSweep(g, n);
  }
}

TEST(InprocEventProtocolTest, GpuSweep) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  for (int n : {1, 2, 3, 4, 8}) {
    auto device = CreateCudaDevice(0);
    ASSERT_TRUE(device.ok()) << device.status();
    Group g(n, absl::Seconds(30), false, std::move(*device));
    EventProtocolSweep(g, n);
  }
}

// The last rank to issue finds the mismatch (its call fails); every rank's
// stream reports it, and the group stays failed.
TEST(InprocEventProtocolTest, MismatchFailsEveryRanksStream) {
  Group g(3, absl::Seconds(30), /*event_protocol=*/true);
  std::atomic<int> calls_failed{0};
  g.RunAll([&](int r) {
    std::vector<float> in(64), out(64);
    Status s = g.rank(r).comm->AllReduce(in.data(), out.data(),
                                         r == 1 ? 32 : 64, DataType::kF32,
                                         ReduceOp::kSum, *g.rank(r).stream, {});
    if (!s.ok()) {
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
      ++calls_failed;
    }
    Status sync = g.rank(r).stream->Synchronize();
    EXPECT_EQ(sync.code(), absl::StatusCode::kInvalidArgument) << sync;
    EXPECT_NE(sync.message().find("count"), std::string::npos) << sync;
    EXPECT_FALSE(g.rank(r).comm->health().ok());
  });
  EXPECT_GE(calls_failed.load(), 1);
}

// The issuing thread never waits for the peers: rank 0 issues 20
// collectives and synchronizes nothing before rank 1 has issued any. (With a
// meeting at issue time rank 0 would block in its first call and rank 1
// would give up waiting for it.)
TEST(InprocEventProtocolTest, IssuingNeverWaitsForThePeers) {
  Group g(2, absl::Seconds(30), /*event_protocol=*/true);
  absl::Notification rank0_issued;
  constexpr int kCalls = 20;
  std::vector<std::vector<float>> in(2, std::vector<float>(kCalls * 8));
  std::vector<std::vector<float>> out(2, std::vector<float>(kCalls * 8));
  g.RunAll([&](int r) {
    for (int i = 0; i < kCalls * 8; ++i) in[r][i] = static_cast<float>(i + r);
    if (r == 1) {
      EXPECT_TRUE(rank0_issued.WaitForNotificationWithTimeout(
          absl::Seconds(20)));
    }
    for (int c = 0; c < kCalls; ++c) {
      ASSERT_TRUE(g.rank(r).comm->AllReduce(
                      in[r].data() + 8 * c, out[r].data() + 8 * c, 8,
                      DataType::kF32, ReduceOp::kSum, *g.rank(r).stream, {})
                      .ok());
    }
    if (r == 0) rank0_issued.Notify();
    ASSERT_TRUE(g.rank(r).stream->Synchronize().ok());
    for (int i = 0; i < kCalls * 8; ++i) {
      ASSERT_EQ(out[r][i], static_cast<float>(2 * i + 1)) << i;
    }
  });
}

// Many collectives in flight at once, in two rounds. Round 1: rank 0
// issues all of them before the others start, so more than one allocation
// of signal words is in use. Round 2 reuses the words, every rank issuing in
// its own time order (rank r sleeps before some calls).
TEST(InprocEventProtocolTest, ManyCollectivesInFlightInAnyTimeOrder) {
  constexpr int kN = 3;
  constexpr int kCalls = 1500;  // > kWordsPerChunk (inproc.cc)
  Group g(kN, absl::Seconds(30), /*event_protocol=*/true);
  absl::Notification rank0_issued;
  g.RunAll([&](int r) {
    std::vector<int32_t> in(kCalls), out(kCalls);
    for (int round = 0; round < 2; ++round) {
      for (int c = 0; c < kCalls; ++c) in[c] = c * 10 + r + round;
      std::fill(out.begin(), out.end(), -1);
      if (round == 0 && r != 0) {
        EXPECT_TRUE(rank0_issued.WaitForNotificationWithTimeout(
            absl::Seconds(20)));
      }
      for (int c = 0; c < kCalls; ++c) {
        if (round == 1 && (c + r) % 3 == 0 && c % 100 == 0) {
          absl::SleepFor(absl::Milliseconds(2));
        }
        ASSERT_TRUE(g.rank(r).comm->AllReduce(&in[c], &out[c], 1,
                                              DataType::kI32, ReduceOp::kSum,
                                              *g.rank(r).stream, {}).ok());
      }
      if (round == 0 && r == 0) rank0_issued.Notify();
      ASSERT_TRUE(g.rank(r).stream->Synchronize().ok());
      for (int c = 0; c < kCalls; ++c) {
        ASSERT_EQ(out[c], c * 30 + 0 + 1 + 2 + 3 * round) << c;
      }
    }
  });
}

// Rank 1 never issues its all-gather: ranks 0 and 2 fail with
// DeadlineExceeded naming rank 1 and the collective, within twice the
// timeout; the communicator is then broken (communicator.h), so a later
// collective fails at once with the same error.
void ExpectRankThatNeverIssuesTimesOut(bool event_protocol) {
  const absl::Duration timeout = absl::Seconds(1);
  Group g(3, timeout, event_protocol);
  g.RunAll([&](int r) {
    if (r == 1) return;  // never issues
    std::vector<float> in(16), out(48);
    const absl::Time t0 = absl::Now();
    ASSERT_TRUE(g.rank(r).comm->AllGather(in.data(), out.data(), 16,
                                          DataType::kF32, *g.rank(r).stream,
                                          {}).ok());
    Status s = g.rank(r).stream->Synchronize();
    const absl::Duration took = absl::Now() - t0;
    EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
    EXPECT_NE(s.message().find("rank(s) 1"), std::string::npos) << s;
    EXPECT_NE(s.message().find("all_gather #0"), std::string::npos) << s;
    EXPECT_LT(took, 2 * timeout);
    // Later calls fail at once with the same error.
    const absl::Time t1 = absl::Now();
    Status later = g.rank(r).comm->AllGather(in.data(), out.data(), 16,
                                             DataType::kF32,
                                             *g.rank(r).stream, {});
    EXPECT_EQ(later.code(), absl::StatusCode::kDeadlineExceeded) << later;
    EXPECT_EQ(later.message(), s.message());
    EXPECT_LT(absl::Now() - t1, timeout / 2);
  });
}

TEST(InprocEventProtocolTest, RankThatNeverIssuesTimesOut) {
  ExpectRankThatNeverIssuesTimesOut(/*event_protocol=*/true);
}

// Rank 3 aborts while the others wait in an all-reduce: each of them is
// released with Unavailable naming rank 3, within seconds.
void ExpectAbortReleasesThePeers(bool event_protocol) {
  Group g(4, absl::Seconds(60), event_protocol);
  g.RunAll([&](int r) {
    if (r == 3) {
      absl::SleepFor(absl::Milliseconds(100));
      g.rank(r).comm->Abort();
      return;
    }
    std::vector<float> in(16), out(16);
    const absl::Time t0 = absl::Now();
    ASSERT_TRUE(g.rank(r).comm->AllReduce(in.data(), out.data(), 16,
                                          DataType::kF32, ReduceOp::kSum,
                                          *g.rank(r).stream, {}).ok());
    Status s = g.rank(r).stream->Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
    EXPECT_NE(s.message().find("rank 3"), std::string::npos) << s;
    EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  });
}

TEST(InprocEventProtocolTest, AbortReleasesThePeersWithUnavailable) {
  ExpectAbortReleasesThePeers(/*event_protocol=*/true);
}

class InprocTagsTest : public ::testing::TestWithParam<bool> {};

TEST_P(InprocTagsTest, ConcurrentTagsOnTwoStreamsIssuedInDifferentOrders) {
  Group g(3, absl::Seconds(30), /*event_protocol=*/GetParam());
  g.RunAll([&](int r) {
    auto second = *g.device().CreateStream();
    CheckCase ag{CollectiveKind::kAllGather, DataType::kF32, ReduceOp::kSum,
                 3, 4096, 0, 1};
    CheckCase rs{CollectiveKind::kReduceScatter, DataType::kF32,
                 ReduceOp::kSum, 3, 4096, 0, 2};
    CollectiveOptions t1, t2;
    t1.tag = 1;
    t2.tag = 2;
    std::vector<float> ag_in(4096), ag_out(3 * 4096), rs_in(3 * 4096),
        rs_out(4096);
    FillInput(ag, r, ag_in.data());
    FillInput(rs, r, rs_in.data());
    // Odd ranks issue tag 2 first: tags decouple the orders.
    auto issue_ag = [&] {
      ASSERT_TRUE(g.rank(r).comm->AllGather(ag_in.data(), ag_out.data(), 4096,
                                            DataType::kF32, *g.rank(r).stream,
                                            t1).ok());
    };
    auto issue_rs = [&] {
      ASSERT_TRUE(g.rank(r).comm->ReduceScatter(rs_in.data(), rs_out.data(),
                                                4096, DataType::kF32,
                                                ReduceOp::kSum, *second, t2)
                      .ok());
    };
    if (r % 2) {
      issue_rs();
      issue_ag();
    } else {
      issue_ag();
      issue_rs();
    }
    ASSERT_TRUE(g.rank(r).stream->Synchronize().ok());
    ASSERT_TRUE(second->Synchronize().ok());
    EXPECT_EQ(CountWrong(ag, r, ag_out.data()), 0u);
    EXPECT_EQ(CountWrong(rs, r, rs_out.data()), 0u);
  });
}

INSTANTIATE_TEST_SUITE_P(Protocols, InprocTagsTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& i) {
                           return i.param ? "events" : "host";
                         });

TEST(InprocTest, MismatchedCountsFailEveryRankWithInvalidArgument) {
  Group g(4);
  g.RunAll([&](int r) {
    std::vector<float> in(100), out(400);
    const size_t count = r == 2 ? 99 : 100;  // rank 2 disagrees
    ASSERT_TRUE(g.rank(r).comm->AllGather(in.data(), out.data(), count,
                                          DataType::kF32, *g.rank(r).stream,
                                          {}).ok());
    Status s = g.rank(r).stream->Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("count"), std::string::npos) << s;
    EXPECT_NE(s.message().find("rank 2"), std::string::npos) << s;
    // The communicator stays failed.
    EXPECT_FALSE(g.rank(r).comm->health().ok());
    EXPECT_FALSE(g.rank(r).comm->AllGather(in.data(), out.data(), 100,
                                           DataType::kF32, *g.rank(r).stream,
                                           {}).ok());
  });
}

TEST(InprocTest, MismatchedTypesAreNamed) {
  Group g(2);
  g.RunAll([&](int r) {
    std::vector<float> in(8), out(8);
    ASSERT_TRUE(g.rank(r).comm->AllReduce(in.data(), out.data(), 8,
                                          r == 0 ? DataType::kF32
                                                 : DataType::kI32,
                                          ReduceOp::kSum, *g.rank(r).stream,
                                          {}).ok());
    Status s = g.rank(r).stream->Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("data type"), std::string::npos) << s;
  });
}

TEST(InprocTest, RankThatNeverIssuesTimesOutWithinTwiceTheTimeout) {
  ExpectRankThatNeverIssuesTimesOut(/*event_protocol=*/false);
}

TEST(InprocTest, AbortWakesThePeersWithUnavailable) {
  ExpectAbortReleasesThePeers(/*event_protocol=*/false);
}

TEST(InprocTest, CreationFailsWhenARankNeverJoins) {
  auto device = *CreateHostDevice();
  CommConfig cfg;
  cfg.rank = 0;
  cfg.size = 2;
  cfg.device = device.get();
  cfg.group = "never-complete";
  cfg.timeout = absl::Milliseconds(300);
  auto c = CreateCommunicator(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(c.status().message().find("rank(s) 1"), std::string::npos)
      << c.status();
}

// caps() says what the executor may rely on: fp32 accumulation (which the
// sweep exercises) and host memory; no graph capture (ranks are matched on the
// host at issue time).
TEST(InprocTest, CapsMatchWhatTheBackendDoes) {
  Group g(1);
  const CommCaps c = g.rank(0).comm->caps();
  EXPECT_TRUE(c.accumulate_fp32);
  EXPECT_TRUE(c.host_memory);
  EXPECT_FALSE(c.graph_capture);
#ifdef BATON_HAVE_CUDA
  EXPECT_TRUE(c.device_memory);
#else
  EXPECT_FALSE(c.device_memory);
#endif
  std::vector<uint16_t> a(8, 0x3f80), out(8);  // bf16 1.0
  CollectiveOptions acc;
  acc.accumulate_fp32 = true;
  Rank& r0 = g.rank(0);
  ASSERT_TRUE(r0.comm->AllReduce(a.data(), out.data(), a.size(),
                                 DataType::kBF16, ReduceOp::kSum, *r0.stream,
                                 acc).ok());
  ASSERT_TRUE(r0.stream->Synchronize().ok());
  EXPECT_EQ(out[3], 0x3f80);
}

TEST(InprocTest, BadArgumentsAreRejectedBeforeEnqueue) {
  Group g(2);
  Rank& r0 = g.rank(0);
  std::vector<float> buf(64);
  auto expect_invalid = [](Status s, const char* word) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(word), std::string::npos) << s;
  };
  expect_invalid(r0.comm->AllGather(nullptr, buf.data(), 4, DataType::kF32,
                                    *r0.stream, {}),
                 "send");
  expect_invalid(r0.comm->AllReduce(buf.data(), nullptr, 4, DataType::kF32,
                                    ReduceOp::kSum, *r0.stream, {}),
                 "recv");
  expect_invalid(r0.comm->Broadcast(buf.data(), buf.data(), 4, DataType::kF32,
                                    2, *r0.stream, {}),
                 "root");
  // Overlapping but not in place (recv = send + 1 element).
  expect_invalid(r0.comm->AllReduce(buf.data(), buf.data() + 1, 8,
                                    DataType::kF32, ReduceOp::kSum,
                                    *r0.stream, {}),
                 "overlap");
  CollectiveOptions bad_tag;
  bad_tag.tag = 300;
  expect_invalid(r0.comm->Barrier(*r0.stream, bad_tag), "tag");
  // Nothing was enqueued, so the communicator is still healthy.
  EXPECT_TRUE(r0.comm->health().ok());
  // A bad backend name or rank through the factory.
  CommConfig cfg;
  auto device = *CreateHostDevice();
  cfg.device = device.get();
  cfg.backend = "mpi";
  auto c = CreateCommunicator(cfg);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("mpi"), std::string::npos);
  cfg.backend = "inproc";
  cfg.rank = 3;
  cfg.size = 2;
  EXPECT_EQ(CreateCommunicator(cfg).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(InprocTest, MeasureLimitGivesEveryRankTheSameFigure) {
  Group g(2);
  std::vector<double> got(2);
  g.RunAll([&](int r) {
    auto l = g.rank(r).comm->MeasureLimit(8 << 20, 3);
    ASSERT_TRUE(l.ok()) << l.status();
    EXPECT_EQ(l->medium, "memcpy");
    got[r] = l->gbps;
  });
  EXPECT_GT(got[0], 0.1);
  EXPECT_EQ(got[0], got[1]);
}

}  // namespace
}  // namespace baton
