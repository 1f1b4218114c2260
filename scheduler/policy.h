// A schedule policy: the knobs that turn a ModelLayout into a StepGraph, and
// the named presets that reproduce the peers' schedules.
//
// Knobs and their trade-offs:
//   forward_prefetch / backward_prefetch = d
//       All-gathers may run up to d buckets ahead of the one the compute
//       stream is using: the gather of bucket k+d+1 waits (event edge) until
//       compute has finished with bucket k. Larger d hides more latency and
//       holds d+1 gathered buckets (not 2) in memory.
//   reshard_after_forward
//       true (ZeRO-3): gathered parameters are dropped after a unit's
//       forward and gathered again for its backward: least memory, twice the
//       all-gather traffic. false (ZeRO-2): kept until the backward.
//   param_dtype / reduce_dtype
//       Gathered parameters (and the all-gather wire) / full gradient buffer
//       and reduce-scatter wire. The master shard and the optimizer are fp32.
//   micro_steps, reduce_every_micro_step
//       Gradient accumulation: reduce-scatter each micro-step and add into
//       the gradient shard (less memory, more traffic), or keep the full
//       gradient buffers across micro-steps and reduce once on the last.
//   recompute_blocks, recompute (full | selective)
//       Activation recompute of the first N blocks (-1: all): the backward
//       of such a block is preceded by a recompute node. full: the whole
//       block's forward runs again and the forward keeps only the block's
//       input. selective (Korthikanti et al. 2022, attention core only):
//       the forward keeps everything but the attention core's output and
//       softmax statistics, which the recompute rebuilds from the kept
//       q, k, v (ComputeContext::recompute says which part to run).
//   shared_comm_stream
//       One comm stream for AG and RS in FIFO order (YaFSDP), or one each.
//   reduce_window = w
//       Full gradient buffers alive in backward: the backward of the bucket
//       w places after bucket k waits until k's reduce-scatter is done.
//       Bounds gradient memory; a slow reduce-scatter then stalls compute.
//   host_limit = k (peer emulation)
//       Before issuing a gather, the HOST blocks until the compute that
//       consumed the gather k places earlier has finished (FSDP1's
//       limit_all_gathers, DeepSpeed's fetch limit). 0: never.
//   copy_in_out (peer emulation: FSDP2)
//       Copy the shard into a separate all-gather input, copy the gathered
//       buffer out into parameters, and copy gradients into a separate
//       reduce-scatter input: the extra device copies FSDP2 makes.
//   all_reduce (DDP)
//       No sharding: every rank holds whole parameters and all-reduces
//       gradient buckets.
//   shard_group = S (hierarchical sharding: FSDP2's HSDP)
//       Ranks per shard group; 0 (or the world size) shards over every
//       rank. With S < world, consecutive blocks of S ranks each hold a full
//       copy of the model sharded S ways (replicas = world / S): gathers and
//       the reduce-scatter stay inside the group (inside a node when S is at
//       most the GPUs per node: NVLink, not InfiniBand), and each reduced
//       gradient shard is then all-reduced across the replica group (the
//       ranks holding the same shard, one per group). Costs: every shard,
//       master and optimizer moment is world/S times larger than under full
//       sharding, and the replica all-reduce moves 2 x shard bytes across
//       groups; wins when gathers over the slow links dominate. Must divide
//       the world size; a group larger than the world is the world.
//   hpz_group = h (ZeRO++ hpZ)
//       0: off. Else after each forward all-gather a rank keeps a secondary
//       shard: its 1/h slice of the gathered bucket, where its hpZ group is
//       a block of h consecutive ranks (a node, typically). The backward
//       all-gathers gather from those secondary shards within the hpZ group
//       instead of across the shard group. Costs: a transient 1/h of every
//       bucket held from forward to backward (h < S: more than the primary
//       shard), a copy per bucket; saves the backward gathers' traffic over
//       the slow links. Must divide the shard group (and so be at most
//       it; a group larger than the world is the world); needs
//       reshard_after_forward (else there is no backward gather).
//   reuse_edges
//       true: the static planner may add cross-stream reuse edges (never
//       into a compute node, never from compute into an all-gather) to
//       shrink the arena. false: buffers share bytes only where the
//       schedule already orders them, which is what a caching allocator
//       can prove without waiting.
//   offload (ZeRO-Offload)
//       none: the fp32 master shard, the two Adam moments and the optimizer
//       live on the device. optimizer: they live in (pinned) host memory;
//       after each bucket's last reduction its gradient shard is copied to
//       the host on a copy stream ("D2H"), the host runs the optimizer and
//       the cast into a host copy of the parameter-dtype shard (host
//       stream), and the next step copies that shard back to the device
//       ("H2D", copy stream) just before the bucket's first gather, so the
//       copies of later buckets overlap the forward of earlier ones. Costs:
//       2 x shard bytes over the host link per step and the host
//       optimizer's time (serial with the step: the next forward needs the
//       updated first bucket); saves 12 bytes per parameter (/ shard group)
//       of device memory. Needs sharding: InvalidArgument under all_reduce.
//       params: optimizer offload, and the shards of frozen buckets (LoRA's
//       base; FSDP's CPUOffload(offload_params=True) as Answer.AI's FSDP +
//       QLoRA runs it) live in host memory too: each gather of a frozen
//       bucket first copies its shard to the device ("H2D" into a staged
//       shard, host-copy stream, within the gather's prefetch window), so
//       the device holds only the buckets in flight. Costs the frozen
//       shards' bytes over the host link twice a step (forward and
//       backward gathers).
//   zenflow, zenflow_topk_ratio / zenflow_select_interval /
//   zenflow_update_interval (ZenFlow, DeepSpeed's importance-aware offload)
//       On top of offload = optimizer: the topk_ratio fraction of each
//       matrix's columns with the largest gradient norm (norms summed over
//       the shard group, re-selected every select_interval steps) is
//       updated on the device every step; the gradient shard goes to the
//       host every step, where the other columns' gradients accumulate and
//       the host optimizer applies them every update_interval steps (as
//       DeepSpeed does). Parameters that are not 2-D take the host path.
//       The executor runs it on either kind of device
//       (optim/zenflow_driver.h, the executor's optimizer driver); CaptureStep refuses it. select_interval must be a multiple of
//       update_interval (after "auto" is resolved; ops/zenflow.h).
//       Intervals may be kAutoInterval ("auto", as in DeepSpeed's config):
//       update_interval auto = kAutoUpdateInterval (4, the value of
//       DeepSpeed's ZenFlow tutorial); select_interval auto = the update
//       interval (re-select when a host update lands). ResolveZenFlow gives
//       the values. topk_ratio must be in (0, 1], intervals >= 1 or auto,
//       and zenflow needs offload = optimizer.
//   zenflow_staleness (DeepSpeed's overlap_step)
//       d, 0 <= d < update_interval, or kAutoInterval ("auto": the largest,
//       update_interval - 1): the host update of a window runs while the
//       device computes the next d steps on the older weights and lands
//       before the forward of the (d + 1)-th (ops/zenflow.h). 0 makes the
//       next step wait for it. A selection step still waits for it before
//       its selection (after its forward and backward).
//       Default 0; the zenflow preset uses auto.
//   lora_rank, lora_alpha, lora_targets, base_dtype (in Policy::layout)
//       LoRA (Hu et al. 2021): rank r adapters on the targeted matrices of
//       every block (any of q, k, v, o, gate, up, down), the forward adding
//       (alpha / r) B A x to W x; the model's own parameters are frozen:
//       gathered for compute, never reduced, with no master, gradient or
//       optimizer state; the adapters are parameters of their units'
//       companion buckets (layout.h), sharded, reduced and trained.
//       base_dtype nf4 (QLoRA, Dettmers et al. 2023) stores the frozen
//       block weights as NF4 with double-quantized scales (4.13 bits):
//       their shards are packed, the all-gather moves the packed bytes,
//       and a dequantize node on the compute stream writes the gathered
//       weights in the parameter dtype just before their first use
//       (step_graph.h). Both change what is trained: the tuner picks them
//       only when allowed. nf4 needs lora_rank > 0 and sharding; neither
//       combines with zenflow.
//   optimizer (adamw | adamw8bit)
//       adamw: two fp32 moments per parameter (8 bytes). adamw8bit: both
//       moments in 8 bits, block-wise (ops/adamw8bit.h: blocks of
//       kQuantBlockNumel = 2048 elements with one fp32 absmax per block
//       and moment; scheduler/optimizer_state.h): 2 bytes (+ 8 per 2048)
//       per parameter, so the optimizer state shrinks by 75%. Every
//       parameter then starts on a block boundary of its bucket and every
//       shard is whole blocks (Sharding::block), so a block holds one
//       parameter's elements whatever the sharding, and the state does not
//       depend on it. It changes the update (quantized moments), so the
//       tuner picks it only when allowed. Needs the fp32 master with an f32
//       or bf16 parameter dtype (InvalidArgument for half); not with
//       zenflow, whose device and host updates keep fp32 moments.
//   tensor_parallel = t, sequence_parallel, tp_comm_overlap
//       Megatron-style tensor parallelism over t ranks of one node (the
//       mesh's innermost dimension): column-parallel QKV and gate/up,
//       row-parallel output and down projections, heads and KV heads split
//       t ways (t must divide both), vocabulary-parallel embedding and head.
//       Each block's forward all-reduces its attention and MLP outputs
//       over the t ranks; sequence_parallel (needs t > 1) shards the norms
//       and residuals over the sequence instead and turns each all-reduce
//       into an all-gather before the column-parallel GEMM and a
//       reduce-scatter after the row-parallel one (backward mirrored).
//       tp_comm_overlap (needs t > 1): those collectives are decomposed
//       into t chunks pipelined with the partial GEMMs (PyTorch's async TP,
//       Megatron's --tp-comm-overlap) instead of exposed on the critical
//       path. Costs: activation memory and GEMMs / t, per block 4 (SP
//       forward) to 6 (SP backward) collectives of s x b x h elements.
//   context_parallel = c
//       Ring attention over c ranks: each rank holds s / c tokens (two
//       chunks of a 2c-way split, load-balanced for the causal mask), and
//       each attention passes K / V around the ring, overlapped with the
//       attention blocks; compute and activations / c.
//   pipeline_parallel = p, virtual_stages = v, pipeline_schedule,
//   pipeline_first_layers / pipeline_last_layers
//       Pipeline parallelism over p stages (the mesh's outermost
//       dimension): the blocks split into p x v contiguous groups
//       (virtual stages; stage s holds groups s, s + p, ...), embedding on
//       the first, final norm and head on the last; micro_steps is the
//       number of micro-batches m per step. Schedules: 1f1b (v = 1),
//       interleaved (Megatron's interleaved 1F1B, v >= 2, m a multiple of
//       p, layers a multiple of p x v), zb-h1 (zero-bubble H1, v = 1: each
//       backward split into an input-gradient pass and a weight-gradient
//       pass deferred into the bubbles, at 1F1B's in-flight micro-batches).
//       first / last layers: blocks of the first / last (virtual) stage
//       (0: an even split, the remainder to the inner stages first;
//       Megatron's --decoder-first/last-pipeline-num-layers).
//       recompute_blocks N in a parallel graph: the first N blocks of each
//       virtual stage (Megatron's --recompute-num-layers per model chunk).
//   expert_parallel = ep, expert_tensor_parallel = etp, moe_dispatcher,
//   moe_a2a_overlap, moe_shared_overlap, moe_capacity_factor (MoE models)
//       Experts folded over a stage's ranks (scheduler/mesh.h, Megatron's
//       parallel folding): each expert-parallel group of ep ranks holds
//       experts / ep experts each (ep must divide the experts and the
//       stage's ranks over etp); their weights, gradients and optimizer
//       states are sharded over the expert-data group edp (a stage's ranks
//       / (ep x etp)) as dense weights are over the data ranks. etp: 1 (an
//       expert's FFN whole on a rank, the usual choice for fine-grained
//       experts) or tensor_parallel (each expert's FFN split like the
//       dense MLP, its tokens all-gathered and reduce-scattered over the
//       tensor group around it). Each MoE block's tokens are dispatched to
//       their experts' ranks and combined back by nodes on the expert
//       stream (scheduler/step_graph.h kDispatch / kCombine) by:
//         alltoall      all-to-all(v) of one copy per (token, expert) over
//                       the ep group (Megatron's alltoall dispatcher,
//                       torchtitan's expert parallel);
//         hierarchical  DeepEP's normal kernels (Megatron's flex
//                       dispatcher): one copy per (token, node) over RDMA
//                       to the peer GPU of each destination node, then over
//                       NVLink to the experts' GPUs, deduplicated per rank;
//         allgather     every rank all-gathers the ep group's tokens and
//                       reduce-scatters the outputs (Megatron's allgather
//                       dispatcher; no per-expert counts).
//       moe_a2a_overlap: each steady-state forward / backward pair of two
//       micro-batches is issued interleaved at the dispatch and combine
//       points, so one micro-batch's all-to-all runs under the other's
//       compute (Megatron's --overlap-moe-expert-parallel-comm, DeepSeek's
//       DualPipe overlap of a forward and a backward chunk); costs both
//       micro-batches' activations at once, which 1F1B holds anyway.
//       moe_shared_overlap: the shared experts run on the compute stream
//       while the dispatch is in flight (Megatron's
//       --moe-shared-expert-overlap), else after the combine.
//       moe_capacity_factor c > 0: each expert takes at most c x its
//       balanced share of tokens (the rest are dropped; GShard / DeepSpeed
//       capacity), so a load imbalance above c costs no time; 0: dropless.
//       Need a MoE model (InvalidArgument otherwise, by the graph builder).
//   gather_per_micro_batch (needs pipeline_parallel > 1)
//       false: each stage gathers its buckets once per step and keeps
//       them (Megatron's distributed optimizer, torchtitan's FSDP under
//       pipelining). true (ZeRO-3 style): each pass re-gathers the buckets
//       of its chunk before it runs and frees them after (the backward's
//       kept for zb-h1's weight pass): less memory, 2 x m gathers per
//       bucket instead of one.
//       Data parallelism inside a parallel graph is Megatron's distributed
//       optimizer (torchtitan's FSDP under pipelining alike): each stage's
//       parameters are gathered once per step and kept, its gradients
//       reduced once, after their last micro-batch; shard_group as above;
//       all_reduce: gradients all-reduced, optimizer state replicated.
//       Not with offload, ZenFlow or hpz_group (InvalidArgument).
// Plain data; copyable.
#ifndef BATON_SCHEDULER_POLICY_H_
#define BATON_SCHEDULER_POLICY_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/layout.h"
#include "baton/scheduler/mesh.h"

namespace baton::scheduler {

enum class Offload { kNone, kOptimizer, kParams };
const char* OffloadName(Offload offload);  // "none", "optimizer", "params"
// InvalidArgument listing the names for anything else.
StatusOr<Offload> ParseOffload(absl::string_view name);

// Which part of a block a recompute node runs (Policy::recompute).
enum class Recompute { kFull, kSelective };
const char* RecomputeName(Recompute r);  // "full", "selective"
// InvalidArgument listing the names for anything else.
StatusOr<Recompute> ParseRecompute(absl::string_view name);

// The optimizer whose state the graph holds (Policy::optimizer).
enum class OptimizerKind { kAdamW, kAdamW8bit };
const char* OptimizerName(OptimizerKind kind);  // "adamw", "adamw8bit"
// InvalidArgument listing the names for anything else.
StatusOr<OptimizerKind> ParseOptimizer(absl::string_view name);
// Pipeline schedules (the pipeline_schedule knob).
enum class PipelineSchedule { k1F1B, kInterleaved, kZbH1 };
// "1f1b", "interleaved", "zb-h1".
const char* PipelineScheduleName(PipelineSchedule schedule);
// InvalidArgument listing the names for anything else.
StatusOr<PipelineSchedule> ParsePipelineSchedule(absl::string_view name);

// How a MoE block's tokens reach their experts (the moe_dispatcher knob).
enum class MoeDispatcher { kAllToAll, kHierarchical, kAllGather };
// "alltoall", "hierarchical", "allgather".
const char* MoeDispatcherName(MoeDispatcher d);
// InvalidArgument listing the names for anything else.
StatusOr<MoeDispatcher> ParseMoeDispatcher(absl::string_view name);

// A ZenFlow interval chosen by ResolveZenFlow ("auto").
inline constexpr int kAutoInterval = -1;
inline constexpr int kAutoUpdateInterval = 4;

struct Policy {
  std::string name = "baton";
  int forward_prefetch = 1;
  int backward_prefetch = 1;
  bool reshard_after_forward = true;
  DataType param_dtype = DataType::kBF16;
  DataType reduce_dtype = DataType::kF32;
  int micro_steps = 1;
  bool reduce_every_micro_step = false;
  int recompute_blocks = 0;
  Recompute recompute = Recompute::kFull;
  bool shared_comm_stream = false;
  int reduce_window = 2;
  int host_limit = 0;
  bool copy_in_out = false;
  bool all_reduce = false;
  bool reuse_edges = true;
  // Hierarchical sharding (0: off).
  int shard_group = 0;
  int hpz_group = 0;
  // Offload (ZeRO-Offload) and ZenFlow.
  Offload offload = Offload::kNone;
  bool zenflow = false;
  double zenflow_topk_ratio = 0.05;
  int zenflow_select_interval = kAutoInterval;
  int zenflow_update_interval = kAutoInterval;
  int zenflow_staleness = 0;  // or kAutoInterval: update_interval - 1
  OptimizerKind optimizer = OptimizerKind::kAdamW;
  // Tensor, context and pipeline parallelism (1: off).
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  bool tp_comm_overlap = false;
  int context_parallel = 1;
  // Experts (MoE models; folded over a stage's ranks, scheduler/mesh.h).
  int expert_parallel = 1;
  int expert_tensor_parallel = 1;  // 1 or tensor_parallel
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  bool moe_a2a_overlap = false;
  bool moe_shared_overlap = false;
  double moe_capacity_factor = 0;  // 0: dropless
  int pipeline_parallel = 1;
  int virtual_stages = 1;
  PipelineSchedule pipeline_schedule = PipelineSchedule::k1F1B;
  bool gather_per_micro_batch = false;
  int pipeline_first_layers = 0;  // 0: balanced
  int pipeline_last_layers = 0;
  // Buckets and resident parameters (layout.h).
  LayoutOptions layout;
};

// Whether the policy uses tensor, context or pipeline parallelism (its
// graphs come from scheduler/parallel_graph.h).
// (Expert parallelism counts: its graphs are parallel graphs too; so does
// a MoE model under any policy, scheduler/parallel_graph.h.)
inline bool IsParallel(const Policy& p) {
  return p.tensor_parallel > 1 || p.context_parallel > 1 || p.pipeline_parallel > 1 ||
         p.expert_parallel > 1 || p.expert_tensor_parallel > 1;
}

// baton   static plan with reuse edges, AG and RS on two comm streams (a
//         reduce-scatter never delays a gather), prefetch 1 both ways
//         (deeper prefetch costs a gathered bucket per step of depth, which
//         the simulator turns into recompute when memory is tight),
//         resident norms, per-unit buckets.
// yafsdp  one comm stream, prefetch 1 (two weight buffers), reduce window
//         2 (two gradient buffers), resident norms, per-unit buckets.
// fsdp1   per-unit flat parameters (norms inside), backward prefetch 1, no
//         forward prefetch, host-blocking limiter of 2 gathers,
//         caching-allocator memory (no reuse edges).
// fsdp2   copy-in / copy-out around the collectives, prefetch 1 both ways,
//         caching-allocator memory.
// zero3   buckets merged up to 5e7 elements, parameters of at most 1e5
//         elements resident, host-blocking limiter of 2 fetches, AG and
//         RS on their own streams, caching-allocator memory.
// ddp     whole parameters on every rank, all-reduce of 25 MB gradient
//         buckets.
// hsdp    FSDP2's HSDP: baton's schedule sharded within groups of 4 ranks
//         (shard_group 4; set it to the GPUs per node on a real cluster),
//         replicated across them with a gradient all-reduce.
// zeropp  ZeRO++ hpZ: primary shards over every rank, secondary shards in
//         groups of 4 ranks (hpz_group 4) for the backward gathers.
// zero_offload  baton's schedule with offload = optimizer (ZeRO-Offload:
//         master, moments and the optimizer step on the host).
// zenflow ZeRO-Offload plus ZenFlow: topk_ratio 0.05, select_interval,
//         update_interval and staleness auto (the host update overlaps
//         the next update_interval - 1 steps, as DeepSpeed's examples run).
// NotFound listing the names otherwise.
StatusOr<Policy> PolicyPreset(absl::string_view name);
std::vector<std::string> PolicyPresetNames();

// InvalidArgument naming the knob for an integer knob outside its bounds
// in scheduler/limits.h (depths and windows, micro_steps in [1,
// kMaxMicroSteps], recompute_blocks in [-1, kMaxModelLayers], groups,
// byte counts, ZenFlow intervals), an integer dtype, offload under
// all_reduce, zenflow without offload, a zenflow_topk_ratio outside (0, 1],
// a ZenFlow interval that is neither >= 1 nor kAutoInterval, a
// zenflow_staleness outside [0, update_interval) after "auto" is resolved;
// a parallel size < 1, sequence_parallel or tp_comm_overlap without
// tensor_parallel > 1, virtual_stages > 1 without the interleaved schedule
// (or interleaved with fewer than 2), zb-h1 or interleaved without
// pipeline_parallel > 1, first / last layers or gather_per_micro_batch
// without it, negative first / last layers,
// tensor / context / pipeline parallelism with offload, zenflow or hpz_group;
// expert_parallel < 1, expert_tensor_parallel neither 1 nor tensor_parallel,
// a negative or non-finite moe_capacity_factor (or one in (0, 1));
// adamw8bit with a half parameter dtype or with zenflow, a lora_rank
// outside [0, kMaxLoraRank], a non-positive lora_alpha, no LoRA targets,
// nf4 without LoRA or under all_reduce, LoRA with zenflow. (A rank larger
// than a targeted matrix is refused by the layout, which knows the model.)
// Every route to a policy (presets, policy files, flags, the API) ends
// here, so no route gets past these bounds.
[[nodiscard]] Status ValidatePolicy(const Policy& policy);

// The bounds a policy has only with a model (scheduler/limits.h):
// recompute_blocks at most the model's blocks, and micro_steps x (layers +
// 3) at most kMaxStepUnits. InvalidArgument naming the knob: "policy NAME:
// recompute_blocks = 9 is more than the model's 2 blocks", or, for a policy
// read from `file` ("policy file x.json"), "<file>: field
// "recompute_blocks" = 9 ...", the words the file's other fields use.
// BuildStepGraph calls it; tools call it first with their file's name.
[[nodiscard]] Status CheckPolicyForModel(const Policy& policy, const ModelSpec& model,
                                         absl::string_view file = "");

// ZenFlow's intervals with "auto" resolved (policy.h, the zenflow knob).
struct ZenFlowIntervals {
  int select = 1;
  int update = 1;
  int staleness = 0;
};
ZenFlowIntervals ResolveZenFlow(const Policy& policy);

// The device mesh a policy implies for `world_size` ranks (scheduler/mesh.h):
// pp, cp and tp as the policy's parallel sizes, ep and etp folded over a
// stage's ranks (InvalidArgument when ep x etp does not divide them); of the data ranks (world /
// (pp x cp x tp)), dp_replicate = data / shard group, dp_shard = shard
// group / hpz group, hpz = hpz_group (1 without hpZ). A shard_group counts
// data ranks (0: all of them). InvalidArgument naming the sizes when pp x
// cp x tp does not divide the world. So rank r is in
// data-shard group r / shard (position r % shard), replica group r % shard
// (position r / shard) and hpZ group r / hpz (position r % hpz). Groups
// larger than the world are capped at it. InvalidArgument naming
// shard_group or hpz_group when the shard group does not divide the world,
// the hpZ group does not divide the shard group (or is larger), hpZ is set
// without reshard_after_forward, or either is set under all_reduce; also
// world_size < 1.
StatusOr<DeviceMesh> ResolveMesh(const Policy& policy, int world_size);

// Whether the policy keeps hpZ secondary shards (hpz_group > 0; the hpz
// dimension may still have size 1).
inline bool UsesHpz(const Policy& policy) { return policy.hpz_group > 0; }

// How a policy's layout is sharded on `mesh`: over its data-shard group, in
// the parameter dtype, or not at all under all_reduce; in whole 8-bit
// optimizer blocks under adamw8bit and whole NF4 groups under nf4
// (Sharding::block).
Sharding ShardingFor(const Policy& policy, const DeviceMesh& mesh);

// The layout of `spec` for `policy` on `mesh`: BuildLayout(spec,
// policy.layout, ShardingFor(policy, mesh)), with its errors.
StatusOr<ModelLayout> LayoutFor(const ModelSpec& spec, const Policy& policy,
                                const DeviceMesh& mesh);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_POLICY_H_
