// Step graphs of tensor, context and pipeline parallelism on top of data
// parallelism: one StepGraph per pipeline stage, each the graph every rank
// of that stage runs (the ranks of a stage are symmetric: their tensor,
// context and data coordinates only change which shard they hold).
//
// A stage's graph, in issue order (Policy in scheduler/policy.h names the
// knobs):
//   gathers   with data sharding (more than one data rank, no all_reduce)
//             an all-gather of each of the stage's buckets over the
//             data-shard group (with the context ranks: parameters are
//             replicated over them), issued at the start and kept for the
//             whole step (Megatron's distributed optimizer with
//             --overlap-param-gather; torchtitan's FSDP under pipelining);
//             with gather_per_micro_batch instead before each unit's
//             compute in every pass (forward, backward, zb-h1's weight
//             pass), into buffers of that pass freed after it, each gather
//             waiting (a window edge) for the compute of the unit two
//             before it: two units' parameters held, 2 (zb-h1: 3) x m
//             gathers per bucket (ZeRO-3 style);
//   passes    the pipeline schedule's passes in order (PipelineOrder):
//             F(m, c), B(m, c), and for zero-bubble W(m, c), micro-batch m
//             of this stage's model chunk c. F: a kRecv of the input
//             activation from the previous virtual stage (none on the
//             first), the forward of each unit of the chunk, a kSend of the
//             output to the next (none on the last). B: a kRecv of the
//             output's gradient, per unit in reverse a kRecompute (a
//             recomputed block) and the backward (the input-gradient half
//             under zb-h1), a kSend of the input's gradient. W: each
//             unit's deferred kBackwardWeight (with tensor_parallel > 1
//             one per backward part of a block, below). Sends and receives run on
//             the pipeline streams and pair by Node::tag (the receiving
//             virtual stage, micro-batch and direction); Node::peer is the
//             other stage;
//   blocks    with tensor_parallel > 1, a block is split where its tensor
//             collectives sit (Node::segments, BlockSegment), which run on
//             the tensor stream, over the tensor group, on activation
//             buffers of s x b x h elements (s / cp under context
//             parallelism): forward, with sequence_parallel the norm, an
//             all-gather, the attention, a reduce-scatter, then the same
//             for the MLP (8 nodes); without it norm and attention, an
//             all-reduce, norm and MLP, an all-reduce (4 nodes);
//             backward, the MLP with its norm, then the attention with its
//             norm, each after an all-gather of its output gradient with
//             sequence_parallel, and (as Megatron overlaps them with the
//             dgrad / wgrad GEMMs) the re-gather of the input and the
//             reduce-scatter of the input gradient fused into the node;
//             without it the all-reduce of the input gradient fused
//             likewise; under zb-h1 these parts are the input-gradient
//             passes (their collectives kept), and each has a weight pass
//             of its own (kBackwardWeight with the part's segments: the
//             MLP with its norm, the attention with its norm) with no
//             tensor collective. Under tp_comm_overlap
//             every one of them is fused into its segment in
//             tensor_parallel chunks (Node::fused). Context parallelism
//             fuses the K / V ring into the attention (kRing). The
//             vocabulary-parallel embedding and head fuse their all-reduce
//             (reduce-scatter / all-gather with sequence parallelism) and
//             the parallel cross-entropy's three all-reduces of s floats;
//   experts   a mixture-of-experts block (ModelSpec::moe_block) splits its
//             MLP where its tokens leave for their experts and come back
//             (Megatron-Core's MoE layer): forward, the attention (with
//             tensor parallelism its nodes as above, the rest on the
//             sequence shard) with the norm, the router and the permute
//             ("F blockN.attn_router"; with tp "F blockN.router"); a
//             kDispatch of the permuted tokens over the expert group on the
//             expert stream ("DISPATCH blockN"); with moe_shared_overlap
//             the shared experts ("F blockN.shared") while it runs; with
//             etp > 1 an all-gather of the dispatched tokens over the
//             tensor group; the grouped expert GEMMs ("F blockN.experts");
//             (etp > 1: a reduce-scatter;) a kCombine back ("COMBINE");
//             the unpermute and residual add (and the shared experts
//             without the overlap, "F blockN.unpermute"). Backward mirrors
//             it: unpermute, DISPATCH-GRAD (the output gradients to the
//             experts), shared, experts, COMBINE-GRAD, router and
//             attention. A recomputed MoE block runs its forward nodes
//             again ("R ...", "R-DISPATCH", "R-COMBINE"). The routed
//             experts' bucket (Bucket::expert) holds 1 / (ep x etp) of
//             them per rank, gathered and reduce-scattered over the
//             expert-data group (kExpertDataGroup), never over replicas.
//             With moe_a2a_overlap each backward pass and the forward pass
//             right after it (another micro-batch or chunk) are issued
//             interleaved, each cut after its dispatch and combine nodes:
//             one micro-batch's all-to-all runs under the other's compute
//             (backward first on every stage, which keeps the stages'
//             pairs free of cyclic waits);
//   reduces   after a bucket's last backward (or weight pass) of the step,
//             a reduce-scatter of its gradient over the data-shard group
//             (all-reduce under all_reduce; with replicas an all-reduce of
//             the shard over them), overlapping the rest of the backward;
//   optimizer the optimizer and cast of each bucket on the compute stream.
// A frozen bucket (LoRA's base weights) is gathered like the others and
// gets no gradient, reduction, optimizer or cast; its adapters' bucket is
// trained. NF4 base weights (base_dtype nf4) keep their shard's packing
// (scheduler/nf4_layout.h, fp32 words) and gather it packed (kPacked,
// once per step or per pass as above); before a unit's compute in every
// pass (forward, backward with its recompute, weight) a dequantize node
// ("DQ <bucket> <pass> m<i>", compute stream) writes the pass's weights
// into a gathered buffer of its own, which the unit's compute nodes read
// (the executor runs it through StepCallbacks::dequantize, as for
// data-parallel graphs).
// Edges and waits are derived from the buffers as for data-parallel graphs
// (scheduler/step_graph.h); cross-stage order is the send / receive pairs
// (the simulator runs the stages together, sim/pipeline_loop.h). The
// backward of a chunk's first unit (with tensor parallelism its attention
// part, whose norm's backward reads the block input) also reads the
// activation its forward received, so a stage keeps its in-flight micro-batches' inputs until
// their backward (stage s of 1F1B: min(m, p - s) at once). A trainer that
// declares the bytes a unit's forward saves per micro-batch
// (BuildParallelStep's saved_bytes) gets a saved-activation buffer
// (BufferRole::kSavedActivation, "saved.<unit> m<i>") per (unit,
// micro-batch): the unit's forward writes it, its recompute (with
// recompute_blocks) writes it again, its backward reads it and under zb-h1
// its weight pass too (the last use); with tensor parallelism every part of
// a block (its norm, attention and MLP nodes) writes it forward and reads
// it backward (and under zb-h1 in both weight parts, the attention's last), the trainer's per-micro-batch state of its slice (and
// sequence shard); the planner places them, reusing the
// bytes of micro-batches whose lifetimes do not overlap, so the plan holds
// the schedule's in-flight count (1F1B stage s: min(m, p - s) per unit;
// SavedActivationPeak). No memory plan
// is made unless BuildParallelStep's plan_memory asks (the executor needs
// one): the simulator counts activations and the kept parameters itself.
//
// Plain data; immutable once built; thread-safe.
#ifndef BATON_SCHEDULER_PARALLEL_GRAPH_H_
#define BATON_SCHEDULER_PARALLEL_GRAPH_H_

#include <cstdint>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/mesh.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler {

// One pass of a stage's schedule.
struct PipelinePass {
  enum class Kind : uint8_t { kForward, kBackward, kWeight };
  Kind kind = Kind::kForward;
  int micro = 0;
  int chunk = 0;
  friend bool operator==(const PipelinePass& a, const PipelinePass& b) {
    return a.kind == b.kind && a.micro == b.micro && a.chunk == b.chunk;
  }
};

// A block's forward, input-gradient and weight-gradient pass times (any
// unit), for the zero-bubble list schedule.
struct PassCosts {
  double f = 1, b = 1, w = 1;
};

// The order of passes on each of p stages for m micro-batches and v model
// chunks per stage:
//   1f1b        stage s: min(p - s - 1, m) forwards, then forward / backward
//               pairs, then the remaining backwards (Narayanan et al. 2021);
//   interleaved Megatron's interleaved 1F1B (megatron/core/pipeline_parallel/
//               schedules.py): forward k runs chunk (k mod pv) / p of
//               micro-batch (k / pv) p + k mod p, backward k chunk v - 1 -
//               that; min(2 (p - s - 1) + (v - 1) p, m v) warm-up forwards.
//               Needs m a multiple of p;
//   zb-h1       each backward split into B (input gradient) and W (weight
//               gradient): the order a list schedule of the passes (times
//               `costs`, as the zero-bubble paper's scheduler takes
//               profiled ones) gives when each stage runs a ready B first,
//               else a ready F while fewer than p - s micro-batches await
//               their B (1F1B's in-flight count), else a pending W, and
//               runs a W first once p micro-batches await theirs. With
//               F = B = W its bubble is (p - 1) of the 3 (p - 1) of 1F1B
//               (Qi et al. 2023, ZB-H1: (p - 1)(T_F + T_B - T_W)).
// InvalidArgument for p, m or v < 1, v > 1 outside interleaved,
// interleaved with m not a multiple of p, or costs not positive and finite.
StatusOr<std::vector<std::vector<PipelinePass>>> PipelineOrder(
    PipelineSchedule schedule, int stages, int micro_batches, int chunks,
    const PassCosts& costs = {});

// InvalidArgument, one line naming the problem, when the policy's parallel
// sizes do not fit the model: tensor_parallel not dividing the heads or
// the KV heads, more pipeline stages x virtual stages than blocks, the
// interleaved schedule with blocks not a multiple of p x v or micro_steps
// not a multiple of p, first / last layers leaving the other stages
// nothing (or not dividing evenly), tied embeddings with pipeline_parallel > 1;
// --ep / --etp on a model without experts, ep not dividing the experts,
// a MoE model with tensor parallelism but no sequence parallelism, or
// moe_a2a_overlap with gather_per_micro_batch.
Status ValidateParallel(const ModelSpec& spec, const Policy& policy);

// Blocks per virtual stage (p x v entries, virtual stage c p + s is chunk c
// of stage s): pipeline_first_layers / pipeline_last_layers for the first
// and last virtual stage (the first and last stage's first and last
// chunk) and the rest split evenly; without them,
// an even split whose remainder goes to the inner stages first (the first
// holds the embedding, the last the head: llama3-405b's 126 blocks on 16
// stages are 7, 8 x 14, 7). With the policy's sizes validated.
StatusOr<std::vector<int>> VirtualStageLayers(const ModelSpec& spec,
                                              const Policy& policy);

// Each unit's training FLOPs per sequence of `seq` tokens (forward and
// backward, one entry per unit of the layout's order: embedding, blocks,
// final norm, head): 3 x BlockForwardFlops per block, 6 x hidden x vocab x
// seq for the head, 0 for the embedding (a gather) and the norm.
std::vector<double> UnitTrainingFlops(const ModelSpec& spec, int64_t seq);

// Blocks per stage for `stages` contiguous stages (no virtual stages) that
// minimise the largest stage's cost, the embedding on the first stage and
// the final norm and head on the last, at least one block each; among
// equal splits the one whose earlier stages hold fewer blocks. `unit_costs`
// as UnitTrainingFlops (blocks + 3 entries, each finite and >= 0).
// InvalidArgument for stages < 1 or more than the blocks, or costs of the
// wrong count or value.
StatusOr<std::vector<int>> BalancedStageLayers(int64_t blocks, int stages,
                                               const std::vector<double>& unit_costs);

struct ParallelStep {
  DeviceMesh mesh;
  ModelLayout layout;                 // the whole model, sharded over data
  std::vector<int> virtual_layers;    // blocks per virtual stage
  std::vector<StepGraph> stages;      // stages[s].stage == s
  std::vector<std::vector<PipelinePass>> order;  // per stage: its passes
  double build_ms = 0;
};

// Builds every stage's graph for `policy` (which must be IsParallel) on
// `world_size` ranks, for micro-batches of `micro_batch` sequences of `seq`
// tokens (the activations' size); `virtual_layers` (p x v entries of at
// least one block, summing to the model's blocks) overrides
// VirtualStageLayers; `costs` go to PipelineOrder; `plan_memory` plans
// each stage's transient buffers (StepGraph::plan), as the executor
// requires. The layout has a bucket per unit and no resident
// bucket (a bucket never spans two stages), whatever policy.layout says.
// `tensor_slices` (tensor_parallel > 1): the layout is of one tensor rank's
// slice (TensorParallelSlice, scheduler/tensor_parallel.h: heads, KV heads,
// FFN and the vocabulary rows of the embedding and head / tp, norms whole; InvalidArgument where tp does not
// divide them) and each rank's buffers
// hold its slice, as the executor runs it; otherwise (the simulator) the
// layout is the whole model's and each rank holds 1 / tp of every bucket
// (the vocabulary-parallel embedding and head included).
// A mixture-of-experts model's graphs come from here under any policy
// (its expert nodes and buckets), and tensor_slices refuses it (the executor
// does not run dispatch yet).
// InvalidArgument for a policy that is not parallel (of a dense model) or is invalid
// (ValidatePolicy, ResolveMesh, ValidateParallel), a seq that does not
// split into 2 x context_parallel chunks, sequence parallelism with tokens
// per context rank not a multiple of tensor_parallel, or virtual_layers of
// the wrong size or sum.
// `saved_bytes` (empty: none): per unit of the layout's order, the bytes
// its forward saves per micro-batch for its backward (0: none); the
// executor hands each node its buffer (ComputeContext::pipeline.saved).
// InvalidArgument for a size other than the units' or a negative entry.
// With tensor_slices, the bytes of this rank's slice.
StatusOr<ParallelStep> BuildParallelStep(const ModelSpec& spec, const Policy& policy,
                                         int world_size, int64_t seq, int64_t micro_batch,
                                         std::vector<int> virtual_layers = {},
                                         const PassCosts& costs = {},
                                         bool plan_memory = false,
                                         bool tensor_slices = false,
                                         const std::vector<int64_t>& saved_bytes = {});

// The most bytes of saved-activation buffers (BufferRole::kSavedActivation)
// live at once in a stage graph built with plan_memory, by the plan's
// lifetimes (first write to last use in issue order); 0 without a plan or
// without such buffers. Pure.
int64_t SavedActivationPeak(const StepGraph& g);

// The group the data-parallel collectives of a parallel graph run over:
// the data-shard group, with the context dimension when context_parallel > 1.
MeshGroup ParallelDataGroup(const Policy& policy);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_PARALLEL_GRAPH_H_
