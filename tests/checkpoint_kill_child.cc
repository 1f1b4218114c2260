// The rank program of tests/checkpoint_kill_test.cc: two inproc ranks load
// the newest checkpoint in ROOT, train the toy model --steps steps and save
// into ROOT through a file layer that kills this process (SIGKILL, all
// ranks at once) at its --kill-at-th file operation of the save (-1:
// never). Exit 0 when the save completed, 1 with a message otherwise.
//
//   checkpoint_kill_child --root=DIR --steps=N --kill-at=K
//
// With --tmpfs-kib=N instead (a real full disk): in a mount namespace of
// its own, mounts a tmpfs of N KiB at DIR, saves step 3 from the initial
// values there, then step 5 from it, and prints what happened, one line
// each ("first: ...", "second: ...", "found: ...", "load: ..."); exit 3
// when it may not mount (not root), 0 otherwise.
//
//   checkpoint_kill_child --root=DIR --tmpfs-kib=N
#include <sched.h>
#include <sys/mount.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "baton/scheduler/checkpoint_format.h"
#include "baton/scheduler/testing/checkpoint_toy.h"
#include "baton/scheduler/testing/fault_fs.h"

namespace {

using namespace baton::scheduler::testing;  // NOLINT: a test program

int FullDisk(const std::string& root, int64_t kib) {
  if (unshare(CLONE_NEWNS) != 0 || mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
      mount("tmpfs", root.c_str(), "tmpfs", 0, absl::StrCat("size=", kib, "k").c_str()) != 0) {
    std::printf("cannot mount a tmpfs: %s\n", std::strerror(errno));
    return 3;
  }
  ToyRunSpec job;
  job.policy = Fp32Preset("baton");
  job.ranks = 2;
  job.steps = 3;
  job.save_root = root;
  const std::string first = RunToy(job);
  std::printf("first: %s\n", first.empty() ? "ok" : first.c_str());
  job.load = root;
  job.steps = 2;
  const std::string second = RunToy(job);
  std::printf("second: %s\n", second.empty() ? "ok" : second.c_str());
  auto found = baton::scheduler::FindCheckpoint(baton::scheduler::PosixFs(), root);
  std::printf("found: %s\n", found.ok() ? found->c_str() : found.status().ToString().c_str());
  job.save_root = "";
  const std::string load = RunToy(job);
  std::printf("load: %s\n", load.empty() ? "ok" : load.c_str());
  umount(root.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string root;
  int steps = 0;
  int64_t kill_at = -1, tmpfs_kib = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    const std::string key = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    bool ok = true;
    if (key == "--root") root = v;
    else if (key == "--steps") ok = absl::SimpleAtoi(v, &steps);
    else if (key == "--kill-at") ok = absl::SimpleAtoi(v, &kill_at);
    else if (key == "--tmpfs-kib") ok = absl::SimpleAtoi(v, &tmpfs_kib);
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "checkpoint_kill_child: bad argument %s\n", a.c_str());
      return 2;
    }
  }
  if (tmpfs_kib > 0) return FullDisk(root, tmpfs_kib);
  FaultFs fs;
  fs.Arm(kill_at, kill_at >= 0 ? FaultFs::Fault::kKill : FaultFs::Fault::kNone);
  ToyRunSpec job;
  job.policy = Fp32Preset("baton");
  job.ranks = 2;
  job.load = root;
  job.steps = steps;
  job.save_root = root;
  job.fs = &fs;
  const std::string err = RunToy(job);
  if (!err.empty()) {
    std::fprintf(stderr, "checkpoint_kill_child: %s\n", err.c_str());
    return 1;
  }
  std::printf("operations %lld\n", static_cast<long long>(fs.ops()));
  return 0;
}
