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
// Parallel graphs (scheduler/parallel_graph.h) add:
//   segments   a block segment's kernels (ComputeModel::Segments); under
//              zb-h1 a backward is its input-gradient part and a
//              kBackwardWeight the weight-gradient GEMMs; a recomputed
//              block is its forward with its tensor collectives again;
//   fused      a collective inside a compute node: with c its time over
//              its group (alone on the links) and g the time of the
//              kernels it overlaps (the segment's GEMMs; for the ring the
//              attention), k chunks run as (g + c) / k + (k - 1) / k x
//              max(g, c) (a chunked pipeline); chunks 0 as max(g, c) (run
//              beside them); the ring as g / cp + (cp - 1) max(g / cp,
//              one step's transfer);
//   vocabulary the parallel embedding's and head's collectives over the
//              tensor group (all-reduce of the embedding output, or with
//              sequence parallelism reduce-scatter / all-gather; the
//              cross-entropy's three all-reduces of s floats), exposed in
//              the node;
//   experts    a MoE block's router, shared-expert, expert and unpermute
//              segments (sim/moe_cost.h MoeKernels) beside its attention
//              segments; a recompute node with segments is their forward;
//              kDispatch / kCombine over the expert group by the policy's
//              dispatcher (sim/moe_cost.h AllToAllTime), each going to the
//              experts (a forward dispatch, a backward DISPATCH-GRAD) in the
//              to-experts dtype, each coming back in bf16;
//   send       a point-to-point transfer to the peer stage (P2PTime; on
//              NVLink when the pipeline neighbours share a node), sharing
//              the links as a collective; a receive costs nothing itself:
//              it finishes when its send does (sim/event_loop.h).
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
#include "baton/sim/moe_cost.h"

namespace baton::sim {

struct SimOptions;  // sim/simulator.h

struct NodeCost {
  double latency_s = 0;  // not shared
  double work_s = 0;     // at full link bandwidth; shared while concurrent
  bool comm = false;     // a collective (shares the links)
};

class NodeCoster {
 public:
  // `moe` (a graph of a MoE model: required) prices its expert nodes.
  NodeCoster(const scheduler::StepGraph& graph, const ClusterSpec& cluster,
             const SimOptions& options, const ComputeModel& compute,
             const MoeCost* moe = nullptr);

  NodeCost Cost(const scheduler::Node& node) const;

 private:
  NodeCost ComputeCost(const scheduler::Node& node) const;
  // Parallel graphs: a compute node's kernels, then with its fused and
  // vocabulary collectives.
  double ParallelCompute(const scheduler::Node& node) const;
  double WithFused(const scheduler::Node& node, double total, double gemm,
                   double attention) const;
  double VocabularyComm(const scheduler::Node& node) const;
  NodeCost ExpertExchange(const scheduler::Node& node) const;
  // A block node's segments' kernels (bits 0-3 from the dense block's
  // segments, 4-7 from the MoE kernels), forward (or a recompute with
  // segments), backward (its input part under zb-h1) or weight pass.
  double BlockSegmentsSeconds(const scheduler::Node& node) const;
  double RecomputeSeconds() const;
  // Context parallelism's ring over `attention` seconds of attention
  // kernels, one step moving `step_bytes`.
  double RingSeconds(double attention, double step_bytes) const;
  double CommSeconds(CollectiveKind kind, double bytes, scheduler::MeshGroup group) const;
  NodeCost Collective(CollectiveKind kind, double bytes,
                      scheduler::MeshGroup group) const;
  KernelSum WithGradientCopy(KernelSum k, int unit) const;

  const scheduler::StepGraph& g_;
  const ClusterSpec& c_;
  const SimOptions& o_;
  const ComputeModel& k_;
  const MoeCost* moe_;
  // Placement of each mesh group the graph uses, by MeshGroup::bits().
  std::array<std::optional<GroupPlacement>, 1 << scheduler::kNumMeshGroupBits> placement_;
  double act_bytes_ = 0;        // parallel graphs: one micro-batch's activation
  double ring_step_bytes_ = 0;  // ... and one ring step's K and V
};

}  // namespace baton::sim

#endif  // BATON_SIM_NODE_COST_H_
