// Rank discovery from the launch environment.
//
// Looked up in this order; the first family whose rank variable is set wins:
//   torchrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE
//   SLURM     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE
//   Open MPI  OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE
//   PMI       PMI_RANK, PMI_SIZE
// MASTER_ADDR (default 127.0.0.1) and MASTER_PORT (default 29500) locate the
// store that rank 0 hosts, whichever family set the ranks.
//
// Errors (InvalidArgument, naming the variable): a value that is not an
// integer; a rank without a size or the other way round; rank outside
// [0, size); local rank outside [0, local size); a port outside 1..65535.
// No variable at all gives NotFound (a caller may then assume one rank).
#ifndef BATON_COMM_BOOTSTRAP_LAUNCH_ENV_H_
#define BATON_COMM_BOOTSTRAP_LAUNCH_ENV_H_

#include <functional>
#include <optional>
#include <string>

#include "baton/runtime/status.h"

namespace baton {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
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
