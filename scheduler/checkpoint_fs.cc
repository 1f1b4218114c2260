#include "baton/scheduler/checkpoint_fs.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace baton::scheduler {
namespace {

Status Errno(int err, absl::string_view op, absl::string_view path) {
  const std::string msg = absl::StrCat(op, " ", path, ": ", std::strerror(err));
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(msg);
    case ENOENT:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    default:
      return absl::UnavailableError(msg);
  }
}

class PosixWritable final : public WritableFile {
 public:
  PosixWritable(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritable() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status Append(const void* data, size_t n) override {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
      if (w < 0) {
        if (errno == EINTR) continue;
        return Errno(errno, "write", path_);
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
    return absl::OkStatus();
  }
  Status Sync() override {
    if (::fsync(fd_) != 0) return Errno(errno, "fsync", path_);
    return absl::OkStatus();
  }
  Status Close() override {
    const int fd = fd_;
    fd_ = -1;
    if (fd >= 0 && ::close(fd) != 0) return Errno(errno, "close", path_);
    return absl::OkStatus();
  }

 private:
  int fd_;
  std::string path_;
};

class PosixReadable final : public ReadableFile {
 public:
  PosixReadable(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixReadable() override { ::close(fd_); }
  StatusOr<int64_t> Size() override {
    struct stat st;
    if (::fstat(fd_, &st) != 0) return Errno(errno, "stat", path_);
    return static_cast<int64_t>(st.st_size);
  }
  Status ReadAt(int64_t offset, void* out, size_t n) override {
    char* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t r = ::pread(fd_, p, std::min<size_t>(n, size_t{1} << 30), offset);
      if (r < 0) {
        if (errno == EINTR) continue;
        return Errno(errno, "read", path_);
      }
      if (r == 0) {
        return absl::OutOfRangeError(
            absl::StrCat("read ", path_, ": the file ends at byte ", offset));
      }
      p += r;
      n -= static_cast<size_t>(r);
      offset += r;
    }
    return absl::OkStatus();
  }

 private:
  int fd_;
  std::string path_;
};

class Posix final : public CheckpointFs {
 public:
  StatusOr<std::unique_ptr<WritableFile>> Create(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return Errno(errno, "create", path);
    return std::unique_ptr<WritableFile>(new PosixWritable(fd, path));
  }
  StatusOr<std::unique_ptr<ReadableFile>> Open(const std::string& path) override {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno(errno, "open", path);
    struct stat st;
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat("open ", path, ": not a regular file"));
    }
    return std::unique_ptr<ReadableFile>(new PosixReadable(fd, path));
  }
  Status Rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) {
      return Errno(errno, "rename", absl::StrCat(from, " to ", to));
    }
    return absl::OkStatus();
  }
  Status SyncDir(const std::string& dir) override {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return Errno(errno, "open directory", dir);
    const int rc = ::fsync(fd);
    const int err = errno;
    ::close(fd);
    if (rc != 0) return Errno(err, "fsync directory", dir);
    return absl::OkStatus();
  }
  Status MakeDirs(const std::string& dir) override {
    if (dir.empty()) return absl::InvalidArgumentError("mkdir: empty path");
    for (size_t at = 1; at <= dir.size(); ++at) {
      if (at != dir.size() && dir[at] != '/') continue;
      const std::string prefix = dir.substr(0, at);
      if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
        return Errno(errno, "mkdir", prefix);
      }
    }
    if (!IsDir(dir)) {
      return absl::FailedPreconditionError(absl::StrCat("mkdir ", dir, ": not a directory"));
    }
    return absl::OkStatus();
  }
  Status Remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0 && errno != ENOENT) return Errno(errno, "remove", path);
    return absl::OkStatus();
  }
  StatusOr<std::vector<std::string>> List(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return Errno(errno, "list", dir);
    std::vector<std::string> names;
    while (const dirent* e = ::readdir(d)) {
      const std::string n = e->d_name;
      if (n != "." && n != "..") names.push_back(n);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
  bool IsDir(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }
};

}  // namespace

CheckpointFs& PosixFs() {
  static Posix* const fs = new Posix();
  return *fs;
}

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

Status WriteFileAtomically(CheckpointFs& fs, const std::string& dir, const std::string& name,
                           const std::string& tmp_name, absl::string_view data) {
  const std::string tmp = JoinPath(dir, tmp_name);
  Status st = [&]() -> Status {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, fs.Create(tmp));
    BATON_RETURN_IF_ERROR(f->Append(data.data(), data.size()));
    BATON_RETURN_IF_ERROR(f->Sync());
    BATON_RETURN_IF_ERROR(f->Close());
    BATON_RETURN_IF_ERROR(fs.Rename(tmp, JoinPath(dir, name)));
    return fs.SyncDir(dir);
  }();
  if (!st.ok()) (void)fs.Remove(tmp);
  return st;
}

StatusOr<std::string> ReadWholeFile(CheckpointFs& fs, const std::string& path,
                                    int64_t max_bytes) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<ReadableFile> f, fs.Open(path));
  BATON_ASSIGN_OR_RETURN(const int64_t size, f->Size());
  if (size > max_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is ", size, " bytes, more than the ", max_bytes, " allowed"));
  }
  std::string out(static_cast<size_t>(size), '\0');
  BATON_RETURN_IF_ERROR(f->ReadAt(0, out.data(), out.size()));
  return out;
}

}  // namespace baton::scheduler
