// What the multi-process ucx tests' rank programs share: a check that ends
// the rank with exit code 1 and says why, and one rank's environment (launch
// info, store, host device, stream) and ucx communicator.
#ifndef BATON_TESTS_UCX_CHILD_H_
#define BATON_TESTS_UCX_CHILD_H_

#include <cstddef>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "baton/comm/bootstrap/launch_env.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/communicator.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

// In a rank program's scenario (a function returning the exit code): when
// `cond` fails, prints it with the message and returns 1.
#define CHILD_CHECK(cond, ...)                                     \
  do {                                                             \
    if (!(cond)) {                                                 \
      std::fprintf(stderr, "CHECK failed: %s: %s\n", #cond,       \
                   absl::StrCat(__VA_ARGS__).c_str());             \
      return 1;                                                    \
    }                                                              \
  } while (0)

namespace baton {

struct ChildEnv {
  LaunchInfo info;
  std::unique_ptr<TcpStore> store;
  std::unique_ptr<Device> device;
  std::unique_ptr<Stream> stream;
};

// The launcher's variables, the job's store (20 s to reach it), a host
// device and one stream.
Status SetUpChild(ChildEnv* env);

// This rank's ucx communicator over env's store (collective: every rank).
StatusOr<std::unique_ptr<Communicator>> MakeUcxComm(ChildEnv& env,
                                                    absl::Duration timeout,
                                                    size_t chunk_bytes);

// This test binary's own path, which the parent launches as the rank
// program ("" if /proc/self/exe cannot be read).
std::string SelfPath();

// The main() of a test binary that is also its rank program: with
// --child=NAME runs `run_child(NAME)` and returns its exit code, else runs
// the gtest cases.
int ChildOrTestsMain(int argc, char** argv,
                     int (*run_child)(const std::string& name));

}  // namespace baton

#endif  // BATON_TESTS_UCX_CHILD_H_
