// Prices of the offload nodes of a step graph (Policy::offload, zenflow;
// scheduler/step_graph.h) on a cluster:
//   D2H / H2D        bytes / ClusterSpec::host_link_gbps (each GPU has its
//                    own host link; one copy at a time on the host-copy
//                    stream)
//   host OPT         shard elements / host_adam_gparams
//   host CAST        0: fused into the host AdamW's pass (ops/adamw.h)
//   ZenFlow          TOPK (device): AdamW over topk_ratio of the shard
//                    plus the column-norm pass over the gradient shard
//                    every select_interval steps; D2H, H2D and the host
//                    OPT move / update the other (1 - topk_ratio) of the
//                    shard once every update_interval steps, so each costs
//                    (1 - topk_ratio) / update_interval of the full copy or
//                    update per step.
// With zenflow the host's work overlaps the following steps (bounded
// staleness), so a step takes max(device time, host time per step)
// (StepWithAsyncHost); under plain offload it is serial with the step.
// Plain functions; thread-safe.
#ifndef BATON_SIM_OFFLOAD_COST_H_
#define BATON_SIM_OFFLOAD_COST_H_

#include <optional>

#include "baton/scheduler/step_graph.h"
#include "baton/sim/cluster.h"
#include "baton/sim/compute_model.h"

namespace baton::sim {

// Seconds of node `n` when it is an offload node (a host-link copy, a node
// of the host stream, a ZenFlow TOPK); nullopt for every other node.
std::optional<double> OffloadNodeSeconds(const scheduler::StepGraph& graph,
                                         const scheduler::Node& n,
                                         const ClusterSpec& cluster,
                                         const ComputeModel& kernels);

// Whether node `n` runs on the host stream of an offload graph.
bool OnHostStream(const scheduler::StepGraph& graph, const scheduler::Node& n);

}  // namespace baton::sim

#endif  // BATON_SIM_OFFLOAD_COST_H_
