#include "baton/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <optional>

#include "absl/strings/str_cat.h"
#include "baton/sim/compute_model.h"
#include "baton/sim/event_loop.h"
#include "baton/sim/node_cost.h"
#include "baton/sim/offload_cost.h"
#include "baton/sim/parallel_sim.h"

namespace baton::sim {
namespace {

using scheduler::Bucket;
using scheduler::GraphBuffer;
using scheduler::ModelSpec;
using scheduler::StepGraph;

// Runs the graph through the event loop with each node's cost, and sums
// what the step's timeline shows (the figures of SimResult that come from
// one rank's streams).
StatusOr<SimResult> RunStep(const StepGraph& graph, const ClusterSpec& c,
                            const SimOptions& o, const ComputeModel& k) {
  // DeepSpeed's executor orders the offload copies and the host step its
  // own way (sim/offload_cost.h); baton's runs the graph as built.
  std::optional<StepGraph> reordered;
  if (graph.offload() && c.offload_executor != OffloadExecutor::kBaton) {
    reordered = AsExecutorRunsIt(graph, c);
  }
  const StepGraph& g = reordered ? *reordered : graph;
  const NodeCoster coster(g, c, o, k);
  std::vector<NodeCost> costs;
  costs.reserve(g.nodes.size());
  for (const scheduler::Node& n : g.nodes) costs.push_back(coster.Cost(n));
  BATON_ASSIGN_OR_RETURN(const EventLoopResult e, RunEventLoop(g, costs, c.host_issue_us));
  const int nn = static_cast<int>(g.nodes.size());
  int64_t step = 0, device_end = 0, host_busy = 0;
  for (int i = 0; i < nn; ++i) {
    step = std::max(step, e.finish_ns[i]);
    if (OnHostStream(g, g.nodes[i])) {
      host_busy += e.finish_ns[i] - e.start_ns[i];
    } else {
      device_end = std::max(device_end, e.finish_ns[i]);
    }
  }
  // ZenFlow: the host's update overlaps the next d steps (sim/offload_cost.h).
  if (g.policy.zenflow) {
    step = static_cast<int64_t>(
        ZenFlowStepSeconds(g, c, step * 1e-9, host_busy * 1e-9) * 1e9);
  }
  // The tail after the last compute-stream node waits on reductions (and
  // under offload on the host).
  const int64_t exposed_rs =
      e.exposed_rs_ns +
      std::max<int64_t>(0, std::min(step, device_end) - e.last_compute_end_ns);
  const int64_t offload_tail =
      std::max<int64_t>(0, step - std::max(device_end, e.last_compute_end_ns));
  SimResult r;
  r.step_s = step * 1e-9;
  r.compute_s = e.compute_busy_ns * 1e-9;
  r.exposed_ag_s = e.exposed_ag_ns * 1e-9;
  r.exposed_rs_s = exposed_rs * 1e-9;
  r.exposed_host_s = e.exposed_host_ns * 1e-9;
  r.exposed_offload_s = offload_tail * 1e-9;
  if (o.timeline) {
    for (int i = 0; i < nn; ++i) {
      r.timeline.push_back(
          {i, g.nodes[i].stream, e.start_ns[i] * 1e-9, e.finish_ns[i] * 1e-9});
    }
  }
  return r;
}

}  // namespace

double StateBytes(const StepGraph& g) {
  // FSDP1 keeps the fp32 flat-parameter shard as the parameter itself and
  // casts it into a low-precision shard only for the all-gather, freeing
  // that right after (torch/distributed/fsdp/_flat_param.py:
  // _use_low_precision_shard / _free_low_precision_sharded_param); FSDP2's
  // sharded DTensor parameters are fp32 and the all-gather input is a
  // copy-in made per gather (torch/distributed/_composable/fsdp/
  // _fsdp_collectives.py: foreach_all_gather). Neither keeps a persistent
  // bf16 shard: 16 bytes per parameter under mixed precision (fp32 param,
  // fp32 gradient, two fp32 moments) where baton, YaFSDP and ZeRO-3 keep 18.
  //
  // ZeRO-3 keeps the low-precision parameter partition, the fp32 master
  // and moments, and its gradient partition in the low precision: 2 + 2 +
  // 12 = 16 bytes per parameter (Rajbhandari et al. 2020, ZeRO, section 3:
  // "2Ψ + 2Ψ + KΨ", K = 12 for mixed-precision Adam); the fp32 gradient
  // the optimizer reads is made per sub-group during the step and freed
  // (deepspeed/runtime/zero/stage3.py: _prepare_fp32_grad_for_sub_group,
  // _release_sub_group), when the activations are gone.
  const bool fp32_shard_only = g.policy.name == "fsdp1" || g.policy.name == "fsdp2";
  const bool low_precision_grad = g.policy.name == "zero3";
  double bytes = 0;
  for (const GraphBuffer& b : g.buffers) {
    if (!b.persistent) continue;
    // (A frozen bucket's shard is its only copy of the weights.)
    if (fp32_shard_only && b.role == scheduler::BufferRole::kShard &&
        !g.layout.buckets[b.bucket].frozen) {
      continue;
    }
    if (b.host) continue;  // offload: host memory (StepGraph::host_bytes)
    if (low_precision_grad && b.role == scheduler::BufferRole::kGradShard) {
      bytes += static_cast<double>(b.numel) * DataTypeSize(g.policy.param_dtype);
      continue;
    }
    bytes += static_cast<double>(b.bytes());
  }
  return bytes;
}

double AllocatorReserveBytes(const StepGraph& g) {
  // FSDP1 and ZeRO-3 free their all-gathered parameters with record_stream
  // for the compute stream (torch/distributed/fsdp/_flat_param.py:
  // _no_dispatch_record_stream; "Fairscale FSDP, PyTorch FSDP, and
  // DeepSpeed ZeRO use recordStream", pytorch/pytorch issue 114299, the
  // FSDP2 design): the caching allocator keeps such a block from reuse until
  // the GPU's use of it finishes, which can be much later than the host's
  // free, so the next all-gather takes a fresh block. The rate limiter
  // (FSDP1 _limiter_utils.py; ZeRO-3's prefetch bucket) keeps that to one
  // gathered unit beyond the schedule's. FSDP2 synchronizes the streams
  // explicitly instead ("deterministically achieve the desired memory",
  // same issue); baton and YaFSDP gather into buffers they own.
  if (g.policy.name != "fsdp1" && g.policy.name != "zero3") return 0;
  double largest = 0;
  for (const Bucket& b : g.layout.buckets) {  // what one all-gather fills
    largest = std::max(largest, static_cast<double>(b.padded_numel));
  }
  return largest * DataTypeSize(g.policy.param_dtype);
}

MemoryBreakdown StepMemory(const StepGraph& g, const ClusterSpec& cluster,
                           const Workload& workload) {
  MemoryBreakdown m = ActivationMemory(g.layout.spec, workload, g.policy.recompute_blocks,
                                       g.policy.recompute);
  m.states = StateBytes(g);
  m.arena = static_cast<double>(g.plan.arena_bytes);
  m.reserved = cluster.reserved_gib * 1073741824.0 + AllocatorReserveBytes(g);
  return m;
}

Status ValidateWorkload(const Workload& w) {
  if (w.gpus < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus must be positive, got ", w.gpus));
  }
  if (w.seq < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seq must be positive, got ", w.seq));
  }
  if (w.global_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch must be positive, got ", w.global_batch));
  }
  if (w.micro_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--micro-batch must be positive, got ", w.micro_batch));
  }
  // Above (scheduler/limits.h): no real job, and no bound on the work.
  const struct {
    const char* flag;
    int64_t value, hi;
  } sizes[] = {{"--gpus", w.gpus, scheduler::kMaxWorldSize},
               {"--seq", w.seq, scheduler::kMaxSeq},
               {"--global-batch", w.global_batch, scheduler::kMaxGlobalBatch},
               {"--micro-batch", w.micro_batch, scheduler::kMaxGlobalBatch}};
  for (const auto& s : sizes) {
    if (s.value > s.hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.flag, " = ", s.value, " is over the limit of ", s.hi, " (scheduler/limits.h)"));
    }
  }
  if (w.tp < 1 || w.cp < 1 || w.pp < 1 || w.vpp < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tp, --cp, --pp and --vpp must be positive, got ", w.tp, ", ", w.cp, ", ", w.pp,
        ", ", w.vpp));
  }
  if (w.ep < 1 || w.etp < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ep and --etp must be positive, got ", w.ep, ", ", w.etp));
  }
  if (!(w.moe_imbalance >= 1 && w.moe_imbalance <= 64)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--moe-imbalance must be in [1, 64] (the busiest expert rank's load over the mean), got ",
        w.moe_imbalance));
  }
  const int64_t model_ranks = int64_t{w.tp} * w.cp * w.pp;
  if (w.gpus % model_ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the mesh does not fill --gpus=", w.gpus, ": --tp=", w.tp, " x --cp=", w.cp,
        " x --pp=", w.pp, " = ", model_ranks, " does not divide it"));
  }
  const int64_t data = w.gpus / model_ranks;
  if (w.global_batch % data != 0) {
    return absl::InvalidArgumentError(
        model_ranks == 1
            ? absl::StrCat("--global-batch ", w.global_batch, " does not divide over --gpus ",
                           w.gpus)
            : absl::StrCat("--global-batch ", w.global_batch, " does not divide over the ",
                           data, " data-parallel ranks (--gpus / (tp x cp x pp))"));
  }
  const int64_t local = w.global_batch / data;
  if (local % w.micro_batch != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the local batch ", local, " (global ", w.global_batch,
                     " / ", data, model_ranks == 1 ? " GPUs" : " data ranks",
                     ") does not divide into micro-batches of ", w.micro_batch));
  }
  if (local / w.micro_batch > scheduler::kMaxMicroSteps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the step would take ", local / w.micro_batch, " micro-steps (global batch ",
        w.global_batch, " / ", data, model_ranks == 1 ? " GPUs" : " data ranks",
        " / micro-batch ", w.micro_batch,
        "); the limit is ", scheduler::kMaxMicroSteps, ": raise --micro-batch or --gpus"));
  }
  return absl::OkStatus();
}

StatusOr<scheduler::Policy> SimPolicy(const std::string& name,
                                      const Workload& w, int gpus_per_node) {
  BATON_RETURN_IF_ERROR(ValidateWorkload(w));
  BATON_ASSIGN_OR_RETURN(scheduler::Policy p, scheduler::PolicyPreset(name));
  // A preset's group of 4 stands for "one node" (policy.h); on a simulated
  // cluster that is the node's GPUs.
  if (p.shard_group > 0) p.shard_group = gpus_per_node;
  if (p.hpz_group > 0) p.hpz_group = gpus_per_node;
  if (w.shard_group >= 0) p.shard_group = w.shard_group;
  if (w.hpz_group >= 0) p.hpz_group = w.hpz_group;
  p.micro_steps = static_cast<int>(w.global_batch / w.data_ranks() / w.micro_batch);
  p.reduce_every_micro_step = p.micro_steps > 1;
  p.tensor_parallel = w.tp;
  p.sequence_parallel = w.sp;
  p.tp_comm_overlap = w.tp_overlap;
  p.context_parallel = w.cp;
  p.pipeline_parallel = w.pp;
  p.virtual_stages = w.vpp;
  p.pipeline_schedule = w.schedule;
  p.pipeline_first_layers = w.pp_first_layers;
  p.pipeline_last_layers = w.pp_last_layers;
  p.expert_parallel = w.ep;
  p.expert_tensor_parallel = w.etp;
  p.moe_dispatcher = w.moe_dispatcher;
  p.moe_a2a_overlap = w.moe_a2a_overlap;
  p.moe_shared_overlap = w.moe_shared_overlap;
  p.moe_capacity_factor = w.moe_capacity_factor;
  // Parallel graphs reduce each gradient once, after its last micro-batch.
  if (scheduler::IsParallel(p)) p.reduce_every_micro_step = false;
  return p;
}

double ExpectedMaxOfNormals(int n) {
  if (n <= 1) return 0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by the midpoint rule
  // over [-10, 10] (the integrand is below 1e-20 outside for n <= 1e9).
  constexpr int kSteps = 4000;
  constexpr double kLo = -10, kHi = 10, kDx = (kHi - kLo) / kSteps;
  double sum = 0;
  for (int i = 0; i < kSteps; ++i) {
    const double x = kLo + (i + 0.5) * kDx;
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * n * pdf * std::pow(cdf, n - 1);
  }
  return sum * kDx;
}

MemoryBreakdown ActivationMemory(const ModelSpec& m, const Workload& w,
                                 int recompute_blocks, scheduler::Recompute mode) {
  MemoryBreakdown mem;
  const double sb = static_cast<double>(w.seq) * w.micro_batch;
  const double sbh = sb * m.hidden;
  const int64_t recomputed =
      recompute_blocks < 0 ? m.layers : std::min<int64_t>(recompute_blocks, m.layers);
  if (mode == scheduler::Recompute::kSelective) {
    // The attention core's output and its fp32 softmax statistics.
    const double core = sb * m.heads * m.head_dim * 2 + sb * m.heads * 4;
    mem.activations = m.layers * 34 * sbh - recomputed * core + 2 * sbh;
    if (recomputed > 0) mem.activations += core;  // one block's, rebuilt
  } else {
    mem.activations = recomputed * 2 * sbh + (m.layers - recomputed) * 34 * sbh +
                      2 * sbh;  // the embedding output
    if (recomputed > 0) mem.activations += 34 * sbh;  // one block rebuilt
  }
  mem.logits = static_cast<double>(w.seq) * w.micro_batch * m.vocab * 6;
  return mem;
}

StatusOr<SimResult> SimulateGraph(const StepGraph& graph,
                                  const ClusterSpec& cluster,
                                  const Workload& workload,
                                  const SimOptions& options) {
  BATON_RETURN_IF_ERROR(ValidateCluster(cluster));
  BATON_RETURN_IF_ERROR(ValidateWorkload(workload));
  if (graph.world_size() != workload.gpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "simulator: graph built for ", graph.world_size(),
        " ranks, workload has ", workload.gpus, " GPUs"));
  }
  BATON_ASSIGN_OR_RETURN(const KernelTable* table, KernelTableOrH100(options.kernels));
  BATON_ASSIGN_OR_RETURN(
      ComputeModel kernels,
      ComputeModel::Create(*table, cluster, graph.layout.spec,
                           workload.seq * workload.micro_batch,
                           workload.micro_batch, workload.seq,
                           options.attention));
  if (graph.layout.options.lora_rank > 0) {
    kernels.AddLora(graph.layout.options.lora_rank, graph.layout.options.lora_targets);
  }
  BATON_ASSIGN_OR_RETURN(SimResult r, RunStep(graph, cluster, options, kernels));
  // Stragglers: each rank's compute varies by straggler_cv, and every rank
  // waits for the slowest one at the step's collectives.
  r.straggler_s = cluster.straggler_cv * r.compute_s *
                  ExpectedMaxOfNormals(workload.gpus);
  r.step_s += r.straggler_s;
  const ModelSpec& m = graph.layout.spec;
  r.policy = graph.policy.name;
  r.recompute_blocks = graph.policy.recompute_blocks < 0
                           ? static_cast<int>(m.layers)
                           : graph.policy.recompute_blocks;
  const double local = static_cast<double>(workload.global_batch) / workload.gpus;
  r.mfu = scheduler::TrainingFlopsPerSequence(m, workload.seq) * local /
          (r.step_s * cluster.peak_tflops * 1e12);
  r.tokens_per_s_per_gpu = local * workload.seq / r.step_s;
  r.memory = StepMemory(graph, cluster, workload);
  r.fits = r.memory.peak() <= cluster.memory_gib * 1073741824.0;
  r.arena_bytes = graph.plan.arena_bytes;
  r.host_bytes = graph.host_bytes;
  r.lower_bound_bytes = graph.plan.lower_bound_bytes;
  return r;
}

StatusOr<SimResult> Simulate(const ModelSpec& model, const ClusterSpec& cluster,
                             const Workload& workload,
                             const std::string& policy_name,
                             int recompute_blocks, const SimOptions& options,
                             StepGraph* graph) {
  BATON_ASSIGN_OR_RETURN(scheduler::Policy policy,
                         SimPolicy(policy_name, workload, cluster.gpus_per_node));
  return SimulatePolicy(model, cluster, workload, std::move(policy),
                        recompute_blocks, options, graph);
}

StatusOr<SimResult> SimulatePolicy(const ModelSpec& model,
                                   const ClusterSpec& cluster,
                                   const Workload& workload,
                                   scheduler::Policy policy,
                                   int recompute_blocks,
                                   const SimOptions& options,
                                   StepGraph* graph) {
  BATON_RETURN_IF_ERROR(ValidateWorkload(workload));
  BATON_RETURN_IF_ERROR(scheduler::ValidatePolicy(policy));
  if (policy.micro_steps !=
      workload.global_batch / workload.data_ranks() / workload.micro_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", policy.name, ": micro_steps = ", policy.micro_steps,
        ", but the workload takes ",
        workload.global_batch / workload.data_ranks() / workload.micro_batch,
        " micro-steps (global batch / data ranks / micro-batch)"));
  }
  if (scheduler::IsParallel(policy) || model.moe.enabled()) {
    return SimulateParallel(model, cluster, workload, std::move(policy), recompute_blocks,
                            options, nullptr, graph);
  }
  if (recompute_blocks == kAutoRecompute) {
    // Arena and states do not depend on recompute: plan once, then pick the
    // fewest recomputed blocks that fit.
    policy.recompute_blocks = 0;
    BATON_ASSIGN_OR_RETURN(StepGraph g0,
                           scheduler::BuildStepGraph(model, policy, workload.gpus));
    const double fixed = StateBytes(g0) +
                         static_cast<double>(g0.plan.arena_bytes) +
                         cluster.reserved_gib * 1073741824.0 +
                         AllocatorReserveBytes(g0);
    int chosen = -1;
    for (int n = 0; n <= model.layers; ++n) {
      const MemoryBreakdown a = ActivationMemory(model, workload, n, policy.recompute);
      if (fixed + a.activations + a.logits <= cluster.memory_gib * 1073741824.0) {
        chosen = n;
        break;
      }
    }
    policy.recompute_blocks = chosen < 0 ? -1 : chosen;
    if (chosen == 0) {
      BATON_ASSIGN_OR_RETURN(SimResult r,
                             SimulateGraph(g0, cluster, workload, options));
      if (graph != nullptr) *graph = std::move(g0);
      return r;
    }
  } else {
    if (recompute_blocks < -1 || recompute_blocks > model.layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--recompute-layers must be 0..", model.layers,
          ", all or auto; got ", recompute_blocks));
    }
    policy.recompute_blocks = recompute_blocks;
  }
  BATON_ASSIGN_OR_RETURN(StepGraph g,
                         scheduler::BuildStepGraph(model, policy, workload.gpus));
  BATON_ASSIGN_OR_RETURN(SimResult r,
                         SimulateGraph(g, cluster, workload, options));
  if (graph != nullptr) *graph = std::move(g);
  return r;
}

}  // namespace baton::sim
