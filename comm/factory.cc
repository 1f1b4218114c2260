#include "comm/factory.h"

#include "absl/strings/str_cat.h"
#include "comm/inproc/inproc.h"
#include "comm/ucx/ucx.h"
#if defined(BATON_HAVE_NCCL)
#include "comm/nccl/nccl.h"
#endif

namespace baton {

std::vector<std::string> BuiltBackends() {
  std::vector<std::string> out = {"inproc", "ucx"};
#if defined(BATON_HAVE_NCCL)
  out.push_back("nccl");
#endif
  return out;
}

StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    const CommConfig& config) {
  if (config.size < 1 || config.rank < 0 || config.rank >= config.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator: rank ", config.rank, " is outside [0, ",
                     config.size, ")"));
  }
  if (config.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("communicator: timeout must be > 0");
  }
  if (config.device == nullptr) {
    return absl::InvalidArgumentError("communicator: device is null");
  }
  if (config.backend == "inproc") return CreateInprocCommunicator(config);
  if (config.backend == "ucx") return CreateUcxCommunicator(config);
  if (config.backend == "nccl") {
#if defined(BATON_HAVE_NCCL)
    return CreateNcclCommunicator(config);
#else
    return absl::UnavailableError(
        "communicator: backend 'nccl' is not built in (no CUDA toolkit with "
        "NCCL was found at build time)");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "communicator: unknown backend '", config.backend,
      "' (inproc, ucx, nccl)"));
}

}  // namespace baton
