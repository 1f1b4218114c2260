#include "baton/sim/cluster.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "baton/runtime/json_input.h"
#include "nlohmann/json.hpp"

namespace baton::sim {
namespace {

struct Field {
  const char* name;
  double ClusterSpec::*d;
  int ClusterSpec::*i;
  double lo, hi;  // the range a cluster file may set, inclusive
};

constexpr double kMaxRate = 1e6;  // TFLOP/s or GB/s per GPU
constexpr double kMaxUs = 1e6;    // one second of latency per hop or issue

constexpr Field kFields[] = {
    {"gpus_per_node", nullptr, &ClusterSpec::gpus_per_node, 1, kMaxGpusPerNode},
    {"peak_tflops", &ClusterSpec::peak_tflops, nullptr, 1e-3, kMaxRate},
    {"fp8_tflops", &ClusterSpec::fp8_tflops, nullptr, 0, kMaxRate},
    {"hbm_gbps", &ClusterSpec::hbm_gbps, nullptr, 1e-3, kMaxRate},
    {"memory_gib", &ClusterSpec::memory_gib, nullptr, 1e-3, kMaxRate},
    {"reserved_gib", &ClusterSpec::reserved_gib, nullptr, 0, kMaxRate},
    {"nvlink_gbps", &ClusterSpec::nvlink_gbps, nullptr, 1e-3, kMaxRate},
    {"nic_gbps", &ClusterSpec::nic_gbps, nullptr, 1e-3, kMaxRate},
    {"base_latency_us", &ClusterSpec::base_latency_us, nullptr, 0, kMaxUs},
    {"nvlink_hop_us", &ClusterSpec::nvlink_hop_us, nullptr, 0, kMaxUs},
    {"net_hop_us", &ClusterSpec::net_hop_us, nullptr, 0, kMaxUs},
    {"host_issue_us", &ClusterSpec::host_issue_us, nullptr, 0, kMaxUs},
    {"straggler_cv", &ClusterSpec::straggler_cv, nullptr, 0, 1},
    {"host_link_gbps", &ClusterSpec::host_link_gbps, nullptr, 1e-3, kMaxRate},
    {"host_adam_gparams", &ClusterSpec::host_adam_gparams, nullptr, 1e-6, kMaxRate},
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
    c.fp8_tflops = 0;
    c.hbm_gbps = 1800;
    c.nvlink_gbps = 230;
    c.nic_gbps = 25;
    c.host_link_gbps = 25;
    c.host_adam_gparams = 1.6;
    return c;
  }
  return absl::NotFoundError(
      absl::StrCat("unknown cluster \"", name, "\"; presets: ",
                   absl::StrJoin(ClusterPresetNames(), ", ")));
}

Status ValidateCluster(const ClusterSpec& c) {
  for (const Field& f : kFields) {
    const double v = f.d != nullptr ? c.*(f.d) : c.*(f.i);
    // Written so that NaN fails; the simulator refuses steps its clock
    // cannot hold, so extreme finite rates are left to it.
    const bool ok = std::isfinite(v) && (f.lo == 0 ? v >= 0 : v > 0);
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(
          "cluster ", c.name, ": ", f.name, " must be ",
          f.lo == 0 ? "finite and non-negative" : "finite and positive", ", got ", v));
    }
  }
  if (c.straggler_cv > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster ", c.name, ": straggler_cv must be in [0, 1], got ", c.straggler_cv));
  }
  if (c.gpus_per_node > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster: gpus_per_node must be at most ", kMaxGpusPerNode));
  }
  return absl::OkStatus();
}

Status ApplyClusterJson(absl::string_view json_text, ClusterSpec& c) {
  BATON_ASSIGN_OR_RETURN(const nlohmann::json j,
                         ParseJsonInput(json_text, "cluster file"));
  if (!j.is_object()) {
    return absl::InvalidArgumentError("cluster file: not a JSON object");
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "name") {
      if (!it->is_string() || it->get_ref<const std::string&>().size() > 256) {
        return absl::InvalidArgumentError(
            "cluster file: field \"name\" must be a string of at most 256 bytes");
      }
      c.name = it->get<std::string>();
      continue;
    }
    const Field* field = nullptr;
    for (const Field& f : kFields) {
      if (it.key() == f.name) field = &f;
    }
    if (field == nullptr) {
      std::string key = it.key();
      if (key.size() > 64) key = absl::StrCat(key.substr(0, 61), "...");
      return absl::InvalidArgumentError(
          absl::StrCat("cluster file: unknown field \"", key, "\""));
    }
    const std::string what = absl::StrCat("cluster file: field \"", field->name, "\"");
    if (field->d != nullptr) {
      BATON_ASSIGN_OR_RETURN(c.*(field->d),
                             JsonNumber(*it, what, field->lo, field->hi));
    } else {
      BATON_ASSIGN_OR_RETURN(
          const int64_t v,
          JsonInt(*it, what, static_cast<int64_t>(field->lo),
                  static_cast<int64_t>(field->hi)));
      c.*(field->i) = static_cast<int>(v);
    }
  }
  return ValidateCluster(c);
}

}  // namespace baton::sim
