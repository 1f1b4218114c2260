// One allocation per device holding every planned buffer of a step, and
// views into it.
//
// Debug (poison) mode, for the scheduler's stress tests. It catches a reuse
// race: a buffer's bytes overwritten by another buffer while it is live.
//   - At creation the whole arena is filled with the poison byte.
//   - MarkWritten(b, s): after b's writer, in stream order on s, records a
//     fingerprint (64-bit hash) of b's bytes.
//   - CheckIntact(b, s): before a read of b, in stream order on s, compares
//     the bytes with the fingerprint. A mismatch makes that host work fail
//     with DataLoss naming b (so the stream enters its error state and the
//     next Synchronize reports it); so does a read of b before MarkWritten.
//   - Release(b, s): after b's last use, checks as above, then fills b's
//     bytes with the poison byte, so a later reader of stale bytes sees
//     poison rather than plausible numbers.
// The hooks enqueue host work, so poison mode needs a host device; creating
// a poison-mode arena on a CUDA device returns Unimplemented. With poison
// mode off, the hooks do nothing and return OK.
//
// Thread safety: views may be used from any thread; the hooks may be called
// from any thread (their work runs on the given stream).
#ifndef BATON_MEMORY_ARENA_H_
#define BATON_MEMORY_ARENA_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "baton/memory/planner.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::memory {

struct ArenaOptions {
  bool poison = false;
  uint8_t poison_byte = 0xA5;
  size_t alignment = 256;  // of the base allocation
};

struct BufferView {
  void* data = nullptr;
  size_t bytes = 0;
};

class Arena {
 public:
  // Allocates plan.arena_bytes (at least 1) on `device`. The plan must
  // outlive the arena's use of names in error messages only (copied).
  static StatusOr<std::unique_ptr<Arena>> Create(Device& device,
                                                 const MemoryPlan& plan,
                                                 const ArenaOptions& options);

  size_t bytes() const { return buffer_.size(); }
  void* base() const { return buffer_.data(); }
  int num_buffers() const { return static_cast<int>(offsets_.size()); }
  bool poison() const { return options_.poison; }

  // OutOfRange for an unknown id.
  StatusOr<BufferView> View(BufferId b) const;

  Status MarkWritten(BufferId b, Stream& stream);
  Status CheckIntact(BufferId b, Stream& stream);
  Status Release(BufferId b, Stream& stream);

 private:
  struct Slot {
    std::atomic<uint64_t> fingerprint{0};
    std::atomic<bool> written{false};
  };
  Arena(DeviceBuffer buffer, const MemoryPlan& plan, ArenaOptions options);
  Status Check(BufferId b) const;

  DeviceBuffer buffer_;
  ArenaOptions options_;
  std::vector<size_t> offsets_;
  std::vector<size_t> sizes_;
  std::vector<std::string> names_;
  std::unique_ptr<Slot[]> slots_;
};

// A 64-bit hash of `bytes` bytes at `data` (not cryptographic).
uint64_t Fingerprint(const void* data, size_t bytes);

}  // namespace baton::memory

#endif  // BATON_MEMORY_ARENA_H_
