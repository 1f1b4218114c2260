#include "baton/optim/zenflow_driver.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/optim/zenflow_state.h"
#include "baton/runtime/stream_ops.h"
#include "baton/scheduler/offload.h"
#include "baton/scheduler/schedule_check.h"

namespace baton::optim {
namespace {

using namespace zenflow_internal;  // NOLINT: the state this driver issues
using scheduler::BufferRole;
using scheduler::GraphBuffer;
using scheduler::Node;
using scheduler::NodeKind;

class ZenFlowDriver final : public scheduler::OptimizerDriver {
 public:
  explicit ZenFlowDriver(const ops::AdamWConfig& adamw) : adamw_(adamw) {}
  ~ZenFlowDriver() override;  // waits for the host-update stream and thread

  Status Init(scheduler::ExecutorParts& parts) override;
  Stream* NodeStream(int i, int64_t step) override;
  Stream* BeginNode(int i, int64_t step) override;
  Status BeforeWaits(int i, int64_t step, Stream& s) override;
  Status AfterWaits(int i, int64_t step, Stream& s) override;
  StatusOr<bool> Run(int i, int64_t step, bool init, Stream& s) override;
  Status AfterNode(int i, int64_t step, Stream& s) override;
  void EndNode(int i, int64_t step, const Status& issue) override;
  Status Synchronize() override;
  Status CanCapture() const override;

 private:
  const scheduler::StepGraph& graph() const { return parts_->graph(); }
  void* data(int buffer) { return parts_->BufferData(buffer); }
  scheduler::BufferRole role(int buffer) const { return graph().buffers[buffer].role; }
  bool UpdateNode(int i, int64_t step) const;
  Status StartUpdate(int i, int64_t step, Stream& s);
  void PostUpdate(int i, int64_t step, const Status& issue);
  StatusOr<bool> RunOptimizer(int i, int64_t step, Stream& s);
  StatusOr<bool> RunCast(int i, int64_t step, bool init, Stream& s);
  uint64_t* Start(int b) { return static_cast<uint64_t*>(values_.data()) + 2 * b; }
  uint64_t* Done(int b) { return static_cast<uint64_t*>(values_.data()) + 2 * b + 1; }

  ops::AdamWConfig adamw_;
  scheduler::ExecutorParts* parts_ = nullptr;
  float scale_ = 1;  // the gradient scale
  // Per bucket (null for a bucket no node updates).
  std::vector<std::unique_ptr<ZenFlowState>> state_;
  // The host-update stream, outside the executor's step barrier, waits for
  // each update's inputs and writes its start value; the update thread then
  // runs the update (the node's deferred work) and writes its done value,
  // which the consumers wait for. Per bucket b: events ready and uploaded;
  // values start (word 2b) and done (2b + 1), counting the bucket's
  // windows; the inputs-good flag.
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Stream> host_view_;  // its host work view on CUDA
  std::vector<std::unique_ptr<Event>> ready_, uploaded_;
  DeviceBuffer values_;
  std::unique_ptr<std::atomic<int64_t>[]> inputs_ok_;
  std::unique_ptr<DeferredWork> work_;  // the open update's work
  int open_ = -1;                       // the update node being issued, or -1
  bool started_ = false;                // its start value was enqueued
  std::mutex error_mu_;
  Status error_;  // the update thread's first error
  // Joined first thing in the destructor (it uses the members above).
  std::unique_ptr<ZenFlowUpdateThread> thread_;
};



ZenFlowDriver::~ZenFlowDriver() {
  if (stream_) (void)stream_->Synchronize();
  thread_.reset();  // runs the updates posted, then joins
}

Status ZenFlowDriver::Init(scheduler::ExecutorParts& parts) {
  parts_ = &parts;
  const scheduler::StepGraph& g = graph();
  if (!g.policy.zenflow) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zenflow driver: policy ", g.policy.name, " does not use zenflow"));
  }
  if (!g.layout.sharding.shard) {
    return absl::InvalidArgumentError("zenflow driver: zenflow needs a sharded layout");
  }
  BATON_RETURN_IF_ERROR(scheduler::ValidatePolicy(g.policy));
  Device& device = parts.device();
  scale_ = static_cast<float>(parts.grad_scale());
  const scheduler::ZenFlowIntervals z = scheduler::ResolveZenFlow(g.policy);
  ops::ZenFlowConfig zc;
  zc.topk_ratio = g.policy.zenflow_topk_ratio;
  zc.select_interval = z.select;
  zc.update_interval = z.update;
  for (const scheduler::Bucket& bk : g.layout.buckets) {
    BATON_ASSIGN_OR_RETURN(auto zf, ZenFlowState::Create(device, bk, parts.shard_rank(),
                                                         g.layout.sharding.ranks, zc,
                                                         z.staleness, adamw_));
    state_.push_back(std::move(zf));
  }
  Stream& compute = parts.stream(scheduler::kComputeStream);
  StreamOptions so;
  so.name = absl::StrCat("host_update.r", parts.rank());
  BATON_ASSIGN_OR_RETURN(stream_, device.CreateStream(so));
  const size_t nb = g.layout.buckets.size();
  BATON_ASSIGN_OR_RETURN(values_, device.AllocateValues(2 * nb));
  inputs_ok_.reset(new std::atomic<int64_t>[nb]);
  for (size_t b = 0; b < nb; ++b) inputs_ok_[b].store(0);
  work_ = std::make_unique<DeferredWork>(so.name);
  thread_ = std::make_unique<ZenFlowUpdateThread>();
  // The updates are ordered by stream values (rule 8): a device or driver
  // without them (CUDA: 64-bit stream memory operations) fails here, not
  // at the first window's end. Both no-ops: the words hold 0.
  for (Status st : {stream_->WriteValue(Start(0), 0), compute.WaitValue(Done(0), 0)}) {
    if (!st.ok()) {
      return absl::Status(st.code(), absl::StrCat(
          "executor: ZenFlow orders its host updates with stream values, "
          "which this device cannot use: ", st.message()));
    }
  }
  // InitParameters' cast is host work on host memory: on a CUDA stream,
  // through the driver's host-function thread (the updates run on the
  // update thread).
  if (device.kind() != DeviceKind::kHost) {
    host_view_ = std::make_unique<scheduler::HostWorkView>(*stream_);
  }
  for (size_t b = 0; b < nb; ++b) {
    for (auto* v : {&ready_, &uploaded_}) {
      BATON_ASSIGN_OR_RETURN(auto ev, device.CreateEvent());
      v->push_back(std::move(ev));
    }
  }
  for (const Node& n : g.nodes) {
    for (int w : n.waits) {
      if (g.nodes[w].kind == NodeKind::kCast) {
        return absl::InternalError(absl::StrCat(
            "executor: node ", n.name, " waits on ZenFlow's cast, whose "
            "update finishes on the update thread after its node event"));
      }
    }
  }
  return absl::OkStatus();
}

Stream* ZenFlowDriver::NodeStream(int i, int64_t) {
  return graph().nodes[i].kind == NodeKind::kCast ? stream_.get() : nullptr;
}

bool ZenFlowDriver::UpdateNode(int i, int64_t step) const {
  const Node& n = graph().nodes[i];
  return n.kind == NodeKind::kCast && n.bucket >= 0 && state_[n.bucket] != nullptr &&
         state_[n.bucket]->update_step(step);
}

Stream* ZenFlowDriver::BeginNode(int i, int64_t step) {
  if (!UpdateNode(i, step)) return nullptr;
  open_ = i;  // EndNode posts it, whatever happens now
  return work_.get();
}

// ZenFlow's CAST off its graph stream: first where its graph stream stands
// (its OPT), then the graph's waits (pruned against that).
Status ZenFlowDriver::BeforeWaits(int i, int64_t, Stream& s) {
  const Node& n = graph().nodes[i];
  if (n.kind != NodeKind::kCast || n.bucket < 0) return absl::OkStatus();
  return s.Wait(*ready_[n.bucket]);
}

// The waits on the host updates' done values (optim/zenflow_state.h), after
// the graph's waits, before the observer's "before work" point and the
// trace's start: a node's traced start follows every wait it has. Then, for
// a window's update, its start (StartUpdate).
Status ZenFlowDriver::AfterWaits(int i, int64_t step, Stream& s) {
  const Node& n = graph().nodes[i];
  if (n.bucket < 0) return absl::OkStatus();
  const ZenFlowState* zf = state_[n.bucket].get();
  if (zf == nullptr) return absl::OkStatus();
  const int64_t w = zf->window(step);
  // The host update of `window` has finished (the update thread counts the
  // bucket's windows in its done value).
  auto done = [&](int64_t window) -> Status {
    if (window < 0) return absl::OkStatus();
    return s.WaitValue(Done(n.bucket), static_cast<uint64_t>(window + 1));
  };
  if (n.kind == NodeKind::kOptimizer && role(n.reads.back()) == BufferRole::kTopkState) {
    // TOPK reads the host master (not declared in the graph) on a selection
    // step only, for the newly selected columns: after the host update of
    // the window that just ended.
    if (zf->select_step(step) && w >= 1) return done(w - 1);
    return absl::OkStatus();
  }
  if (n.kind == NodeKind::kOptimizer) {
    // OPT, the first step of a window: two windows back used this
    // accumulator, its update is done. A selection step hands values back
    // into the master the last window's update reads.
    if (step % zf->update_interval() != 0 || w < 1) return absl::OkStatus();
    BATON_RETURN_IF_ERROR(done(w - 2));
    if (zf->select_step(step)) return done(w - 1);
    return absl::OkStatus();
  }
  if (n.kind == NodeKind::kH2D) {
    // The host shard the window's cast wrote.
    const int64_t up = zf->upload_window(step);
    if (up >= 0) return done(up);
  }
  if (open_ == i) return StartUpdate(i, step, s);
  return absl::OkStatus();
}

// The host-update stream's part of a window's update (after the node's
// waits): the last upload read the host shard the update's cast writes
// (issued before: it came at the previous window's end + 1 + d <= this
// step); then the flag that the inputs are good (host work: skipped when
// the stream failed) and the start value (written even then), which the
// update thread waits for.
Status ZenFlowDriver::StartUpdate(int i, int64_t step, Stream& s) {
  const Node& n = graph().nodes[i];
  const int64_t w = state_[n.bucket]->window(step);
  BATON_RETURN_IF_ERROR(s.Wait(*uploaded_[n.bucket]));
  BATON_RETURN_IF_ERROR(s.Enqueue([ok = &inputs_ok_[n.bucket], w]() {
    ok->store(w + 1, std::memory_order_release);
    return absl::OkStatus();
  }));
  BATON_RETURN_IF_ERROR(s.WriteValue(Start(n.bucket), static_cast<uint64_t>(w + 1)));
  started_ = true;  // only now may the update thread wait for it
  return absl::OkStatus();
}

// After the observer's and the trace's end: the update waits for all of
// OPT, not only its work.
Status ZenFlowDriver::AfterNode(int i, int64_t, Stream& s) {
  const Node& n = graph().nodes[i];
  if (n.kind == NodeKind::kOptimizer && n.bucket >= 0 &&
      role(n.reads.back()) != BufferRole::kTopkState) {
    return ready_[n.bucket]->Record(s);
  }
  return absl::OkStatus();
}

void ZenFlowDriver::EndNode(int i, int64_t step, const Status& issue) {
  if (open_ == i) PostUpdate(i, step, issue);
}

// Posts node i's update to the update thread: once the host-update stream
// wrote the start value, the deferred work in order (observer, trace,
// delay, the update), then the done value its consumers wait for. Posted
// whether or not the node's issue succeeded (`issue`): a failed one, or
// one whose inputs failed, fails every stream of the executor through its
// error sink and still writes the done value (runtime/device.h rule 8), so
// no consumer waits forever.
void ZenFlowDriver::PostUpdate(int i, int64_t step, const Status& issue) {
  const Node& n = graph().nodes[i];
  const int64_t w = state_[n.bucket]->window(step);
  std::vector<HostWork> work = work_->Take();
  std::vector<std::shared_ptr<StreamErrorSink>> sinks;
  std::vector<Stream*> all = parts_->streams();
  all.insert(all.begin(), stream_.get());
  for (Stream* st : all) {
    if (auto sink = st->error_sink()) sinks.push_back(std::move(sink));
  }
  const bool started = started_;
  open_ = -1;
  started_ = false;
  thread_->Post([this, b = n.bucket, w, work = std::move(work), sinks = std::move(sinks),
                 issue, started]() mutable {
    Status st = issue;
    if (st.ok() && !started) {
      st = absl::InternalError("executor: ZenFlow's update was posted without its start");
    }
    if (st.ok()) {
      // The start value (enqueued, so it comes): the host-update stream got
      // past the update's waits. The update is long; a short spin, then
      // naps growing to 200 us.
      int64_t nap_us = 10;
      for (int k = 0; !ValueReached(HostReadValue(Start(b)), w + 1); ++k) {
        if (k < 64) {
          std::this_thread::yield();
        } else {
          std::this_thread::sleep_for(std::chrono::microseconds(nap_us));
          nap_us = std::min<int64_t>(2 * nap_us, 200);
        }
      }
    }
    if (st.ok() && inputs_ok_[b].load(std::memory_order_acquire) < w + 1) {
      st = absl::AbortedError(absl::StrCat(
          "executor: ZenFlow's host update of bucket ", b, ", window ", w,
          " did not run: the work it waits for failed"));
    }
    for (HostWork& item : work) {
      if (!st.ok()) break;
      st = item();
    }
    if (!st.ok()) {
      for (auto& sink : sinks) sink->Fail(st);
      std::lock_guard<std::mutex> lock(error_mu_);
      if (error_.ok()) error_ = st;
    }
    parts_->device().HostWriteValue(Done(b), static_cast<uint64_t>(w + 1));
  });
}

// ZenFlow's nodes (optim/zenflow_state.h); the D2H and compute nodes are
// the executor's (false).
StatusOr<bool> ZenFlowDriver::Run(int i, int64_t step, bool init, Stream& s) {
  const Node& n = graph().nodes[i];
  if (n.bucket < 0) return false;  // compute nodes
  ZenFlowState* zf = state_[n.bucket].get();
  switch (n.kind) {
    case NodeKind::kAccumulate:
      if (role(n.writes[0]) != BufferRole::kColumnNorms) return false;
      BATON_RETURN_IF_ERROR(zf->Norms(s, data(n.reads[0]), graph().buffers[n.reads[0]].dtype,
                                      scale_, static_cast<float*>(data(n.writes[0]))));
      return true;
    case NodeKind::kAllReduce: {
      if (role(n.writes[0]) != BufferRole::kColumnNorms) return false;
      if (!zf->select_step(step)) return true;
      CollectiveOptions co;
      co.tag = scheduler::CollectiveTag(n.stream);
      // Its place in the schedule, for hang reports (issue 38).
      co.position = scheduler::NodePosition(graph(), i, step, false);
      BATON_RETURN_IF_ERROR(parts_->CommFor(n.group).AllReduce(
          data(n.reads[0]), data(n.writes[0]), graph().buffers[n.writes[0]].numel,
          DataType::kF32, ReduceOp::kSum, s, co));
      return true;
    }
    case NodeKind::kOptimizer:
      return RunOptimizer(i, step, s);
    case NodeKind::kCast:
      return RunCast(i, step, init, s);
    case NodeKind::kH2D: {
      const int64_t w = zf->upload_window(step);
      if (w == ZenFlowState::kNone) return true;
      const int shard = n.writes[0], stage = n.writes[1];
      BATON_RETURN_IF_ERROR(
          s.MemcpyAsync(data(stage), data(n.reads[0]), graph().buffers[stage].bytes()));
      BATON_RETURN_IF_ERROR(uploaded_[n.bucket]->Record(s));
      BATON_RETURN_IF_ERROR(
          zf->Apply(s, w, data(stage), data(shard), graph().buffers[shard].dtype));
      return true;
    }
    default:
      return false;
  }
}

// TOPK on the compute stream, or OPT on the host stream: this window's
// accumulator (AfterNode records `ready`).
StatusOr<bool> ZenFlowDriver::RunOptimizer(int i, int64_t step, Stream& s) {
  const Node& n = graph().nodes[i];
  const std::vector<GraphBuffer>& bufs = graph().buffers;
  ZenFlowState* zf = state_[n.bucket].get();
  if (role(n.reads.back()) == BufferRole::kTopkState) {
    const int master = parts_->BucketBuffer(n.bucket, BufferRole::kMaster);
    BATON_RETURN_IF_ERROR(zf->Topk(
        s, step, data(n.reads[0]), bufs[n.reads[0]].dtype, scale_,
        static_cast<float*>(data(n.reads[1])), bufs[n.reads[1]].numel,
        static_cast<float*>(data(n.reads[2])), bufs[n.reads[2]].numel,
        static_cast<const float*>(data(master)), data(n.writes[1]), bufs[n.writes[1]].dtype));
    return true;
  }
  const int64_t w = zf->window(step);
  const int64_t numel = graph().layout.buckets[n.bucket].shard_numel;
  BATON_RETURN_IF_ERROR(s.Enqueue(
      [zf, step, scale = scale_, g = data(n.reads[0]), t = bufs[n.reads[0]].dtype,
       master = static_cast<float*>(data(n.writes[0])),
       accum = static_cast<float*>(data(n.writes[3])) + (w % 2) * numel]() {
        return zf->Accumulate(step, g, t, scale, master, accum);
      }));
  return true;
}

// InitParameters' cast: host work on host memory on the host-update stream
// (a host view of it on CUDA). A window's update: deferred work for the
// update thread, after the host-update stream's waits (StartUpdate);
// EndNode posts it.
StatusOr<bool> ZenFlowDriver::RunCast(int i, int64_t step, bool init, Stream& s) {
  const Node& n = graph().nodes[i];
  ZenFlowState* zf = state_[n.bucket].get();
  Stream& hs = host_view_ ? *host_view_ : s;
  void* dst = data(n.writes[0]);
  const GraphBuffer& buf = graph().buffers[n.writes[0]];
  if (init) {
    const float* src = static_cast<const float*>(data(n.reads[0]));
    if (buf.dtype == DataType::kF32) {
      BATON_RETURN_IF_ERROR(hs.MemcpyAsync(dst, src, buf.bytes()));
    } else {
      BATON_RETURN_IF_ERROR(
          CastFromF32(hs, dst, src, buf.dtype, static_cast<size_t>(buf.numel)));
    }
    return true;
  }
  if (!zf->update_step(step)) return true;
  const int64_t w = zf->window(step);
  const int m1 = parts_->BucketBuffer(n.bucket, BufferRole::kMoment1);
  const int m2 = parts_->BucketBuffer(n.bucket, BufferRole::kMoment2);
  const int accum = parts_->BucketBuffer(n.bucket, BufferRole::kHostAccum);
  const int64_t numel = graph().layout.buckets[n.bucket].shard_numel;
  BATON_RETURN_IF_ERROR(work_->Enqueue(
      [zf, w, master = static_cast<float*>(data(n.reads[0])),
       m1 = static_cast<float*>(data(m1)), m2 = static_cast<float*>(data(m2)),
       acc = static_cast<float*>(data(accum)) + (w % 2) * numel, dst, pt = buf.dtype]() {
        return zf->Update(w, master, m1, m2, acc, dst, pt);
      }));
  return true;
}

// The host-update stream, then the updates it started (every posted
// update's start value is written by then, even on a failure).
Status ZenFlowDriver::Synchronize() {
  Status first = stream_ ? stream_->Synchronize() : absl::OkStatus();
  if (thread_) thread_->Drain();
  std::lock_guard<std::mutex> lock(error_mu_);
  if (first.ok()) first = error_;
  return first;
}

Status ZenFlowDriver::CanCapture() const {
  return absl::FailedPreconditionError(absl::StrCat(
      "policy ", parts_ != nullptr ? graph().policy.name : std::string("zenflow"),
      " uses zenflow, whose work differs from step to step (selection, update "
      "and upload steps); it cannot be captured once and replayed"));
}

}  // namespace

scheduler::OptimizerDriverFactory ZenFlowDriverFactory(const ops::AdamWConfig& adamw) {
  return [adamw]() -> std::unique_ptr<scheduler::OptimizerDriver> {
    return std::make_unique<ZenFlowDriver>(adamw);
  };
}

}  // namespace baton::optim
