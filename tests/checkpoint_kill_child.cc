// The rank program of tests/checkpoint_kill_test.cc: two inproc ranks load
// the newest checkpoint in ROOT, train the toy model --steps steps and save
// into ROOT through a file layer that kills this process (SIGKILL, all
// ranks at once) at its --kill-at-th file operation of the save (-1:
// never). Exit 0 when the save completed, 1 with a message otherwise.
//
//   checkpoint_kill_child --root=DIR --steps=N --kill-at=K
#include <cstdio>
#include <string>

#include "absl/strings/numbers.h"
#include "baton/scheduler/testing/checkpoint_toy.h"
#include "baton/scheduler/testing/fault_fs.h"

int main(int argc, char** argv) {
  using namespace baton::scheduler::testing;  // NOLINT: a test program
  std::string root;
  int steps = 0;
  int64_t kill_at = -1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    const std::string key = a.substr(0, eq), v = eq == std::string::npos ? "" : a.substr(eq + 1);
    bool ok = true;
    if (key == "--root") root = v;
    else if (key == "--steps") ok = absl::SimpleAtoi(v, &steps);
    else if (key == "--kill-at") ok = absl::SimpleAtoi(v, &kill_at);
    else ok = false;
    if (!ok) {
      std::fprintf(stderr, "checkpoint_kill_child: bad argument %s\n", a.c_str());
      return 2;
    }
  }
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
