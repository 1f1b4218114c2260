// What each node of a step graph costs on a cluster: the simulator's model
// per node (sim/simulator.h lists it), gathered in one place.
//
//   compute    forward / recompute / backward of a unit: the sum of its
//              kernels (sim/compute_model.h), plus the peers' own gradient
//              copies where they make them (fsdp1's flat-parameter
//              gradient, zero3's reduce-bucket copy; sources in the .cc);
//   collective sim/collective_cost.h over the node's mesh group, placed on
//              the cluster once per group;
//   copies     device copies, gradient accumulation and the cast as
//              memory-bound kernels (bytes read + written);
//   optimizer  the fused AdamW kernel over the bucket's shard;
//   offload    D2H / H2D and the host optimizer (sim/offload_cost.h).
//
// Latency is a node's own time; `work` is time at full link bandwidth,
// shared with the collectives that run at the same time (only collectives
// have work).
//
// Holds references to its arguments, which must outlive it. Thread-safe
// once built (const).
#ifndef BATON_SIM_NODE_COST_H_
#define BATON_SIM_NODE_COST_H_

#include <array>
#include <optional>

#include "baton/scheduler/step_graph.h"
#include "baton/sim/cluster.h"
#include "baton/sim/collective_cost.h"
#include "baton/sim/compute_model.h"

namespace baton::sim {

struct SimOptions;  // sim/simulator.h

struct NodeCost {
  double latency_s = 0;  // not shared
  double work_s = 0;     // at full link bandwidth; shared while concurrent
  bool comm = false;     // a collective (shares the links)
};

class NodeCoster {
 public:
  NodeCoster(const scheduler::StepGraph& graph, const ClusterSpec& cluster,
             const SimOptions& options, const ComputeModel& compute);

  NodeCost Cost(const scheduler::Node& node) const;

 private:
  NodeCost ComputeCost(const scheduler::Node& node) const;
  NodeCost Collective(CollectiveKind kind, double bytes,
                      scheduler::MeshGroup group) const;
  KernelSum WithGradientCopy(KernelSum k, int unit) const;

  const scheduler::StepGraph& g_;
  const ClusterSpec& c_;
  const SimOptions& o_;
  const ComputeModel& k_;
  // Placement of each mesh group the graph uses, by MeshGroup::bits().
  std::array<std::optional<GroupPlacement>, 1 << scheduler::kNumMeshDims> placement_;
};

}  // namespace baton::sim

#endif  // BATON_SIM_NODE_COST_H_
