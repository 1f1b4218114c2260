#include "baton/tests/ucx_child.h"

#include "baton/comm/factory.h"

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

}  // namespace baton
