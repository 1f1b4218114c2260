// A cluster as the simulator sees it: GPU speed and memory, and the two
// link levels of a node-based cluster (NVLink inside a node, InfiniBand
// across nodes). Presets hold one set of constants per GPU type, shared by
// every model and size: nothing here is tuned per case.
//
// Every field can be overridden from JSON (ApplyClusterJson): a flat object
// with the field names below, e.g. {"nic_gbps": 25, "gpus_per_node": 4}.
// Plain data; copyable.
#ifndef BATON_SIM_CLUSTER_H_
#define BATON_SIM_CLUSTER_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"

namespace baton::sim {

// Whose executor runs an offloaded step (ClusterSpec::offload_executor).
enum class OffloadExecutor { kBaton, kDeepSpeed };
const char* OffloadExecutorName(OffloadExecutor e);  // "baton", "deepspeed"

struct ClusterSpec {
  std::string name;
  int gpus_per_node = 8;
  // Dense bf16 per GPU and device-copy bandwidth: the kernel table's times
  // scale by the table GPU's figures over these (sim/compute_model.h).
  double peak_tflops = 989;
  // Dense FP8 per GPU (H100 SXM 1979; 0: no FP8 tensor cores, A100):
  // float8 linears (sim/compute_model.h KernelStack) run their GEMMs at
  // the table's bf16 time x peak_tflops / fp8_tflops.
  double fp8_tflops = 1979;
  double hbm_gbps = 3000;       // measured device-copy bandwidth, GB/s
  double memory_gib = 80;       // device memory
  double reserved_gib = 4;      // context, NCCL buffers, fragmentation
  double nvlink_gbps = 370;     // ring busbw inside a node, GB/s per GPU
  double nic_gbps = 50;         // network bandwidth per GPU, GB/s
  double base_latency_us = 8.4;  // NCCL ring base latency
  double nvlink_hop_us = 3.4;    // per NVLink hop
  double net_hop_us = 14;        // per network hop
  double host_issue_us = 4;      // host time to issue one node
  // Stragglers: the coefficient of variation of one GPU's compute time per
  // step (clock and thermal variation, OS noise). Every rank waits for the
  // slowest at the step's collectives, so a step on N GPUs takes the
  // expected maximum of N such times (sim/simulator.h). An assumption, not
  // a published figure: 0 turns it off; set it from a cluster's own
  // per-rank step times.
  double straggler_cv = 0.005;
  // Offload (Policy::offload): the host side, priced by sim/host_cost.h
  // (docs/offload.md derives each default; the presets' sources are in
  // cluster.cc). The host of a node is shared by the node's ranks.
  //   host_cores            physical cores of the node
  //   host_mem_gbps         peak DRAM bandwidth of the node (sockets x
  //                         channels x MT/s x 8 bytes)
  //   host_stream_fraction  fraction of that peak a streaming kernel reaches
  //   pcie_gen              the GPU's host link: PCIe generation (x16)
  //   pcie_efficiency       pinned DMA copies' fraction of the link's raw rate
  //   gpus_per_pcie_switch  GPUs behind one x16 uplink to the host; their
  //                         copies share it
  //   host_pinned           1: the executor's host buffers are pinned
  //                         (page-locked); 0: pageable, staged by the driver
  //   offload_executor      whose executor runs the offload step: baton's
  //                         (copies overlapped, host update fused with the
  //                         cast) or DeepSpeed's (ZeRO-Offload as
  //                         deepspeed/runtime/zero/stage_1_and_2.py runs it)
  //   host_opt_bytes, host_opt_efficiency, host_core_gparams
  //                         the host optimizer: host memory bytes moved per
  //                         parameter, fraction of the streaming bandwidth it
  //                         reaches, parameters/s per core (1e9); 0: the
  //                         executor's figure (sim/host_cost.h)
  //   host_link_gbps, host_adam_gparams
  //                         overrides of the derived per-GPU copy rate (GB/s)
  //                         and host optimizer rate (1e9 parameters/s);
  //                         0: derived from the fields above
  int host_cores = 112;
  double host_mem_gbps = 614.4;
  double host_stream_fraction = 0.75;
  int pcie_gen = 5;
  double pcie_efficiency = 0.75;
  int gpus_per_pcie_switch = 2;
  int host_pinned = 1;
  OffloadExecutor offload_executor = OffloadExecutor::kBaton;
  double host_opt_bytes = 0;
  double host_opt_efficiency = 0;
  double host_core_gparams = 0;
  double host_link_gbps = 0;
  double host_adam_gparams = 0;
};

// "h100": 8 x H100 SXM per node, NVLink4, 8 x 400 Gb/s NDR per node.
// "a100": DGX A100 80 GB, NVLink3, 8 x 200 Gb/s HDR per node.
// "h800": 8 x H800 SXM per node (H100 compute, NVLink 400 GB/s), 8 x 400
// Gb/s per node (DeepSeek-V3's cluster).
// NotFound listing the names otherwise.
StatusOr<ClusterSpec> ClusterPreset(absl::string_view name);
std::vector<std::string> ClusterPresetNames();

inline constexpr int kMaxGpusPerNode = 4096;

// Overrides fields from a JSON object (bounded as runtime/json_input.h
// says), each within its range: gpus_per_node an integer in [1, 4096];
// rates and sizes (peak_tflops, *_gbps,
// memory_gib) in [1e-3, 1e6], reserved_gib and fp8_tflops in [0, 1e6];
// latencies (*_us) in [0, 1e6]; straggler_cv in [0, 1]; host_cores an integer in [1, 1e5];
// host_stream_fraction and pcie_efficiency in [1e-3, 1]; pcie_gen an
// integer in [3, 6]; gpus_per_pcie_switch an integer in [1, 4096];
// host_pinned 0 or 1; offload_executor "baton" or "deepspeed";
// host_opt_bytes, host_core_gparams, host_link_gbps and host_adam_gparams
// in [0, 1e6] and host_opt_efficiency in [0, 1] (0: derived).
// InvalidArgument naming an unknown field, a non-number, a
// non-integer integer field or a value outside its range (with the range);
// then ValidateCluster. Never throws.
Status ApplyClusterJson(absl::string_view json_text, ClusterSpec& spec);

// Every field finite and positive (reserved_gib, fp8_tflops, latencies,
// straggler_cv and the derived-when-0 host fields may be 0), and within its cluster-file
// range where that range has an upper bound below 1e6 (straggler_cv,
// fractions, pcie_gen, host_pinned, gpus_per_node and the other counts).
// InvalidArgument naming the field otherwise.
Status ValidateCluster(const ClusterSpec& spec);

}  // namespace baton::sim

#endif  // BATON_SIM_CLUSTER_H_
