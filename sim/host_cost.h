// The host side of an offloaded step on one node: how fast a GPU's copies
// cross its host link and how fast the host optimizer updates its shard,
// from the node's hardware (sim/cluster.h) and the executor's own figures.
// docs/offload.md derives every default and lists the sources.
//
// The ranks of a node run their host steps at the same time (data-parallel
// steps are in lockstep), so they share the node's host:
//   ranks          min(world size, gpus_per_node): the ranks on one node
//   stream share   host_mem_gbps x host_stream_fraction / ranks (GB/s)
//   link           pinned: PCIe x16 raw rate of pcie_gen x pcie_efficiency,
//                  over the ranks whose copies share an uplink
//                  (min(gpus_per_pcie_switch, ranks)); pageable
//                  (host_pinned 0): the driver stages every byte through a
//                  pinned buffer with a host memcpy (2 bytes of host
//                  traffic per byte at the stream share) that this model
//                  does not overlap with the DMA: 1 / (1/pinned + 2/share)
//   optimizer      min(memory: stream share x efficiency / bytes per
//                  parameter, cores: host_cores / ranks x parameters/s per
//                  core), in parameters per second per GPU
// Executors (ClusterSpec::offload_executor), their host optimizer figures:
//   baton      30 bytes a parameter (ops/host_adamw.h: fp32 master, two
//              moments read and written, the fp32 gradient shard read, the
//              bf16 cast written in the same pass), 0.93 of the streaming
//              bandwidth (//bench:host_adamw, best row, idle development
//              machine), 1.2e9 parameters/s per core (2.47e9 on that
//              machine's 2 cores while memory-bound: a lower bound)
//   deepspeed  42 bytes a parameter (deepspeed/runtime/zero/stage_1_and_2.py
//              step() under cpu_offload: unscale_and_clip_grads multiplies
//              the fp32 gradient partition in place, 8; DeepSpeedCPUAdam
//              reads fp32 param, grad and moments and writes param and
//              moments, 28; the fp32 partition is cast into the pinned bf16
//              buffer, 6), efficiency kDeepSpeedHostEfficiency (below),
//              per-core rate not published (baton's figure is used; it
//              binds on no host in the validation)
// A cluster file may override any of them (0: the executor's).
//
// Plain functions; thread-safe.
#ifndef BATON_SIM_HOST_COST_H_
#define BATON_SIM_HOST_COST_H_

#include "baton/sim/cluster.h"

namespace baton::sim {

struct HostOptimizerFigures {
  double bytes_per_param = 0;
  double efficiency = 0;    // of the streaming bandwidth
  double core_gparams = 0;  // 1e9 parameters/s per core
};

// DeepSpeed's ZeRO-Offload CPU path reaches this fraction of the host's
// streaming bandwidth. Derived from one published figure (docs/offload.md,
// "calibration"): the zenflow-corebinding blog's Qwen2.5-1.5B on 2 of a
// DGX A100's GPUs (2 x EPYC 7742) takes 240 ms per step with ZeRO-2 and
// 1365 ms with ZeRO-Offload (cores bound to ranks); the 1125 ms between
// them less the simulated copies (the gradient partition down, the bf16
// partition up, serial as DeepSpeed runs them) is the CPU path, 1.54e9
// parameters x 42 bytes in 0.75 s over the host: 0.28 of its 307 GB/s of
// streaming bandwidth. sim/offload_validation_test checks that row and
// validates the others against it.
inline constexpr double kDeepSpeedHostEfficiency = 0.28;

// The executor's own figures, before a cluster file's overrides.
HostOptimizerFigures ExecutorFigures(OffloadExecutor executor);

// A PCIe x16 link's raw rate per direction, GB/s: 15.75 (gen 3), 31.5 (4),
// 63 (5), 121 (6); `gen` outside 3..6 is clamped.
double PcieRawGbps(int gen);

struct HostRates {
  int ranks_on_node = 1;
  double link_gbps = 0;    // per GPU, GB/s, while the node's GPUs copy
  double stream_gbps = 0;  // per GPU share of the host's streaming bandwidth
  double opt_gparams = 0;  // host optimizer, 1e9 parameters/s per GPU
  bool opt_memory_bound = true;  // the memory limit is the lower one
  HostOptimizerFigures figures;  // after the cluster file's overrides
};

// The rates for a cluster (validated) and a step on `world_size` ranks.
HostRates ResolveHostRates(const ClusterSpec& cluster, int world_size);

}  // namespace baton::sim

#endif  // BATON_SIM_HOST_COST_H_
