#include "baton/comm/factory.h"

#include <atomic>
#include <thread>

#include "absl/strings/str_cat.h"
#include "baton/comm/backend_registry.h"
#include "baton/comm/inproc/inproc.h"

namespace baton {
namespace {

// The backends that live in their own library: what to link to get them.
const char* LinkHint(const std::string& backend) {
  if (backend == "ucx") {
    return "link //:baton_ucx (Bazel), baton::ucx (CMake) or -lbaton_ucx";
  }
  if (backend == "nccl") {
    return "link //:baton_nccl (Bazel), baton::nccl (CMake) or -lbaton_nccl";
  }
  return nullptr;
}

}  // namespace

std::vector<std::string> BuiltBackends() {
  std::vector<std::string> out = {"inproc"};
  for (auto& name : internal::RegisteredBackends()) out.push_back(name);
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
  if (auto factory = internal::FindBackend(config.backend)) {
    return factory(config);
  }
  if (const char* hint = LinkHint(config.backend)) {
    return absl::UnavailableError(
        absl::StrCat("communicator: backend '", config.backend,
                     "' is not linked into this program (", hint, ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "communicator: unknown backend '", config.backend,
      "' (inproc, ucx, nccl)"));
}

StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateInprocGroup(
    int n, const CommConfig& base) {
  if (n < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("inproc group: size must be positive, got ", n));
  }
  if (base.recorder != nullptr) {
    return absl::InvalidArgumentError(
        "inproc group: base.recorder must be null (each rank records into a "
        "flight recorder of its own)");
  }
  static std::atomic<int> counter{0};
  const std::string group =
      base.group.empty() ? absl::StrCat("inproc-group-", counter++) : base.group;
  std::vector<std::unique_ptr<Communicator>> comms(n);
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CommConfig cfg = base;
      cfg.backend = "inproc";
      cfg.rank = r;
      cfg.size = n;
      cfg.group = group;
      auto c = CreateCommunicator(cfg);
      if (c.ok()) {
        comms[r] = std::move(*c);
      } else {
        status[r] = c.status();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < n; ++r) {
    if (!status[r].ok()) {
      return Status(status[r].code(),
                    absl::StrCat("inproc rank ", r, ": ", status[r].message()));
    }
  }
  return comms;
}

}  // namespace baton
