// Makes "ucx" known to CreateCommunicator when this library is linked
// (alwayslink; see comm/backend_registry.h).
#include "baton/comm/backend_registry.h"
#include "baton/comm/ucx/ucx.h"

namespace baton {
namespace {

[[maybe_unused]] const bool kRegistered =
    internal::RegisterBackend("ucx", &CreateUcxCommunicator);

}  // namespace
}  // namespace baton
