// Rank discovery from the launch environment.
//
// Looked up in this order; the first family whose rank variable is set wins:
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   SLURM     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//   Open MPI  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   PMI       PMI_RANK, PMI_SIZE
// MASTER_ADDR (default 127.0.0.1) is the host of rank 0, whichever family
// set the ranks. The store that rank 0 hosts (store.h) listens on
// BATON_STORE_PORT, by default MASTER_PORT + 1 (MASTER_PORT defaults to
// 29500, so 29501): under torchrun, MASTER_PORT is held by torchrun's own
// store. BATON_STORE_TOKEN (default empty) is the store's shared secret; the
// launcher (launcher.h) sets both.
//
// Errors (InvalidArgument, naming the variable): a value that is not an
// integer; a rank without a size or the other way round; rank outside
// [0, size); local rank outside [0, local size); a port outside 1..65535;
// BATON_STORE_PORT equal to MASTER_PORT; MASTER_PORT 65535 without
// BATON_STORE_PORT.
// No variable at all gives NotFound (a caller may then assume one rank).
#ifndef BATON_COMM_BOOTSTRAP_LAUNCH_ENV_H_
#define BATON_COMM_BOOTSTRAP_LAUNCH_ENV_H_

#include <functional>
#include <optional>
#include <string>

#include "baton/runtime/status.h"

namespace baton {

inline constexpr int kDefaultMasterPort = 29500;
inline constexpr int kDefaultStorePort = kDefaultMasterPort + 1;

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = kDefaultMasterPort;
  // The store's port and token (BATON_STORE_PORT, BATON_STORE_TOKEN).
  int store_port = kDefaultStorePort;
  std::string store_token;
  // "torchrun", "slurm", "openmpi" or "pmi".
  std::string source;
};

// Returns the variable's value, or nullopt when unset. Injected so tests do
// not touch the process environment.
using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// The real process environment.
EnvLookup ProcessEnv();

StatusOr<LaunchInfo> LaunchInfoFromEnv(const EnvLookup& env = ProcessEnv());

}  // namespace baton

#endif  // BATON_COMM_BOOTSTRAP_LAUNCH_ENV_H_
