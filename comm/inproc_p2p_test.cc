// Point-to-point on the in-process backend (communicator.h,
// "Point-to-point"): ring and grouped exchanges, matching order, sizes that
// disagree, a peer that never comes, abort, refused arguments and the flight
// record. Ranks are threads. Three modes: host streams (one host work item
// per group, p2p.h), host streams with the event protocol, and CUDA streams
// on device memory (both p2p_events.h); the GPU mode skips without a GPU.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "baton/comm/factory.h"
#include "baton/comm/flight_recorder.h"
#include "baton/runtime/device.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

// kHost: host streams, one host work item per group. kEvents: host streams
// with CommConfig::inproc_event_protocol. kGpu: CUDA streams and device
// memory of GPU 0 (the ranks share it).
enum class Mode { kHost, kEvents, kGpu };

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kHost:
      return "host";
    case Mode::kEvents:
      return "events";
    case Mode::kGpu:
      return "gpu";
  }
  return "?";
}

class Group {
 public:
  explicit Group(int n, absl::Duration timeout = absl::Seconds(30),
                 Mode mode = Mode::kHost)
      : n_(n) {
    device_ = mode == Mode::kGpu ? *CreateCudaDevice(0) : *CreateHostDevice();
    CommConfig cfg;
    cfg.device = device_.get();
    cfg.group = "";
    cfg.timeout = timeout;
    cfg.inproc_event_protocol = mode == Mode::kEvents;
    auto comms = CreateInprocGroup(n, cfg);
    EXPECT_TRUE(comms.ok()) << comms.status();
    for (int r = 0; r < n && comms.ok(); ++r) {
      comms_.push_back(std::move((*comms)[r]));
      streams_.push_back(*device_->CreateStream());
    }
  }
  ~Group() {
    for (auto& s : streams_) (void)s->Synchronize();
  }
  void RunAll(const std::function<void(int)>& body) {
    std::vector<std::thread> threads;
    for (int r = 0; r < n_; ++r) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }
  Communicator& comm(int r) { return *comms_[r]; }
  Stream& stream(int r) { return *streams_[r]; }
  Device& device() { return *device_; }

  // `bytes` (at least one) of the group's memory kind holding `data`, copied
  // on rank r's stream; then that stream is synchronized.
  DeviceBuffer Upload(int r, const std::vector<uint8_t>& data,
                      size_t bytes = 0) {
    bytes = std::max({bytes, data.size(), size_t{1}});
    DeviceBuffer b = *device_->Allocate(bytes);
    EXPECT_TRUE(stream(r).MemsetAsync(b.data(), 0, bytes).ok());
    if (!data.empty()) {
      EXPECT_TRUE(
          stream(r).MemcpyAsync(b.data(), data.data(), data.size()).ok());
    }
    EXPECT_TRUE(stream(r).Synchronize().ok());
    return b;
  }
  // The first `bytes` of `b`, read on rank r's stream (after its work).
  std::vector<uint8_t> Download(int r, const DeviceBuffer& b, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    if (bytes > 0) {
      EXPECT_TRUE(stream(r).MemcpyAsync(out.data(), b.data(), bytes).ok());
    }
    Status s = stream(r).Synchronize();
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

 private:
  int n_;
  std::unique_ptr<Device> device_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<Stream>> streams_;
};

// Rank r's byte i: distinct per rank and position.
uint8_t Pattern(int r, size_t i) {
  return static_cast<uint8_t>(r * 31 + i * 7 + 1);
}

std::vector<uint8_t> Patterned(int r, size_t bytes) {
  std::vector<uint8_t> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = Pattern(r, i);
  return v;
}

class InprocP2PModeTest : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override {
    if (GetParam() == Mode::kGpu && CudaDeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device";
    }
  }
  Mode mode() const { return GetParam(); }
};

TEST_P(InprocP2PModeTest, RingExchangeInOneGroupIsExact) {
  for (int n : {2, 3, 4}) {
    Group g(n, absl::Seconds(30), mode());
    for (size_t bytes : {size_t{0}, size_t{2}, size_t{14}, size_t{1} << 20}) {
      g.RunAll([&](int r) {
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        DeviceBuffer out = g.Upload(r, Patterned(r, bytes));
        DeviceBuffer in = g.Upload(r, {}, bytes);
        const P2POp ops[] = {
            P2POp::Send(out.data(), bytes / 2, DataType::kBF16, next),
            P2POp::Recv(in.data(), bytes / 2, DataType::kBF16, prev)};
        ASSERT_TRUE(g.comm(r).SendRecvGroup(ops, g.stream(r), {}).ok());
        const std::vector<uint8_t> got = g.Download(r, in, bytes);
        size_t wrong = 0;
        for (size_t i = 0; i < bytes; ++i) wrong += got[i] != Pattern(prev, i);
        EXPECT_EQ(wrong, 0u) << "n=" << n << " bytes=" << bytes;
      });
    }
  }
}

// Grouped sends: every rank sends a block of its own to every other rank
// and receives one from each, all in one group (the receives listed before
// the sends on odd ranks).
TEST_P(InprocP2PModeTest, AllToAllInOneGroupIsExact) {
  constexpr int kN = 4;
  constexpr size_t kBlock = 4098;  // 2049 bf16 elements: odd, unaligned
  Group g(kN, absl::Seconds(30), mode());
  g.RunAll([&](int r) {
    std::vector<uint8_t> mine(kN * kBlock);
    for (int q = 0; q < kN; ++q) {
      for (size_t i = 0; i < kBlock; ++i) {
        mine[q * kBlock + i] = Pattern(r * kN + q, i);
      }
    }
    DeviceBuffer out = g.Upload(r, mine);
    DeviceBuffer in = g.Upload(r, {}, kN * kBlock);
    std::vector<P2POp> sends, recvs;
    for (int q = 0; q < kN; ++q) {
      if (q == r) continue;
      sends.push_back(P2POp::Send(static_cast<char*>(out.data()) + q * kBlock,
                                  kBlock / 2, DataType::kBF16, q));
      recvs.push_back(P2POp::Recv(static_cast<char*>(in.data()) + q * kBlock,
                                  kBlock / 2, DataType::kBF16, q));
    }
    std::vector<P2POp> ops = r % 2 == 0 ? sends : recvs;
    ops.insert(ops.end(), (r % 2 == 0 ? recvs : sends).begin(),
               (r % 2 == 0 ? recvs : sends).end());
    ASSERT_TRUE(g.comm(r).SendRecvGroup(ops, g.stream(r), {}).ok());
    const std::vector<uint8_t> got = g.Download(r, in, kN * kBlock);
    size_t wrong = 0;
    for (int q = 0; q < kN; ++q) {
      if (q == r) continue;
      for (size_t i = 0; i < kBlock; ++i) {
        wrong += got[q * kBlock + i] != Pattern(q * kN + r, i);
      }
    }
    EXPECT_EQ(wrong, 0u) << "rank " << r;
  });
}

// Ungrouped Send / Recv work when the pair orders them (one sends first,
// the other receives first), and the k-th send matches the k-th receive.
// Rank 1 issues nothing before rank 0 has issued all four ops: issuing
// never waits for the peer.
TEST_P(InprocP2PModeTest, OrderedSendRecvMatchInIssueOrder) {
  Group g(2, absl::Seconds(30), mode());
  absl::Notification rank0_issued;
  g.RunAll([&](int r) {
    const int peer = 1 - r;
    DeviceBuffer a = g.Upload(r, Patterned(r, 400));
    DeviceBuffer b = g.Upload(r, Patterned(r + 2, 400));
    DeviceBuffer got_a = g.Upload(r, {}, 400);
    DeviceBuffer got_b = g.Upload(r, {}, 400);
    Communicator& c = g.comm(r);
    Stream& s = g.stream(r);
    if (r == 0) {
      ASSERT_TRUE(c.Send(a.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Send(b.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Recv(got_a.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Recv(got_b.data(), 100, DataType::kI32, peer, s, {}).ok());
      rank0_issued.Notify();
    } else {
      ASSERT_TRUE(
          rank0_issued.WaitForNotificationWithTimeout(absl::Seconds(20)));
      ASSERT_TRUE(c.Recv(got_a.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Recv(got_b.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Send(a.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Send(b.data(), 100, DataType::kI32, peer, s, {}).ok());
    }
    EXPECT_EQ(g.Download(r, got_a, 400), Patterned(peer, 400));
    EXPECT_EQ(g.Download(r, got_b, 400), Patterned(peer + 2, 400));
  });
}

TEST_P(InprocP2PModeTest, SizeMismatchFailsBothSidesNamingBothSizes) {
  Group g(2, absl::Seconds(30), mode());
  g.RunAll([&](int r) {
    DeviceBuffer buf = g.Upload(r, {}, 256);
    Status s = r == 0 ? g.comm(r).Send(buf.data(), 64, DataType::kF32, 1,
                                       g.stream(r), {})
                      : g.comm(r).Recv(buf.data(), 32, DataType::kF32, 0,
                                       g.stream(r), {});
    // On the event protocol the side that posts second finds the mismatch
    // at its call; the host path finds it on the stream.
    if (!s.ok()) {
      EXPECT_NE(mode(), Mode::kHost) << s;
    }
    s = g.stream(r).Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("rank 0 sends 256 bytes"), std::string::npos)
        << s;
    EXPECT_NE(s.message().find("rank 1 receives 128 bytes"), std::string::npos)
        << s;
    EXPECT_FALSE(g.comm(r).health().ok());
  });
}

TEST_P(InprocP2PModeTest, PeerThatNeverPostsTimesOutNamingIt) {
  Group g(3, absl::Milliseconds(400), mode());
  DeviceBuffer buf0 = g.Upload(0, {}, 32);
  DeviceBuffer buf1 = g.Upload(1, {}, 32);
  DeviceBuffer buf2 = g.Upload(2, {}, 32);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(
      g.comm(0).Recv(buf0.data(), 8, DataType::kF32, 2, g.stream(0), {}).ok());
  Status s = g.stream(0).Synchronize();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank 2 did not send"), std::string::npos) << s;
  EXPECT_NE(s.message().find("32 bytes"), std::string::npos) << s;
  EXPECT_NE(s.message().find("on rank 0"), std::string::npos) << s;
  EXPECT_FALSE(g.comm(0).health().ok());
  // A sender whose receiver never comes fails too.
  ASSERT_TRUE(
      g.comm(1).Send(buf1.data(), 8, DataType::kF32, 2, g.stream(1), {}).ok());
  s = g.stream(1).Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank 2 did not receive"), std::string::npos)
      << s;
  // The late peer fails instead of moving data the others gave up on.
  Status late =
      g.comm(2).Send(buf2.data(), 8, DataType::kF32, 0, g.stream(2), {});
  if (late.ok()) late = g.stream(2).Synchronize();
  EXPECT_EQ(late.code(), absl::StatusCode::kDeadlineExceeded) << late;
}

TEST_P(InprocP2PModeTest, AbortWakesTheWaitingPeerWithUnavailable) {
  Group g(2, absl::Seconds(30), mode());
  DeviceBuffer buf = g.Upload(0, {}, 32);
  ASSERT_TRUE(
      g.comm(0).Recv(buf.data(), 8, DataType::kF32, 1, g.stream(0), {}).ok());
  absl::SleepFor(absl::Milliseconds(50));  // let the receive start waiting
  const absl::Time t0 = absl::Now();
  g.comm(1).Abort();
  Status s = g.stream(0).Synchronize();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 1 aborted"), std::string::npos) << s;
  // Later groups fail at once.
  Status later =
      g.comm(0).Send(buf.data(), 8, DataType::kF32, 1, g.stream(0), {});
  if (later.ok()) later = g.stream(0).Synchronize();
  EXPECT_EQ(later.code(), absl::StatusCode::kUnavailable) << later;
}

TEST_P(InprocP2PModeTest, FlightRecorderHasEveryOpWithItsPeer) {
  Group g(2, absl::Seconds(30), mode());
  g.RunAll([&](int r) {
    DeviceBuffer out = g.Upload(r, Patterned(r, 16));
    DeviceBuffer in = g.Upload(r, {}, 16);
    CollectiveOptions o;
    o.tag = 3;
    o.position.step = 2;
    o.position.node = 9;
    const P2POp ops[] = {P2POp::Send(out.data(), 4, DataType::kF32, 1 - r),
                         P2POp::Recv(in.data(), 4, DataType::kF32, 1 - r)};
    ASSERT_TRUE(g.comm(r).SendRecvGroup(ops, g.stream(r), o).ok());
    EXPECT_EQ(g.Download(r, in, 16), Patterned(1 - r, 16));
  });
  // Both ranks have synchronized: every op was matched (the event
  // protocol completes a record when its message is matched).
  for (int r = 0; r < 2; ++r) {
    std::vector<CollectiveRecord> recs = g.comm(r).recorder()->Records();
    ASSERT_EQ(recs.size(), 2u);
    EXPECT_EQ(recs[0].kind, CollectiveKind::kSend);
    EXPECT_EQ(recs[1].kind, CollectiveKind::kRecv);
    for (const CollectiveRecord& rec : recs) {
      EXPECT_EQ(rec.position.peer, 1 - r);
      EXPECT_EQ(rec.position.node, 9);
      EXPECT_EQ(rec.tag, 3u);
      EXPECT_EQ(rec.count, 4u);
      EXPECT_NE(rec.done_ns, 0);
      EXPECT_FALSE(rec.failed);
    }
    // Point-to-point does not move the collectives' per-tag counters.
    const RankState st = g.comm(r).recorder()->Snapshot();
    for (const RankState::Comm& c : st.comms) {
      for (const RankState::Tag& t : c.tags) EXPECT_EQ(t.issued, 0u);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, InprocP2PModeTest,
                         ::testing::Values(Mode::kHost, Mode::kEvents,
                                           Mode::kGpu),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return std::string(ModeName(info.param));
                         });

// Different tags never match each other, even issued in opposite orders on
// two streams (host memory: host streams, with and without the event
// protocol).
TEST(InprocP2PTest, TagsSeparateMessages) {
  for (Mode mode : {Mode::kHost, Mode::kEvents}) {
    SCOPED_TRACE(ModeName(mode));
    Group g(2, absl::Seconds(30), mode);
    g.RunAll([&](int r) {
      auto second = *g.device().CreateStream();
      const int peer = 1 - r;
      std::vector<float> t1(16, r + 1.0f), t2(16, r + 10.0f), in1(16), in2(16);
      CollectiveOptions o1, o2;
      o1.tag = 1;
      o2.tag = 2;
      if (r == 0) {
        const P2POp a[] = {P2POp::Send(t1.data(), 16, DataType::kF32, peer),
                           P2POp::Recv(in1.data(), 16, DataType::kF32, peer)};
        const P2POp b[] = {P2POp::Send(t2.data(), 16, DataType::kF32, peer),
                           P2POp::Recv(in2.data(), 16, DataType::kF32, peer)};
        ASSERT_TRUE(g.comm(r).SendRecvGroup(a, g.stream(r), o1).ok());
        ASSERT_TRUE(g.comm(r).SendRecvGroup(b, *second, o2).ok());
      } else {
        const P2POp b[] = {P2POp::Send(t2.data(), 16, DataType::kF32, peer),
                           P2POp::Recv(in2.data(), 16, DataType::kF32, peer)};
        const P2POp a[] = {P2POp::Send(t1.data(), 16, DataType::kF32, peer),
                           P2POp::Recv(in1.data(), 16, DataType::kF32, peer)};
        ASSERT_TRUE(g.comm(r).SendRecvGroup(b, *second, o2).ok());
        ASSERT_TRUE(g.comm(r).SendRecvGroup(a, g.stream(r), o1).ok());
      }
      ASSERT_TRUE(g.stream(r).Synchronize().ok());
      ASSERT_TRUE(second->Synchronize().ok());
      EXPECT_EQ(in1[5], peer + 1.0f);
      EXPECT_EQ(in2[5], peer + 10.0f);
    });
  }
}

TEST(InprocP2PTest, BadArgumentsAreRefusedBeforeEnqueue) {
  for (Mode mode : {Mode::kHost, Mode::kEvents}) {
    SCOPED_TRACE(ModeName(mode));
    Group g(2, absl::Seconds(30), mode);
    Communicator& c = g.comm(0);
    Stream& s = g.stream(0);
    std::vector<float> buf(8);
    auto expect = [](Status st, const char* words) {
      EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
      EXPECT_NE(st.message().find(words), std::string::npos) << st;
    };
    expect(c.Send(buf.data(), 8, DataType::kF32, 2, s, {}),
           "out of range 0..1");
    expect(c.Recv(buf.data(), 8, DataType::kF32, -1, s, {}),
           "out of range 0..1");
    expect(c.Send(buf.data(), 8, DataType::kF32, 0, s, {}), "oneself");
    expect(c.Recv(nullptr, 8, DataType::kF32, 1, s, {}), "null");
    expect(c.Send(buf.data(), ~size_t{0} / 2, DataType::kF32, 1, s, {}),
           "overflows");
    expect(c.SendRecvGroup({}, s, {}), "empty group");
    CollectiveOptions bad_tag;
    bad_tag.tag = 256;
    expect(c.Send(buf.data(), 8, DataType::kF32, 1, s, bad_tag), "tag 256");
    // Nothing was enqueued: the stream and the communicator are fine.
    EXPECT_TRUE(s.Synchronize().ok());
    EXPECT_TRUE(c.health().ok());
    EXPECT_TRUE(c.caps().p2p_host_memory);
    // Device memory: with the CUDA implementation built in (the GPU mode
    // above runs it where there is a GPU).
  #ifdef BATON_HAVE_CUDA
    EXPECT_TRUE(c.caps().p2p_device_memory);
  #else
    EXPECT_FALSE(c.caps().p2p_device_memory);
  #endif
  }
}

}  // namespace
}  // namespace baton
