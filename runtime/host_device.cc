// The host implementation of runtime/device.h: one worker thread per stream
// drains a FIFO queue of items (host work, event records, event waits).
//
// A record is a shared RecordState that the recording stream completes when
// it reaches it; a wait holds the RecordState that was the event's most
// recent record at the time of the wait, so re-recording the event later
// never changes what an earlier wait waits for (CUDA semantics).
//
// WaitValue / WriteValue (rule 8) are queue items too: the worker blocks on
// a process-wide condition variable (ValueHub) until the word reaches the
// value; every write notifies it.
//
// Idle workers and waiting workers spin briefly (yielding the core) before
// they block on a condition variable: this keeps enqueue-to-run and
// record-to-wait hand-offs in the microseconds without burning a core when a
// stream stays idle.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/runtime/device.h"

namespace baton {
namespace {

// How many times an idle or waiting worker yields before it blocks.
constexpr int kSpinYields = 200;

class HostDevice;

// Wakes the workers waiting in WaitValue (rule 8) when a word is written: a
// write stores the word, then notifies under the lock, so a waiter that
// checks the word under the lock never misses it. One for the process: the
// words of every host device.
class ValueHub {
 public:
  static ValueHub& Get() {
    static ValueHub* hub = new ValueHub;
    return *hub;
  }

  void Write(uint64_t* addr, uint64_t value) {
    __atomic_store_n(addr, value, __ATOMIC_RELEASE);
    {
      std::lock_guard<std::mutex> lock(mu_);
    }
    cv_.notify_all();
  }

  void Await(const uint64_t* addr, uint64_t at_least) {
    auto reached = [&] { return ValueReached(HostReadValue(addr), at_least); };
    for (int i = 0; i < kSpinYields && !reached(); ++i) {
      std::this_thread::yield();
    }
    if (reached()) return;
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, reached);
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

// One record of an event; completed by the stream that reached it.
class RecordState {
 public:
  void Complete(Status status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      status_ = std::move(status);
      done_.store(true, std::memory_order_release);
    }
    cv_.notify_all();
  }

  bool done() const { return done_.load(std::memory_order_acquire); }

  // Blocks until completed; returns the status the recording stream carried.
  Status Await() {
    for (int i = 0; i < kSpinYields && !done(); ++i) std::this_thread::yield();
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done(); });
    return status_;
  }

 private:
  std::atomic<bool> done_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  Status status_;  // guarded by mu_
};

// A stream's error state, shared with its error sink (which may outlive it).
class HostStreamErrors final : public StreamErrorSink {
 public:
  void Fail(Status status) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (status_.ok()) status_ = std::move(status);
  }
  Status Get() const {
    std::lock_guard<std::mutex> lock(mu_);
    return status_;
  }

 private:
  mutable std::mutex mu_;
  Status status_;  // guarded by mu_
};

class HostEvent final : public Event {
 public:
  explicit HostEvent(const HostDevice* device) : device_(device) {}

  DeviceKind kind() const override { return DeviceKind::kHost; }
  Status Record(Stream& stream) override;

  StatusOr<bool> Query() override {
    std::shared_ptr<RecordState> r = latest();
    return r == nullptr || r->done();
  }

  Status Synchronize() override {
    std::shared_ptr<RecordState> r = latest();
    return r == nullptr ? Status() : r->Await();
  }

  std::shared_ptr<RecordState> latest() const {
    std::lock_guard<std::mutex> lock(mu_);
    return latest_;
  }

  const HostDevice* device() const { return device_; }

 private:
  const HostDevice* const device_;
  mutable std::mutex mu_;
  std::shared_ptr<RecordState> latest_;  // guarded by mu_
};

class HostStream final : public Stream {
 public:
  HostStream(const HostDevice* device, StreamOptions options)
      : device_(device), options_(std::move(options)) {
    worker_ = std::thread([this] { Run(); });
  }

  // Lets pending work finish, then joins the worker.
  ~HostStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_cv_.notify_one();
    worker_.join();
  }

  DeviceKind kind() const override { return DeviceKind::kHost; }
  const std::string& name() const override { return options_.name; }
  void* native_handle() override { return nullptr; }
  const HostDevice* device() const { return device_; }

  Status Enqueue(HostWork work) override {
    if (!work) return absl::InvalidArgumentError("Enqueue: empty host work");
    Push(Item{Item::kWork, std::move(work), nullptr});
    return Status();
  }

  Status Wait(Event& event) override;

  std::shared_ptr<StreamErrorSink> error_sink() override { return errors_; }

  Status WaitValue(const uint64_t* addr, uint64_t at_least) override {
    if (addr == nullptr) {
      return absl::InvalidArgumentError("WaitValue: null address");
    }
    Item item{Item::kWaitValue, nullptr, nullptr};
    item.addr = const_cast<uint64_t*>(addr);
    item.value = at_least;
    Push(std::move(item));
    return Status();
  }

  Status WriteValue(uint64_t* addr, uint64_t value) override {
    if (addr == nullptr) {
      return absl::InvalidArgumentError("WriteValue: null address");
    }
    Item item{Item::kWriteValue, nullptr, nullptr};
    item.addr = addr;
    item.value = value;
    Push(std::move(item));
    return Status();
  }

  Status MemcpyAsync(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return Status();
    if (dst == nullptr || src == nullptr) {
      return absl::InvalidArgumentError("MemcpyAsync: null pointer");
    }
    return Enqueue([dst, src, bytes]() {
      std::memmove(dst, src, bytes);
      return Status();
    });
  }

  Status MemsetAsync(void* dst, int value, size_t bytes) override {
    if (bytes == 0) return Status();
    if (dst == nullptr) {
      return absl::InvalidArgumentError("MemsetAsync: null pointer");
    }
    return Enqueue([dst, value, bytes]() {
      std::memset(dst, value, bytes);
      return Status();
    });
  }

  Status Synchronize() override {
    std::unique_lock<std::mutex> lock(mu_);
    const uint64_t target = submitted_;
    ++sync_waiters_;
    done_cv_.wait(lock, [&] { return completed_ >= target; });
    --sync_waiters_;
    return errors_->Get();
  }

  void PushRecord(std::shared_ptr<RecordState> record) {
    Push(Item{Item::kRecord, nullptr, std::move(record)});
  }

 private:
  struct Item {
    enum Kind { kWork, kRecord, kWait, kWaitValue, kWriteValue } kind;
    HostWork work;
    std::shared_ptr<RecordState> record;
    uint64_t* addr = nullptr;  // kWaitValue, kWriteValue
    uint64_t value = 0;
  };

  void Push(Item item) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(item));
      ++submitted_;
      pending_.fetch_add(1, std::memory_order_release);
      wake = sleeping_;
    }
    if (wake) wake_cv_.notify_one();
  }

  void Run() {
    if (!options_.name.empty()) {
      std::string thread_name = options_.name.substr(0, 15);
      pthread_setname_np(pthread_self(), thread_name.c_str());
    }
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (queue_.empty()) {
        if (stop_) return;
        lock.unlock();
        for (int i = 0; i < kSpinYields &&
                        pending_.load(std::memory_order_acquire) == 0;
             ++i) {
          std::this_thread::yield();
        }
        lock.lock();
        while (queue_.empty() && !stop_) {
          sleeping_ = true;
          wake_cv_.wait(lock);
          sleeping_ = false;
        }
        continue;
      }
      Item item = std::move(queue_.front());
      queue_.pop_front();
      pending_.fetch_sub(1, std::memory_order_relaxed);
      Status error = errors_->Get();
      lock.unlock();
      Status result = Execute(item, std::move(error));
      item = Item{};  // release captures outside the lock
      lock.lock();
      if (!result.ok()) errors_->Fail(std::move(result));
      ++completed_;
      if (sync_waiters_ > 0) done_cv_.notify_all();
    }
  }

  // Runs one item given the stream's error state before it; returns the
  // error the stream should carry after it (OK to leave it unchanged).
  static Status Execute(Item& item, Status error) {
    switch (item.kind) {
      case Item::kWork:
        if (!error.ok()) return Status();  // skipped
        return item.work();
      case Item::kRecord:
        item.record->Complete(std::move(error));
        return Status();
      case Item::kWait:
        return item.record->Await();
      case Item::kWaitValue:
        ValueHub::Get().Await(item.addr, item.value);
        return Status();
      case Item::kWriteValue:
        // Also in the error state: CUDA cannot skip a stream write either.
        ValueHub::Get().Write(item.addr, item.value);
        return Status();
    }
    return Status();
  }

  const HostDevice* const device_;
  const StreamOptions options_;

  // std::mutex is no clang capability under libstdc++, so "guarded by" is a
  // comment here; the absl::Mutex annotations of comm/ are compiler-checked
  // (tools/tsa_check.sh).
  std::mutex mu_;
  std::condition_variable wake_cv_;  // worker sleeps here
  std::condition_variable done_cv_;  // Synchronize sleeps here
  std::deque<Item> queue_;  // guarded by mu_
  uint64_t submitted_ = 0;  // guarded by mu_
  uint64_t completed_ = 0;  // guarded by mu_
  int sync_waiters_ = 0;  // guarded by mu_
  bool sleeping_ = false;  // guarded by mu_
  bool stop_ = false;  // guarded by mu_
  const std::shared_ptr<HostStreamErrors> errors_ =
      std::make_shared<HostStreamErrors>();
  std::atomic<int64_t> pending_{0};  // queue length, for the idle spin
  std::thread worker_;

  friend class HostEvent;
};

class HostDevice final : public Device {
 public:
  DeviceKind kind() const override { return DeviceKind::kHost; }
  std::string name() const override { return "host"; }
  int ordinal() const override { return -1; }

  StatusOr<std::unique_ptr<Stream>> CreateStream(
      const StreamOptions& options) override {
    return std::unique_ptr<Stream>(new HostStream(this, options));
  }

  StatusOr<std::unique_ptr<Event>> CreateEvent() override {
    return std::unique_ptr<Event>(new HostEvent(this));
  }

  StatusOr<DeviceBuffer> Allocate(size_t bytes, size_t alignment) override {
    BATON_RETURN_IF_ERROR(CheckAllocationRequest(bytes, alignment));
    alignment = std::max(alignment, sizeof(void*));
    const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
    if (rounded < bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Allocate: ", bytes, " bytes overflows"));
    }
    void* p = std::aligned_alloc(alignment, rounded);
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("Allocate: host allocation of ", bytes, " bytes failed"));
    }
    return DeviceBuffer(p, bytes, [](void* q) { std::free(q); });
  }

  StatusOr<DeviceBuffer> AllocateValues(size_t count) override {
    if (count == 0 || count > (size_t{1} << 40)) {
      return absl::InvalidArgumentError(
          absl::StrCat("AllocateValues: bad count ", count));
    }
    void* p = std::calloc(count, sizeof(uint64_t));
    if (p == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("AllocateValues: ", count, " words failed"));
    }
    return DeviceBuffer(p, count * sizeof(uint64_t),
                        [](void* q) { std::free(q); });
  }

  void HostWriteValue(uint64_t* addr, uint64_t value) override {
    ValueHub::Get().Write(addr, value);
  }
};

Status HostEvent::Record(Stream& stream) {
  auto* host = dynamic_cast<HostStream*>(&stream);
  if (host == nullptr || host->device() != device_) {
    return absl::InvalidArgumentError(
        "Event::Record: the stream belongs to another device");
  }
  auto record = std::make_shared<RecordState>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    latest_ = record;
  }
  host->PushRecord(std::move(record));
  return Status();
}

Status HostStream::Wait(Event& event) {
  auto* host = dynamic_cast<HostEvent*>(&event);
  if (host == nullptr || host->device() != device_) {
    return absl::InvalidArgumentError(
        "Stream::Wait: the event belongs to another device");
  }
  std::shared_ptr<RecordState> record = host->latest();
  if (record == nullptr) return Status();  // never recorded: no-op
  Push(Item{Item::kWait, nullptr, std::move(record)});
  return Status();
}

}  // namespace

StatusOr<std::unique_ptr<Device>> CreateHostDevice() {
  return std::unique_ptr<Device>(new HostDevice());
}

}  // namespace baton
