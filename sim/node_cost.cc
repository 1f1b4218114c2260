#include "baton/sim/node_cost.h"

#include "baton/sim/offload_cost.h"
#include "baton/sim/simulator.h"

namespace baton::sim {

using scheduler::MeshGroup;
using scheduler::Node;
using scheduler::NodeKind;
using scheduler::UnitKind;

NodeCoster::NodeCoster(const scheduler::StepGraph& graph, const ClusterSpec& cluster,
                       const SimOptions& options, const ComputeModel& compute)
    : g_(graph), c_(cluster), o_(options), k_(compute) {
  for (const Node& n : g_.nodes) {
    auto& p = placement_[n.group.bits()];
    if (!p) p = PlaceGroup(g_.mesh, n.group, c_.gpus_per_node);
  }
}

NodeCost NodeCoster::Cost(const Node& n) const {
  auto time = [](const KernelSum& k) {
    NodeCost cost;
    cost.latency_s = k.seconds;
    return cost;
  };
  auto buffer_bytes = [&](int b) { return static_cast<double>(g_.buffers[b].bytes()); };
  if (const std::optional<double> s = OffloadNodeSeconds(g_, n, c_, k_)) {
    return NodeCost{*s, 0, false};  // sim/offload_cost.h
  }
  switch (n.kind) {
    case NodeKind::kForward:
    case NodeKind::kRecompute:
    case NodeKind::kBackward:
      return ComputeCost(n);
    case NodeKind::kAllGather:
      return Collective(CollectiveKind::kAllGather, buffer_bytes(n.writes[0]), n.group);
    case NodeKind::kReduceScatter:
      return Collective(CollectiveKind::kReduceScatter, buffer_bytes(n.reads[0]),
                        n.group);
    case NodeKind::kAllReduce:
      return Collective(CollectiveKind::kAllReduce, buffer_bytes(n.reads[0]), n.group);
    case NodeKind::kCopy:
      return time(k_.CopyBytes(2 * buffer_bytes(n.writes[0])));
    case NodeKind::kAccumulate:
      return time(k_.CopyBytes(3 * buffer_bytes(n.writes[0])));
    case NodeKind::kOptimizer: {
      // The fused 8-bit AdamW (ops/adamw8bit.h) reads and writes the master
      // (4 + 4), the codes (2 + 2), reads the gradient (4), writes the
      // param (2): 18 bytes a parameter, fp32 AdamW 30 (8 + 8 moments).
      const double traffic =
          g_.policy.optimizer == scheduler::OptimizerKind::kAdamW8bit ? 18.0 / 30 : 1.0;
      return time(k_.Optimizer(
          static_cast<double>(g_.layout.buckets[n.bucket].shard_numel), traffic));
    }
    case NodeKind::kCast:  // read fp32, write the parameter dtype
      return time(k_.CopyBytes(3 * buffer_bytes(n.writes[0])));
    case NodeKind::kD2H:
    case NodeKind::kH2D:
      return NodeCost{};  // priced by OffloadNodeSeconds
    case NodeKind::kDequantize:  // read the packing, write the weights
      return time(k_.CopyBytes(buffer_bytes(n.reads[0]) + buffer_bytes(n.writes[0])));
  }
  return NodeCost{};
}

NodeCost NodeCoster::ComputeCost(const Node& n) const {
  const bool bwd = n.kind == NodeKind::kBackward;
  KernelSum k;
  if (n.kind == NodeKind::kRecompute && n.recompute == scheduler::Recompute::kSelective) {
    NodeCost cost;  // the attention core's forward only
    cost.latency_s = k_.AttentionCoreForward().seconds;
    return cost;
  }
  // LoRA's frozen base: no weight gradients (the adapters' are in the
  // block's frozen backward).
  const int own = g_.layout.unit_bucket[n.unit];
  const bool frozen = own >= 0 && g_.layout.buckets[own].frozen;
  switch (g_.layout.units[n.unit].kind) {
    case UnitKind::kBlock: {
      bool acc = false;
      for (bool a : n.grad_accumulate) acc |= a;
      k = !bwd     ? k_.BlockForward()
          : frozen ? k_.BlockBackwardFrozen()
                   : WithGradientCopy(k_.BlockBackward(acc), n.unit);
      break;
    }
    case UnitKind::kLmHead:
      k = !bwd     ? k_.LmHeadForward()
          : frozen ? k_.LmHeadBackwardFrozen()
                   : WithGradientCopy(k_.LmHeadBackward(), n.unit);
      break;
    case UnitKind::kEmbedding:  // frozen: no backward work at all
      k = !bwd ? k_.EmbeddingForward()
          : frozen ? KernelSum{}
                   : WithGradientCopy(k_.EmbeddingBackward(), n.unit);
      break;
    case UnitKind::kFinalNorm:
      k = bwd ? k_.FinalNormBackward() : k_.FinalNormForward();
      break;
  }
  NodeCost cost;
  cost.latency_s = k.seconds;
  return cost;
}

// The peers' own device copies of a unit's gradient in its backward, on
// the compute stream (bf16: read 2 + write 2 bytes per parameter):
//   fsdp1  the unit's parameters are views into one FlatParameter
//          (torch/distributed/fsdp/_flat_param.py, _unflatten_as_params),
//          so autograd concatenates their gradients into the flat gradient.
//   zero3  each gradient is copied into the contiguous reduce bucket
//          before the reduce-scatter (deepspeed/runtime/zero/stage3.py,
//          __add_grad_to_ipg_bucket: new_grad_tensor.copy_(param.grad)).
// baton and YaFSDP compute into the gradient buffer that is reduced;
// FSDP2's copies are graph nodes (Policy::copy_in_out).
KernelSum NodeCoster::WithGradientCopy(KernelSum k, int unit) const {
  const std::string& p = g_.policy.name;
  if (p == "fsdp1" || p == "zero3") {
    k.Add(k_.CopyBytes(4.0 * static_cast<double>(g_.layout.units[unit].numel())).seconds,
          k_.launch_s());
  }
  return k;
}

NodeCost NodeCoster::Collective(CollectiveKind kind, double bytes,
                                MeshGroup group) const {
  NodeCost cost;
  cost.comm = true;
  if (o_.free_comm) return cost;
  const CollectiveTime t = CollectiveCost(c_, *placement_[group.bits()], bytes, kind,
                                          o_.calibration, o_.bandwidth_scale);
  cost.latency_s = t.latency_s;
  cost.work_s = t.work_s;
  return cost;
}

}  // namespace baton::sim
