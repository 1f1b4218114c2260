// launch: start N local ranks of a command (like torchrun --standalone).
//
//   launch --nproc=N [--master-port=P] [--store-port=P] [--timeout=SECONDS]
//          [--keep-going] -- cmd [args...]
//
// The ranks get MASTER_PORT (torchrun's variable; free port by default),
// BATON_STORE_PORT (baton's store; another free port by default) and a
// fresh BATON_STORE_TOKEN. When a rank fails the others are stopped, unless
// --keep-going (fault tests: watch how the survivors fail on their own).
//
// Exit code: 0 if every rank exited 0, else the first failing rank's code;
// 2 for bad usage.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "baton/comm/bootstrap/launcher.h"
#include "baton/runtime/output_file.h"
#include "baton/runtime/version.h"

namespace {
int Usage(const char* why) {
  std::fprintf(stderr,
               "launch: %s\nusage: launch --nproc=N [--master-port=P] "
               "[--store-port=P] [--timeout=SECONDS] [--keep-going] -- command "
               "[args...]\n",
               why);
  return 2;
}
}  // namespace

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit("launch");
  baton::LaunchOptions o;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--version") {
      std::printf("launch (baton %s)\n", BATON_VERSION);
      return 0;
    }
    if (a == "--") {
      ++i;
      break;
    }
    int v = 0;
    if (a == "--keep-going") {
      o.stop_all_on_failure = false;
    } else if (absl::StartsWith(a, "--nproc=")) {
      if (!absl::SimpleAtoi(a.substr(8), &v) || v < 1) {
        return Usage("--nproc needs a positive integer");
      }
      o.nproc = v;
    } else if (absl::StartsWith(a, "--master-port=")) {
      if (!absl::SimpleAtoi(a.substr(14), &v) || v < 0 || v > 65535) {
        return Usage("--master-port needs 0..65535");
      }
      o.master_port = v;
    } else if (absl::StartsWith(a, "--store-port=")) {
      if (!absl::SimpleAtoi(a.substr(13), &v) || v < 0 || v > 65535) {
        return Usage("--store-port needs 0..65535");
      }
      o.store_port = v;
    } else if (absl::StartsWith(a, "--timeout=")) {
      if (!absl::SimpleAtoi(a.substr(10), &v) || v < 0) {
        return Usage("--timeout needs seconds >= 0");
      }
      o.timeout = absl::Seconds(v);
    } else {
      return Usage(("unknown flag " + a).c_str());
    }
  }
  for (; i < argc; ++i) o.argv.push_back(argv[i]);
  if (o.argv.empty()) return Usage("no command after --");
  auto result = baton::LaunchLocal(o);
  if (!result.ok()) {
    std::fprintf(stderr, "launch: %s\n",
                 std::string(result.status().message()).c_str());
    return 2;
  }
  if (!result->summary.empty()) {
    std::fprintf(stderr, "launch: %s", result->summary.c_str());
  }
  return result->exit_code;
}
