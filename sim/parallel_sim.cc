#include "baton/sim/parallel_sim.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "baton/sim/compute_model.h"
#include "baton/sim/event_loop.h"
#include "baton/sim/moe_cost.h"
#include "baton/sim/node_cost.h"

namespace baton::sim {
namespace {

using scheduler::BufferRole;
using scheduler::NodeKind;
using scheduler::ParallelStep;
using scheduler::PipelinePass;
using scheduler::Policy;
using scheduler::StepGraph;

constexpr double kGiB = 1073741824.0;

// One block's activation bytes per micro-batch on a rank, whole or
// recomputed (parallel_sim.h); a MoE block's whole, and its dispatch and
// combine buffers in flight.
struct BlockActivation {
  double full = 0, recomputed = 0, moe_full = 0, dispatch = 0;
};

// The tokens a rank routes per micro-batch in a MoE block.
int64_t MoeTokens(const Policy& p, const Workload& w) {
  const int64_t t = w.seq * w.micro_batch / p.context_parallel;
  return p.sequence_parallel ? t / p.tensor_parallel : t;
}

BlockActivation BlockBytes(const scheduler::ModelSpec& m, const Policy& p, const Workload& w) {
  const double t = static_cast<double>(w.seq * w.micro_batch) / p.context_parallel;
  const double h = static_cast<double>(m.hidden);
  const double tp = p.tensor_parallel;
  BlockActivation a;
  if (tp == 1) {
    a.full = 34 * t * h;
  } else if (p.sequence_parallel) {
    a.full = 34 * t * h / tp;
  } else {
    a.full = t * h * (10 + 24 / tp);
  }
  a.recomputed = 2 * t * h / (p.sequence_parallel ? tp : 1);
  if (m.moe.enabled()) {
    // Korthikanti's 34 less the MLP's 19, and the MoE MLP (sim/moe_cost.h).
    MoeShape shape;
    shape.tokens = MoeTokens(p, w);
    shape.ep = p.expert_parallel;
    shape.etp = p.expert_tensor_parallel;
    shape.imbalance = w.moe_imbalance;
    shape.capacity = p.moe_capacity_factor;
    a.moe_full = a.full * 15 / 34 + MoeMlpActivationBytes(m, shape);
    const double load = shape.capacity > 0 ? std::min(shape.imbalance, shape.capacity)
                                           : shape.imbalance;
    // The permuted copies sent and the dispatched ones received, each way.
    a.dispatch = 2 * (1 + load * shape.etp) * static_cast<double>(shape.tokens) *
                 static_cast<double>(m.moe.top_k) * h * 2;
  }
  return a;
}

// Peak activation bytes and micro-batches of one stage over its order.
std::pair<double, int> StageActivations(const StepGraph& g, const std::vector<PipelinePass>& order,
                                        const BlockActivation& a) {
  const Policy& p = g.policy;
  const int chunks = static_cast<int>(g.chunk_units.size());
  std::vector<double> per_mb(chunks, 0);
  bool any_recompute = false;
  double rebuilt = 0;  // the largest block a recomputed backward rebuilds
  for (int c = 0; c < chunks; ++c) {
    int k = 0;
    for (int u : g.chunk_units[c]) {
      if (g.layout.units[u].kind != scheduler::UnitKind::kBlock) continue;
      const bool rec = p.recompute_blocks < 0 || k < p.recompute_blocks;
      const double full =
          g.layout.spec.moe_block(g.layout.units[u].block) ? a.moe_full : a.full;
      any_recompute |= rec;
      if (rec) rebuilt = std::max(rebuilt, full);
      per_mb[c] += rec ? a.recomputed : full;
      ++k;
    }
  }
  const bool split = p.pipeline_schedule == scheduler::PipelineSchedule::kZbH1;
  double live = 0, peak = 0;
  int held = 0, most = 0;
  for (const PipelinePass& x : order) {
    if (x.kind == PipelinePass::Kind::kForward) {
      live += per_mb[x.chunk];
      ++held;
    } else if ((x.kind == PipelinePass::Kind::kBackward) != split) {
      live -= per_mb[x.chunk];
      --held;
    }
    peak = std::max(peak, live);
    most = std::max(most, held);
  }
  if (any_recompute) peak += rebuilt;  // a recomputed block rebuilt in its backward
  return {peak, most};
}

// The gathered buckets' bytes held at most at once in issue order, each
// from the moment its all-gather may start (after the node its window edge
// waits for, else at its issue) to its last reader: every bucket of the stage when
// they are gathered once per step, about two units' under
// gather_per_micro_batch (the one computing, the next prefetched).
double GatheredPeakBytes(const StepGraph& g) {
  const int nb = static_cast<int>(g.buffers.size());
  std::vector<int> first(nb, -1), last(nb, -1);
  const int nn = static_cast<int>(g.nodes.size());
  std::vector<int> may_start(nn);
  for (int i = 0; i < nn; ++i) may_start[i] = i;
  for (const scheduler::GraphEdge& e : g.edges) {
    if (e.kind == scheduler::EdgeKind::kWindow && e.from < e.to) {
      may_start[e.to] = std::min(may_start[e.to], e.from + 1);
    }
  }
  for (int i = 0; i < nn; ++i) {
    for (int w : g.nodes[i].writes) {
      if (g.buffers[w].role == BufferRole::kGathered && first[w] < 0) first[w] = may_start[i];
    }
    for (int r : g.nodes[i].reads) {
      if (g.buffers[r].role == BufferRole::kGathered) last[r] = i;
    }
  }
  std::vector<double> delta(nn + 1, 0.0);
  for (int b = 0; b < nb; ++b) {
    if (first[b] < 0) continue;
    delta[first[b]] += static_cast<double>(g.buffers[b].bytes());
    delta[std::max(first[b], last[b]) + 1] -= static_cast<double>(g.buffers[b].bytes());
  }
  double live = 0, peak = 0;
  for (double d : delta) {
    live += d;
    peak = std::max(peak, live);
  }
  return peak;
}

double StateBytesOf(const StepGraph& g) {
  double bytes = GatheredPeakBytes(g);
  const bool whole = g.policy.all_reduce;
  for (const scheduler::GraphBuffer& b : g.buffers) {
    switch (b.role) {
      case BufferRole::kGradFull:
      case BufferRole::kMaster:
      case BufferRole::kMoment1:
      case BufferRole::kMoment2:
        bytes += static_cast<double>(b.bytes());
        break;
      case BufferRole::kShard:
        if (whole) bytes += static_cast<double>(b.bytes());
        break;
      default:
        break;
    }
  }
  return bytes;
}

std::vector<MemoryBreakdown> Memory(const ParallelStep& step, const ClusterSpec& cluster,
                                    const Workload& w, std::vector<int>* in_flight) {
  const Policy& p = step.stages[0].policy;
  const scheduler::ModelSpec& m = step.layout.spec;
  const BlockActivation a = BlockBytes(m, p, w);
  std::vector<MemoryBreakdown> out;
  for (const StepGraph& g : step.stages) {
    MemoryBreakdown mem;
    mem.states = StateBytesOf(g);
    const auto [act, held] = StageActivations(g, step.order[g.stage], a);
    mem.activations = act;
    if (in_flight != nullptr) in_flight->push_back(held);
    if (g.stage == p.pipeline_parallel - 1) {
      const double t = static_cast<double>(w.seq * w.micro_batch) / p.context_parallel;
      mem.logits = t * std::ceil(static_cast<double>(m.vocab) / p.tensor_parallel) * 6;
    }
    mem.reserved = cluster.reserved_gib * kGiB;
    for (const std::vector<int>& units : g.chunk_units) {
      for (int u : units) {
        if (g.layout.units[u].kind == scheduler::UnitKind::kBlock &&
            m.moe_block(g.layout.units[u].block)) {
          mem.dispatch = a.dispatch;
        }
      }
    }
    out.push_back(mem);
  }
  return out;
}

int MaxVirtualLayers(const std::vector<int>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// The figures of SimResult from the stages' runs (parallel_sim.h).
// The pipeline's span (first forward to last backward or weight pass, in
// seconds) and each stage's compute busy time in it.
double PipelineSpan(const std::vector<const StepGraph*>& graphs,
                    const std::vector<EventLoopResult>& runs, std::vector<double>* busy) {
  int64_t first = INT64_MAX, last = 0;
  busy->assign(graphs.size(), 0);
  for (size_t s = 0; s < graphs.size(); ++s) {
    const StepGraph& g = *graphs[s];
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (!scheduler::IsCompute(g.nodes[i].kind)) continue;
      first = std::min(first, runs[s].start_ns[i]);
      last = std::max(last, runs[s].finish_ns[i]);
      (*busy)[s] += (runs[s].finish_ns[i] - runs[s].start_ns[i]) * 1e-9;
    }
  }
  return std::max<int64_t>(last - first, 1) * 1e-9;
}

SimResult Summarize(const scheduler::ModelSpec& model, const ClusterSpec& cluster,
                    const Workload& w, const Policy& policy, const ParallelStep& step,
                    const std::vector<EventLoopResult>& runs, bool timeline) {
  const double limit = cluster.memory_gib * kGiB;
  std::vector<const StepGraph*> graphs;
  for (const StepGraph& g : step.stages) graphs.push_back(&g);
  SimResult r;
  r.policy = policy.name;
  r.recompute_blocks = policy.recompute_blocks < 0 ? MaxVirtualLayers(step.virtual_layers)
                                                   : policy.recompute_blocks;
  // The pipeline's span: first forward to last backward or weight pass.
  int64_t end = 0;
  for (size_t s = 0; s < graphs.size(); ++s) {
    for (int64_t f : runs[s].finish_ns) end = std::max(end, f);
  }
  std::vector<double> busy;
  const double span = PipelineSpan(graphs, runs, &busy);
  std::vector<int> in_flight;
  const std::vector<MemoryBreakdown> mem = Memory(step, cluster, w, &in_flight);
  int busiest = 0;
  double bubble_sum = 0;
  r.fits = true;
  for (size_t s = 0; s < graphs.size(); ++s) {
    const double pipeline_busy = busy[s];
    SimResult::Stage st;
    st.layers = 0;
    for (int c = 0; c < policy.virtual_stages; ++c) {
      st.layers += step.virtual_layers[c * policy.pipeline_parallel + static_cast<int>(s)];
    }
    st.busy_s = runs[s].compute_busy_ns * 1e-9;
    // Idle in the span, less what waited on tensor collectives (not the
    // pipeline's doing).
    st.bubble = std::max(0.0, 1 - (pipeline_busy + runs[s].exposed_tp_ns * 1e-9) / span);
    st.in_flight = in_flight[s];
    st.memory = mem[s];
    st.fits = mem[s].peak() <= limit;
    r.fits &= st.fits;
    bubble_sum += st.bubble;
    if (runs[s].compute_busy_ns > runs[busiest].compute_busy_ns) busiest = static_cast<int>(s);
    if (mem[s].peak() > r.memory.peak()) r.memory = mem[s];
    r.stages.push_back(st);
  }
  r.bubble = bubble_sum / static_cast<double>(graphs.size());
  r.pipeline_span_s = span;
  const EventLoopResult& b = runs[busiest];
  r.step_s = end * 1e-9;
  r.compute_s = b.compute_busy_ns * 1e-9;
  r.exposed_ag_s = b.exposed_ag_ns * 1e-9;
  r.exposed_rs_s = b.exposed_rs_ns * 1e-9;
  r.exposed_host_s = b.exposed_host_ns * 1e-9;
  r.exposed_tp_s = b.exposed_tp_ns * 1e-9;
  r.exposed_pp_s = b.exposed_pp_ns * 1e-9;
  r.exposed_a2a_s = b.exposed_ep_ns * 1e-9;
  r.straggler_s = cluster.straggler_cv * r.compute_s * ExpectedMaxOfNormals(w.gpus);
  r.step_s += r.straggler_s;
  const double local = static_cast<double>(w.global_batch) / w.gpus;
  r.mfu = scheduler::TrainingFlopsPerSequence(model, w.seq) * local /
          (r.step_s * cluster.peak_tflops * 1e12);
  r.tokens_per_s_per_gpu = local * w.seq / r.step_s;
  if (timeline) {
    for (size_t s = 0; s < graphs.size(); ++s) {
      for (size_t i = 0; i < graphs[s]->nodes.size(); ++i) {
        r.timeline.push_back({static_cast<int>(i), graphs[s]->nodes[i].stream,
                              runs[s].start_ns[i] * 1e-9, runs[s].finish_ns[i] * 1e-9,
                              static_cast<int>(s)});
      }
    }
  }
  return r;
}

}  // namespace

std::vector<MemoryBreakdown> StageMemory(const ParallelStep& step, const ClusterSpec& cluster,
                                         const Workload& workload) {
  return Memory(step, cluster, workload, nullptr);
}

StatusOr<SimResult> SimulateParallel(const scheduler::ModelSpec& model,
                                     const ClusterSpec& cluster, const Workload& w,
                                     Policy policy, int recompute_blocks,
                                     const SimOptions& options, ParallelStep* step_out,
                                     StepGraph* graph_out) {
  BATON_RETURN_IF_ERROR(ValidateCluster(cluster));
  if (policy.tensor_parallel > cluster.gpus_per_node && !w.tp_across_nodes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp=", policy.tensor_parallel, " is larger than a node's ", cluster.gpus_per_node,
        " GPUs: its collectives would cross the network on every block; pass "
        "--tp-across-nodes to simulate it anyway"));
  }
  const double limit = cluster.memory_gib * kGiB;
  // Parallel graphs reduce each gradient once, after its last micro-batch
  // (a MoE model's graph is one under a data-parallel preset too).
  policy.reduce_every_micro_step = false;
  BATON_ASSIGN_OR_RETURN(const KernelTable* table, KernelTableOrH100(options.kernels));
  ShardShape shard;
  shard.tp = policy.tensor_parallel;
  shard.sp = policy.sequence_parallel;
  shard.cp = policy.context_parallel;
  BATON_ASSIGN_OR_RETURN(
      const ComputeModel kernels,
      ComputeModel::Create(*table, cluster, model, w.seq * w.micro_batch, w.micro_batch, w.seq,
                           options.attention, options.stack, shard));
  // A block's pass times order the zero-bubble schedule.
  scheduler::PassCosts pass;
  const BlockSegments& seg = kernels.Segments();
  pass.f = seg.Forward().seconds;
  pass.b = 0;
  for (const KernelSum& k : seg.bwd_input) pass.b += k.seconds;
  pass.w = std::max(seg.weight.seconds, 1e-12);
  std::optional<ParallelStep> built;
  if (recompute_blocks == kAutoRecompute) {
    policy.recompute_blocks = 0;
    BATON_ASSIGN_OR_RETURN(ParallelStep probe,
                           scheduler::BuildParallelStep(model, policy, w.gpus, w.seq,
                                                        w.micro_batch, {}, pass));
    int chosen = -1;
    for (int n = 0; n <= MaxVirtualLayers(probe.virtual_layers); ++n) {
      for (StepGraph& g : probe.stages) g.policy.recompute_blocks = n;
      bool fits = true;
      for (const MemoryBreakdown& m : StageMemory(probe, cluster, w)) fits &= m.peak() <= limit;
      if (fits) {
        chosen = n;
        break;
      }
    }
    policy.recompute_blocks = chosen < 0 ? -1 : chosen;
    if (chosen == 0) {
      for (StepGraph& g : probe.stages) g.policy.recompute_blocks = 0;
      built = std::move(probe);
    }
  } else {
    if (recompute_blocks < -1 || recompute_blocks > model.layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--recompute-layers must be 0..", model.layers, ", all or auto; got ",
          recompute_blocks));
    }
    policy.recompute_blocks = recompute_blocks;
  }
  if (!built) {
    BATON_ASSIGN_OR_RETURN(built, scheduler::BuildParallelStep(model, policy, w.gpus, w.seq,
                                                               w.micro_batch, {}, pass));
  }
  ParallelStep step = *std::move(built);
  std::optional<MoeCost> moe;
  if (model.moe.enabled()) {
    BATON_ASSIGN_OR_RETURN(moe, BuildMoeCost(kernels, model, policy, MoeTokens(policy, w),
                                             w.moe_imbalance, options.stack, cluster));
  }
  std::vector<const StepGraph*> graphs;
  std::vector<std::vector<NodeCost>> costs;
  for (const StepGraph& g : step.stages) {
    graphs.push_back(&g);
    const NodeCoster coster(g, cluster, options, kernels, moe ? &*moe : nullptr);
    std::vector<NodeCost> c;
    c.reserve(g.nodes.size());
    for (const scheduler::Node& n : g.nodes) c.push_back(coster.Cost(n));
    costs.push_back(std::move(c));
  }
  BATON_ASSIGN_OR_RETURN(const std::vector<EventLoopResult> runs,
                         RunStagesEventLoop(graphs, costs, cluster.host_issue_us));
  SimResult r = Summarize(model, cluster, w, policy, step, runs, options.timeline);
  if (graph_out != nullptr) *graph_out = step.stages[0];
  if (step_out != nullptr) *step_out = std::move(step);
  return r;
}

StatusOr<std::vector<double>> ScheduleBubble(const std::vector<const StepGraph*>& stages,
                                             const scheduler::PassCosts& pass) {
  if (stages.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule bubble: ", stages.size(), " stage graphs; a pipeline has 2 or more"));
  }
  for (double c : {pass.f, pass.b, pass.w}) {
    if (!(c > 0) || !std::isfinite(c)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schedule bubble: pass costs must be positive and finite, got ", pass.f, ", ", pass.b,
          ", ", pass.w));
    }
  }
  std::vector<std::vector<NodeCost>> costs;
  for (const StepGraph* g : stages) {
    std::vector<NodeCost> c(g->nodes.size());
    for (size_t i = 0; i < g->nodes.size(); ++i) {
      const scheduler::Node& n = g->nodes[i];
      if (!scheduler::IsCompute(n.kind) || n.unit < 0 ||
          g->layout.units[n.unit].kind != scheduler::UnitKind::kBlock) {
        continue;
      }
      const bool split = g->policy.pipeline_schedule == scheduler::PipelineSchedule::kZbH1;
      c[i].latency_s = n.kind == NodeKind::kBackwardWeight ? pass.w
                       : n.kind == NodeKind::kBackward     ? (split ? pass.b : pass.b + pass.w)
                                                           : pass.f;
    }
    costs.push_back(std::move(c));
  }
  BATON_ASSIGN_OR_RETURN(const std::vector<EventLoopResult> runs,
                         RunStagesEventLoop(stages, costs, 0));
  std::vector<double> busy;
  const double span = PipelineSpan(stages, runs, &busy);
  std::vector<double> bubble;
  for (double b : busy) bubble.push_back(std::max(0.0, 1 - b / span));
  return bubble;
}

}  // namespace baton::sim
