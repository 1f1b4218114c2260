#include "baton/comm/backend_registry.h"

#include <map>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace baton::internal {
namespace {

struct Registry {
  absl::Mutex mu;
  std::map<std::string, BackendFactory> factories ABSL_GUARDED_BY(mu);
};

// Built on first use, so registrations from static initializers of other
// libraries never see an unconstructed table; never destroyed, so none see
// a destroyed one at exit.
Registry& TheRegistry() {
  static Registry* registry = new Registry;
  return *registry;
}

}  // namespace

bool RegisterBackend(const std::string& name, BackendFactory factory) {
  if (factory == nullptr || name.empty()) return false;
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  return r.factories.emplace(name, factory).second;
}

BackendFactory FindBackend(const std::string& name) {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  auto it = r.factories.find(name);
  return it == r.factories.end() ? nullptr : it->second;
}

std::vector<std::string> RegisteredBackends() {
  Registry& r = TheRegistry();
  absl::MutexLock lock(&r.mu);
  std::vector<std::string> out;
  for (const auto& [name, factory] : r.factories) out.push_back(name);
  return out;
}

}  // namespace baton::internal
