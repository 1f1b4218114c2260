#include "baton/scheduler/testing/fault_fs.h"

#include <csignal>

#include "absl/strings/str_cat.h"

namespace baton::scheduler::testing {
namespace {

class FaultFile final : public WritableFile {
 public:
  FaultFile(FaultFs& fs, std::unique_ptr<WritableFile> base, std::string path)
      : fs_(fs), base_(std::move(base)), path_(std::move(path)) {}
  Status Append(const void* data, size_t n) override {
    if (fs_.Hit(true)) {
      // A full disk (or a kill, which does not come back) in the middle of
      // the write: half of it is in the file.
      (void)base_->Append(data, n / 2);
      return fs_.NoSpace("write", path_);
    }
    return base_->Append(data, n);
  }
  Status Sync() override {
    if (fs_.Hit(true)) return fs_.NoSpace("fsync", path_);
    return base_->Sync();
  }
  Status Close() override {
    if (fs_.Hit(false)) return fs_.NoSpace("close", path_);
    return base_->Close();
  }

 private:
  FaultFs& fs_;
  std::unique_ptr<WritableFile> base_;
  std::string path_;
};

}  // namespace

void FaultFs::Arm(int64_t at, Fault fault) {
  fault_.store(static_cast<int>(fault));
  at_.store(at);
  ops_.store(0);
}

bool FaultFs::Hit(bool space) {
  const int64_t op = ops_.fetch_add(1);
  const auto fault = static_cast<Fault>(fault_.load());
  const int64_t at = at_.load();
  if (fault == Fault::kNone || at < 0 || op < at) return false;
  if (fault == Fault::kKill) {
    if (op == at) std::raise(SIGKILL);
    return false;
  }
  // A full disk stays full: every later operation that needs space fails.
  return op == at || space;
}

Status FaultFs::NoSpace(const std::string& op, const std::string& path) const {
  return absl::ResourceExhaustedError(
      absl::StrCat(op, " ", path, ": No space left on device (injected)"));
}

StatusOr<std::unique_ptr<WritableFile>> FaultFs::Create(const std::string& path) {
  if (Hit(true)) return NoSpace("create", path);
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<WritableFile> f, base_.Create(path));
  return std::unique_ptr<WritableFile>(new FaultFile(*this, std::move(f), path));
}

Status FaultFs::Rename(const std::string& from, const std::string& to) {
  if (Hit(false)) return NoSpace("rename", from);
  return base_.Rename(from, to);
}

Status FaultFs::SyncDir(const std::string& dir) {
  if (Hit(false)) return NoSpace("fsync directory", dir);
  return base_.SyncDir(dir);
}

Status FaultFs::MakeDirs(const std::string& dir) {
  if (Hit(true)) return NoSpace("mkdir", dir);
  return base_.MakeDirs(dir);
}

Status FaultFs::Remove(const std::string& path) {
  if (Hit(false)) return absl::UnavailableError(absl::StrCat("remove ", path, ": injected"));
  return base_.Remove(path);
}

}  // namespace baton::scheduler::testing
