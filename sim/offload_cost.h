// Prices of the offload nodes of a step graph (Policy::offload, zenflow;
// scheduler/step_graph.h) on a cluster:
//   D2H / H2D        bytes / ClusterSpec::host_link_gbps (each GPU has its
//                    own host link; one copy at a time on the host-copy
//                    stream)
//   host OPT         shard elements / host_adam_gparams
//   host CAST        0: fused into the host AdamW's pass (ops/adamw.h)
//   ZenFlow          as the executor runs it (scheduler/step_graph.h):
//                    NORM (device) one read of the gradient shard; TOPK
//                    (device) AdamW over topk_ratio of the shard; D2H the
//                    whole gradient shard every step; the host OPT an
//                    accumulation pass every step (12 bytes an element at
//                    kHostStreamGBps), in the step; H2D the host shard
//                    once every update_interval steps. The host update
//                    (AdamW over the other 1 - topk_ratio, once a window)
//                    runs outside the step's graph (the executor's
//                    host-update stream) and is priced by ZenFlowStepSeconds.
//                    AR-NORM (one float per matrix column, run on
//                    selection steps) is priced as a collective every
//                    step, an upper bound.
// Under plain offload the host's work is serial with the step.
// Plain functions; thread-safe.
#ifndef BATON_SIM_OFFLOAD_COST_H_
#define BATON_SIM_OFFLOAD_COST_H_

#include <optional>

#include "baton/scheduler/step_graph.h"
#include "baton/sim/cluster.h"
#include "baton/sim/compute_model.h"

namespace baton::sim {

// ZenFlow's host accumulation (read the gradient, read and write the fp32
// sum: 12 bytes an element) streams through host memory at
// kHostStreamGBps per GPU whatever the host optimizer's speed: a DGX A100
// host's 410 GB/s over 8 GPUs is 51 GB/s, a DGX H100's 614 GB/s 77 GB/s
// (sim/cluster.h); the lower figure, rounded. A constant of this file until
// ClusterSpec has a host memory bandwidth.
inline constexpr double kHostStreamGBps = 50;
inline constexpr double kZenFlowAccumulateBytes = 12;

// Seconds of node `n` when it is an offload node (a host-link copy, a node
// of the host stream, a ZenFlow NORM or TOPK); nullopt for every other node.
std::optional<double> OffloadNodeSeconds(const scheduler::StepGraph& graph,
                                         const scheduler::Node& n,
                                         const ClusterSpec& cluster,
                                         const ComputeModel& kernels);

// Whether node `n` runs on the host stream of an offload graph.
bool OnHostStream(const scheduler::StepGraph& graph, const scheduler::Node& n);

// ZenFlow: seconds of one window's host update, every bucket's unselected
// elements through the host AdamW (host_adam_gparams). 0 without zenflow.
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
