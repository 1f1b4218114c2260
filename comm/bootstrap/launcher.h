// A local launcher, like `torchrun --standalone`: starts N copies of a
// command with the launch environment of comm/bootstrap/launch_env.h (RANK,
// WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
// BATON_STORE_PORT: a free port other than MASTER_PORT; BATON_STORE_TOKEN:
// 128 random bits per launch, so the ranks of another job cannot join),
// forwards their stdout and stderr line by line with a "[rank k] " prefix,
// and fails as a whole: when one rank exits with an error (or a signal), the
// others get SIGTERM, then SIGKILL after `grace`. Children die with the
// launcher (PR_SET_PDEATHSIG).
//
// Used by the `launch` tool, the multi-process tests and the benchmarks.
#ifndef BATON_COMM_BOOTSTRAP_LAUNCHER_H_
#define BATON_COMM_BOOTSTRAP_LAUNCHER_H_

#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "baton/runtime/status.h"

namespace baton {

struct LaunchOptions {
  int nproc = 1;
  // argv[0] is the program (a path; PATH is searched when it has no '/').
  std::vector<std::string> argv;
  std::string master_addr = "127.0.0.1";
  int master_port = 0;  // 0: pick a free port
  int store_port = 0;   // 0: pick a free port (not master_port)
  std::string store_token;  // empty: a fresh random one
  absl::Duration grace = absl::Seconds(5);
  // Kill everything after this long (zero: no limit).
  absl::Duration timeout = absl::ZeroDuration();
  bool prefix_output = true;
  // Stop the other ranks when one fails (the launcher's normal behaviour).
  // Fault tests turn it off to watch how the survivors fail on their own.
  bool stop_all_on_failure = true;
  std::map<std::string, std::string> extra_env;
};

struct LaunchResult {
  // 0 when every rank exited with 0; else the first failing rank's exit
  // code (128 + signal number for a signal).
  int exit_code = 0;
  int first_failed_rank = -1;
  std::vector<int> exit_codes;
  // One line per rank that did not exit 0, e.g. "rank 1 killed by signal 9".
  std::string summary;
};

// Errors only when the launch itself fails (bad options, fork failure).
StatusOr<LaunchResult> LaunchLocal(const LaunchOptions& options);

}  // namespace baton

#endif  // BATON_COMM_BOOTSTRAP_LAUNCHER_H_
