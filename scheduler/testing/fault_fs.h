// A CheckpointFs (scheduler/checkpoint_fs.h) that forwards to another one
// and fails its k-th mutating operation, for the crash-consistency tests of
// checkpoints: a kill at any point of a save (the process raises SIGKILL
// there, an Append after writing half its bytes, as a torn write) and a
// disk that fills up (ResourceExhausted "No space left on device" from a
// Create, an Append, after writing half, or a Sync).
//
// Mutating operations, counted from 0 over all threads since the last Arm:
// Create, Append, Sync, Close, Rename, SyncDir, MakeDirs, Remove. Reads are
// not counted. Thread-safe.
#ifndef BATON_SCHEDULER_TESTING_FAULT_FS_H_
#define BATON_SCHEDULER_TESTING_FAULT_FS_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "baton/scheduler/checkpoint_fs.h"

namespace baton::scheduler::testing {

class FaultFs final : public CheckpointFs {
 public:
  enum class Fault { kNone, kKill, kNoSpace };
  explicit FaultFs(CheckpointFs& base = PosixFs()) : base_(base) {}

  // Operation `at` (and, for kNoSpace, every later one that can meet a full
  // disk) fails with `fault`; resets the count.
  void Arm(int64_t at, Fault fault);
  // Mutating operations since the last Arm.
  int64_t ops() const { return ops_.load(); }

  StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& path) override;
  StatusOr<std::unique_ptr<ReadableFile>> Open(const std::string& path) override {
    return base_.Open(path);
  }
  Status Rename(const std::string& from, const std::string& to) override;
  Status SyncDir(const std::string& dir) override;
  Status MakeDirs(const std::string& dir) override;
  Status Remove(const std::string& path) override;
  StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    return base_.List(dir);
  }
  bool IsDir(const std::string& path) override { return base_.IsDir(path); }

  // Counts one operation; true when it must fail (a kill does not return).
  // `space`: the operation can meet a full disk.
  bool Hit(bool space);
  Status NoSpace(const std::string& op, const std::string& path) const;

 private:
  CheckpointFs& base_;
  std::atomic<int64_t> ops_{0};
  std::atomic<int64_t> at_{-1};
  std::atomic<int> fault_{0};
};

}  // namespace baton::scheduler::testing

#endif  // BATON_SCHEDULER_TESTING_FAULT_FS_H_
