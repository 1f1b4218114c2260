#include "baton/tests/ucx_child.h"

#include <unistd.h>

#include <climits>

#include "absl/strings/match.h"
#include "baton/comm/factory.h"
#include "gtest/gtest.h"

namespace baton {

Status SetUpChild(ChildEnv* env) {
  BATON_ASSIGN_OR_RETURN(env->info, LaunchInfoFromEnv());
  BATON_ASSIGN_OR_RETURN(env->store,
                         TcpStore::Create(env->info, absl::Seconds(20)));
  BATON_ASSIGN_OR_RETURN(env->device, CreateHostDevice());
  BATON_ASSIGN_OR_RETURN(env->stream, env->device->CreateStream());
  return Status();
}

StatusOr<std::unique_ptr<Communicator>> MakeUcxComm(ChildEnv& env,
                                                    absl::Duration timeout,
                                                    size_t chunk_bytes) {
  CommConfig cfg;
  cfg.backend = "ucx";
  cfg.rank = env.info.rank;
  cfg.size = env.info.world_size;
  cfg.device = env.device.get();
  cfg.store = env.store.get();
  cfg.timeout = timeout;
  cfg.chunk_bytes = chunk_bytes;
  return CreateCommunicator(cfg);
}

std::string SelfPath() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, n) : std::string();
}

int ChildOrTestsMain(int argc, char** argv,
                     int (*run_child)(const std::string& name)) {
  for (int i = 1; i < argc; ++i) {
    if (absl::StartsWith(argv[i], "--child=")) {
      return run_child(std::string(argv[i] + 8));
    }
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace baton
