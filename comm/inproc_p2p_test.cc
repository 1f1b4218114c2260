// Point-to-point on the in-process backend (communicator.h,
// "Point-to-point"): ring and grouped exchanges, matching order, sizes that
// disagree, a peer that never comes, abort, refused arguments and the flight
// record. Ranks are threads. Device memory (CUDA streams) is not supported by
// inproc's send/recv: that case checks the refusal and skips without a GPU.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/factory.h"
#include "baton/comm/flight_recorder.h"
#include "baton/runtime/device.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

class Group {
 public:
  explicit Group(int n, absl::Duration timeout = absl::Seconds(30)) : n_(n) {
    device_ = *CreateHostDevice();
    CommConfig cfg;
    cfg.device = device_.get();
    cfg.group = "";
    cfg.timeout = timeout;
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

TEST(InprocP2PTest, RingExchangeInOneGroupIsExact) {
  for (int n : {2, 3, 4}) {
    Group g(n);
    for (size_t bytes : {size_t{0}, size_t{2}, size_t{14}, size_t{1} << 20}) {
      g.RunAll([&](int r) {
        std::vector<uint8_t> out(bytes), in(bytes, 0);
        for (size_t i = 0; i < bytes; ++i) out[i] = Pattern(r, i);
        const int next = (r + 1) % n, prev = (r + n - 1) % n;
        const P2POp ops[] = {
            P2POp::Send(out.data(), bytes / 2, DataType::kBF16, next),
            P2POp::Recv(in.data(), bytes / 2, DataType::kBF16, prev)};
        ASSERT_TRUE(g.comm(r).SendRecvGroup(ops, g.stream(r), {}).ok());
        ASSERT_TRUE(g.stream(r).Synchronize().ok());
        size_t wrong = 0;
        for (size_t i = 0; i < bytes; ++i) wrong += in[i] != Pattern(prev, i);
        EXPECT_EQ(wrong, 0u) << "n=" << n << " bytes=" << bytes;
      });
    }
  }
}

// Ungrouped Send / Recv work when the pair orders them (one sends first,
// the other receives first), and the k-th send matches the k-th receive.
TEST(InprocP2PTest, OrderedSendRecvMatchInIssueOrder) {
  Group g(2);
  g.RunAll([&](int r) {
    const int peer = 1 - r;
    std::vector<int32_t> a(100), b(100), got_a(100, -1), got_b(100, -1);
    for (int i = 0; i < 100; ++i) {
      a[i] = r * 1000 + i;
      b[i] = r * 1000 + 500 + i;
    }
    Communicator& c = g.comm(r);
    Stream& s = g.stream(r);
    if (r == 0) {
      ASSERT_TRUE(c.Send(a.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Send(b.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Recv(got_a.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Recv(got_b.data(), 100, DataType::kI32, peer, s, {}).ok());
    } else {
      ASSERT_TRUE(c.Recv(got_a.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Recv(got_b.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Send(a.data(), 100, DataType::kI32, peer, s, {}).ok());
      ASSERT_TRUE(c.Send(b.data(), 100, DataType::kI32, peer, s, {}).ok());
    }
    ASSERT_TRUE(s.Synchronize().ok());
    EXPECT_EQ(got_a[7], peer * 1000 + 7);
    EXPECT_EQ(got_b[7], peer * 1000 + 507);
  });
}

// Different tags never match each other, even issued in opposite orders on
// two streams.
TEST(InprocP2PTest, TagsSeparateMessages) {
  Group g(2);
  auto device = *CreateHostDevice();
  g.RunAll([&](int r) {
    auto second = *device->CreateStream();
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

TEST(InprocP2PTest, SizeMismatchFailsBothSidesNamingBothSizes) {
  Group g(2);
  g.RunAll([&](int r) {
    std::vector<float> buf(64);
    Status s = r == 0 ? g.comm(r).Send(buf.data(), 64, DataType::kF32, 1,
                                       g.stream(r), {})
                      : g.comm(r).Recv(buf.data(), 32, DataType::kF32, 0,
                                       g.stream(r), {});
    ASSERT_TRUE(s.ok()) << s;
    s = g.stream(r).Synchronize();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("256 bytes"), std::string::npos) << s;
    EXPECT_NE(s.message().find("128 bytes"), std::string::npos) << s;
    EXPECT_FALSE(g.comm(r).health().ok());
  });
}

TEST(InprocP2PTest, PeerThatNeverPostsTimesOutNamingIt) {
  Group g(3, absl::Milliseconds(400));
  std::vector<float> buf(8);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(
      g.comm(0).Recv(buf.data(), 8, DataType::kF32, 2, g.stream(0), {}).ok());
  Status s = g.stream(0).Synchronize();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank 2 did not send"), std::string::npos) << s;
  EXPECT_NE(s.message().find("32 bytes"), std::string::npos) << s;
  EXPECT_NE(s.message().find("on rank 0"), std::string::npos) << s;
  // A sender whose receiver never comes fails too.
  ASSERT_TRUE(
      g.comm(1).Send(buf.data(), 8, DataType::kF32, 2, g.stream(1), {}).ok());
  s = g.stream(1).Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank 2 did not receive"), std::string::npos)
      << s;
}

TEST(InprocP2PTest, AbortWakesTheWaitingPeerWithUnavailable) {
  Group g(2);
  std::vector<float> buf(8);
  ASSERT_TRUE(
      g.comm(0).Recv(buf.data(), 8, DataType::kF32, 1, g.stream(0), {}).ok());
  absl::SleepFor(absl::Milliseconds(50));  // let the receive start waiting
  const absl::Time t0 = absl::Now();
  g.comm(1).Abort();
  Status s = g.stream(0).Synchronize();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  EXPECT_NE(s.message().find("rank 1 aborted"), std::string::npos) << s;
}

TEST(InprocP2PTest, BadArgumentsAreRefusedBeforeEnqueue) {
  Group g(2);
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
  EXPECT_FALSE(c.caps().p2p_device_memory);
}

TEST(InprocP2PTest, FlightRecorderHasEveryOpWithItsPeer) {
  Group g(2);
  g.RunAll([&](int r) {
    std::vector<float> out(4, 1.0f), in(4);
    CollectiveOptions o;
    o.tag = 3;
    o.position.step = 2;
    o.position.node = 9;
    const P2POp ops[] = {P2POp::Send(out.data(), 4, DataType::kF32, 1 - r),
                         P2POp::Recv(in.data(), 4, DataType::kF32, 1 - r)};
    ASSERT_TRUE(g.comm(r).SendRecvGroup(ops, g.stream(r), o).ok());
    ASSERT_TRUE(g.stream(r).Synchronize().ok());
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
  });
}

TEST(InprocP2PTest, CudaStreamsAreRefusedAsUnimplemented) {
  auto device = CreateCudaDevice(0);
  if (!device.ok()) GTEST_SKIP() << "no CUDA device: " << device.status();
  CommConfig cfg;
  cfg.device = device->get();
  cfg.group = "";
  auto comms = CreateInprocGroup(2, cfg);
  ASSERT_TRUE(comms.ok()) << comms.status();
  auto stream = *(*device)->CreateStream();
  auto buf = *(*device)->Allocate(64);
  Status s = (*comms)[0]->Send(buf.data(), 16, DataType::kF32, 1, *stream, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kUnimplemented) << s;
}

}  // namespace
}  // namespace baton
