#include "baton/scheduler/executor.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/stream_ops.h"
#include "baton/scheduler/checkpoint_saver.h"
#include "baton/scheduler/offload.h"
#include "baton/scheduler/optimizer_state.h"
#include "baton/scheduler/schedule_check.h"
#ifdef BATON_HAVE_CUDA
#include <cuda_runtime.h>

#include "baton/runtime/cuda_check.h"
#endif

namespace baton::scheduler {
namespace {

constexpr size_t kStateAlign = 256;

size_t AlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

// Parallel graphs run when they are pipeline stage graphs (1F1B,
// interleaved or zb-h1), with or without tensor parallelism (all-reduces, or sequence
// parallelism's all-gathers and reduce-scatters, on the layout of tensor
// slices); the rest is simulated only.
// Pipeline messages' tags (communicator tags are 0..255): per direction
// and the receiving virtual stage's chunk, after the step's and trainer's.
constexpr int kMaxExecutedVirtualStages = 100;
constexpr uint32_t kFirstPipelineTag = 32;

Status CheckExecutable(const StepGraph& graph, const ExecutorOptions& options) {
  if (!graph.parallel()) return absl::OkStatus();
  const Policy& p = graph.policy;
  if (p.optimizer == OptimizerKind::kAdamW8bit) {
    // The parallel graphs keep fp32 moments (parallel_graph.h).
    return absl::UnimplementedError(
        "executor: adamw8bit is not run on tensor or pipeline parallel graphs yet");
  }
  if (p.context_parallel > 1) {
    return absl::UnimplementedError(
        "executor: graphs of context parallelism are simulated only "
        "(scheduler/parallel_graph.h); the executor runs data-parallel graphs, "
        "1F1B pipeline stages and tensor parallelism");
  }
  if (p.tensor_parallel > 1) {
    if (!graph.tensor_slices) {
      return absl::InvalidArgumentError(
          "executor: a tensor-parallel graph runs on the layout of tensor slices "
          "(BuildParallelStep's tensor_slices); this one is the simulator's");
    }
  }
  if (p.virtual_stages > kMaxExecutedVirtualStages) {
    return absl::InvalidArgumentError(absl::StrCat(
        "executor: ", p.virtual_stages, " virtual stages; the executor's pipeline tags "
        "allow at most ", kMaxExecutedVirtualStages));
  }
  if (options.check_schedule) {
    return absl::InvalidArgumentError(
        "executor: check_schedule compares one schedule over every rank; pipeline "
        "stages run different graphs");
  }
  if (options.optimizer_driver) {
    return absl::InvalidArgumentError(
        "executor: an optimizer driver (ZenFlow) runs on data-parallel graphs only");
  }
  return absl::OkStatus();
}


// The tag of a pipeline send / receive (Node::tag is the message:
// (micro-batch x virtual stages + receiving virtual stage) x 2 + gradient).
uint32_t PipelineTag(const StepGraph& g, const Node& n) {
  const int p = g.policy.pipeline_parallel, nv = p * g.policy.virtual_stages;
  const int64_t receiver = (n.tag / 2) % nv;
  return kFirstPipelineTag + static_cast<uint32_t>(2 * (receiver / p) + n.tag % 2);
}

}  // namespace

StatusOr<std::unique_ptr<Executor>> Executor::Create(
    StepGraph graph, Device& device, Communicator& comm,
    const ExecutorOptions& options) {
  return Create(std::make_shared<const StepGraph>(std::move(graph)), device,
                comm, options);
}

StatusOr<std::unique_ptr<Executor>> Executor::Create(
    std::shared_ptr<const StepGraph> shared, Device& device,
    Communicator& comm, const ExecutorOptions& options) {
  if (shared == nullptr) {
    return absl::InvalidArgumentError("executor: null step graph");
  }
  const StepGraph& graph = *shared;
  BATON_RETURN_IF_ERROR(CheckExecutable(graph, options));
  if (comm.size() != graph.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "executor: the graph was built for ", graph.world_size(),
        " ranks but the communicator has ", comm.size()));
  }
  // Pipeline stages send and receive: refused here where the backend has no
  // point-to-point on this device's memory (its caps), not at the first send.
  if (graph.policy.pipeline_parallel > 1) {
    const CommCaps caps = comm.caps();
    const bool on_device = device.kind() == DeviceKind::kCuda;
    if (!(on_device ? caps.p2p_device_memory : caps.p2p_host_memory)) {
      return absl::UnimplementedError(absl::StrCat(
          "executor: pipeline stages send and receive, but the ", comm.backend(),
          " communicator has no point-to-point on ", on_device ? "device" : "host",
          " memory"));
    }
  }
  if (graph.parallel() && graph.mesh.coord(comm.rank(), MeshDim::kPipeline) != graph.stage) {
    return absl::InvalidArgumentError(absl::StrCat(
        "executor: world rank ", comm.rank(), " is in pipeline stage ",
        graph.mesh.coord(comm.rank(), MeshDim::kPipeline), " of mesh ", graph.mesh.ToString(),
        " but was given the graph of stage ", graph.stage));
  }
  if (graph.plan.buffers.size() != graph.plan_input.buffers.size()) {
    return absl::InvalidArgumentError(
        "executor: the graph has no memory plan (GraphOptions::plan_memory)");
  }
  if (graph.policy.zenflow && !options.optimizer_driver) {
    return absl::InvalidArgumentError(absl::StrCat(
        "executor: policy ", graph.policy.name, " uses zenflow, whose optimizer "
        "runs its own nodes: pass ExecutorOptions::optimizer_driver "
        "(optim::ZenFlowDriverFactory, //optim:zenflow)"));
  }
  if ((options.poison || options.trace || options.max_delay_us > 0) &&
      device.kind() != DeviceKind::kHost) {
    return absl::InvalidArgumentError(
        "executor: poison, trace and delay injection need the host device");
  }
  // Check mode (scheduler/schedule_check.h): every rank's schedule is the
  // same before the first collective, or every rank fails naming how not.
  if (options.check_schedule) {
    BATON_RETURN_IF_ERROR(CheckSchedule(graph, comm, device));
  }
  std::unique_ptr<Executor> e(
      new Executor(std::move(shared), device, comm, options));
  BATON_RETURN_IF_ERROR(e->Init());
  return e;
}

Executor::Executor(std::shared_ptr<const StepGraph> graph, Device& device,
                   Communicator& comm, const ExecutorOptions& options)
    : owned_graph_(std::move(graph)),
      graph_(*owned_graph_),
      device_(device),
      comm_(comm),
      options_(options),
      rng_(options.seed * 0x9E3779B97F4A7C15ull + comm.rank()),
      trace_seq_(std::make_shared<std::atomic<uint64_t>>(0)),
      trace_(std::make_shared<std::vector<TraceRecord>>()),
      trace_mu_(std::make_shared<std::mutex>()) {}

Executor::~Executor() {
  saver_.reset();  // its writer finishes; its copies read the state
  if (driver_) (void)driver_->Synchronize();
  driver_.reset();  // it may run work of its own that uses our streams
  for (auto& s : streams_) {
    if (s) (void)s->Synchronize();
  }
#ifdef BATON_HAVE_CUDA
  if (cuda_graph_exec_ != nullptr) {
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(cuda_graph_exec_));
  }
#endif
}

Status Executor::BindGroups() {
  const DeviceMesh& mesh = graph_.mesh;
  const int r = comm_.rank();
  // The groups the graph's collectives run over, and the data-shard group
  // (shard_rank()), in one order on every rank: Split is collective.
  std::vector<MeshGroup> needed = {kDataShardGroup};
  for (const Node& n : graph_.nodes) {
    needed.push_back(n.group);
    // Collectives run inside compute nodes (tp_comm_overlap's all-reduces).
    for (const FusedComm& f : n.fused) needed.push_back(f.group);
  }
  std::sort(needed.begin(), needed.end());
  needed.erase(std::unique(needed.begin(), needed.end()), needed.end());
  for (const GroupComm& given : options_.group_comms) {
    if (std::find(needed.begin(), needed.end(), given.group) == needed.end()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "executor: group_comms names group ", given.group.name(),
          ", which no collective of the graph runs over"));
    }
  }
  for (MeshGroup g : needed) {
    const int size = mesh.size(g);
    const int position = mesh.position(r, g);
    Communicator* given = nullptr;
    for (const GroupComm& gc : options_.group_comms) {
      if (gc.group == g) given = gc.comm;
    }
    Communicator*& slot = group_comm_[g.bits()];
    if (given != nullptr) {
      if (given->size() != size || given->rank() != position) {
        return absl::InvalidArgumentError(absl::StrCat(
            "executor: the communicator given for group ", g.name(), " is rank ",
            given->rank(), " of ", given->size(), " but world rank ", r,
            " is rank ", position, " of ", size, " in that group (mesh ",
            mesh.ToString(), ")"));
      }
      slot = given;
    } else if (size == mesh.world_size()) {
      slot = &comm_;  // the group is every rank, in world order
    } else {
      BATON_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> c,
                             comm_.Split(mesh.group_index(r, g), position));
      if (c == nullptr || c->size() != size || c->rank() != position) {
        return absl::InternalError(absl::StrCat(
            "executor: Split gave a wrong communicator for group ", g.name()));
      }
      slot = c.get();
      owned_comms_.push_back(std::move(c));
    }
  }
  return absl::OkStatus();
}

Communicator& Executor::CommFor(MeshGroup group) {
  return *group_comm_[group.bits()];
}

std::vector<Stream*> Executor::streams() {
  std::vector<Stream*> out;
  for (auto& s : streams_) out.push_back(s.get());
  return out;
}

double Executor::grad_scale() const {
  // Gradients are summed over the data ranks of a stage (the world over
  // the pipeline stages and tensor ranks; context parallelism is refused).
  const int data = comm_.size() / graph_.mesh.size(MeshDim::kPipeline) /
                   graph_.mesh.size(MeshDim::kTensor);
  return 1.0 / (static_cast<double>(data) * graph_.policy.micro_steps);
}

Status Executor::Init() {
  BATON_RETURN_IF_ERROR(BindGroups());
  // Reductions of 16-bit gradients keep fp32 partial sums where the backend
  // can (caps().accumulate_fp32; nccl refuses: reduce an fp32 buffer there).
  accumulate_fp32_ = graph_.policy.reduce_dtype != DataType::kF32 &&
                     comm_.caps().accumulate_fp32;
  const std::vector<std::string> names = graph_.stream_names();
  for (int s = 0; s < graph_.num_streams; ++s) {
    StreamOptions so;
    so.priority = StreamId(s).is_compute() ? 0 : -1;
    so.name = absl::StrCat(names[s], ".r", comm_.rank());
    BATON_ASSIGN_OR_RETURN(auto stream, device_.CreateStream(so));
    streams_.push_back(std::move(stream));
    BATON_ASSIGN_OR_RETURN(auto ev, device_.CreateEvent());
    end_events_.push_back(std::move(ev));
  }
  host_views_.resize(streams_.size());
  if (graph_.offload() && device_.kind() != DeviceKind::kHost) {
    const StreamId h = graph_.stream_for(StreamClass::kHost);
    host_views_[h.index()] = std::make_unique<HostWorkView>(*streams_[h.index()]);
  }
  const int nn = static_cast<int>(graph_.nodes.size());
  std::vector<bool> needs(nn, false);
  for (const Node& n : graph_.nodes) {
    for (int w : n.waits) needs[w] = true;
    if (n.host_wait >= 0) needs[n.host_wait] = true;
  }
  fusable_cast_ = true;
  for (int i = 0; i < nn; ++i) {
    const Node& n = graph_.nodes[i];
    if (n.kind != NodeKind::kOptimizer) continue;
    const bool next_is_cast = i + 1 < nn && graph_.nodes[i + 1].kind == NodeKind::kCast &&
                              graph_.nodes[i + 1].bucket == n.bucket &&
                              graph_.nodes[i + 1].stream == n.stream;
    fusable_cast_ = fusable_cast_ && next_is_cast && !needs[i];
  }
  writes_saved_.assign(nn, false);
  for (int i = 0; i < nn; ++i) {
    for (int w : graph_.nodes[i].writes) {
      const BufferRole r = graph_.buffers[w].role;
      if (r == BufferRole::kMaster || r == BufferRole::kMoment1 || r == BufferRole::kMoment2) {
        writes_saved_[i] = true;
      }
    }
  }
  // Pipeline stages: the activations received and the ones sent
  // (ComputeContext's pipeline views).
  recv_written_.assign(graph_.buffers.size(), false);
  send_read_.assign(graph_.buffers.size(), false);
  for (const Node& n : graph_.nodes) {
    if (n.kind == NodeKind::kRecv) recv_written_[n.writes[0]] = true;
    if (n.kind == NodeKind::kSend) send_read_[n.reads[0]] = true;
  }
  // Tensor parallelism: the activations the tensor collectives move
  // (ComputeContext's tensor views).
  tensor_written_.assign(graph_.buffers.size(), false);
  tensor_read_.assign(graph_.buffers.size(), false);
  const StreamId tensor = graph_.stream_for(StreamClass::kTensor);
  for (const Node& n : graph_.nodes) {
    if (!graph_.parallel() || n.stream != tensor) continue;
    for (int w : n.writes) tensor_written_[w] = true;
    for (int r : n.reads) tensor_read_[r] = true;
  }
  node_events_.resize(nn);
  for (int i = 0; i < nn; ++i) {
    if (!needs[i]) continue;
    BATON_ASSIGN_OR_RETURN(node_events_[i], device_.CreateEvent());
  }
  memory::ArenaOptions ao;
  ao.poison = options_.poison;
  BATON_ASSIGN_OR_RETURN(arena_,
                         memory::Arena::Create(device_, graph_.plan, ao));
  // Persistent state.
  const int nbuf = static_cast<int>(graph_.buffers.size());
  state_offset_.assign(nbuf, 0);
  size_t total = 0, host_total = 0;
  for (int b = 0; b < nbuf; ++b) {
    const GraphBuffer& buf = graph_.buffers[b];
    if (!buf.persistent) continue;
    size_t& t = buf.host ? host_total : total;
    state_offset_[b] = t;
    t = AlignUp(t + buf.bytes(), kStateAlign);
  }
  BATON_ASSIGN_OR_RETURN(state_, device_.Allocate(std::max<size_t>(total, 1)));
  BATON_RETURN_IF_ERROR(compute_stream().MemsetAsync(state_.data(), 0, total));
  if (host_total > 0) {
    BATON_ASSIGN_OR_RETURN(host_state_, AllocateHostState(device_, host_total));
    std::memset(host_state_.data(), 0, host_total);
  }
  BATON_RETURN_IF_ERROR(compute_stream().Synchronize());
  if (options_.optimizer_driver) {
    driver_ = options_.optimizer_driver();
    if (driver_ == nullptr) {
      return absl::InvalidArgumentError("executor: optimizer_driver made no driver");
    }
    BATON_RETURN_IF_ERROR(driver_->Init(*this));
  }
  // Gradient gaps per bucket.
  for (const Bucket& bk : graph_.layout.buckets) {
    std::vector<std::pair<int64_t, int64_t>> gaps;
    int64_t at = 0;
    std::vector<const ParamSlot*> slots;
    for (const ParamSlot& p : bk.params) slots.push_back(&p);
    std::sort(slots.begin(), slots.end(),
              [](const ParamSlot* a, const ParamSlot* b) {
                return a->offset < b->offset;
              });
    for (const ParamSlot* p : slots) {
      if (p->offset > at) gaps.push_back({at, p->offset});
      at = p->offset + p->numel;
    }
    if (bk.padded_numel > at) gaps.push_back({at, bk.padded_numel});
    gaps_.push_back(std::move(gaps));
  }
  return absl::OkStatus();
}

void* Executor::BufferData(int buffer) {
  const GraphBuffer& b = graph_.buffers[buffer];
  if (b.persistent) {
    return static_cast<char*>(b.host ? host_state_.data() : state_.data()) +
           state_offset_[buffer];
  }
  return arena_->View(b.plan_id)->data;
}

Status Executor::InitParameters(
    const std::function<void(const ParamSlot&, float*)>& init, const Nf4Packer& nf4) {
  const int rank = shard_rank();
  Stream& s = compute_stream();
  if (saver_) BATON_RETURN_IF_ERROR(saver_->WaitCopies());  // they read the masters
  BATON_RETURN_IF_ERROR(s.Synchronize());
  for (const Bucket& bk : graph_.layout.buckets) {
    if (bk.nf4 && !nf4) {
      return absl::InvalidArgumentError(absl::StrCat(
          "executor: bucket ", bk.name, " stores its weights as NF4: InitParameters needs "
          "the packer (Nf4Packer)"));
    }
  }
  for (int b = 0; b < static_cast<int>(graph_.buffers.size()); ++b) {
    const GraphBuffer& buf = graph_.buffers[b];
    if (buf.bucket < 0) continue;  // activations of a parallel graph
    const Bucket& bk = graph_.layout.buckets[buf.bucket];
    // A master shard, or the shard itself of a frozen bucket.
    const bool frozen_shard =
        bk.frozen && (buf.role == BufferRole::kShard || buf.role == BufferRole::kHostShard);
    if (buf.role != BufferRole::kMaster && !frozen_shard) continue;
    const int64_t begin = graph_.layout.sharding.shard ? rank * bk.shard_numel : 0;
    const int64_t end = begin + bk.shard_numel;
    std::vector<float> shard(bk.shard_numel, 0.0f);
    std::vector<float> full;
    for (const ParamSlot& p : bk.params) {
      const int64_t lo = std::max(begin, p.offset);
      const int64_t hi = std::min(end, p.offset + p.numel);
      if (lo >= hi) continue;
      full.assign(p.numel, 0.0f);
      init(p, full.data());
      std::copy(full.begin() + (lo - p.offset), full.begin() + (hi - p.offset),
                shard.begin() + (lo - begin));
    }
    std::vector<uint8_t> bytes(buf.bytes());
    if (buf.role == BufferRole::kMaster || buf.dtype == DataType::kF32) {
      if (bk.nf4) {
        BATON_RETURN_IF_ERROR(nf4(shard.data(), bk.shard_numel, bytes.data()));
      } else {
        std::memcpy(bytes.data(), shard.data(), shard.size() * sizeof(float));
      }
    } else {
      NarrowFromF32(bytes.data(), shard.data(), buf.dtype, shard.size());
    }
    BATON_RETURN_IF_ERROR(s.MemcpyAsync(BufferData(b), bytes.data(), bytes.size()));
    BATON_RETURN_IF_ERROR(s.Synchronize());
  }
  return CastMasters();
}

Status Executor::CastMasters() {
  // Cast every master into its shard (under offload: the host shard, which
  // the first step's H2D copies to the device).
  init_cast_ = true;
  for (int i = 0; i < static_cast<int>(graph_.nodes.size()); ++i) {
    if (graph_.nodes[i].kind != NodeKind::kCast) continue;
    Status st = RunWork(i, StepCallbacks{});
    if (!st.ok()) {
      init_cast_ = false;
      return st;
    }
  }
  init_cast_ = false;
  return Synchronize();
}

Status Executor::BeginStep() {
  if (in_step_) {
    return absl::FailedPreconditionError("executor: a step is already open");
  }
  if (step_ > 0) {
    for (size_t s = 0; s < streams_.size(); ++s) {
      for (size_t o = 0; o < streams_.size(); ++o) {
        if (o != s) BATON_RETURN_IF_ERROR(streams_[s]->Wait(*end_events_[o]));
      }
    }
  }
  in_step_ = true;
  return absl::OkStatus();
}

Status Executor::EndStep() {
  if (!in_step_) return absl::FailedPreconditionError("executor: no open step");
  for (size_t s = 0; s < streams_.size(); ++s) {
    BATON_RETURN_IF_ERROR(end_events_[s]->Record(*streams_[s]));
  }
  in_step_ = false;
  save_pending_ = false;  // this step's writers of saved state waited
  ++step_;
  return absl::OkStatus();
}

Status Executor::Trace(int i, bool start, Stream& s) {
  if (!options_.trace) return absl::OkStatus();
  auto seq = trace_seq_;
  const int64_t step = step_;
  if (start) {
    auto rec = std::make_shared<TraceRecord>();
    rec->node = i;
    rec->step = step;
    pending_trace_ = rec;
    return s.Enqueue([seq, rec]() {
      rec->start = seq->fetch_add(1);
      return absl::OkStatus();
    });
  }
  auto rec = std::move(pending_trace_);
  auto out = trace_;
  auto mu = trace_mu_;
  return s.Enqueue([seq, rec, out, mu]() {
    rec->end = seq->fetch_add(1);
    std::lock_guard<std::mutex> lock(*mu);
    out->push_back(*rec);
    return absl::OkStatus();
  });
}

std::vector<TraceRecord> Executor::TakeTrace() {
  std::lock_guard<std::mutex> lock(*trace_mu_);
  std::vector<TraceRecord> out;
  out.swap(*trace_);
  return out;
}

Status Executor::PreNode(int i) {
  if (!in_step_) return absl::FailedPreconditionError("executor: no open step");
  const Node& n = graph_.nodes[i];
  Stream& s = NodeStream(i);
  // Where the node's work and its observer / trace / delay points go: the
  // driver's (e.g. ZenFlow's update thread), else the stream.
  work_stream_ = driver_ ? driver_->BeginNode(i, step_) : nullptr;
  Stream& ws = work_stream_ != nullptr ? *work_stream_ : s;
  if (n.host_wait >= 0) {
    BATON_RETURN_IF_ERROR(node_events_[n.host_wait]->Synchronize());
  }
  BATON_RETURN_IF_ERROR(Observe(i, NodeObserver::Point::kBeforeWaits, s));
  if (driver_) BATON_RETURN_IF_ERROR(driver_->BeforeWaits(i, step_, s));
  for (int w : n.waits) BATON_RETURN_IF_ERROR(s.Wait(*node_events_[w]));
  if (save_pending_ && writes_saved_[i]) {
    // A checkpoint's copies of this state must be taken first (device wait).
    BATON_RETURN_IF_ERROR(s.Wait(saver_->copied()));
  }
  if (driver_) BATON_RETURN_IF_ERROR(driver_->AfterWaits(i, step_, s));
  BATON_RETURN_IF_ERROR(Observe(i, NodeObserver::Point::kBeforeWork, ws));
  if (options_.max_delay_us > 0) {
    const int us = static_cast<int>(rng_() % (options_.max_delay_us + 1));
    BATON_RETURN_IF_ERROR(ws.Enqueue([us]() {
      std::this_thread::sleep_for(std::chrono::microseconds(us));
      return absl::OkStatus();
    }));
  }
  BATON_RETURN_IF_ERROR(Trace(i, true, ws));
  for (int r : n.reads) {
    if (!graph_.buffers[r].persistent) {
      BATON_RETURN_IF_ERROR(arena_->CheckIntact(graph_.buffers[r].plan_id, s));
    }
  }
  for (int w : n.writes) {
    const GraphBuffer& buf = graph_.buffers[w];
    if (buf.persistent) continue;
    if (graph_.first_write[w] != i) {
      if (std::find(n.reads.begin(), n.reads.end(), w) == n.reads.end()) {
        BATON_RETURN_IF_ERROR(arena_->CheckIntact(buf.plan_id, s));
      }
    } else if (buf.role == BufferRole::kGradFull) {
      const size_t elem = DataTypeSize(buf.dtype);
      char* base = static_cast<char*>(BufferData(w));
      for (const auto& [lo, hi] : gaps_[buf.bucket]) {
        BATON_RETURN_IF_ERROR(
            s.MemsetAsync(base + lo * elem, 0, (hi - lo) * elem));
      }
    }
  }
  return absl::OkStatus();
}

Status Executor::Observe(int i, NodeObserver::Point point, Stream& s) {
  if (options_.observer == nullptr) return absl::OkStatus();
  return options_.observer->Observe(i, step_, point, s);
}

Status Executor::PostNode(int i) {
  const Node& n = graph_.nodes[i];
  Stream& s = NodeStream(i);
  Stream& ws = work_stream_ != nullptr ? *work_stream_ : s;
  BATON_RETURN_IF_ERROR(Observe(i, NodeObserver::Point::kAfterWork, ws));
  for (int w : n.writes) {
    if (!graph_.buffers[w].persistent) {
      BATON_RETURN_IF_ERROR(arena_->MarkWritten(graph_.buffers[w].plan_id, s));
    }
  }
  auto release = [&](int b) -> Status {
    const GraphBuffer& buf = graph_.buffers[b];
    if (buf.persistent || graph_.last_use[b] != i ||
        !graph_.last_use_is_final[b]) {
      return absl::OkStatus();
    }
    return arena_->Release(buf.plan_id, s);
  };
  for (int r : n.reads) BATON_RETURN_IF_ERROR(release(r));
  for (int w : n.writes) {
    if (std::find(n.reads.begin(), n.reads.end(), w) == n.reads.end()) {
      BATON_RETURN_IF_ERROR(release(w));
    }
  }
  BATON_RETURN_IF_ERROR(Trace(i, false, ws));
  if (node_events_[i]) BATON_RETURN_IF_ERROR(node_events_[i]->Record(s));
  if (driver_) BATON_RETURN_IF_ERROR(driver_->AfterNode(i, step_, s));
  return absl::OkStatus();
}

Stream& Executor::NodeStream(int i) {
  if (driver_) {
    if (Stream* s = driver_->NodeStream(i, step_)) return *s;
  }
  return stream(graph_.nodes[i].stream);
}

ComputeContext Executor::MakeComputeContext(int i) {
  const Node& n = graph_.nodes[i];
  const ModelLayout& layout = graph_.layout;
  ComputeContext ctx;
  ctx.kind = n.kind;
  ctx.recompute = n.recompute;
  ctx.unit = n.unit;
  ctx.spec = &layout.units[n.unit];
  ctx.micro_step = n.micro_step;
  ctx.step = step_;
  ctx.rank = comm_.rank();
  ctx.stream = &stream(n.stream);
  if (options_.observer != nullptr) ctx.spans = options_.observer->spans();
  auto find = [&](const std::vector<int>& bufs, int bucket) {
    for (int b : bufs) {
      if (graph_.buffers[b].bucket == bucket) return b;
    }
    return -1;
  };
  // zb-h1: a backward that writes no gradient is the input-gradient pass
  // B; its unit's kBackwardWeight node for the micro-batch runs later.
  ctx.weight_deferred = n.kind == NodeKind::kBackward &&
                        graph_.policy.pipeline_schedule == PipelineSchedule::kZbH1;
  for (const ParamRef& ref : layout.unit_params[n.unit]) {
    const ParamSlot& slot = layout.buckets[ref.bucket].params[ref.slot];
    const int pb = find(n.reads, ref.bucket);
    const GraphBuffer& pbuf = graph_.buffers[pb];
    ctx.params.push_back(
        {&slot,
         static_cast<char*>(BufferData(pb)) + slot.offset * DataTypeSize(pbuf.dtype),
         pbuf.dtype});
    if (n.kind == NodeKind::kBackward || n.kind == NodeKind::kBackwardWeight) {
      if (ctx.weight_deferred) continue;  // zb-h1's B: no gradient written
      if (slot.frozen) {
        ctx.grads.push_back({&slot, nullptr, graph_.policy.reduce_dtype});
        continue;
      }
      const int gb = find(n.writes, ref.bucket);
      const GraphBuffer& gbuf = graph_.buffers[gb];
      ctx.grads.push_back(
          {&slot,
           static_cast<char*>(BufferData(gb)) + slot.offset * DataTypeSize(gbuf.dtype),
           gbuf.dtype});
    }
  }
  if (n.kind == NodeKind::kBackward || n.kind == NodeKind::kBackwardWeight) {
    ctx.grad_accumulate = n.grad_accumulate;
  }
  // Pipeline stages: what came from or goes to the neighbouring stages.
  for (int b : n.writes) {
    if (graph_.buffers[b].role == BufferRole::kSavedActivation) ctx.pipeline.saved = BufferData(b);
  }
  for (int b : n.reads) {
    if (graph_.buffers[b].role == BufferRole::kSavedActivation) ctx.pipeline.saved = BufferData(b);
  }
  for (int r : n.reads) {
    if (!recv_written_[r]) continue;
    const bool grad = graph_.buffers[r].role == BufferRole::kActivationGrad;
    (grad ? ctx.pipeline.output_grad : ctx.pipeline.input) = BufferData(r);
  }
  for (int w : n.writes) {
    if (!send_read_[w]) continue;
    const bool grad = graph_.buffers[w].role == BufferRole::kActivationGrad;
    (grad ? ctx.pipeline.input_grad : ctx.pipeline.output) = BufferData(w);
  }
  // Tensor parallelism: the node's part of the block and the activations
  // its neighbouring all-reduces move.
  if (graph_.parallel() && graph_.policy.tensor_parallel > 1) {
    Communicator& tp = CommFor(kTensorGroup);
    ctx.tensor.segments = n.segments;
    ctx.tensor.comm = &tp;
    ctx.tensor.rank = tp.rank();
    ctx.tensor.size = tp.size();
    ctx.tensor.stream = &stream(graph_.stream_for(StreamClass::kTensor));
    for (const FusedComm& f : n.fused) {
      // An all-reduce's, or sequence parallelism's gathers and
      // reduce-scatters': the same tensor_parallel chunks.
      if (f.group == kTensorGroup) ctx.tensor.chunks = f.chunks;
    }
    for (int r : n.reads) {
      if (tensor_written_[r]) ctx.tensor.input = BufferData(r);
    }
    for (int w : n.writes) {
      if (tensor_read_[w]) ctx.tensor.output = BufferData(w);
    }
  }
  return ctx;
}

Status Executor::RunWork(int i, const StepCallbacks& cb) {
  const Node& n = graph_.nodes[i];
  Stream& s = stream(n.stream);
  const ModelLayout& layout = graph_.layout;
  const Policy& p = graph_.policy;
  CollectiveOptions co;
  co.tag = CollectiveTag(n.stream);
  co.position = NodePosition(graph_, i, step_, options_.check_schedule);
  if (driver_) {
    BATON_ASSIGN_OR_RETURN(const bool handled,
                           driver_->Run(i, step_, init_cast_, NodeStream(i)));
    if (handled) return absl::OkStatus();
  }
  switch (n.kind) {
    case NodeKind::kForward:
    case NodeKind::kRecompute:
    case NodeKind::kBackward:
    case NodeKind::kBackwardWeight: {
      if (!cb.compute) {
        return absl::InvalidArgumentError("executor: no compute callback");
      }
      return cb.compute(MakeComputeContext(i));
    }
    case NodeKind::kDispatch:
    case NodeKind::kCombine:
      return absl::UnimplementedError(absl::StrCat(
          "executor: ", n.name, ": expert dispatch and combine are simulated, not executed yet"));
    case NodeKind::kSend:
    case NodeKind::kRecv: {
      // A tag per direction and receiving chunk: between two stages the
      // messages of one tag go in micro-batch order on both ends (with
      // virtual stages a pair carries activations of two chunks and
      // gradients, each stage issuing them in its own schedule's order).
      co.tag = PipelineTag(graph_, n);
      const int b = n.kind == NodeKind::kSend ? n.reads[0] : n.writes[0];
      const GraphBuffer& buf = graph_.buffers[b];
      Communicator& pp = CommFor(kPipelineGroup);
      if (n.kind == NodeKind::kSend) {
        return pp.Send(BufferData(b), buf.numel, buf.dtype, n.peer, s, co);
      }
      return pp.Recv(BufferData(b), buf.numel, buf.dtype, n.peer, s, co);
    }
    case NodeKind::kAllGather: {
      // A shard (shard group) or a secondary shard (hpZ group).
      // (NF4: the packings, as fp32 words.)
      const GraphBuffer& in = graph_.buffers[n.reads[0]];
      return CommFor(n.group).AllGather(BufferData(n.reads[0]),
                                        BufferData(n.writes[0]), in.numel,
                                        in.dtype, s, co);
    }
    case NodeKind::kReduceScatter: {
      if (n.group == kTensorGroup) {
        // Sequence parallelism: a block part's partial output, summed and
        // scattered into the tensor ranks' sequence shards (its dtype).
        const GraphBuffer& out = graph_.buffers[n.writes[0]];
        co.accumulate_fp32 = accumulate_fp32_;
        return CommFor(n.group).ReduceScatter(BufferData(n.reads[0]), BufferData(n.writes[0]),
                                              out.numel, out.dtype, ReduceOp::kSum, s, co);
      }
      const Bucket& bk = layout.buckets[n.bucket];
      co.accumulate_fp32 = accumulate_fp32_;
      return CommFor(n.group).ReduceScatter(
          BufferData(n.reads[0]), BufferData(n.writes[0]), bk.shard_numel,
          p.reduce_dtype, ReduceOp::kSum, s, co);
    }
    case NodeKind::kAllReduce: {
      // DDP: the whole bucket; HSDP (replica group): a gradient shard;
      // tensor parallelism: a block part's partial output (its dtype).
      co.accumulate_fp32 = accumulate_fp32_;
      const GraphBuffer& out = graph_.buffers[n.writes[0]];
      const size_t count = out.numel;
      const DataType t = n.group == kTensorGroup ? out.dtype : p.reduce_dtype;
      return CommFor(n.group).AllReduce(BufferData(n.reads[0]),
                                        BufferData(n.writes[0]), count,
                                        t, ReduceOp::kSum, s, co);
    }
    case NodeKind::kCopy: {
      const size_t bytes = graph_.buffers[n.writes[0]].bytes();
      const char* src = static_cast<const char*>(BufferData(n.reads[0]));
      // hpZ: this rank's slice of the gathered bucket.
      if (n.group == kHpzGroup) src += CommFor(kHpzGroup).rank() * bytes;
      return s.MemcpyAsync(BufferData(n.writes[0]), src, bytes);
    }
    case NodeKind::kAccumulate: {
      void* dst = BufferData(n.writes[0]);
      const void* src = BufferData(n.reads[0]);
      const GraphBuffer& buf = graph_.buffers[n.writes[0]];
      const DataType t = buf.dtype;
      return AccumulateInto(s, dst, src, t, static_cast<size_t>(buf.numel));
    }
    case NodeKind::kD2H:
    case NodeKind::kH2D:
      return s.MemcpyAsync(BufferData(n.writes[0]), BufferData(n.reads[0]),
                           graph_.buffers[n.writes[0]].bytes());
    case NodeKind::kCast: {
      Stream& ws = WorkStream(n.stream);  // a host view under offload on CUDA
      void* dst = BufferData(n.writes[0]);
      const float* src = static_cast<const float*>(BufferData(n.reads[0]));
      const GraphBuffer& buf = graph_.buffers[n.writes[0]];
      const DataType t = buf.dtype;
      const size_t count = static_cast<size_t>(buf.numel);
      if (cb.optimizer_writes_shard && cb.optimizer) {
        return RunOptimizer(i - 1, cb, dst, t);  // fusable_cast_: i - 1 is it
      }
      if (t == DataType::kF32) return ws.MemcpyAsync(dst, src, count * 4);
      return CastFromF32(ws, dst, src, t, count);
    }
    case NodeKind::kOptimizer:
      if (!cb.optimizer || cb.optimizer_writes_shard) return absl::OkStatus();
      return RunOptimizer(i, cb, nullptr, DataType::kBF16);
    case NodeKind::kDequantize: {
      if (!cb.dequantize) {
        return absl::InvalidArgumentError(absl::StrCat(
            "executor: ", n.name, " needs StepCallbacks::dequantize"));
      }
      const Bucket& bk = layout.buckets[n.bucket];
      DequantizeContext ctx;
      ctx.bucket = n.bucket;
      ctx.spec = &bk;
      ctx.stream = &s;
      ctx.packed = BufferData(n.reads[0]);
      ctx.segment_numel = bk.shard_numel;
      ctx.segments = bk.padded_numel / bk.shard_numel;
      ctx.out = BufferData(n.writes[0]);
      ctx.out_dtype = graph_.buffers[n.writes[0]].dtype;
      return cb.dequantize(ctx);
    }
  }
  return absl::InternalError("executor: unknown node kind");
}

Status Executor::RunOptimizer(int i, const StepCallbacks& cb, void* shard,
                              DataType shard_dtype) {
  const Node& n = graph_.nodes[i];
  const ModelLayout& layout = graph_.layout;
  const Bucket& bk = layout.buckets[n.bucket];
  OptimizerContext ctx;
  ctx.bucket = n.bucket;
  ctx.spec = &bk;
  ctx.step = step_;
  ctx.rank = comm_.rank();
  ctx.stream = &WorkStream(n.stream);
  ctx.on_host = graph_.buffers[n.writes[0]].host;
  ctx.master = static_cast<float*>(BufferData(n.writes[0]));
  ctx.grad = BufferData(n.reads[0]);
  ctx.grad_dtype = graph_.buffers[n.reads[0]].dtype;
  if (graph_.buffers[n.writes[1]].role == BufferRole::kMoments8bit) {
    char* q = static_cast<char*>(BufferData(n.writes[1]));
    const Moments8bitLayout l = Moments8bitLayoutFor(bk.shard_numel);
    ctx.moment1_codes = reinterpret_cast<uint8_t*>(q + l.codes1);
    ctx.moment2_codes = reinterpret_cast<uint8_t*>(q + l.codes2);
    ctx.moment1_absmax = reinterpret_cast<float*>(q + l.absmax1);
    ctx.moment2_absmax = reinterpret_cast<float*>(q + l.absmax2);
  } else {
    ctx.moment1 = static_cast<float*>(BufferData(n.writes[1]));
    ctx.moment2 = static_cast<float*>(BufferData(n.writes[2]));
  }
  ctx.shard_numel = bk.shard_numel;
  ctx.shard_offset = layout.sharding.shard ? shard_rank() * bk.shard_numel : 0;
  ctx.grad_scale = grad_scale();
  ctx.shard = shard;
  ctx.shard_dtype = shard_dtype;
  return cb.optimizer(ctx);
}

Stream& Executor::WorkStream(StreamId s) {
  Stream* view = host_views_[s.index()].get();
  return view != nullptr ? *view : stream(s);
}

Status Executor::IssueNode(int i, const StepCallbacks& callbacks) {
  Status st = PreNode(i);
  if (st.ok()) st = RunWork(i, callbacks);
  if (st.ok()) st = PostNode(i);
  if (driver_) driver_->EndNode(i, step_, st);
  work_stream_ = nullptr;
  return st;
}

Status Executor::CheckCallbacks(const StepCallbacks& callbacks) const {
  if (callbacks.optimizer_writes_shard && !fusable_cast_ && driver_ == nullptr) {
    return absl::InvalidArgumentError(
        "executor: optimizer_writes_shard needs every optimizer node followed "
        "by its cast on the same stream and no node waiting on an optimizer");
  }
  return absl::OkStatus();
}

Status Executor::Step(const StepCallbacks& callbacks) {
  BATON_RETURN_IF_ERROR(CheckCallbacks(callbacks));
  BATON_RETURN_IF_ERROR(BeginStep());
  for (int i = 0; i < static_cast<int>(graph_.nodes.size()); ++i) {
    Status st = IssueNode(i, callbacks);
    if (!st.ok()) {
      in_step_ = false;
      return st;
    }
  }
  return EndStep();
}

Status Executor::Synchronize() {
  // The driver's own work first (ZenFlow: its host-update stream, then the
  // updates that stream started).
  Status first = driver_ ? driver_->Synchronize() : absl::OkStatus();
  for (auto& s : streams_) {
    Status st = s->Synchronize();
    if (first.ok() && !st.ok()) first = st;
  }
  if (first.ok()) first = comm_.health();
  for (auto& c : owned_comms_) {
    if (first.ok()) first = c->health();
  }
  return first;
}

StatusOr<std::vector<float>> Executor::ReadMaster(int bucket) {
  BATON_RETURN_IF_ERROR(Synchronize());
  const int b = BucketBuffer(bucket, BufferRole::kMaster);
  if (b < 0) return absl::OutOfRangeError(absl::StrCat("executor: no bucket ", bucket));
  const GraphBuffer& buf = graph_.buffers[b];
  std::vector<float> out(buf.numel);
  BATON_RETURN_IF_ERROR(
      compute_stream().MemcpyAsync(out.data(), BufferData(b), buf.bytes()));
  BATON_RETURN_IF_ERROR(compute_stream().Synchronize());
  return out;
}

int Executor::BucketBuffer(int bucket, BufferRole role) const {
  for (int b = 0; b < static_cast<int>(graph_.buffers.size()); ++b) {
    if (graph_.buffers[b].role == role && graph_.buffers[b].bucket == bucket) return b;
  }
  return -1;
}

Status Executor::CaptureStep(const StepCallbacks& callbacks) {
  BATON_RETURN_IF_ERROR(CheckCallbacks(callbacks));
#ifdef BATON_HAVE_CUDA
  if (device_.kind() != DeviceKind::kCuda) {
    return absl::UnimplementedError("CUDA graph capture needs CUDA streams");
  }
  if (driver_) BATON_RETURN_IF_ERROR(driver_->CanCapture());
  if (!comm_.caps().graph_capture) {
    return absl::UnimplementedError(absl::StrCat(
        "CUDA graph capture needs a communicator that can be captured (",
        comm_.backend(), " matches ranks at issue time, which a replay would "
        "skip)"));
  }
  for (const Node& n : graph_.nodes) {
    if (n.host_wait >= 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "policy ", graph_.policy.name,
          " blocks the host inside the step; it cannot be captured"));
    }
  }
  if (step_ == 0) {
    // The libraries build handles, workspaces and plans on first use
    // (cuBLAS, cuDNN's attention plans, NCCL's buffers), with calls that are
    // illegal inside a capture; an eager step makes them first.
    return absl::FailedPreconditionError(
        "CaptureStep: run one eager Step first (the libraries set themselves "
        "up on first use, which a capture cannot record)");
  }
  BATON_RETURN_IF_ERROR(Synchronize());
  if (saver_) BATON_RETURN_IF_ERROR(saver_->WaitCopies());
  save_pending_ = false;  // a capture must not record a checkpoint's wait
  // Created before the capture and kept alive until it ended.
  BATON_ASSIGN_OR_RETURN(auto fork, device_.CreateEvent());
  auto origin = static_cast<cudaStream_t>(streams_[0]->native_handle());
  BATON_CUDA_CHECK(
      cudaStreamBeginCapture(origin, cudaStreamCaptureModeThreadLocal));
  Status st = [&]() -> Status {
    BATON_RETURN_IF_ERROR(fork->Record(*streams_[0]));
    for (size_t s = 1; s < streams_.size(); ++s) {
      BATON_RETURN_IF_ERROR(streams_[s]->Wait(*fork));
    }
    in_step_ = true;
    for (int i = 0; i < static_cast<int>(graph_.nodes.size()); ++i) {
      BATON_RETURN_IF_ERROR(IssueNode(i, callbacks));
    }
    in_step_ = false;
    for (size_t s = 1; s < streams_.size(); ++s) {
      BATON_RETURN_IF_ERROR(end_events_[s]->Record(*streams_[s]));
      BATON_RETURN_IF_ERROR(streams_[0]->Wait(*end_events_[s]));
    }
    return absl::OkStatus();
  }();
  in_step_ = false;
  cudaGraph_t cuda_graph = nullptr;
  const cudaError_t end = cudaStreamEndCapture(origin, &cuda_graph);
  BATON_RETURN_IF_ERROR(st);
  BATON_CUDA_CHECK(end);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t inst = cudaGraphInstantiate(&exec, cuda_graph, 0);
  cudaGraphDestroy(cuda_graph);
  BATON_CUDA_CHECK(inst);
  if (cuda_graph_exec_ != nullptr) {
    cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(cuda_graph_exec_));
  }
  cuda_graph_exec_ = exec;
  return absl::OkStatus();
#else
  (void)callbacks;
  return absl::UnimplementedError(
      "CUDA graph capture: baton was built without CUDA");
#endif
}

Status Executor::ReplayStep() {
#ifdef BATON_HAVE_CUDA
  if (cuda_graph_exec_ == nullptr) {
    return absl::FailedPreconditionError("ReplayStep before CaptureStep");
  }
  for (size_t s = 1; s < streams_.size(); ++s) {
    if (step_ > 0) BATON_RETURN_IF_ERROR(streams_[0]->Wait(*end_events_[s]));
  }
  if (save_pending_) BATON_RETURN_IF_ERROR(streams_[0]->Wait(saver_->copied()));
  save_pending_ = false;
  auto origin = static_cast<cudaStream_t>(streams_[0]->native_handle());
  BATON_CUDA_CHECK(cudaGraphLaunch(
      static_cast<cudaGraphExec_t>(cuda_graph_exec_), origin));
  for (size_t s = 0; s < streams_.size(); ++s) {
    BATON_RETURN_IF_ERROR(end_events_[s]->Record(*streams_[0]));
  }
  ++step_;
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError("ReplayStep before CaptureStep");
#endif
}

}  // namespace baton::scheduler
