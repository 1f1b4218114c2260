// Makes "nccl" known to CreateCommunicator when this library is linked
// (alwayslink; see comm/backend_registry.h). In a build without NCCL the
// backend is registered as a factory that says so.
#include "baton/comm/backend_registry.h"

#if defined(BATON_HAVE_NCCL)
#include "baton/comm/nccl/nccl.h"
#endif

namespace baton {
namespace {

#if !defined(BATON_HAVE_NCCL)
StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CommConfig&) {
  return absl::UnavailableError(
      "communicator: backend 'nccl' is not built in (no CUDA toolkit with "
      "NCCL was found at build time)");
}
#endif

[[maybe_unused]] const bool kRegistered =
    internal::RegisterBackend("nccl", &CreateNcclCommunicator);

}  // namespace
}  // namespace baton
