#include "baton/sim/offload_cost.h"

#include <algorithm>

namespace baton::sim {

using scheduler::BufferRole;
using scheduler::Node;
using scheduler::NodeKind;
using scheduler::StepGraph;
using scheduler::StreamClass;

bool OnHostStream(const StepGraph& g, const Node& n) {
  return g.offload() && n.stream == g.stream_for(StreamClass::kHost);
}

std::optional<double> OffloadNodeSeconds(const StepGraph& g, const Node& n,
                                         const ClusterSpec& c,
                                         const ComputeModel& k) {
  if (!g.offload()) return std::nullopt;
  const scheduler::Policy& p = g.policy;
  auto numel = [&]() {  // only for bucket nodes (bucket >= 0)
    return static_cast<double>(g.layout.buckets[n.bucket].shard_numel);
  };
  double share = 1;  // of a full copy or update, per step
  if (p.zenflow) {
    share = (1 - p.zenflow_topk_ratio) / scheduler::ResolveZenFlow(p).update;
  }
  switch (n.kind) {
    case NodeKind::kD2H:
    case NodeKind::kH2D:
      return share * static_cast<double>(g.buffers[n.writes[0]].bytes()) /
             (c.host_link_gbps * 1e9);
    case NodeKind::kOptimizer:
      if (OnHostStream(g, n)) return share * numel() / (c.host_adam_gparams * 1e9);
      if (p.zenflow) {
        // TOPK: the device AdamW over the selected elements, and the
        // column-norm pass (read the gradient shard) when re-selecting.
        const double grad_bytes = static_cast<double>(g.buffers[n.reads[0]].bytes());
        return k.Optimizer(p.zenflow_topk_ratio * numel()).seconds +
               k.CopyBytes(grad_bytes).seconds / scheduler::ResolveZenFlow(p).select;
      }
      return std::nullopt;
    case NodeKind::kCast:
      if (OnHostStream(g, n)) return 0.0;  // fused into the host AdamW
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

}  // namespace baton::sim
