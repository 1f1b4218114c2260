// One suite for the stream/event contract of runtime/device.h, run against
// the host device always and against CUDA device 0 when a GPU is present
// (skipped otherwise). Work items are host work, which both kinds accept; a
// CUDA-only test at the end checks the same ordering with real kernels.
#include "baton/runtime/device.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#if BATON_HAVE_CUDA
#include <cuda_runtime.h>

#include "baton/runtime/cuda_test_kernels.h"
#endif

namespace baton {
namespace {

using std::chrono::milliseconds;

class DeviceTest : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Device>> d = GetParam() == DeviceKind::kHost
                                              ? CreateHostDevice()
                                              : CreateCudaDevice(0);
    if (!d.ok()) {
      ASSERT_EQ(GetParam(), DeviceKind::kCuda) << d.status();
      GTEST_SKIP() << "no CUDA device: " << d.status();
    }
    device_ = std::move(*d);
  }

  std::unique_ptr<Stream> NewStream(int priority = 0) {
    StatusOr<std::unique_ptr<Stream>> s =
        device_->CreateStream({priority, "test"});
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  std::unique_ptr<Event> NewEvent() {
    StatusOr<std::unique_ptr<Event>> e = device_->CreateEvent();
    EXPECT_TRUE(e.ok()) << e.status();
    return e.ok() ? std::move(*e) : nullptr;
  }

  std::unique_ptr<Device> device_;
};

// Holds a stream until the test opens it, in a way both kinds honour (rule 7
// of device.h: host work never waits for other host work). On a host stream
// the gate is host work blocked on the test thread. On a CUDA stream it is a
// kernel spinning on a flag in mapped host memory that the test thread sets:
// host work would not do there, as CUDA runs the host work of all streams on
// one thread, so a blocked item would starve every other stream's host work.
// The kernel gives up after 10 s, so a test that never opens cannot hang.
class Gate {
 public:
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  ~Gate() {
    Open();
#if BATON_HAVE_CUDA
    if (cuda_stream_ != nullptr) (void)cudaStreamSynchronize(cuda_stream_);
    if (flag_ != nullptr) (void)cudaFreeHost(flag_);
#endif
  }

  // Enqueues the gate on `s`: later work on `s` waits for Open().
  Status Close(Stream& s) {
    if (s.kind() == DeviceKind::kHost) {
      return s.Enqueue([this]() {
        open_.WaitForNotification();
        return Status();
      });
    }
#if BATON_HAVE_CUDA
    if (flag_ == nullptr) {
      void* p = nullptr;
      if (cudaHostAlloc(&p, sizeof(int), cudaHostAllocMapped) != cudaSuccess) {
        return absl::InternalError("gate: cudaHostAlloc failed");
      }
      flag_ = static_cast<int*>(p);
      __atomic_store_n(flag_, 0, __ATOMIC_SEQ_CST);
    }
    void* dev = nullptr;
    if (cudaHostGetDevicePointer(&dev, flag_, 0) != cudaSuccess) {
      return absl::InternalError("gate: cudaHostGetDevicePointer failed");
    }
    cuda_stream_ = static_cast<cudaStream_t>(s.native_handle());
    if (testing::LaunchSpinUntilFlag(static_cast<const int*>(dev),
                                     10'000'000'000ull,
                                     cuda_stream_) != cudaSuccess) {
      return absl::InternalError("gate: kernel launch failed");
    }
    return Status();
#else
    return absl::UnimplementedError("gate: built without CUDA");
#endif
  }

  void Open() {
    if (!open_.HasBeenNotified()) open_.Notify();
#if BATON_HAVE_CUDA
    if (flag_ != nullptr) __atomic_store_n(flag_, 1, __ATOMIC_SEQ_CST);
#endif
  }

 private:
  absl::Notification open_;
#if BATON_HAVE_CUDA
  int* flag_ = nullptr;  // mapped host memory
  cudaStream_t cuda_stream_ = nullptr;
#endif
};

// Enqueues host work on `s` that sets *flag (bool or std::atomic<bool>),
// so a test can see whether work behind a wait has run.
template <typename Flag>
Status SetWhenRun(Stream& s, Flag* flag) {
  return s.Enqueue([flag]() {
    *flag = true;
    return Status();
  });
}

TEST_P(DeviceTest, WorkOnOneStreamRunsInFifoOrder) {
  auto s = NewStream();
  std::vector<int> order;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(s->Enqueue([&order, i]() {
                   order.push_back(i);
                   return Status();
                 }).ok());
  }
  ASSERT_TRUE(s->Synchronize().ok());
  ASSERT_EQ(order.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(order[i], i);
}

TEST_P(DeviceTest, CrossStreamWaitOrdersWork) {
  auto a = NewStream();
  auto b = NewStream();
  auto e = NewEvent();
  std::atomic<int> flag{0};
  int seen_by_b = -1;
  ASSERT_TRUE(a->Enqueue([&]() {
                 std::this_thread::sleep_for(milliseconds(30));
                 flag.store(1);
                 return Status();
               }).ok());
  ASSERT_TRUE(e->Record(*a).ok());
  ASSERT_TRUE(b->Wait(*e).ok());
  ASSERT_TRUE(b->Enqueue([&]() {
                 seen_by_b = flag.load();
                 return Status();
               }).ok());
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_EQ(seen_by_b, 1);
  ASSERT_TRUE(a->Synchronize().ok());
}

TEST_P(DeviceTest, WaitDoesNotBlockTheIssuingThread) {
  auto a = NewStream();
  auto b = NewStream();
  auto e = NewEvent();
  Gate gate;
  ASSERT_TRUE(gate.Close(*a).ok());
  ASSERT_TRUE(e->Record(*a).ok());
  // Every call below returns while `a` is blocked.
  ASSERT_TRUE(b->Wait(*e).ok());
  std::atomic<bool> ran{false};
  ASSERT_TRUE(SetWhenRun(*b, &ran).ok());
  StatusOr<bool> done = e->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_FALSE(*done);
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(ran.load());
  gate.Open();
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_TRUE(ran.load());
  done = e->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
}

TEST_P(DeviceTest, WaitOnNeverRecordedEventIsNoOp) {
  auto b = NewStream();
  auto e = NewEvent();
  StatusOr<bool> done = e->Query();
  ASSERT_TRUE(done.ok());
  EXPECT_TRUE(*done);
  EXPECT_TRUE(e->Synchronize().ok());
  ASSERT_TRUE(b->Wait(*e).ok());
  bool ran = false;
  ASSERT_TRUE(SetWhenRun(*b, &ran).ok());
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_TRUE(ran);
}

TEST_P(DeviceTest, WaitCapturesTheRecordCurrentAtTheTimeOfTheWait) {
  auto a = NewStream();
  auto b = NewStream();
  auto c = NewStream();
  auto d = NewStream();
  auto e = NewEvent();
  Gate gate;
  ASSERT_TRUE(gate.Close(*a).ok());
  ASSERT_TRUE(e->Record(*a).ok());  // record 1: held by the gate
  ASSERT_TRUE(b->Wait(*e).ok());    // captures record 1
  std::atomic<bool> b_ran{false};
  ASSERT_TRUE(SetWhenRun(*b, &b_ran).ok());
  ASSERT_TRUE(e->Record(*c).ok());  // record 2 on an idle stream
  ASSERT_TRUE(d->Wait(*e).ok());    // captures record 2
  std::atomic<bool> d_ran{false};
  ASSERT_TRUE(SetWhenRun(*d, &d_ran).ok());
  // d proceeds although record 1 is still pending; b does not, although the
  // event's most recent record (2) has completed.
  ASSERT_TRUE(d->Synchronize().ok());
  EXPECT_TRUE(d_ran.load());
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(b_ran.load());
  gate.Open();
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_TRUE(b_ran.load());
}

// Rule 8: a wait on a value that another thread writes only later (here the
// test thread, after the wait and the work behind it were enqueued) holds
// the stream until the value arrives; a smaller value does not release it.
TEST_P(DeviceTest, WaitValueHoldsTheStreamUntilALaterWrite) {
  StatusOr<DeviceBuffer> words = device_->AllocateValues(2);
  ASSERT_TRUE(words.ok()) << words.status();
  auto* w = static_cast<uint64_t*>(words->data());
  EXPECT_EQ(HostReadValue(&w[0]), 0u);
  EXPECT_EQ(HostReadValue(&w[1]), 0u);
  auto b = NewStream();
  ASSERT_TRUE(b->WaitValue(&w[0], 7).ok());
  std::atomic<bool> ran{false};
  ASSERT_TRUE(SetWhenRun(*b, &ran).ok());
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(ran.load());
  device_->HostWriteValue(&w[0], 6);  // not enough
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(ran.load());
  device_->HostWriteValue(&w[0], 9);  // >= 7 releases
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_TRUE(ran.load());
}

// A stream write orders like a record: the waiter on another stream runs
// only after the writer's earlier work; the host reads the value after the
// writer's Synchronize. The comparison is cyclic (int64 of the difference).
TEST_P(DeviceTest, WriteValueOrdersAcrossStreams) {
  StatusOr<DeviceBuffer> words = device_->AllocateValues(1);
  ASSERT_TRUE(words.ok()) << words.status();
  auto* w = static_cast<uint64_t*>(words->data());
  auto a = NewStream();
  auto b = NewStream();
  Gate gate;
  ASSERT_TRUE(gate.Close(*a).ok());
  ASSERT_TRUE(a->WriteValue(w, 3).ok());
  ASSERT_TRUE(b->WaitValue(w, 3).ok());
  std::atomic<bool> ran{false};
  ASSERT_TRUE(SetWhenRun(*b, &ran).ok());
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_FALSE(ran.load());
  EXPECT_EQ(HostReadValue(w), 0u);
  gate.Open();
  ASSERT_TRUE(b->Synchronize().ok());
  EXPECT_TRUE(ran.load());
  ASSERT_TRUE(a->Synchronize().ok());
  EXPECT_EQ(HostReadValue(w), 3u);
  // Cyclic: 1 is "after" 2^64 - 1.
  EXPECT_TRUE(ValueReached(1, ~uint64_t{0}));
  EXPECT_FALSE(ValueReached(~uint64_t{0}, 1));
  device_->HostWriteValue(w, 1);
  ASSERT_TRUE(a->WaitValue(w, ~uint64_t{0}).ok());
  ASSERT_TRUE(a->Synchronize().ok());
  EXPECT_EQ(a->WaitValue(nullptr, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a->WriteValue(nullptr, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->AllocateValues(0).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Writes run also on a stream in its error state (CUDA cannot skip them),
// so a failed stream still releases its waiters.
TEST_P(DeviceTest, WriteValueRunsOnAFailedStream) {
  StatusOr<DeviceBuffer> words = device_->AllocateValues(1);
  ASSERT_TRUE(words.ok()) << words.status();
  auto* w = static_cast<uint64_t*>(words->data());
  auto a = NewStream();
  ASSERT_TRUE(
      a->Enqueue([]() { return absl::InternalError("boom"); }).ok());
  ASSERT_TRUE(a->WriteValue(w, 5).ok());
  EXPECT_EQ(a->Synchronize().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(HostReadValue(w), 5u);
}

// The error sink fails the stream at once: host work not yet started is
// skipped, Synchronize returns the first error; after the stream is gone
// the sink does nothing.
TEST_P(DeviceTest, ErrorSinkFailsTheStreamAtOnce) {
  auto a = NewStream();
  std::shared_ptr<StreamErrorSink> sink = a->error_sink();
  ASSERT_NE(sink, nullptr);
  Gate gate;
  ASSERT_TRUE(gate.Close(*a).ok());
  std::atomic<bool> ran{false};
  ASSERT_TRUE(SetWhenRun(*a, &ran).ok());
  sink->Fail(absl::DeadlineExceededError("peer gone"));
  sink->Fail(absl::InternalError("second"));
  gate.Open();
  Status s = a->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_FALSE(ran.load());
  a.reset();
  sink->Fail(absl::InternalError("after the stream"));
}

// 16 streams, random work and random record/wait pairs; every wait must
// order all work issued before the captured record on the recording stream
// before all work issued after the wait on the waiting stream.
TEST_P(DeviceTest, RandomCrossWaitsNeverViolateRecordedOrder) {
  constexpr int kStreams = 16;
  constexpr int kEvents = 8;
  constexpr int kOps = 120;
  const int rounds = GetParam() == DeviceKind::kHost ? 1000 : 200;
  std::vector<std::unique_ptr<Stream>> streams;
  std::vector<std::unique_ptr<Event>> events;
  for (int i = 0; i < kStreams; ++i) streams.push_back(NewStream());
  for (int i = 0; i < kEvents; ++i) events.push_back(NewEvent());

  struct Span {
    std::atomic<int64_t> start{-1}, end{-1};
  };
  std::atomic<int64_t> clock{0};
  for (int round = 0; round < rounds; ++round) {
    std::mt19937 rng(1234 + round);
    std::vector<Span> spans(kOps);
    // For each work item: the work items it must follow.
    std::vector<std::vector<int>> must_follow(kOps);
    std::vector<std::vector<int>> issued_on(kStreams);   // work ids per stream
    std::vector<std::vector<int>> captured(kEvents);     // record contents
    std::vector<std::vector<int>> pending_waits(kStreams);
    std::vector<bool> recorded(kEvents, false);
    for (int op = 0; op < kOps; ++op) {
      const int s = rng() % kStreams;
      const int kind = rng() % 4;  // 0,1: work  2: record  3: wait
      if (kind == 2) {
        const int e = rng() % kEvents;
        ASSERT_TRUE(events[e]->Record(*streams[s]).ok());
        captured[e] = issued_on[s];
        // Transitively, what this stream already waited for is included.
        for (int w : pending_waits[s]) captured[e].push_back(w);
        recorded[e] = true;
      } else if (kind == 3) {
        const int e = rng() % kEvents;
        ASSERT_TRUE(streams[s]->Wait(*events[e]).ok());
        if (recorded[e]) {
          for (int w : captured[e]) pending_waits[s].push_back(w);
        }
      } else {
        const int spin_us = rng() % 3 == 0 ? rng() % 40 : 0;
        Span* span = &spans[op];
        ASSERT_TRUE(streams[s]
                        ->Enqueue([span, &clock, spin_us]() {
                          span->start = clock.fetch_add(1);
                          const auto until =
                              std::chrono::steady_clock::now() +
                              std::chrono::microseconds(spin_us);
                          while (std::chrono::steady_clock::now() < until) {
                          }
                          span->end = clock.fetch_add(1);
                          return Status();
                        })
                        .ok());
        must_follow[op] = pending_waits[s];
        issued_on[s].push_back(op);
      }
    }
    for (auto& s : streams) ASSERT_TRUE(s->Synchronize().ok());
    for (int op = 0; op < kOps; ++op) {
      for (int before : must_follow[op]) {
        ASSERT_GE(spans[before].end.load(), 0);
        ASSERT_LT(spans[before].end.load(), spans[op].start.load())
            << "round " << round << ": op " << op
            << " started before op " << before << " ended";
      }
    }
  }
}

TEST_P(DeviceTest, DestructionLetsPendingWorkFinish) {
  std::atomic<int> count{0};
  auto e = NewEvent();
  {
    auto s = NewStream();
    for (int i = 0; i < 100; ++i) {
      ASSERT_TRUE(s->Enqueue([&count]() {
                     std::this_thread::sleep_for(std::chrono::microseconds(50));
                     count.fetch_add(1);
                     return Status();
                   }).ok());
    }
    ASSERT_TRUE(e->Record(*s).ok());
  }  // destroyed with pending work
  ASSERT_TRUE(e->Synchronize().ok());
  EXPECT_EQ(count.load(), 100);
}

TEST_P(DeviceTest, ErrorSurfacesAtSynchronizeAndSkipsLaterWork) {
  auto a = NewStream();
  auto b = NewStream();
  auto c = NewStream();
  auto e = NewEvent();
  bool later_ran = false;
  ASSERT_TRUE(a->Enqueue([]() { return absl::DataLossError("bad shard"); })
                  .ok());
  ASSERT_TRUE(SetWhenRun(*a, &later_ran).ok());
  ASSERT_TRUE(e->Record(*a).ok());
  Status s = a->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "bad shard");
  EXPECT_FALSE(later_ran);
  // Sticky.
  EXPECT_EQ(a->Synchronize().code(), absl::StatusCode::kDataLoss);
  // The record carries the error.
  EXPECT_EQ(e->Synchronize().code(), absl::StatusCode::kDataLoss);
  // An unrelated stream is unaffected.
  bool c_ran = false;
  ASSERT_TRUE(SetWhenRun(*c, &c_ran).ok());
  EXPECT_TRUE(c->Synchronize().ok());
  EXPECT_TRUE(c_ran);
  if (GetParam() == DeviceKind::kHost) {
    // On the host runtime the error follows the event edge.
    ASSERT_TRUE(b->Wait(*e).ok());
    bool b_ran = false;
    ASSERT_TRUE(SetWhenRun(*b, &b_ran).ok());
    EXPECT_EQ(b->Synchronize().code(), absl::StatusCode::kDataLoss);
    EXPECT_FALSE(b_ran);
  }
}

TEST_P(DeviceTest, AllocateCopyAndFill) {
  StatusOr<DeviceBuffer> a = device_->Allocate(4096, 256);
  StatusOr<DeviceBuffer> b = device_->Allocate(4096, 64);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 256, 0u);
  EXPECT_EQ(a->size(), 4096u);
  auto s = NewStream();
  std::vector<unsigned char> host(4096, 0);
  ASSERT_TRUE(s->MemsetAsync(a->data(), 0x5a, 4096).ok());
  ASSERT_TRUE(s->MemcpyAsync(b->data(), a->data(), 4096).ok());
  ASSERT_TRUE(s->MemcpyAsync(host.data(), b->data(), 4096).ok());
  ASSERT_TRUE(s->Synchronize().ok());
  for (unsigned char c : host) ASSERT_EQ(c, 0x5a);
}

TEST_P(DeviceTest, BadArgumentsAreRejected) {
  EXPECT_EQ(device_->Allocate(0).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(device_->Allocate(64, 48).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto s = NewStream();
  EXPECT_EQ(s->Enqueue(HostWork()).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s->MemcpyAsync(nullptr, this, 8).code(),
            absl::StatusCode::kInvalidArgument);
  // A stream or event of another device is refused.
  StatusOr<std::unique_ptr<Device>> other = CreateHostDevice();
  ASSERT_TRUE(other.ok());
  StatusOr<std::unique_ptr<Event>> foreign_event = (*other)->CreateEvent();
  StatusOr<std::unique_ptr<Stream>> foreign_stream = (*other)->CreateStream();
  ASSERT_TRUE(foreign_event.ok() && foreign_stream.ok());
  ASSERT_TRUE((*foreign_event)->Record(**foreign_stream).ok());
  EXPECT_EQ(s->Wait(**foreign_event).code(),
            absl::StatusCode::kInvalidArgument);
  auto e = NewEvent();
  EXPECT_EQ(e->Record(**foreign_stream).code(),
            absl::StatusCode::kInvalidArgument);
}

std::string KindName(const ::testing::TestParamInfo<DeviceKind>& info) {
  return DeviceKindName(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllDevices, DeviceTest,
                         ::testing::Values(DeviceKind::kHost,
                                           DeviceKind::kCuda),
                         KindName);

#if BATON_HAVE_CUDA
// The same ordering with real kernels: a slow kernel on A writes a flag, B
// waits on A's event and copies the flag. Without the wait B would read 0.
TEST(CudaKernels, CrossStreamWaitOrdersKernels) {
  StatusOr<std::unique_ptr<Device>> d = CreateCudaDevice(0);
  if (!d.ok()) GTEST_SKIP() << "no CUDA device: " << d.status();
  auto a = (*d)->CreateStream({0, "a"});
  auto b = (*d)->CreateStream({-1, "b"});
  auto e = (*d)->CreateEvent();
  auto mem = (*d)->Allocate(2 * sizeof(int));
  ASSERT_TRUE(a.ok() && b.ok() && e.ok() && mem.ok());
  int* flag = static_cast<int*>(mem->data());
  int* out = flag + 1;
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE((*a)->MemsetAsync(flag, 0, 2 * sizeof(int)).ok());
    ASSERT_EQ(testing::LaunchSpinThenWrite(
                  flag, round + 1, 2'000'000,
                  static_cast<cudaStream_t>((*a)->native_handle())),
              cudaSuccess);
    ASSERT_TRUE((*e)->Record(**a).ok());
    ASSERT_TRUE((*b)->Wait(**e).ok());
    ASSERT_EQ(testing::LaunchCopyInt(
                  flag, out, static_cast<cudaStream_t>((*b)->native_handle())),
              cudaSuccess);
    int host = -1;
    ASSERT_TRUE((*b)->MemcpyAsync(&host, out, sizeof(int)).ok());
    ASSERT_TRUE((*b)->Synchronize().ok());
    EXPECT_EQ(host, round + 1);
  }
}
#endif

}  // namespace
}  // namespace baton
