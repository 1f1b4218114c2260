// Devices, streams, events and device memory: the execution contract that
// every layer above builds on. Two implementations honour it exactly:
//
//   host  (CreateHostDevice)   each stream is a FIFO queue drained by its own
//                              worker thread; memory is aligned host memory.
//   cuda  (CreateCudaDevice)   each stream is a non-blocking cudaStream_t with
//                              a priority; events are timing-disabled
//                              cudaEvent_t; memory comes from cudaMalloc.
//
// The scheduler is tested on the host implementation, so the host one copies
// CUDA's semantics rather than approximating them.
//
// ---------------------------------------------------------------------------
// Stream/event protocol
// ---------------------------------------------------------------------------
// 1. Work enqueued on one stream runs in FIFO order, one item at a time.
//    Ordering two items on the same stream costs nothing.
// 2. Event::Record(s) captures all work enqueued on `s` so far. The record
//    completes when that work has completed. Recording again replaces the
//    event's "most recent record"; earlier records still complete on their
//    own streams.
// 3. Stream::Wait(e) makes all work enqueued on the waiting stream after the
//    call wait until the record that was e's most recent one AT THE TIME OF
//    THE CALL has completed (cudaStreamWaitEvent semantics). A later
//    re-record of `e` does not affect an earlier wait. Waiting on an event
//    that was never recorded is a no-op. Wait never blocks the calling
//    thread.
// 4. Cross-stream order exists only through Record + Wait. Issue order on the
//    host proves nothing across streams.
// 5. Memory reuse: bytes used by work on stream A may be reused by work on
//    stream B only after B waits on an event recorded on A after A's last
//    use. The memory planner adds exactly such edges.
// 6. The host never blocks inside a step: Record, Wait, Enqueue and the
//    *Async calls return as soon as the work is queued. Synchronize calls are
//    for the end of a step, tests and tear-down.
// 7. Host work must never wait for other host work, of any stream. On CUDA
//    the host functions of a context (cudaLaunchHostFunc) run on one driver
//    thread, one at a time, in the order they become ready: host work of
//    different streams may be serialized, so a host item that blocks until
//    another stream's host item has run deadlocks there. Host work may block
//    only on something that needs no other host work to make progress (a
//    thread of the caller, device work). The host implementation runs each
//    stream on its own thread and would not deadlock; code must not rely on
//    that.
// 8. Values: Stream::WaitValue(addr, v) makes all work enqueued on the
//    stream after the call wait until the 64-bit word at `addr` holds a
//    value w with (int64_t)(w - v) >= 0 (cuStreamWaitValue64 with
//    CU_STREAM_WAIT_VALUE_GEQ: a cyclic greater-or-equal).
//    Stream::WriteValue(addr, v) stores v at `addr` once all work enqueued
//    before it has completed (cuStreamWriteValue64). Both act on words of
//    Device::AllocateValues only; the host reads such a word with
//    HostReadValue and writes it with Device::HostWriteValue, which releases
//    waiting streams like a stream write. A wait on a value written LATER by
//    another thread is sound (unlike an event wait, rule 3): it waits for
//    the value, not for a record. Nothing times a WaitValue out: the code
//    that enqueues one must make sure the value gets written (on a failure
//    by HostWriteValue). Writes run also on a stream in its error state
//    (CUDA cannot skip them) and never put a stream into one. Wait and write
//    never block the calling thread. On CUDA the driver does not see the
//    order a value creates: a stream stuck in a wait can hold back other
//    streams that share its hardware queue (CUDA_DEVICE_MAX_CONNECTIONS),
//    so keep few waits in flight per device and let the writer be a stream
//    that is not behind the waiter.
//
// Work. A stream accepts two kinds of work:
//   - host work (Enqueue): a callable returning Status, run in stream order.
//     On a host stream it runs on the stream's worker thread; on a CUDA
//     stream it runs through cudaLaunchHostFunc on a CUDA-owned thread
//     shared by all streams (rule 7) and must not call CUDA APIs (a CUDA
//     rule).
//   - device work: on a CUDA stream, kernels and CUDA calls are enqueued by
//     the caller directly on native_handle() (a cudaStream_t). A kernel
//     launcher that supports both kinds checks kind(): host -> Enqueue a CPU
//     implementation, cuda -> launch on native_handle().
//   MemcpyAsync / MemsetAsync are provided for both kinds.
//
// Errors. When host work returns a non-OK Status, the stream enters an error
// state: later host work on it is skipped (CUDA kernels already enqueued
// still run: CUDA cannot skip them), the next Synchronize() returns that
// Status, and it stays sticky (like a CUDA sticky error) until the stream is
// destroyed. Records made on a failed stream complete carrying the error, and
// on a host stream a Wait on such a record puts the waiting stream into the
// same error state, so a failure never lets dependent work run on bad data.
//
// Thread safety. Device, Stream and Event are safe to use from several
// threads at once (issue order between threads is then whatever the threads
// make it). Objects of one device may not be mixed with another device's:
// that returns InvalidArgument.
//
// Lifetime. Destroying a Stream with pending work lets that work finish (the
// host destructor blocks until it has; the CUDA one returns at once, as
// cudaStreamDestroy does). An Event may be destroyed while records of it are
// pending; waits already issued on it stay valid. Streams and events must be
// destroyed before their Device.
#ifndef BATON_RUNTIME_DEVICE_H_
#define BATON_RUNTIME_DEVICE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/functional/any_invocable.h"
#include "baton/runtime/status.h"

namespace baton {

enum class DeviceKind { kHost, kCuda };

const char* DeviceKindName(DeviceKind kind);

// Host work: runs in stream order; a non-OK result puts the stream in its
// error state (see above).
using HostWork = absl::AnyInvocable<Status()>;

class Stream;

class Event {
 public:
  virtual ~Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  virtual DeviceKind kind() const = 0;

  // Captures the work enqueued on `stream` so far (rule 2). InvalidArgument
  // if `stream` belongs to another device.
  virtual Status Record(Stream& stream) = 0;

  // True when the most recent record has completed, or when never recorded.
  virtual StatusOr<bool> Query() = 0;

  // Blocks the calling thread until the most recent record has completed.
  // Returns the error the recorded stream carried, if any.
  virtual Status Synchronize() = 0;

 protected:
  Event() = default;
};

struct StreamOptions {
  // Lower runs first, as in CUDA (YaFSDP gives its comm stream -1). Clamped
  // to the device's range; the host implementation records it only.
  int priority = 0;
  // For traces and thread names; may be empty.
  std::string name;
};

// Puts one stream into its error state from any thread (Stream::error_sink).
class StreamErrorSink {
 public:
  virtual ~StreamErrorSink() = default;
  // At once, not in stream order: host work that has not started yet is
  // skipped and Synchronize returns the first error. A no-op once the
  // stream is destroyed.
  virtual void Fail(Status status) = 0;
};

class Stream {
 public:
  virtual ~Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  virtual DeviceKind kind() const = 0;
  virtual const std::string& name() const = 0;

  // Enqueues host work (see "Work" above).
  virtual Status Enqueue(HostWork work) = 0;

  // Rule 3. InvalidArgument if `event` belongs to another device.
  virtual Status Wait(Event& event) = 0;

  // Copies / fills `bytes` bytes in stream order. Pointers must be memory of
  // this device (or host memory for CUDA, which cudaMemcpyDefault accepts).
  virtual Status MemcpyAsync(void* dst, const void* src, size_t bytes) = 0;
  virtual Status MemsetAsync(void* dst, int value, size_t bytes) = 0;

  // Rule 8. `addr` must be a word of this device's AllocateValues. The
  // defaults return Unimplemented (for wrappers that forward a subset); the
  // host and CUDA streams implement both.
  virtual Status WaitValue(const uint64_t* addr, uint64_t at_least);
  virtual Status WriteValue(uint64_t* addr, uint64_t value);

  // For work that another thread completes on this stream's behalf (a
  // WaitValue whose value that thread writes): before it writes the value
  // on a failure, it fails the stream through the sink, so no Synchronize
  // that returns after the write misses the error, without host work
  // enqueued behind every wait. Null when the stream has none (the default,
  // for wrappers); the host and CUDA streams have one.
  virtual std::shared_ptr<StreamErrorSink> error_sink();

  // Blocks until all work enqueued so far has completed; returns the stream's
  // error state (OK if none).
  virtual Status Synchronize() = 0;

  // cudaStream_t for a CUDA stream, nullptr for a host stream.
  virtual void* native_handle() = 0;

 protected:
  Stream() = default;
};

// Owns one allocation of device memory; frees it on destruction. Move-only.
class DeviceBuffer {
 public:
  using Deleter = void (*)(void* ptr);
  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t bytes, Deleter deleter)
      : data_(data), bytes_(bytes), deleter_(deleter) {}
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      Reset();
      data_ = other.data_;
      bytes_ = other.bytes_;
      deleter_ = other.deleter_;
      other.data_ = nullptr;
      other.bytes_ = 0;
      other.deleter_ = nullptr;
    }
    return *this;
  }

  void* data() const { return data_; }
  size_t size() const { return bytes_; }

 private:
  void Reset() {
    if (data_ != nullptr && deleter_ != nullptr) deleter_(data_);
    data_ = nullptr;
    bytes_ = 0;
  }
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Deleter deleter_ = nullptr;
};

class Device {
 public:
  virtual ~Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual DeviceKind kind() const = 0;
  // "host" or "cuda:<ordinal> (<GPU name>)".
  virtual std::string name() const = 0;
  // The CUDA device ordinal; -1 for the host device.
  virtual int ordinal() const = 0;

  virtual StatusOr<std::unique_ptr<Stream>> CreateStream(
      const StreamOptions& options = {}) = 0;
  virtual StatusOr<std::unique_ptr<Event>> CreateEvent() = 0;

  // `bytes` > 0; `alignment` a power of two (CUDA allocations are at least
  // 256-byte aligned, larger alignments return InvalidArgument there).
  // Contents are unspecified. ResourceExhausted when memory runs out.
  virtual StatusOr<DeviceBuffer> Allocate(size_t bytes,
                                          size_t alignment = 256) = 0;

  // `count` > 0 zeroed 64-bit words for rule 8, readable and writable by
  // this device's streams and by the host (CUDA: mapped page-locked host
  // memory, cudaHostAllocMapped; host: ordinary memory).
  virtual StatusOr<DeviceBuffer> AllocateValues(size_t count) = 0;

  // Stores `value` at `addr` (a word of AllocateValues) from the calling
  // thread and releases the streams waiting for it (rule 8).
  virtual void HostWriteValue(uint64_t* addr, uint64_t value) = 0;

 protected:
  Device() = default;
};

// The host device. Never fails in practice; StatusOr for symmetry.
StatusOr<std::unique_ptr<Device>> CreateHostDevice();

// A CUDA device. Unavailable when baton was built without CUDA, when no
// driver or GPU is present, or when `ordinal` is out of range.
StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int ordinal = 0);

// Number of visible CUDA devices; 0 without CUDA, driver or GPU.
int CudaDeviceCount();

// True when this build includes the CUDA implementation.
bool BuiltWithCuda();

// Reads a word of Device::AllocateValues from the host (an acquire load).
uint64_t HostReadValue(const uint64_t* addr);

// The comparison of rule 8: (int64_t)(value - at_least) >= 0.
inline bool ValueReached(uint64_t value, uint64_t at_least) {
  return static_cast<int64_t>(value - at_least) >= 0;
}

// The argument checks every Device::Allocate applies: InvalidArgument for
// zero bytes or an alignment that is not a power of two.
Status CheckAllocationRequest(size_t bytes, size_t alignment);

}  // namespace baton

#endif  // BATON_RUNTIME_DEVICE_H_
