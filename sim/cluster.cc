#include "baton/sim/cluster.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"

namespace baton::sim {
namespace {

struct Field {
  const char* name;
  double ClusterSpec::*d;
  int ClusterSpec::*i;
};

constexpr Field kFields[] = {
    {"gpus_per_node", nullptr, &ClusterSpec::gpus_per_node},
    {"peak_tflops", &ClusterSpec::peak_tflops, nullptr},
    {"hbm_gbps", &ClusterSpec::hbm_gbps, nullptr},
    {"memory_gib", &ClusterSpec::memory_gib, nullptr},
    {"reserved_gib", &ClusterSpec::reserved_gib, nullptr},
    {"nvlink_gbps", &ClusterSpec::nvlink_gbps, nullptr},
    {"nic_gbps", &ClusterSpec::nic_gbps, nullptr},
    {"base_latency_us", &ClusterSpec::base_latency_us, nullptr},
    {"nvlink_hop_us", &ClusterSpec::nvlink_hop_us, nullptr},
    {"net_hop_us", &ClusterSpec::net_hop_us, nullptr},
    {"host_issue_us", &ClusterSpec::host_issue_us, nullptr},
};

}  // namespace

std::vector<std::string> ClusterPresetNames() { return {"h100", "a100"}; }

StatusOr<ClusterSpec> ClusterPreset(absl::string_view name) {
  ClusterSpec c;
  c.name = std::string(name);
  if (name == "h100") {
    return c;  // the defaults above
  }
  if (name == "a100") {
    c.peak_tflops = 312;
    c.hbm_gbps = 1800;
    c.nvlink_gbps = 230;
    c.nic_gbps = 25;
    return c;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown cluster \"", name, "\"; presets: ",
                   absl::StrJoin(ClusterPresetNames(), ", ")));
}

Status ValidateCluster(const ClusterSpec& c) {
  for (const Field& f : kFields) {
    const double v = f.d != nullptr ? c.*(f.d) : c.*(f.i);
    const bool may_be_zero = std::string(f.name) == "reserved_gib" ||
                             std::string(f.name).find("_us") != std::string::npos;
    if (!(v > 0) && !(may_be_zero && v == 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster ", c.name, ": ", f.name, " must be positive, got ", v));
    }
  }
  return absl::OkStatus();
}

Status ApplyClusterJson(absl::string_view json_text, ClusterSpec& c) {
  nlohmann::json j = nlohmann::json::parse(json_text.begin(), json_text.end(),
                                           nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InvalidArgumentError("cluster file: not a JSON object");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    const Field* field = nullptr;
    for (const Field& f : kFields) {
      if (it.key() == f.name) field = &f;
    }
    if (it.key() == "name" && it->is_string()) {
      c.name = it->get<std::string>();
      continue;
    }
    if (field == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("cluster file: unknown field \"", it.key(), "\""));
    }
    if (!it->is_number()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster file: field \"", it.key(), "\" must be a number"));
    }
    if (field->d != nullptr) {
      c.*(field->d) = it->get<double>();
    } else {
      if (!it->is_number_integer()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cluster file: field \"", it.key(), "\" must be an integer"));
      }
      c.*(field->i) = it->get<int>();
    }
  }
  return ValidateCluster(c);
}

}  // namespace baton::sim
