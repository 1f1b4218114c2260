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
  // ZenFlow (scheduler/step_graph.h): the gradient shard goes down every
  // step; the host update of the unselected elements and the H2D of the
  // host shard happen once every update_interval steps.
  const double per_update = p.zenflow ? 1.0 / scheduler::ResolveZenFlow(p).update : 1.0;
  switch (n.kind) {
    case NodeKind::kD2H:
    case NodeKind::kH2D:
      return (n.kind == NodeKind::kH2D ? per_update : 1.0) *
             static_cast<double>(g.buffers[n.writes[0]].bytes()) /
             (c.host_link_gbps * 1e9);
    case NodeKind::kAccumulate:
      // ZenFlow's NORM: one read of the gradient shard on the device.
      if (p.zenflow && g.buffers[n.writes[0]].role == BufferRole::kColumnNorms) {
        return k.CopyBytes(static_cast<double>(g.buffers[n.reads[0]].bytes())).seconds;
      }
      return std::nullopt;
    case NodeKind::kOptimizer:
      if (OnHostStream(g, n)) {
        const double adam = numel() / (c.host_adam_gparams * 1e9);
        if (!p.zenflow) return adam;
        // The accumulation pass, every step (the window's update runs off
        // the step's graph: ZenFlowStepSeconds).
        return numel() * kZenFlowAccumulateBytes / (kHostStreamGBps * 1e9);
      }
      if (p.zenflow) {
        // TOPK: the device AdamW over the selected elements.
        return k.Optimizer(p.zenflow_topk_ratio * numel()).seconds;
      }
      return std::nullopt;
    case NodeKind::kCast:
      // zero_offload's host AdamW writes the cast as it goes (fused). ZenFlow's
      // executor casts in a pass of its own after the update, not priced here
      // (one f32 read + one write of the shard per window).
      if (OnHostStream(g, n)) return 0.0;
      return std::nullopt;
    default:
      return std::nullopt;
  }
}

double ZenFlowHostUpdateSeconds(const StepGraph& g, const ClusterSpec& c) {
  const scheduler::Policy& p = g.policy;
  if (!p.zenflow) return 0;
  double numel = 0;
  for (const Node& n : g.nodes) {
    if (n.kind == NodeKind::kOptimizer && OnHostStream(g, n)) {
      numel += static_cast<double>(g.layout.buckets[n.bucket].shard_numel);
    }
  }
  return (1 - p.zenflow_topk_ratio) * numel / (c.host_adam_gparams * 1e9);
}

double ZenFlowStepSeconds(const StepGraph& g, const ClusterSpec& c,
                          double step_s, double host_stream_s) {
  const scheduler::ZenFlowIntervals z = scheduler::ResolveZenFlow(g.policy);
  const double h = ZenFlowHostUpdateSeconds(g, c);
  const double u = z.update;
  // Of select / update windows, the last is followed by a selection.
  const double before_selection = u / z.select;
  auto exposed = [&](double hidden_steps) {
    return std::max(0.0, h - hidden_steps * step_s);
  };
  const double d = z.staleness;
  const double per_window = before_selection * exposed(std::min(d, 1.0)) +
                            (1 - before_selection) * exposed(d);
  return std::max(step_s + per_window / u, host_stream_s + h / u);
}

}  // namespace baton::sim
