#include "baton/sim/cluster.h"

#include <cmath>
#include <iterator>

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
  // ValidateCluster also holds programmatic specs to `hi` (fractions,
  // counts, enumerations); for the rates it is left to the simulator.
  bool bounded = false;
};

constexpr double kMaxRate = 1e6;  // TFLOP/s or GB/s per GPU
constexpr double kMaxUs = 1e6;    // one second of latency per hop or issue
constexpr int kMaxHostCores = 100'000;

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
    {"straggler_cv", &ClusterSpec::straggler_cv, nullptr, 0, 1, true},
    {"host_cores", nullptr, &ClusterSpec::host_cores, 1, kMaxHostCores, true},
    {"host_mem_gbps", &ClusterSpec::host_mem_gbps, nullptr, 1e-3, kMaxRate},
    {"host_stream_fraction", &ClusterSpec::host_stream_fraction, nullptr, 1e-3, 1, true},
    {"pcie_gen", nullptr, &ClusterSpec::pcie_gen, 3, 6, true},
    {"pcie_efficiency", &ClusterSpec::pcie_efficiency, nullptr, 1e-3, 1, true},
    {"gpus_per_pcie_switch", nullptr, &ClusterSpec::gpus_per_pcie_switch, 1,
     kMaxGpusPerNode, true},
    {"host_pinned", nullptr, &ClusterSpec::host_pinned, 0, 1, true},
    {"host_opt_bytes", &ClusterSpec::host_opt_bytes, nullptr, 0, kMaxRate},
    {"host_opt_efficiency", &ClusterSpec::host_opt_efficiency, nullptr, 0, 1, true},
    {"host_core_gparams", &ClusterSpec::host_core_gparams, nullptr, 0, kMaxRate},
    {"host_link_gbps", &ClusterSpec::host_link_gbps, nullptr, 0, kMaxRate},
    {"host_adam_gparams", &ClusterSpec::host_adam_gparams, nullptr, 0, kMaxRate},
};

constexpr const char* kExecutorNames[] = {"baton", "deepspeed"};

}  // namespace

const char* OffloadExecutorName(OffloadExecutor e) {
  return kExecutorNames[static_cast<int>(e)];
}

std::vector<std::string> ClusterPresetNames() { return {"h100", "a100", "h800"}; }

StatusOr<ClusterSpec> ClusterPreset(absl::string_view name) {
  ClusterSpec c;
  c.name = std::string(name);
  // Host fields (docs/offload.md):
  //   h100  DGX H100: 2 x Intel Xeon Platinum 8480C, 56 cores each; 2 x 8
  //         channels of DDR5-4800 (2 x 8 x 4800e6 x 8 B = 614.4 GB/s); GPUs
  //         on PCIe Gen5 x16. GPUs per PCIe switch: not found for DGX H100
  //         in the sources read, taken as DGX A100's 2.
  //   a100  DGX A100: 2 x AMD EPYC 7742, 64 cores each; 2 x 8 channels of
  //         DDR4-3200 (409.6 GB/s); PCIe Gen4 x16 through four PCIe
  //         switches for eight GPUs (2 per switch).
  //   both  host_stream_fraction 0.75: STREAM reaches 74-78% of the DDR4
  //         wire rate in TI's published runs (SPRAD45, table 3-3), about
  //         what server STREAM results show; pcie_efficiency 0.75: NVIDIA's
  //         CUDA FAQ measured up to 6.0 GB/s pinned on PCIe 2.0 x16 (8 GB/s
  //         raw); copies pinned as baton's are (scheduler/offload.h).
  if (name == "h100") {
    return c;  // the defaults above
  }
  if (name == "h800") {
    // H800 SXM: the H100's compute and memory (NVIDIA's H800 datasheet: the
    // same 989 dense bf16 / 1979 fp8 TFLOP/s and 80 GB HBM3) with NVLink cut
    // to 400 GB/s (bidirectional; the H100's 900): the ring busbw measured
    // on the H100 (370) scaled by 400 / 900 = 164 GB/s, which DeepEP's
    // README gives as "~160 GB/s" measured on H800. Network: one 400 Gb/s
    // ConnectX-7 per GPU (DeepSeek-V3, arXiv 2412.19437 sec. 3.1: the
    // H800 cluster's InfiniBand) = 50 GB/s, as the h100 preset.
    c.nvlink_gbps = 370.0 * 400 / 900;
    return c;
  }
  if (name == "a100") {
    c.peak_tflops = 312;
    c.fp8_tflops = 0;
    c.hbm_gbps = 1800;
    c.nvlink_gbps = 230;
    c.nic_gbps = 25;
    c.host_cores = 128;
    c.host_mem_gbps = 409.6;
    c.pcie_gen = 4;
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
    if (f.bounded && (v < f.lo || v > f.hi)) {
      return absl::InvalidArgumentError(absl::StrCat("cluster ", c.name, ": ", f.name,
                                                     " must be in [", f.lo, ", ", f.hi,
                                                     "], got ", v));
    }
  }
  if (c.gpus_per_node > kMaxGpusPerNode) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cluster: gpus_per_node must be at most ", kMaxGpusPerNode));
  }
  const int e = static_cast<int>(c.offload_executor);
  if (e < 0 || e >= static_cast<int>(std::size(kExecutorNames))) {
    return absl::InvalidArgumentError(
        absl::StrCat("cluster ", c.name, ": offload_executor out of range: ", e));
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
    if (it.key() == "offload_executor") {
      bool found = false;
      if (it->is_string()) {
        for (size_t k = 0; k < std::size(kExecutorNames); ++k) {
          if (it->get_ref<const std::string&>() == kExecutorNames[k]) {
            c.offload_executor = static_cast<OffloadExecutor>(k);
            found = true;
          }
        }
      }
      if (!found) {
        return absl::InvalidArgumentError(absl::StrCat(
            "cluster file: field \"offload_executor\" must be one of \"",
            absl::StrJoin(kExecutorNames, "\", \""), "\""));
      }
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
