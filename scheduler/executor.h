// Runs a StepGraph on one rank: the graph's nodes are issued in its order
// on this rank's runtime streams, collectives go to the Communicator, and
// compute and optimizer nodes call the trainer.
//
// Protocol (runtime/device.h rules, applied to the graph):
//   - One stream per stream class: compute (the trainer's), all-gather and
//     reduce-scatter (or one comm stream). Comm streams get priority -1.
//   - Before a node, its stream waits on the events of Node::waits (at most
//     one per other stream; the graph removed waits implied by others).
//     After a node that some later node waits on, an event is recorded.
//   - Between steps every stream waits on every other stream's last event,
//     so step k+1 never touches bytes step k still uses. No host blocking.
//     (An optimizer driver's own streams are the exception: its events
//     order them, e.g. ZenFlow's host-update stream, optim/zenflow_state.h.)
//   - The host blocks only for Node::host_wait (peer emulation of FSDP1's
//     and DeepSpeed's limiters; baton's own presets never set it).
//   - Collectives use CollectiveTag(their stream) (scheduler/streams.h: one
//     tag per comm stream; the graph's order is the same on every rank). A
//     trainer's own collectives on `comm` use kFirstTrainerTag and above.
//
// Callbacks run on the issuing thread at issue time and must only ENQUEUE
// work on ctx.stream (host work on a host stream, kernels on a CUDA stream);
// the views they get are valid in that stream's order until the node's
// successors run. Gradients: the backward writes the gradient of each
// parameter into ctx.grads[i], assigning (=) or adding (+=) as
// ctx.grad_accumulate[i] says. Gradients are SUMMED over ranks and
// micro-steps; the optimizer gets grad_scale = 1 / (ranks * micro_steps) to
// apply once.
//
// Buffers: transient buffers live in one Arena at the plan's offsets
// (poison mode checks every read; host device only); persistent per-bucket
// state (shard, master, gradient shard, two moments) in one allocation.
//
// Offload (Policy::offload; step_graph.h): the graph's host buffers (master,
// moments, host gradient and parameter shards) live in one host allocation
// (pinned on CUDA: scheduler/offload.h), the D2H / H2D nodes are
// MemcpyAsync on the host-copy stream, and the optimizer callback and the
// cast run on the host stream with OptimizerContext::on_host set: their
// stream is a host view (kind() kHost, HostWorkView) of it, so the callback
// enqueues CPU code as host work on host pointers (ops/adamw.h does this
// by itself on such a stream).
//
// Pipeline stages (scheduler/parallel_graph.h; 1F1B, interleaved and
// ZB-H1 pipeline parallelism
// alone with any data sharding inside the stage): the executor runs the
// graph of this rank's stage (StepGraph::stage must be its coordinate
// along pp; built with plan_memory). Sends and receives go to the pipeline
// group's communicator (Communicator::Send / Recv, made by Split like the
// other groups) on their own streams (pp_send, pp_recv), ordered against
// the compute by events both ways; the host never waits on them. The
// compute callbacks get the received activation, a buffer for the sent one
// and their gradients in ComputeContext::pipeline. 1F1B, interleaved
// 1F1B (virtual stages: each rank runs several model chunks; at most 100)
// and ZB-H1 (without tensor parallelism: each backward two calls,
// ComputeContext::weight_deferred) run.
//
// Tensor parallelism (tensor_parallel > 1, inside pipeline stages or not;
// the graph built with
// BuildParallelStep's tensor_slices, so each rank's buffers hold its tensor
// slice, sharded over its data ranks): a block's compute nodes each run a
// part of it (ComputeContext::tensor), the forward's all-reduces are graph
// nodes on the tensor stream over the tensor group's communicator (Split
// like the other groups), on planned activation buffers, ordered against
// the compute by events both ways; the backward's are fused into the
// compute nodes, run by the trainer on ctx.tensor.comm (under
// tp_comm_overlap the forward's too, decomposed: ComputeContext::Tensor).
// With sequence_parallel the forward's graph nodes are the all-gathers of
// the normed shards and the reduce-scatters of the partial outputs, and
// the backward's the all-gathers of the output gradients (AG-TP / RS-TP,
// the same streams and events); the input gradients' reduce-scatters and
// the replicated parameters' gradient all-reduces over the tensor group
// are the trainer's, inside its nodes. Gradients are
// summed over the data ranks only (grad_scale), each tensor rank keeping
// its slice's. Refused (Unimplemented) until they run: context
// parallelism, sequence parallelism with tp_comm_overlap, the zero-bubble
// schedule with tensor parallelism, adamw8bit on any
// parallel graph (its stage graphs keep fp32 moments); InvalidArgument
// with check_schedule or an optimizer driver, or a tensor-parallel graph
// on the simulator's whole-model layout.//
// Thread safety: one thread drives an Executor (Step, Synchronize, ...).
#ifndef BATON_SCHEDULER_EXECUTOR_H_
#define BATON_SCHEDULER_EXECUTOR_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "baton/comm/communicator.h"
#include "baton/memory/arena.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/checkpoint.h"
#include "baton/scheduler/optimizer_driver.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler {

// Spans of work a compute node issues itself on its streams, e.g. the
// chunk GEMMs and chunk transfers of a decomposed tensor collective
// (scheduler/step_trace.h draws them on the stream's track). Span calls
// `issue`, which enqueues work on `stream`, between two host functions on
// `stream` that read the host's steady clock when the stream reaches them
// (on a host stream when its thread runs the work, not when it is issued):
// a span named `what` (static storage: a literal) and `chunk` on the track
// of stream class `track` in step `step`. Called on the node's issuing thread; an error from the
// enqueues or from `issue` is returned. RecordSpan (below) is null-safe.
class WorkSpanSink {
 public:
  virtual ~WorkSpanSink() = default;
  virtual Status Span(Stream& stream, StreamClass track, const char* what, int chunk, int64_t step,
                      const std::function<Status()>& issue) = 0;
};

// `issue()` alone without a sink (no trace: no cost beyond the call).
inline Status RecordSpan(WorkSpanSink* sink, Stream& stream, StreamClass track, const char* what,
                         int chunk, int64_t step, const std::function<Status()>& issue) {
  if (sink == nullptr) return issue();
  return sink->Span(stream, track, what, chunk, step, issue);
}

struct TensorView {
  const ParamSlot* param = nullptr;  // name, shape, numel
  void* data = nullptr;
  DataType dtype = DataType::kF32;
};

struct ComputeContext {
  // forward, recompute or backward; kBackwardWeight: zb-h1's deferred
  // weight-gradient pass (below).
  NodeKind kind = NodeKind::kForward;
  // kRecompute: what to run again before the backward: the whole forward
  // of the unit (kFull), or only its attention core (kSelective: from the
  // q, k, v the forward kept, rebuild the core's output and softmax
  // statistics, which the forward did not keep).
  Recompute recompute = Recompute::kFull;
  int unit = 0;
  const UnitSpec* spec = nullptr;
  int micro_step = 0;
  int64_t step = 0;  // steps issued before this one
  int rank = 0;
  Stream* stream = nullptr;
  // Not owned; null without a trace (ExecutorOptions::observer's spans()):
  // the node may record spans of its own work there (RecordSpan).
  WorkSpanSink* spans = nullptr;
  std::vector<TensorView> params;      // one per layout.unit_params[unit]
  // Backward only, same order; data is null for a frozen parameter (no
  // gradient: the backward computes only what flows to the inputs).
  std::vector<TensorView> grads;
  std::vector<bool> grad_accumulate;   // backward only
  // Pipeline schedule zb-h1 (ZB-H1): each unit's backward of a micro-batch
  // is two calls. First kBackward with weight_deferred set and `grads` /
  // `grad_accumulate` empty: the input gradient only (what the previous
  // unit or stage needs), keeping what the weight gradients need. Later,
  // after other passes, kBackwardWeight for the same unit and micro-batch
  // with `grads` and `grad_accumulate` as a backward gets them and no
  // pipeline buffers: the weight gradients only. With tensor parallelism
  // a block has a kBackwardWeight call per backward part (tensor.segments,
  // no tensor collective in the graph around it). False (and no
  // kBackwardWeight call) on every other graph.
  bool weight_deferred = false;
  // Pipeline stages (a parallel graph's compute nodes next to a receive or
  // a send; all null otherwise, and always null without a pipeline): the
  // activation received from the previous stage (the forward and the
  // backward of the stage's first unit read it), a buffer for the output
  // the next stage receives (forward of the stage's last unit), the
  // output's gradient received from the next stage (backward of the last
  // unit) and a buffer for the input's gradient the previous stage
  // receives (backward of the first unit). Activations of s x b x h
  // elements in the parameter dtype; valid in ctx.stream's order during
  // the node (the executor orders the send / receive around it).
  // `saved`: the unit's saved-activation buffer of this micro-batch (its
  // forward, recompute, backward and zb-h1 weight pass get the same one,
  // and with tensor parallelism each of a block's part nodes; a
  // planned arena buffer of the bytes the trainer declared,
  // BuildParallelStep's saved_bytes, 256-byte aligned; what the forward
  // writes there is intact at the backward); null without a pipeline or
  // without a declared size.
  struct Pipeline {
    const void* input = nullptr;
    void* output = nullptr;
    const void* output_grad = nullptr;
    void* input_grad = nullptr;
    void* saved = nullptr;
  } pipeline;
  // Tensor parallelism (a parallel graph with tensor_parallel > 1, whose
  // layout holds this rank's slice: BuildParallelStep's tensor_slices; all
  // empty otherwise). A block runs as compute nodes split where its tensor
  // collectives sit: `segments` (a bit per BlockSegment; 0: the whole unit)
  // says which part of the block this node computes. Forward, a node that
  // ends in a row-parallel GEMM writes its partial output (s x b x h in the
  // parameter dtype; LlamaRank adds the residual on tensor rank 0 only, so
  // the sum is the part's whole output) to `output`, which the graph's
  // all-reduce node (AR-TP, on the tensor stream, ordered by events both
  // ways) sums over the tensor group into the buffer the next node gets as
  // `input` (the next block part's or the final norm's; a pipeline stage's
  // last block part's goes to the next stage). Backward, the
  // input gradients' all-reduces are fused into the node (Node::fused,
  // beside its weight-gradient GEMMs as Megatron runs them): the trainer
  // runs them on ctx.stream over `comm`, the tensor group's communicator,
  // with tags from kFirstTrainerTag; a whole-unit recompute runs its
  // forward's all-reduces the same way. `rank` / `size`: this rank's
  // position in the tensor group and its size (1 without it).
  // Under tp_comm_overlap (no AR-TP nodes: Node::fused) every all-reduce
  // is the node's own: `chunks` (the policy's tensor_parallel) says to
  // decompose it, the row-parallel GEMM in row chunks each all-reduced on
  // `stream` (the tensor stream, idle otherwise: the trainer orders it
  // against ctx.stream with events both ways and ends the node with
  // ctx.stream waiting on it) while the next chunk's GEMM runs; 0: one
  // all-reduce after the GEMM. With sequence_parallel the graph's AG-TP /
  // RS-TP nodes take the all-reduces' place: `output` is a norm node's
  // normed sequence shard (gathered by AG-TP) or an attention / MLP node's
  // partial output (reduce-scattered by RS-TP), `input` the gathered input
  // or the reduce-scattered shard; backward, `input` the gathered output
  // gradient and `output` the input gradient's shard (for the next
  // gather). Under tp_comm_overlap there are no such nodes and `chunks`
  // says to decompose the node's own gathers and reduce-scatters.
  struct Tensor {
    uint8_t segments = 0;
    const void* input = nullptr;
    void* output = nullptr;
    Communicator* comm = nullptr;
    int rank = 0;
    int size = 1;
    Stream* stream = nullptr;
    int chunks = 0;
  } tensor;
};

struct OptimizerContext {
  int bucket = 0;
  const Bucket* spec = nullptr;
  int64_t step = 0;
  int rank = 0;
  Stream* stream = nullptr;
  float* master = nullptr;
  const void* grad = nullptr;  // reduce dtype
  DataType grad_dtype = DataType::kF32;
  float* moment1 = nullptr;
  float* moment2 = nullptr;
  // Policy::optimizer = adamw8bit: moment1 and moment2 are null; the
  // moments are one code byte per element each, with one fp32 absmax per
  // block of kQuantBlockNumel elements (scheduler/optimizer_state.h; the
  // shard's first element is a block boundary: Sharding::block).
  uint8_t* moment1_codes = nullptr;
  uint8_t* moment2_codes = nullptr;
  float* moment1_absmax = nullptr;
  float* moment2_absmax = nullptr;
  int64_t shard_numel = 0;
  int64_t shard_offset = 0;  // first element of the shard in the bucket
  double grad_scale = 1.0;
  // With StepCallbacks::optimizer_writes_shard: the parameter-dtype shard
  // (the next all-gather's input) that the optimizer must write as the
  // updated master rounded to shard_dtype. Null otherwise.
  void* shard = nullptr;
  DataType shard_dtype = DataType::kBF16;
  // Offload: every pointer above is host memory and `stream` is a host view
  // of the host stream: the step must run as host work (Stream::Enqueue).
  bool on_host = false;
};

// A dequantize node (NF4 base weights; step_graph.h): the gathered packings
// of a frozen bucket's shards into its gathered weights. Enqueue on
// `stream` only.
struct DequantizeContext {
  int bucket = 0;
  const Bucket* spec = nullptr;
  Stream* stream = nullptr;
  // `segments` packings (scheduler/nf4_layout.h) one after another, each
  // of `segment_numel` elements at Nf4PackedWords(segment_numel) x 4 bytes.
  const void* packed = nullptr;
  int64_t segments = 0;
  int64_t segment_numel = 0;
  void* out = nullptr;  // segments x segment_numel elements of out_dtype
  DataType out_dtype = DataType::kBF16;
};

// Packs n floats (a frozen NF4 bucket's shard, n a multiple of
// kNf4AlignNumel) into Nf4PackingFor(n).bytes at `packed` (host memory).
using Nf4Packer = std::function<Status(const float* values, int64_t n, void* packed)>;

struct StepCallbacks {
  std::function<Status(const ComputeContext&)> compute;
  // Required by a graph with NF4 buckets (base_dtype nf4): runs its
  // dequantize nodes (the caller's NF4 kernel: ops/nf4.h's Nf4Dequantize,
  // as examples/llama_trainer calls it).
  std::function<Status(const DequantizeContext&)> dequantize;
  std::function<Status(const OptimizerContext&)> optimizer;
  // The optimizer also casts the updated master into the shard
  // (OptimizerContext::shard; ops/adamw.h does both in one pass), so the
  // executor's own cast of that bucket issues nothing: one pass over the
  // master shard per step instead of two. The optimizer's work is then
  // issued at the cast node's place (the next node on the same stream,
  // after the cast's waits). InvalidArgument from Step if the graph does
  // not allow it (some node waits on an optimizer node).
  bool optimizer_writes_shard = false;
};

// Sees every node as it is issued (scheduler/step_trace.h records
// timestamps with it). Called on the issuing thread at three points of node
// `node` of step `step`, with the node's stream, on which it may enqueue
// work of its own: before the node's waits, after them (before its work)
// and after its work. An error fails the issuing call.
class NodeObserver {
 public:
  enum class Point { kBeforeWaits, kBeforeWork, kAfterWork };
  virtual ~NodeObserver() = default;
  virtual Status Observe(int node, int64_t step, Point point, Stream& stream) = 0;
  // Where compute nodes record the spans of their own work (ComputeContext::
  // spans); null (the default): none.
  virtual WorkSpanSink* spans() { return nullptr; }
};

// A communicator for one mesh group (ExecutorOptions::group_comms).
struct GroupComm {
  MeshGroup group;
  Communicator* comm = nullptr;
};

struct ExecutorOptions {
  bool poison = false;  // arena poison mode (host device only)
  // Host streams: record every node's start and end in one global order
  // (for tests that check the executed order against the edges).
  bool trace = false;
  // Host streams: sleep a random 0..max_delay_us before every node.
  int max_delay_us = 0;
  uint64_t seed = 1;
  // Communicators of the graph's mesh groups (StepGraph::mesh, Node::group;
  // scheduler/mesh.h). A group not listed: the executor makes it with
  // Communicator::Split on `comm` during Create (collective: every rank
  // creates its executor at once; colour and key from the mesh) and owns
  // it; a group of every rank is `comm` itself. Given ones (not owned; must
  // outlive the executor) must have the group's size and this rank's
  // position in it (DeviceMesh::position), and name a group the graph
  // uses: InvalidArgument otherwise.
  std::vector<GroupComm> group_comms;
  // Not owned; must outlive the executor. Null: none.
  NodeObserver* observer = nullptr;
  // Check mode (scheduler/schedule_check.h, issue 38): Create compares the
  // schedule of collectives with every rank's (one small all-gather on
  // `comm`; collective) and fails with InvalidArgument naming the first
  // rank and collective that differ; and every collective carries
  // SchedulePosition::check, so inproc and ucx compare positions. Every
  // collective carries its position (step, node, bucket, mesh group)
  // either way.
  bool check_schedule = false;
  // An optimizer that runs graph nodes itself (scheduler/optimizer_driver.h):
  // one driver per executor, made during Create. Required by a policy that
  // uses zenflow (optim::ZenFlowDriverFactory, optim/zenflow_driver.h);
  // then StepCallbacks::optimizer is not called. Empty: none.
  OptimizerDriverFactory optimizer_driver;
};

class CheckpointSaver;  // scheduler/checkpoint_saver.h

struct TraceRecord {
  int node = 0;
  int64_t step = 0;
  uint64_t start = 0;  // positions in one global sequence
  uint64_t end = 0;
};

class Executor final : private ExecutorParts {
 public:
  // The executor owns (a share of) its graph: pass a StepGraph by value
  // (moved or copied in) or a shared_ptr to one that several executors share
  // (the ranks of one process, say). `device`, `comm` must outlive the
  // executor; comm->size() must be the graph's world size
  // (StepGraph::world_size()). InvalidArgument otherwise (also for a null
  // graph).
  static StatusOr<std::unique_ptr<Executor>> Create(
      std::shared_ptr<const StepGraph> graph, Device& device,
      Communicator& comm, const ExecutorOptions& options = {});
  static StatusOr<std::unique_ptr<Executor>> Create(
      StepGraph graph, Device& device, Communicator& comm,
      const ExecutorOptions& options = {});
  ~Executor();

  // Fills this rank's master shards from full parameter values: `init`
  // writes slot.numel floats for one parameter. Padding is zero. Also
  // casts the shards. Frozen buckets have no master: their shards get the
  // values directly, in the parameter dtype, or packed by `nf4` for NF4
  // buckets (InvalidArgument when the graph has NF4 buckets and `nf4` is
  // empty). Blocks until done.
  Status InitParameters(
      const std::function<void(const ParamSlot&, float*)>& init,
      const Nf4Packer& nf4 = nullptr);

  // Issues one whole step and returns (the host does not wait for it).
  Status Step(const StepCallbacks& callbacks);
  // Waits for every stream; returns the first error of any stream or of
  // the communicator.
  Status Synchronize();

  // This rank's fp32 master shard of `bucket` (waits for the streams).
  // Under ZenFlow: the host master, whose selected columns the device
  // holds newer values of until the next selection step hands them back.
  StatusOr<std::vector<float>> ReadMaster(int bucket);

  // Checkpoints (scheduler/checkpoint.h, docs/checkpoints.md). Save is
  // collective (every rank, between the same two steps) and returns once
  // its copies are enqueued; the next step's optimizer waits for them on
  // the device and a writer thread writes the files meanwhile. WaitForSave
  // blocks until this rank's part is written (OK when none was started);
  // a failed save is sticky. Load (not collective) reads the checkpoint at
  // `path` into this executor's layout, whatever layout saved it, and sets
  // steps_issued(). FailedPrecondition inside a step or with an optimizer
  // driver (ZenFlow); Load: NotFound / InvalidArgument / DataLoss naming
  // the checkpoint, parameter or file.
  Status Save(const SaveOptions& options);
  Status WaitForSave(SaveStats* stats = nullptr);
  StatusOr<CheckpointInfo> Load(const std::string& path, const LoadOptions& options = {});
  // Recorded after the last save's copies of the state (null before the
  // first Save): a trainer that writes masters or moments itself between
  // steps waits on it first.
  Event* SaveCopiesEvent();

  // CUDA only: captures one step as a CUDA graph (callbacks are called
  // during capture), then each ReplayStep launches it. Unimplemented on
  // host streams and with a communicator that cannot be captured (inproc);
  // FailedPrecondition before one eager Step (libraries set themselves up
  // on first use, which a capture cannot record), for a driver that
  // refuses it (ZenFlow: its work differs from step to step) and for
  // ReplayStep before CaptureStep.
  // Every replay repeats the captured kernels with their
  // captured arguments: a callback must not bake per-step values into its
  // launches (the step number of ComputeContext / OptimizerContext is the
  // capture's for every replay; AdamW's bias correction needs it from
  // device memory before a replay can match eager steps).
  Status CaptureStep(const StepCallbacks& callbacks);
  Status ReplayStep();

  const StepGraph& graph() const override { return graph_; }
  Stream& stream(StreamId s) override { return *streams_[s.index()]; }
  Stream& compute_stream() { return stream(kComputeStream); }
  memory::Arena& arena() { return *arena_; }
  int64_t steps_issued() const { return step_; }
  int rank() const override { return comm_.rank(); }
  // This rank's position in its shard group: its shards are elements
  // [shard_rank() * shard_numel, ...) of every bucket.
  int shard_rank() const override { return group_comm_[kDataShardGroup.bits()]->rank(); }
  // The records of every traced node since the last call.
  std::vector<TraceRecord> TakeTrace();

  // Lower-level API for Session: BeginStep, then for each node in order
  // either IssueNode, or PreNode + the trainer's own work + PostNode for a
  // compute node; then EndStep.
  Status BeginStep();
  Status IssueNode(int i, const StepCallbacks& callbacks);
  Status PreNode(int i);
  Status PostNode(int i);
  Status EndStep();
  // The context a compute node would get (views into the buffers).
  ComputeContext MakeComputeContext(int i);

 private:
  Executor(std::shared_ptr<const StepGraph> graph, Device& device,
           Communicator& comm, const ExecutorOptions& options);
  Status Init();
  Status BindGroups();
  // ExecutorParts, for the driver.
  Communicator& CommFor(MeshGroup group) override;
  void* BufferData(int buffer) override;
  Device& device() override { return device_; }
  std::vector<Stream*> streams() override;
  double grad_scale() const override;

  Status RunWork(int i, const StepCallbacks& callbacks);
  // Casts every master into its shard (InitParameters, Load); synchronizes.
  Status CastMasters();
  Status CheckpointAllowed(const char* call) const;
  Status Trace(int i, bool start, Stream& s);
  Status Observe(int i, NodeObserver::Point point, Stream& s);

  std::shared_ptr<const StepGraph> owned_graph_;
  const StepGraph& graph_;  // *owned_graph_
  Device& device_;
  Communicator& comm_;
  ExecutorOptions options_;
  // The mesh groups' communicators by MeshGroup::bits() (BindGroups), and
  // those made by Split.
  std::array<Communicator*, 1 << kNumMeshGroupBits> group_comm_{};
  std::vector<std::unique_ptr<Communicator>> owned_comms_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Event>> node_events_;  // nullptr: not needed
  std::vector<std::unique_ptr<Event>> end_events_;   // per stream
  std::unique_ptr<memory::Arena> arena_;
  DeviceBuffer state_;
  DeviceBuffer host_state_;           // offload: the graph's host buffers
  std::vector<size_t> state_offset_;  // per persistent buffer (in its allocation)
  // Per stream: the host view callbacks get (HostWorkView) for the host
  // stream of an offload graph on a CUDA device; null otherwise.
  std::vector<std::unique_ptr<Stream>> host_views_;
  Stream& WorkStream(StreamId s);  // the view if any, else the stream
  // Per bucket: [begin, end) element ranges of its flat buffer that hold no
  // parameter (gaps and tail padding); zeroed before a gradient's first write.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> gaps_;
  // The graph's buffer of `role` for `bucket` (one per bucket for the
  // per-bucket roles), or -1.
  int BucketBuffer(int bucket, BufferRole role) const override;
  // The optimizer driver (ExecutorOptions::optimizer_driver), if any; the
  // stream the open node's work goes to when its BeginNode chose one; and
  // whether InitParameters' casts are running.
  std::unique_ptr<OptimizerDriver> driver_;
  Stream* work_stream_ = nullptr;
  bool init_cast_ = false;
  // The stream node i is issued on: the driver's choice, else the node's.
  Stream& NodeStream(int i);
  bool accumulate_fp32_ = false;  // CollectiveOptions of the reductions
  // Whether every optimizer node is followed by its bucket's cast on the
  // same stream and nothing waits on an optimizer node (fused cast allowed).
  bool fusable_cast_ = false;
  Status CheckCallbacks(const StepCallbacks& callbacks) const;
  Status RunOptimizer(int optimizer_node, const StepCallbacks& cb, void* shard,
                      DataType shard_dtype);
  int64_t step_ = 0;
  bool in_step_ = false;
  std::mt19937_64 rng_;
  std::shared_ptr<std::atomic<uint64_t>> trace_seq_;
  std::shared_ptr<std::vector<TraceRecord>> trace_;  // filled by host work
  std::shared_ptr<std::mutex> trace_mu_;
  std::shared_ptr<TraceRecord> pending_trace_;
  void* cuda_graph_exec_ = nullptr;  // cudaGraphExec_t
  // Checkpoints: the saver (made by the first Save; destroyed before the
  // state it copies), whether the next step's writers of saved state must
  // wait for its copies, and per node whether it writes a master or a
  // moment.
  std::unique_ptr<CheckpointSaver> saver_;
  bool save_pending_ = false;
  std::vector<bool> writes_saved_;
  // Per buffer: written by a pipeline receive / read by a pipeline send.
  std::vector<bool> recv_written_, send_read_;
  // Tensor parallelism: per buffer, written / read by a tensor-stream node.
  std::vector<bool> tensor_written_, tensor_read_;
};

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_EXECUTOR_H_
