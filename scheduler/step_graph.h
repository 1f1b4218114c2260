// The step graph: every piece of work of one training step on one rank, the
// buffers each reads and writes, the edges that order them, and the memory
// plan that places the step's transient buffers in one arena.
//
// Nodes come in ISSUE ORDER, which is a deterministic function of (layout,
// policy) and therefore identical on every rank (NCCL's requirement). Each
// node runs on one stream class: compute, all-gather, reduce-scatter (the
// last two may be one stream: Policy::shared_comm_stream).
//
// Edges:
//   kData    derived from the buffers: a reader waits for the last writer, a
//            writer for the last writer and every reader since (so a buffer
//            is never overwritten under a reader).
//   kWindow  the policy's bounds: prefetch depth (an all-gather waits for
//            compute to finish with an earlier bucket), the reduce window
//            (a backward waits for an earlier reduce-scatter), and, with
//            separate comm streams, a micro-step's gather of a bucket waits
//            for the previous micro-step's reduction of it.
//   kReuse   added by the memory planner so that two buffers may share
//            bytes; the plan is valid only with them.
// Same-stream edges are free (FIFO); the executor turns each cross-stream
// edge into an event record + wait, keeping only the waits that the
// happens-before relation does not already imply (Node::waits).
//
// Buffers: transient ones (gathered parameters, full gradients, copies,
// reduce-scatter scratch) live in the arena at plan offsets; persistent ones
// (per bucket: the parameter-dtype shard that feeds the all-gather, the fp32
// master shard, the gradient shard, two fp32 optimizer moments) live across
// steps in a separate allocation. Under DDP "shard" means the whole bucket.
//
// Offload (Policy::offload = optimizer): the master shard and the moments
// are host buffers (GraphBuffer::host), with two more per bucket: the host
// gradient shard and the host parameter-dtype shard. After a bucket's last
// reduction "D2H" (host-copy stream) copies its gradient shard to the host;
// "OPT" and "CAST" run on the host stream on host memory, the cast writing
// the host shard (issued after the compute, as without offload, but waiting
// only for their D2H, so the host starts on them during the backward); at the start of the next step "H2D" (host-copy stream)
// copies that shard into the device shard just before the bucket's first
// gather (the gather waits for it; later buckets' copies overlap earlier
// buckets' forward). persistent_bytes counts device buffers only,
// host_bytes the host ones.
//
// ZenFlow (Policy::zenflow, on top of offload), per bucket after the
// compute: "NORM" (compute) adds the per-column squared gradient sums of
// the bucket's matrices (2-D parameters) in this shard into kColumnNorms;
// "AR-NORM" (reduce-scatter stream) sums them over the shard group (the
// executor issues it on selection steps only: a matrix's columns span
// several ranks' shards); "TOPK" (compute) selects the top-k columns per
// matrix on a selection step and updates the selected elements on the
// device every step (kTopkState: their fp32 master and moments, packed,
// sized from the selection) and writes them into the device shard; then
// "D2H" copies the gradient shard to the host EVERY step (reading the topk
// state too: on a selection step it hands the columns leaving the selection
// back to the host master), and the host OPT adds the unselected gradient
// into kHostAccum and, every update_interval steps, updates the unselected
// elements; CAST then writes the host shard. The H2D of the step after an
// update copies the host shard into kStage and from there only the
// unselected elements into the device shard (the selected ones are newer
// there); on other steps OPT's update, CAST and H2D do nothing (the
// simulator prices them 1/update_interval; sim/offload_cost.h). With
// staleness d (Policy::zenflow_staleness) that H2D comes d steps later and
// the executor runs the update and CAST on a stream outside the step
// barrier, ordered by events the graph does not hold (optim/zenflow_state.h), on
// either kind of device.
//
// Frozen buckets (LoRA's base; layout.h): one persistent buffer each, the
// shard (in the parameter dtype, or NF4-packed as fp32 words; on the host
// under offload = params, copied to a kStagedShard by an H2D before each
// gather); gathered
// like any other bucket (never uploaded under offload: a frozen shard stays
// on the device), never reduced, no optimizer or cast. A frozen bucket's
// adapter bucket is gathered right after it with the same window and
// limiter, and reduced (its gradients only) where the frozen bucket would
// have been, so the reduce window counts units as before. A backward node
// writes no gradient of a frozen parameter (its grad_accumulate entry is
// false and unused). NF4 buckets: the gather moves the packed shards into
// a kPacked buffer, and "DQ" (kDequantize, compute stream) writes the
// gathered weights in the parameter dtype right before the bucket's first
// compute of each phase (where FSDP2's copy-out would be), so the compute
// stream waits for the gather only when it needs the weights.
//
// Plain data; immutable once built; safe to share between threads.
#ifndef BATON_SCHEDULER_STEP_GRAPH_H_
#define BATON_SCHEDULER_STEP_GRAPH_H_

#include <cstdint>
#include <string>
#include <vector>

#include "baton/runtime/dtype.h"
#include "baton/memory/planner.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/layout.h"
#include "baton/scheduler/mesh.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/streams.h"

namespace baton::scheduler {

enum class NodeKind {
  kForward,
  kRecompute,
  kBackward,
  kAllGather,
  kReduceScatter,
  kAllReduce,
  kCopy,        // device copy (FSDP2's copy-in / copy-out / chunk-cat)
  kAccumulate,  // gradient shard += reduce-scatter scratch
  kOptimizer,
  kCast,        // fp32 master shard -> parameter-dtype gather input
  kD2H,         // offload: gradient shard -> host gradient shard
  kH2D,         // offload: host parameter shard -> device shard
  kDequantize,  // compute stream: gathered NF4 packing -> gathered weights
  // Parallel graphs (scheduler/parallel_graph.h):
  kSend,            // an activation (gradient) to another pipeline stage
  kRecv,            // ... from another pipeline stage
  kBackwardWeight,  // zero-bubble: the deferred weight-gradient pass
  // Mixture-of-experts blocks (expert stream, over the expert group):
  kDispatch,  // tokens (or, backward, output gradients) to their experts' ranks
  kCombine,   // expert outputs (or, backward, input gradients) back to their tokens
};
const char* NodeKindName(NodeKind kind);
// forward, recompute, backward, backward-weight
bool IsCompute(NodeKind kind);

enum class BufferRole {
  kGathered,   // transient: a bucket's gathered parameters
  kGradFull,   // transient: a bucket's full gradient
  kCopy,       // transient: FSDP2's extra copies
  kRsScratch,  // transient: reduce-scatter output to accumulate
  kShard,      // persistent: parameter-dtype shard (all-gather input)
  kMaster,     // persistent: fp32 master shard
  kGradShard,  // persistent: reduced gradient shard (reduce dtype)
  kMoment1,    // persistent: fp32
  kMoment2,    // persistent: fp32
  kHpzShard,   // transient: hpZ secondary shard (1/hpz of a bucket), kept
               // from a forward gather to the backward gather
  kHostGrad,   // persistent, host (offload): copied gradient shard
  kHostShard,  // persistent, host (offload): parameter-dtype shard the host
               // cast writes and H2D copies to the device
  kTopkState,  // persistent, device (zenflow): fp32 master and moments of
               // the selected elements, packed (3 x 4 bytes each; sized by
               // ZenFlowTopkStateNumel, scheduler/zenflow_buffers.h)
  kColumnNorms,  // persistent, device (zenflow): per-column squared gradient
                 // sums of the bucket's matrices (all-reduced at a selection)
  kHostAccum,    // persistent, host (zenflow): unselected gradient sums,
                 // two shards (by update window parity)
  kStage,        // persistent, device (zenflow): H2D staging of the host shard
  kStagedShard,  // transient (offload params): a frozen shard an H2D copied
                 // from the host for one gather
  kPacked,       // transient: a frozen NF4 bucket's gathered packing (fp32
                 // words: scheduler/nf4_layout.h, one packing per shard)
  kMoments8bit,  // persistent (adamw8bit, instead of kMoment1 / kMoment2):
                 // both moments' 8-bit codes and block absmax, as fp32 words
                 // (scheduler/optimizer_state.h); on the host under offload
  kActivation,   // transient (parallel graphs): an activation a tensor-
                 // parallel collective or a pipeline send / receive moves
  kActivationGrad,  // transient (parallel graphs): its gradient
  kSavedActivation,  // transient (pipeline stages): what a unit's forward
                     // of one micro-batch saves for its backward (the
                     // trainer's declared bytes; BuildParallelStep)
};
const char* BufferRoleName(BufferRole role);

struct GraphBuffer {
  std::string name;
  BufferRole role = BufferRole::kGathered;
  int bucket = 0;
  int64_t numel = 0;
  DataType dtype = DataType::kF32;
  bool persistent = false;
  bool host = false;  // host memory (offload); always persistent
  int plan_id = -1;  // memory::BufferId of a transient buffer
  size_t bytes() const { return static_cast<size_t>(numel) * DataTypeSize(dtype); }
};

// A block split at its tensor-parallel collectives (parallel graphs with
// tensor_parallel > 1) runs as compute nodes that each cover some of its
// four segments, forward in this order and backward in reverse: the
// attention's input norm (with the residual add before it), the attention
// (QKV GEMM, RoPE, attention, output GEMM), the MLP's input norm (and
// residual add), the MLP (gate/up GEMM, SwiGLU, down GEMM). A node ends
// where a collective sits: with sequence parallelism an all-gather before
// the attention and the MLP and a reduce-scatter after each, without it an
// all-reduce after each (forward); so a node covers one segment, or a norm
// and its body. Node::segments is the set, a bit per BlockSegment.
// A mixture-of-experts block has no kMlp; in its place, in forward
// order: kRouter (the router GEMM, its top-k and the permute of the tokens
// into per-expert order; memory-bound but the GEMM), kShared (the shared
// experts, when the model has them), kExperts (the grouped expert GEMMs
// and their activation on the dispatched tokens), kUnpermute (the
// weighted sum of each token's expert outputs back in token order and the
// residual add). Its nodes end at the dispatch and the combine
// (scheduler/parallel_graph.h).
enum class BlockSegment : int8_t {
  kAttnNorm = 0,
  kAttention = 1,
  kMlpNorm = 2,
  kMlp = 3,
  kRouter = 4,
  kShared = 5,
  kExperts = 6,
  kUnpermute = 7,
};
inline constexpr uint8_t SegmentBit(BlockSegment s) {
  return static_cast<uint8_t>(1u << static_cast<int>(s));
}
const char* BlockSegmentName(BlockSegment segment);

// A collective run inside a compute node rather than as a node of its own:
// decomposed into `chunks` pieces pipelined with the node's kernels.
//   kAllGather / kReduceScatter  tensor-parallel comm overlapped by
//       decomposition (Policy::tp_comm_overlap: PyTorch's async TP
//       fused_all_gather_matmul / fused_matmul_reduce_scatter, Megatron's
//       --tp-comm-overlap): the sequence all-gather before the segment's
//       column-parallel GEMM, the reduce-scatter after its row-parallel
//       GEMM, over the tensor group in tensor_parallel chunks;
//   kAllReduce  the same for an all-reduce (no sequence parallelism);
//   kRing  context parallelism's ring attention: K and V (forward; dK and
//       dV too in the backward) passed around the context group in
//       context_parallel - 1 steps, each overlapped with the attention
//       block of the chunk already held.
// `bytes`: the full collective size (all-gather output, reduce-scatter
// input), or for kRing one step's transfer.
struct FusedComm {
  enum class Kind : uint8_t { kAllGather, kReduceScatter, kAllReduce, kRing };
  Kind kind = Kind::kAllGather;
  MeshGroup group;
  int64_t bytes = 0;
  int chunks = 1;
};

struct Node {
  NodeKind kind = NodeKind::kForward;
  StreamId stream;  // StreamFor(its class, policy.shared_comm_stream)
  int unit = -1;   // compute nodes
  int bucket = -1;  // comm, copy, accumulate, optimizer, cast nodes
  int micro_step = 0;
  // Collectives: the mesh group they run over (scheduler/mesh.h: the
  // data-shard group, HSDP's replica group, hpZ's group). A kCopy with
  // group kHpzGroup writes this rank's hpZ slice of the gathered bucket it
  // reads (position in the hpZ group x the slice's numel); other copies
  // copy whole buffers.
  MeshGroup group = kDataShardGroup;
  std::vector<int> reads;   // GraphBuffer indices
  std::vector<int> writes;
  // Backward: for each ParamRef of the unit, whether its gradient slice
  // already holds a value this step (earlier micro-step, or a tied weight's
  // second user): then the backward must add (+=) rather than assign (=).
  std::vector<bool> grad_accumulate;
  // Cross-stream waits the executor issues before this node: source nodes,
  // at most one per other stream (redundant ones removed).
  std::vector<int> waits;
  // Peer emulation (Policy::host_limit): the host blocks until this node has
  // completed before issuing this one; -1: never.
  int host_wait = -1;
  // kRecompute: the whole block's forward (full) or only its attention
  // core (selective), as Policy::recompute says. Named "R" / "R-ATTN".
  Recompute recompute = Recompute::kFull;
  // Parallel graphs (scheduler/parallel_graph.h):
  uint8_t segments = 0;  // compute: the block segments it covers (0: the whole unit)
  int chunk = 0;     // the model chunk (virtual stage) of this rank it serves
  int peer = -1;     // kSend / kRecv: the pipeline stage at the other end
  int64_t tag = -1;  // kSend / kRecv: the message, equal on both ends
  std::vector<FusedComm> fused;  // compute: collectives run inside it
  std::string name;
};

enum class EdgeKind { kData, kWindow, kReuse };
struct GraphEdge {
  int from = 0;
  int to = 0;
  EdgeKind kind = EdgeKind::kData;
};

struct StepGraph {
  ModelLayout layout;
  Policy policy;
  // The ranks: mesh.size(kDataShardGroup) == layout.sharding.ranks.
  DeviceMesh mesh;
  int num_streams = 3;
  std::vector<Node> nodes;  // issue order
  std::vector<GraphEdge> edges;
  std::vector<GraphBuffer> buffers;
  memory::PlanInput plan_input;  // the DAG and transient buffers as planned
  memory::MemoryPlan plan;
  // Per buffer (-1 / false for persistent ones): the node that first writes
  // it this step, the node after which it is dead, and whether that last
  // use happens after every other use (then its bytes may be released,
  // e.g. poisoned, right after it on its stream).
  std::vector<int> first_write;
  std::vector<int> last_use;
  std::vector<bool> last_use_is_final;
  size_t persistent_bytes = 0;  // sum of persistent device buffers
  size_t host_bytes = 0;        // sum of host buffers (offload)
  double build_ms = 0;          // graph construction, plan excluded
  // Parallel graphs: this rank's pipeline stage, and per model chunk the
  // units it runs in forward order (empty for data-parallel graphs).
  int stage = 0;
  std::vector<std::vector<int>> chunk_units;
  // Tensor parallelism: the layout is of one tensor rank's slice
  // (BuildParallelStep's tensor_slices; the executor needs it).
  bool tensor_slices = false;

  // The stream of class `c` in this graph.
  StreamId stream_for(StreamClass c) const {
    return StreamFor(c, policy.shared_comm_stream);
  }
  bool offload() const { return policy.offload != Offload::kNone; }
  bool parallel() const { return IsParallel(policy); }
  int world_size() const { return mesh.world_size(); }
  // HSDP: replica groups of more than one rank, whose all-reduces follow
  // each reduce-scatter.
  bool replicated() const { return mesh.size(kReplicaGroup) > 1; }
  // Names of each stream class present, e.g. {"compute", "allgather",
  // "reducescatter"}, then "hostcopy", "host" under offload, or "tensor",
  // "pp_send", "pp_recv" in a parallel graph.
  std::vector<std::string> stream_names() const;
  // One line per node: index, stream, name, waits.
  std::string ToText() const;
};

struct GraphOptions {
  bool plan_memory = true;  // false: skip the planner (plan stays empty)
};

// Builds the graph of one step for `policy` on `layout` (which must be
// LayoutFor(spec, policy, ResolveMesh(policy, world))), derives its edges
// and plans memory. The layout's Sharding::ranks is the data-shard group;
// `world_size` (0: the same) is every rank. With replicas (shard group < world) each reduce-scatter is
// followed by an in-place all-reduce of its output over the replica group
// ("AR-R"), before the accumulate or the optimizer reads it; with hpZ each
// forward gather of a bucket is followed by a kCopy of this rank's slice
// into a kHpzShard buffer ("HPZ-COPY", on the gather stream) and the
// backward gathers read that buffer over the hpZ group.
// InvalidArgument for an invalid policy (ValidatePolicy), one the model
// cannot run (CheckPolicyForModel: recompute_blocks past its blocks, too
// many micro-steps x units), invalid groups (naming the knob) or a layout
// built for other options.
StatusOr<StepGraph> BuildStepGraph(const ModelLayout& layout,
                                   const Policy& policy,
                                   const GraphOptions& options = {},
                                   int world_size = 0);

// (A policy with tensor, context, pipeline or expert parallelism, and a
// mixture-of-experts model, are refused here: their graphs come from
// BuildParallelStep, scheduler/parallel_graph.h.)

// Convenience: layout + graph for a model, a policy and a world size.
StatusOr<StepGraph> BuildStepGraph(const ModelSpec& spec, const Policy& policy,
                                   int world_size,
                                   const GraphOptions& options = {});

// Checks the invariants every schedule must hold, independently of how the
// graph was built: every gathered buffer is written by an all-gather (or is
// a copy of one) before any compute reads it; every gradient buffer is
// reduced after its last write; every edge goes forward; the waits cover
// every cross-stream edge; with replicas, every reduce-scatter output is
// all-reduced over the replica group before anything else reads it; every
// node's group exists (no replica collective without replicas, no hpZ
// without hpz_group) and every hpZ gather reads a secondary shard written
// by an hpZ copy. Under offload: host buffers are touched only by host-stream
// nodes and the host-link copies, host-stream nodes touch only host buffers,
// every optimizer reads a host gradient that a D2H of its bucket copied this
// step, and every gather of a device shard reads one that an H2D wrote this
// step (frozen shards stay on the device). No frozen bucket is reduced or
// updated; every dequantize reads a packing an all-gather wrote, and no
// compute reads a packing. FailedPrecondition naming the first violation.
Status VerifyStepGraph(const StepGraph& graph);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_STEP_GRAPH_H_
