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
  // Offload (Policy::offload). Pinned host<->device copy bandwidth per GPU
  // (PCIe Gen5 x16 for H100: 64 GB/s raw, ~50 achieved; Gen4 x16 for A100:
  // 32 raw, ~25 achieved; typical pinned cudaMemcpy figures, not measured
  // here). And the host optimizer's throughput for one GPU's shard, in 1e9
  // parameters per second. baton's host AdamW (ops/host_adamw.h) is memory
  // bound: //bench:host_adamw measured 2.47e9 parameters/s (28 bytes each,
  // 69 GB/s, 0.93 of the in-place stream rate of the same run) on the
  // idle 2-core development machine, whose ~75 GB/s stream rate is about
  // one GPU's share of a DGX H100 host (2 sockets x 8 channels of
  // DDR5-4800, 614 GB/s, over 8 GPUs): h100 2.4. A DGX A100 host (2 x 8
  // channels of DDR4-3200, 410 GB/s) gives a GPU two thirds of that:
  // a100 1.6. Offload frameworks whose host step is slower set it from
  // their own figure (a cluster file's "host_adam_gparams"; DeepSpeed's
  // published 7B-on-4-A100 step implies about 0.25, sim/offload_sim_test).
  double host_link_gbps = 50;
  double host_adam_gparams = 2.4;
};

// "h100": 8 x H100 SXM per node, NVLink4, 8 x 400 Gb/s NDR per node.
// "a100": DGX A100 80 GB, NVLink3, 8 x 200 Gb/s HDR per node.
// NotFound listing the names otherwise.
StatusOr<ClusterSpec> ClusterPreset(absl::string_view name);
std::vector<std::string> ClusterPresetNames();

inline constexpr int kMaxGpusPerNode = 4096;

// Overrides fields from a JSON object (bounded as runtime/json_input.h
// says), each within its range: gpus_per_node an integer in [1, 4096];
// rates and sizes (peak_tflops, *_gbps,
// memory_gib) in [1e-3, 1e6], reserved_gib and fp8_tflops in [0, 1e6]; latencies (*_us)
// in [0, 1e6]; straggler_cv in [0, 1]. InvalidArgument naming an unknown
// field, a non-number, a
// non-integer gpus_per_node or a value outside its range (with the range);
// then ValidateCluster. Never throws.
Status ApplyClusterJson(absl::string_view json_text, ClusterSpec& spec);

// Every field finite and positive (reserved_gib, fp8_tflops, latencies and
// straggler_cv may be 0), straggler_cv at most 1, gpus_per_node at most
// kMaxGpusPerNode.
// InvalidArgument naming the field otherwise.
Status ValidateCluster(const ClusterSpec& spec);

}  // namespace baton::sim

#endif  // BATON_SIM_CLUSTER_H_
