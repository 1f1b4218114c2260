// The file layer under checkpoints (scheduler/checkpoint.h): the few file
// operations a save and a load make, behind an interface so that tests
// inject faults (a kill at the k-th operation, a disk that fills up:
// scheduler/testing/fault_fs.h) where a real disk cannot be made to fail.
//
// PosixFs() is the real one: open / write / fsync / rename / fsync of the
// directory, pread. Errors are Status naming the operation and the path
// with the system's message: ENOSPC and EDQUOT are ResourceExhausted ("no
// space left on device"), ENOENT is NotFound, EACCES and EPERM are
// PermissionDenied, anything else Unavailable.
//
// Crash consistency is built from these by WriteFileAtomically (a
// temporary name, write, fsync, close, rename, fsync of the directory): a
// reader sees either no file or the whole file, whenever the writer dies.
//
// Thread safety: PosixFs() and its files may be used from several threads
// (one file by one thread at a time).
#ifndef BATON_SCHEDULER_CHECKPOINT_FS_H_
#define BATON_SCHEDULER_CHECKPOINT_FS_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"

namespace baton::scheduler {

class WritableFile {
 public:
  virtual ~WritableFile() = default;  // closes without syncing
  // Appends all n bytes (short writes retried) or fails.
  [[nodiscard]] virtual Status Append(const void* data, size_t n) = 0;
  [[nodiscard]] virtual Status Sync() = 0;  // fsync
  [[nodiscard]] virtual Status Close() = 0;
};

class ReadableFile {
 public:
  virtual ~ReadableFile() = default;
  [[nodiscard]] virtual StatusOr<int64_t> Size() = 0;
  // Reads exactly n bytes at `offset`; OutOfRange naming the file when it
  // ends first.
  [[nodiscard]] virtual Status ReadAt(int64_t offset, void* out, size_t n) = 0;
};

class CheckpointFs {
 public:
  virtual ~CheckpointFs() = default;
  // Creates or truncates `path` for writing.
  [[nodiscard]] virtual StatusOr<std::unique_ptr<WritableFile>> Create(
      const std::string& path) = 0;
  [[nodiscard]] virtual StatusOr<std::unique_ptr<ReadableFile>> Open(
      const std::string& path) = 0;
  // rename(2): atomic, replaces `to`.
  [[nodiscard]] virtual Status Rename(const std::string& from, const std::string& to) = 0;
  // fsync of a directory (makes its renames and creations durable).
  [[nodiscard]] virtual Status SyncDir(const std::string& dir) = 0;
  // mkdir -p; OK when it exists as a directory.
  [[nodiscard]] virtual Status MakeDirs(const std::string& dir) = 0;
  // Removes a file; OK when it does not exist.
  [[nodiscard]] virtual Status Remove(const std::string& path) = 0;
  // Names of the entries of `dir` (not "." and ".."), sorted.
  [[nodiscard]] virtual StatusOr<std::vector<std::string>> List(const std::string& dir) = 0;
  // Whether `path` exists and is a directory.
  virtual bool IsDir(const std::string& path) = 0;
};

// The process's real file system.
CheckpointFs& PosixFs();

// dir + "/" + name.
std::string JoinPath(absl::string_view dir, absl::string_view name);

// Writes `data` to dir/name through dir/tmp_name: create, append, fsync,
// close, rename, fsync dir. On failure removes the temporary (best effort)
// and returns the first error.
[[nodiscard]] Status WriteFileAtomically(CheckpointFs& fs, const std::string& dir,
                                         const std::string& name, const std::string& tmp_name,
                                         absl::string_view data);

// Reads a whole file of at most max_bytes (InvalidArgument naming it when
// larger).
[[nodiscard]] StatusOr<std::string> ReadWholeFile(CheckpointFs& fs, const std::string& path,
                                                  int64_t max_bytes);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_CHECKPOINT_FS_H_
