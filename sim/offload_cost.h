// Prices of the offload nodes of a step graph (Policy::offload, zenflow;
// scheduler/step_graph.h) on a cluster, at the rates of sim/host_cost.h
// (HostRates for the graph's world size):
//   D2H / H2D        bytes / link_gbps (one copy at a time on the
//                    host-copy stream; the link shared as host_cost.h says)
//   host OPT         shard elements / opt_gparams
//   host CAST        0: fused into the host AdamW's pass (ops/adamw.h)
//   ZenFlow          as the executor runs it (scheduler/step_graph.h):
//                    NORM (device) one read of the gradient shard; TOPK
//                    (device) AdamW over topk_ratio of the shard; D2H the
//                    whole gradient shard every step; the host OPT an
//                    accumulation pass every step (12 bytes an element at
//                    the stream share), in the step; H2D the host shard
//                    once every update_interval steps. The host update
//                    (AdamW over the other 1 - topk_ratio, once a window)
//                    runs outside the step's graph (the executor's
//                    host-update stream) and is priced by ZenFlowStepSeconds.
//                    AR-NORM (one float per matrix column, run on
//                    selection steps) is priced as a collective every
//                    step, an upper bound.
// Under plain offload the host's work is serial with the step.
//
// offload_executor "deepspeed" prices DeepSpeed's executor instead
// (AsExecutorRunsIt, and the host optimizer's figures in host_cost.h):
// ZeRO-Offload (deepspeed/runtime/zero/stage_1_and_2.py, overlap_comm off,
// its default below stage 3: config.py overlap_comm_valid) copies each
// gradient partition down on the compute stream as its reduction ends, runs
// the host step after the backward, and copies the bf16 partition up
// before the next forward, serially; under ZenFlow
// (deepspeed/runtime/zenflow/) the copies are serial too and carry only the
// unselected (1 - topk_ratio) share of a shard: per step, in elements,
// (1 - k) x (1 + 1 / update_interval) of the parameters, the "1.13x model
// size per step" of DeepSpeed's ZenFlow blog at k = 0.1, interval 4.
// Plain functions; thread-safe.
#ifndef BATON_SIM_OFFLOAD_COST_H_
#define BATON_SIM_OFFLOAD_COST_H_

#include <optional>

#include "baton/scheduler/step_graph.h"
#include "baton/sim/cluster.h"
#include "baton/sim/compute_model.h"

namespace baton::sim {

// ZenFlow's host accumulation (read the gradient, read and write the fp32
// sum: 12 bytes an element) streams through host memory at the GPU's share
// of the host's streaming bandwidth (HostRates::stream_gbps).
inline constexpr double kZenFlowAccumulateBytes = 12;

// Seconds of node `n` when it is an offload node (a host-link copy, a node
// of the host stream, a ZenFlow NORM or TOPK); nullopt for every other node.
std::optional<double> OffloadNodeSeconds(const scheduler::StepGraph& graph,
                                         const scheduler::Node& n,
                                         const ClusterSpec& cluster,
                                         const ComputeModel& kernels);

// Whether node `n` runs on the host stream of an offload graph.
bool OnHostStream(const scheduler::StepGraph& graph, const scheduler::Node& n);

// The share of a shard's bytes the executor's copies carry: 1, or under
// DeepSpeed's ZenFlow the unselected 1 - topk_ratio.
double LinkShare(const scheduler::StepGraph& graph, const ClusterSpec& cluster);

// Elements one rank moves over its host link per step (both directions;
// H2D once per ZenFlow update window): the PCIe traffic the published
// figures count in "model sizes" when divided by the rank's shard elements.
double OffloadLinkElementsPerStep(const scheduler::StepGraph& graph,
                                  const ClusterSpec& cluster);

// The graph as the cluster's offload executor orders it: itself for baton's;
// for DeepSpeed's, a copy with the D2H and H2D nodes on the compute stream
// and, without ZenFlow, the first host node waiting for the last node of the
// compute stream issued before it.
scheduler::StepGraph AsExecutorRunsIt(const scheduler::StepGraph& graph,
                                      const ClusterSpec& cluster);

// ZenFlow: seconds of one window's host update, every bucket's unselected
// elements through the host optimizer (HostRates::opt_gparams). 0 without
// zenflow.
double ZenFlowHostUpdateSeconds(const scheduler::StepGraph& graph,
                                const ClusterSpec& cluster);

// ZenFlow's step time with bounded staleness d (Policy::zenflow_staleness,
// resolved), from `step_s`, the step's graph as simulated (device work, the
// copies and the host accumulation, not the host update), and
// `host_stream_s`, the host stream's busy time in it. The update H of a
// window ending at step e hides behind the device time of steps e + 1 ..
// e + d; a selection at step e + 1 waits for it after that step's forward
// and backward, so a window followed by a selection hides behind one step
// at most (d = 0: none). What is not hidden is exposed once a window:
//   step = step_s + (1 / update_interval) x mean over windows of
//          max(0, H - hidden steps x step_s),
// and never below the host's own work, host_stream_s + H / update_interval.
double ZenFlowStepSeconds(const scheduler::StepGraph& graph,
                          const ClusterSpec& cluster, double step_s,
                          double host_stream_s);

}  // namespace baton::sim

#endif  // BATON_SIM_OFFLOAD_COST_H_
