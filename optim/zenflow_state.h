// ZenFlow's per-rank state and node work, on either kind of device; the
// driver that issues it for the executor is optim/zenflow_driver.h.
// The step graph (step_graph.h, "ZenFlow") gives each bucket, after its
// last reduction:
//   NORM     (compute)       g = grad shard * grad_scale; per-column sums
//                            of g^2 of every 2-D parameter's elements in
//                            this shard into the bucket's norms buffer
//   AR-NORM  (reduce stream) on a selection step only: the norms summed
//                            over the shard group (a matrix's columns span
//                            several ranks' shards), the selection
//                            communication: one float per column
//   TOPK     (compute)       on a selection step: the norms and the old
//                            selection's fp32 values to host staging;
//                            host work there (in stream order) picks the
//                            top-k columns per matrix, keeps the old
//                            values for the hand-back and builds the new
//                            packed master (kept columns: device values;
//                            new ones: the host master) and the slot
//                            tables; both back, the selected path's
//                            moments and the norms zeroed; every step:
//                            the selected gradient packed, AdamW on it
//                            (packed in the bucket's topk state buffer,
//                            each matrix at a fixed offset, its
//                            ops::PackedCapacity) and the new values
//                            scattered into the device shard
//   D2H      (host copy)     the gradient shard to the host, every step
//   OPT      (host)          the handed-back values into the host master;
//                            the unselected gradient added into this
//                            window's host accumulator (two, by window
//                            parity: kHostAccum holds 2 x the shard)
//   CAST     (host update)   at the end of an update window: AdamW on the
//                            window's unselected elements with its
//                            accumulator / update_interval, fused with
//                            their cast into the host parameter shard;
//                            accumulator = 0
//   H2D      (host copy)     at step e + 1 + d after the window ending at
//                            step e (d = the staleness): host shard ->
//                            staging buffer, then staging -> device shard
//                            for the elements the update changed (not
//                            selected during its window) that are not
//                            selected now (those are newer on the device):
//                            host work writes the slot tables of the union
//                            of those two selections, they go to the
//                            device, a column copy skips their columns
// The algorithm is ops/zenflow.h's, checked against ops::ZenFlowReference
// bit for bit (optim/zenflow_exec_test.cc) for staleness 0 ..
// update_interval - 1, micro_steps 1 and 2, f32 and bf16 parameters (the
// forward then sees the reference's weights rounded to bf16).
//
// Staleness. The window's host update (AdamW fused with the cast) runs on
// the executor's update thread (ZenFlowUpdateThread), released by a stream
// of its own, the host-update stream, which is NOT in Executor::BeginStep's
// all-streams barrier: the next steps' forward and backward run while it
// works. Not on a stream's host-work thread, because on CUDA that is the
// context's one driver thread (runtime/device.h rule 7): every other host
// item of every stream (the next OPT, whose host stream the barrier waits
// for) would queue behind the update. Every hazard on what it touches is
// an explicit event or value (per bucket; w = the window, e = its last
// step, U = update_interval, d = the staleness; "after" = in stream order
// after a wait; no stream's host work sleeps or blocks for it):
//   ready     event, host stream, after OPT, every step. The host-update
//             stream waits on it before CAST (then CAST's graph waits): the
//             update reads accum[w % 2] and the selection snapshot that OPT
//             of step e wrote last.
//   uploaded  event, host-copy stream, after H2D's host shard -> staging
//             copy. The host-update stream waits on it before the start of
//             window w + 1's update (whose cast overwrites the host shard
//             that copy read; it comes at step e + U >= e + 1 + d, so it is
//             always issued after that copy).
//   start     value, written by the host-update stream after those waits
//             (w + 1; host work before it flags that the inputs are good,
//             skipped if the stream failed). The update thread waits for it
//             (polling), then runs CAST's work: the update, and the
//             observer's, trace's and delay's points of the node, which go
//             to the thread too (DeferredWork), so they bracket the update
//             itself.
//   done      value, written by the update thread after window w's update
//             (w + 1: it counts windows; also after a failure, once it has
//             failed every stream of the executor through its error sink).
//             Waited on (Stream::WaitValue) by:
//             - H2D of step e + 1 + d (reads the host shard the cast wrote);
//             - TOPK of a selection step e + 1 (reads the host master for
//               the newly selected columns);
//             - OPT of the first step of windows w + 1 when it selects (its
//               handoff writes the master columns leaving the selection,
//               which the update reads) and w + 2 (it starts adding into
//               accum[w % 2], which the update read and zeroed). Waiting on
//               done of w + 1 instead would hold the host stream, and with
//               it the next step's barrier, for the whole update.
// Two of these are also implied by the barrier chain and kept explicit:
// OPT's wait for done of w - 2 (H2D of w - 2 waited for it and the
// host-copy stream is in the barrier of every later step), and uploaded
// (CAST waits for ready, OPT of its bucket came after D2H, which follows
// the H2D on the host-copy stream). The H2D's and TOPK's waits are not:
// without either, //optim:zenflow_exec_test fails.
// What else each buffer sees: the host moments only the update thread; the
// master also ReadMaster (Executor::Synchronize waits for the host-update
// stream, then for the update thread to run what it was given); the device
// shard H2D (unselected, host-copy), TOPK (selected, compute) and the
// gathers, ordered in the step by the graph's edges (H2D -> gather -> ...
// -> TOPK) and across steps by the barrier. The state below: the current
// selection is written by TOPK on a selection step and read by OPT (after
// TOPK via D2H in the step), by H2D (at e + 1 + d: with d > 0 in a later
// step than the selection at e + 1; with d = 0 before that step's TOPK,
// graph edge H2D -> TOPK on the device shard, so it sees the window's own
// selection) and never by the update, which reads a snapshot of its
// window's selection that OPT of step e wrote (parity slots; the slot is
// written again two windows later, after done of w).
// A selection step's TOPK waits for the host update of the window before
// it, so with select_interval == update_interval a window's update
// overlaps one step's forward and backward (d > 0); with select_interval
// a multiple of update_interval the windows not followed by a selection
// overlap d whole steps.
//
// Parameters that are not 2-D (norm gains) and the bucket's gaps take the
// host path whole (never selected). DeepSpeed's ZenFlow instead updates
// 1-D parameters with its selective optimizer on the GPU every step; here
// they are a tiny part of the model and the host path keeps one rule.
//
// The fp32 master of a newly selected column starts from the host master
// (after the host's last update, which a stale device shard may not show
// yet); a column leaving the selection hands its device fp32 value back to
// the host master at the selection step.
//
// Scratch outside the graph's buffers, per bucket: on the device the
// packed selected gradient (its capacity), two sets of slot tables
// (columns + 1 int32 per matrix: the current selection, an upload's) and
// on CUDA the column sums' chunk partials (ops::ColumnSquaresScratch of the
// largest matrix block);
// host staging (pinned on CUDA) of the norms, the packed master and both
// sets of tables; host vectors: two column selections per matrix (the
// window snapshots), the hand-back values (the selected elements). None of
// it is in StepGraph's byte counts (the packed gradient is at most a third
// of the topk state, the rest O(columns) or O(selected elements)).
//
// Device kinds. Every call goes through ops/zenflow_stream.h (CUDA kernels
// on a CUDA stream, host work on a host stream), Stream::MemcpyAsync /
// MemsetAsync and host work (Stream::Enqueue; cudaLaunchHostFunc on CUDA)
// for what only the host can do: the selection, the slot tables and the
// accumulation (the update on the update thread), which read and write
// host memory only (the
// master, moments, accumulators, host gradient and host shard are host
// buffers of the graph, pinned on CUDA). So the host runtime's tests run
// the same sequence of calls, in the same stream order, as a GPU. Not
// thread-safe by itself: the executor's graph edges and the events and
// values above order the calls and the host work.
#ifndef BATON_OPTIM_ZENFLOW_STATE_H_
#define BATON_OPTIM_ZENFLOW_STATE_H_

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "baton/ops/adamw.h"
#include "baton/ops/zenflow.h"
#include "baton/ops/zenflow_stream.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/layout.h"

// Not API: libbaton.so does not export the *_internal namespaces.
namespace baton::optim::zenflow_internal {

using scheduler::Bucket;
using scheduler::ParamSlot;

class ZenFlowState {
 public:
  // `shard_rank` of `shards`; `bucket` as in the layout (sharded layout).
  // `staleness` in [0, update_interval) (Policy::zenflow_staleness
  // resolved). Allocates its scratch on `device` (slot tables and the
  // packed gradient) and host staging (AllocateHostState: pinned on CUDA).
  static StatusOr<std::unique_ptr<ZenFlowState>> Create(
      Device& device, const Bucket& bucket, int shard_rank, int shards,
      const ops::ZenFlowConfig& config, int64_t staleness,
      const ops::AdamWConfig& adamw);

  int64_t update_interval() const { return cfg_.update_interval; }
  int64_t window(int64_t step) const { return step / cfg_.update_interval; }
  bool select_step(int64_t step) const { return step % cfg_.select_interval == 0; }
  bool update_step(int64_t step) const {
    return (step + 1) % cfg_.update_interval == 0;
  }
  // The window whose host update the H2D of `step` brings to the device:
  // kInitialUpload at step 0 (InitParameters' cast, every element), kNone
  // when there is none.
  static constexpr int64_t kInitialUpload = -1, kNone = -2;
  int64_t upload_window(int64_t step) const;

  // Enqueued on the node's stream (the device's memory, except where
  // noted); the host state they read or write (selections, hand-back
  // values) only in host work, in stream order.
  //
  // NORM: norms += column sums of squares of grad * scale.
  Status Norms(Stream& s, const void* grad, DataType t, float scale, float* norms);
  // TOPK, after Norms (and the all-reduce of `norms` on a selection step).
  // `topk`: the topk state buffer (capacity elements: packed master, then
  // moments; each matrix at a fixed offset, its PackedCapacity);
  // `host_master` (host memory): read on a selection step for newly
  // selected columns; `shard`: the device parameter shard (dtype `pt`),
  // selected elements written. On a selection step: norms and packed
  // master to the host, the host picks the columns and builds the new
  // packed master and slot tables, both back; then every step the
  // selected gradient is packed, AdamW runs on it, the new values are
  // scattered into the shard.
  Status Topk(Stream& s, int64_t step, const void* grad, DataType gt, float scale,
              float* norms, int64_t norms_numel, float* topk, int64_t topk_numel,
              const float* host_master, void* shard, DataType pt);
  // OPT (host work; host memory), after Topk of the same step (graph edge
  // TOPK -> D2H -> OPT): on a selection step the handed-back values into
  // `master`; the unselected gradient into `accum`, this window's
  // accumulator; on the window's last step the selection is kept for
  // Update and Apply.
  Status Accumulate(int64_t step, const void* host_grad, DataType t,
                    float scale, float* master, float* accum);
  // CAST of the window's last step (host work; host memory): AdamW on the
  // elements not selected during window `w` with accum / update_interval,
  // fused with their cast into `host_shard` (dtype pt); then accum = 0.
  // Elements selected during the window keep their old host shard value
  // (Apply never uploads them).
  Status Update(int64_t w, float* master, float* m1, float* m2, float* accum,
                void* host_shard, DataType pt);
  // H2D, after `stage` received the host shard: from window `w`'s update
  // (or kInitialUpload: every element goes into `shard`), the elements it
  // updated and not selected now go from `stage` into `shard`.
  Status Apply(Stream& s, int64_t w, const void* stage, void* shard, DataType pt);

 private:
  ZenFlowState(const Bucket& bucket, int shard_rank,
               const ops::ZenFlowConfig& config, int64_t staleness,
               const ops::AdamWConfig& adamw);
  // The host half of a selection step's TOPK (host work): reads the
  // staged norms and old packed master, writes the new ones and the slot
  // tables into the staging.
  Status Select(const float* host_master);
  ops::DeviceColumnSlots Slots(const int32_t* tables, size_t k) const;

  struct Matrix {
    ops::ColumnBlock block;  // this shard's part of the parameter
    int64_t pos = 0;         // first element of the block in the shard
    int64_t norms_at = 0;    // first column in the norms buffer
    int64_t k = 1;
    int64_t packed_at = 0;   // in the packed buffers (fixed)
    int64_t capacity = 0;    // ops::PackedCapacity(block, k)
    int64_t table_at = 0;    // in the slot-table buffers
    bool has_selection = false;
    ops::ColumnSelection sel, old_sel;
    int64_t packed_n = 0;                 // selected elements in the block
    std::vector<float> handoff;           // old selection's fp32 values
  };
  ops::ZenFlowConfig cfg_;
  int64_t staleness_ = 0;
  ops::AdamWConfig adamw_;
  // Per window parity: each matrix's selection during that window.
  std::vector<ops::ColumnSelection> window_sel_[2];
  int64_t shard_numel_ = 0;
  int64_t packed_total_ = 0;  // sum of the capacities
  int64_t tables_total_ = 0;  // int32 entries of one set of slot tables
  int64_t norms_total_ = 0;   // floats of the bucket's norms buffer
  std::vector<Matrix> mats_;
  std::vector<std::pair<int64_t, int64_t>> rest_;  // [lo, hi) host-only ranges
  // Device: the packed selected gradient, the current selection's slot
  // tables, the tables of an upload (window's selection + current).
  DeviceBuffer device_scratch_;
  float* packed_grad_ = nullptr;
  int32_t* tables_ = nullptr;
  int32_t* upload_tables_ = nullptr;
  float* squares_scratch_ = nullptr;  // NORM's chunk partials (CUDA; null: none)
  // Host staging (pinned on CUDA): the norms and the packed master on a
  // selection step, the tables of a selection and of an upload.
  DeviceBuffer host_scratch_;
  float* staged_norms_ = nullptr;
  float* staged_packed_ = nullptr;
  int32_t* staged_tables_ = nullptr;
  int32_t* staged_upload_tables_ = nullptr;
};

// The update thread (Executor, ZenFlow): one thread of the executor's own
// that runs the window-end host updates, so they never occupy a stream's
// host-work thread (on CUDA the context's one driver thread, rule 7 of
// runtime/device.h, which every other host item would queue behind). A
// posted task runs after every task posted before it. Thread-safe.
class ZenFlowUpdateThread {
 public:
  ZenFlowUpdateThread();
  ~ZenFlowUpdateThread();  // runs what was posted, then joins
  ZenFlowUpdateThread(const ZenFlowUpdateThread&) = delete;
  ZenFlowUpdateThread& operator=(const ZenFlowUpdateThread&) = delete;

  void Post(absl::AnyInvocable<void()> task);
  // Blocks until every task posted so far has run.
  void Drain();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<absl::AnyInvocable<void()>> tasks_;
  int64_t posted_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

// A Stream that only collects host work (and host-memory copies and
// fills) for later, in order: the update thread runs Take()'s items, so the
// observer, the trace and the delay injection of a ZenFlow CAST see where
// its update really runs. Wait / WaitValue / WriteValue return
// Unimplemented (its ordering is the task's); Synchronize returns OK.
class DeferredWork final : public Stream {
 public:
  explicit DeferredWork(std::string name) : name_(std::move(name)) {}
  DeviceKind kind() const override { return DeviceKind::kHost; }
  const std::string& name() const override { return name_; }
  Status Enqueue(HostWork work) override;
  Status Wait(Event& event) override;
  Status MemcpyAsync(void* dst, const void* src, size_t bytes) override;
  Status MemsetAsync(void* dst, int value, size_t bytes) override;
  Status Synchronize() override { return absl::OkStatus(); }
  void* native_handle() override { return nullptr; }
  std::vector<HostWork> Take();

 private:
  std::string name_;
  std::vector<HostWork> work_;
};

}  // namespace baton::optim::zenflow_internal

#endif  // BATON_OPTIM_ZENFLOW_STATE_H_
