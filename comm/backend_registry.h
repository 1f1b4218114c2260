// How a backend library plugs into CreateCommunicator (comm/factory.h).
// Not part of the API a trainer uses; it is what //:baton_ucx and
// //:baton_nccl (libbaton_ucx.so, libbaton_nccl.so) are made of.
//
// inproc is built into the factory. Every other backend lives in its own
// library that registers itself from a static initializer:
//
//   static const bool kRegistered =
//       baton::internal::RegisterBackend("ucx", &CreateUcxCommunicator);
//
// and is linked with alwayslink (Bazel) or as a shared library, so that the
// initializer runs even though nothing names the backend's symbols. A program
// that did not link a backend gets, from CreateCommunicator, an Unavailable
// error naming the target to add.
//
// Thread safety: RegisterBackend may run concurrently with itself and with
// CreateCommunicator (a registry mutex guards the table).
#ifndef BATON_COMM_BACKEND_REGISTRY_H_
#define BATON_COMM_BACKEND_REGISTRY_H_

#include <memory>
#include <string>
#include <vector>

#include "baton/comm/comm_config.h"
#include "baton/comm/communicator.h"
#include "baton/runtime/status.h"

namespace baton::internal {

using BackendFactory =
    StatusOr<std::unique_ptr<Communicator>> (*)(const CommConfig& config);

// Registers `factory` under `name`; a second registration of the same name
// replaces nothing and returns false (the first one stays). Returns true
// when this call registered it. `factory` must not be null.
bool RegisterBackend(const std::string& name, BackendFactory factory);

// The registered factory for `name`, or nullptr.
BackendFactory FindBackend(const std::string& name);

// Registered names, sorted (inproc is not among them: it is built in).
std::vector<std::string> RegisteredBackends();

}  // namespace baton::internal

#endif  // BATON_COMM_BACKEND_REGISTRY_H_
