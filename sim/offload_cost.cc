#include "baton/sim/offload_cost.h"

#include <algorithm>

#include "baton/sim/host_cost.h"

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
  const HostRates h = ResolveHostRates(c, g.world_size());
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
      return (n.kind == NodeKind::kH2D ? per_update : 1.0) * LinkShare(g, c) *
             static_cast<double>(g.buffers[n.writes[0]].bytes()) / (h.link_gbps * 1e9);
    case NodeKind::kAccumulate:
      // ZenFlow's NORM: one read of the gradient shard on the device.
      if (p.zenflow && g.buffers[n.writes[0]].role == BufferRole::kColumnNorms) {
        return k.CopyBytes(static_cast<double>(g.buffers[n.reads[0]].bytes())).seconds;
      }
      return std::nullopt;
    case NodeKind::kOptimizer:
      if (OnHostStream(g, n)) {
        const double adam = numel() / (h.opt_gparams * 1e9);
        if (!p.zenflow) return adam;
        // The accumulation pass, every step (the window's update runs off
        // the step's graph: ZenFlowStepSeconds).
        return numel() * kZenFlowAccumulateBytes / (h.stream_gbps * 1e9);
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
  return (1 - p.zenflow_topk_ratio) * numel /
         (ResolveHostRates(c, g.world_size()).opt_gparams * 1e9);
}

double LinkShare(const StepGraph& g, const ClusterSpec& c) {
  if (!g.policy.zenflow || c.offload_executor != OffloadExecutor::kDeepSpeed) return 1;
  return 1 - g.policy.zenflow_topk_ratio;
}

double OffloadLinkElementsPerStep(const StepGraph& g, const ClusterSpec& c) {
  if (!g.offload()) return 0;
  const double per_update =
      g.policy.zenflow ? 1.0 / scheduler::ResolveZenFlow(g.policy).update : 1.0;
  double elements = 0;
  for (const Node& n : g.nodes) {
    if (n.kind == NodeKind::kD2H) {
      elements += static_cast<double>(g.buffers[n.writes[0]].numel);
    } else if (n.kind == NodeKind::kH2D) {
      elements += per_update * static_cast<double>(g.buffers[n.writes[0]].numel);
    }
  }
  return LinkShare(g, c) * elements;
}

StepGraph AsExecutorRunsIt(const StepGraph& g, const ClusterSpec& c) {
  StepGraph out = g;
  if (!g.offload() || c.offload_executor != OffloadExecutor::kDeepSpeed) return out;
  const scheduler::StreamId compute = g.stream_for(StreamClass::kCompute);
  int first_host = -1;
  int last_compute = -1;
  for (int i = 0; i < static_cast<int>(out.nodes.size()); ++i) {
    Node& n = out.nodes[i];
    if (n.kind == NodeKind::kD2H || n.kind == NodeKind::kH2D) n.stream = compute;
    if (OnHostStream(out, n)) {
      if (first_host < 0) first_host = i;
    } else if (n.stream == compute && first_host < 0) {
      last_compute = i;
    }
  }
  // ZeRO-Offload's step() runs after the backward: the host starts on the
  // first partition only when the device is done with the last.
  if (!g.policy.zenflow && first_host >= 0 && last_compute >= 0) {
    out.nodes[first_host].waits.push_back(last_compute);
  }
  return out;
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
