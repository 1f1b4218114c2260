// ZenFlow's per-rank state and node work for the executor (host runtime).
// The step graph (step_graph.h, "ZenFlow") gives each bucket, after its
// last reduction:
//   NORM     (compute)       g = grad shard * grad_scale; per-column sums
//                            of g^2 of every 2-D parameter's elements in
//                            this shard into the bucket's norms buffer
//   AR-NORM  (reduce stream) on a selection step only: the norms summed
//                            over the shard group (a matrix's columns span
//                            several ranks' shards), the selection
//                            communication: one float per column
//   TOPK     (compute)       on a selection step: the old selection's fp32
//                            values are handed to the host, the top-k
//                            columns per matrix chosen, the selected
//                            path's state reset; every step: AdamW on the
//                            selected elements (packed in the bucket's
//                            topk state buffer) and their new values
//                            written into the device shard
//   D2H      (host copy)     the gradient shard to the host, every step
//   OPT      (host)          the handed-back values into the host master;
//                            the unselected gradient added into the host
//                            accumulator; at the end of an update window
//                            AdamW on the unselected elements with the
//                            accumulator / update_interval, accumulator = 0
//   CAST     (host)          at the end of an update window: master ->
//                            host parameter shard
//   H2D      (host copy)     at the start of the step after an update
//                            window: host shard -> staging buffer, then
//                            the unselected elements staging -> device
//                            shard (the selected ones are newer there)
// The algorithm is ops/zenflow.h's, checked against ops::ZenFlowReference
// (scheduler/zenflow_exec_test.cc) with staleness 0: the host update of a
// window reaches the device shard before the next step's first gather of
// the bucket, ordered by the graph's edges and the executor's step
// boundary (no host sleeps). Staleness > 0 is not implemented.
//
// Parameters that are not 2-D (norm gains) and the bucket's gaps take the
// host path whole (never selected). DeepSpeed's ZenFlow instead updates
// 1-D parameters with its selective optimizer on the GPU every step; here
// they are a tiny part of the model and the host path keeps one rule.
//
// The fp32 master of a newly selected column starts from the host master
// (where the host's last update left it, which is what the device shard
// holds for an unselected column); a column leaving the selection hands its
// device fp32 value back to the host master at the selection step.
//
// Scratch outside the graph's buffers: two fp32 vectors of the shard per
// bucket (the scaled gradient on each side), not in StepGraph::host_bytes.
//
// Host runtime only: every buffer is addressable host memory, and the
// work runs as host work in stream order. Not thread-safe by itself: the
// executor's graph edges order the calls (see each method).
#ifndef BATON_SCHEDULER_ZENFLOW_EXEC_H_
#define BATON_SCHEDULER_ZENFLOW_EXEC_H_

#include <cstdint>
#include <vector>

#include "baton/ops/adamw.h"
#include "baton/ops/zenflow.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/layout.h"

namespace baton::scheduler {

// Elements of the topk state per bucket and shard position, as the graph
// sizes it: for each 2-D parameter, min(elements in the shard, k x the rows
// the shard touches), summed, maximised over shard positions; times 3
// (master, moment1, moment2, fp32). At least 3.
int64_t ZenFlowTopkStateNumel(const Bucket& bucket, int shards, double topk_ratio);
// Floats of the bucket's norms buffer: the column counts of its 2-D
// parameters, summed (the same on every rank). At least 1.
int64_t ZenFlowNormsNumel(const Bucket& bucket);

class ZenFlowState {
 public:
  // `shard_rank` of `shards`; `bucket` as in the layout (sharded layout).
  ZenFlowState(const Bucket& bucket, int shard_rank, int shards,
               const ops::ZenFlowConfig& config, const ops::AdamWConfig& adamw);

  bool select_step(int64_t step) const { return step % cfg_.select_interval == 0; }
  bool update_step(int64_t step) const {
    return (step + 1) % cfg_.update_interval == 0;
  }
  // The step whose first gather sees a host update (the window before it
  // ended): step % update_interval == 0, step 0 included (the initial cast).
  bool upload_step(int64_t step) const { return step % cfg_.update_interval == 0; }

  // NORM: scaled_ = grad * scale (f32); norms += column sums of squares.
  Status Norms(const void* grad, DataType t, float scale, float* norms);
  // TOPK, after Norms (and the all-reduce of `norms` on a selection step).
  // `topk`: the topk state buffer (capacity elements), `host_master`: read
  // on a selection step for newly selected columns, `shard`: the device
  // parameter shard (dtype `pt`), selected elements written.
  Status Topk(int64_t step, float* norms, int64_t norms_numel, float* topk,
              int64_t topk_numel, const float* host_master, void* shard,
              DataType pt);
  // OPT, after Topk of the same step (graph edge TOPK -> D2H -> OPT).
  Status HostUpdate(int64_t step, const void* host_grad, DataType t,
                    float scale, float* master, float* m1, float* m2,
                    float* accum);
  // H2D: `stage` holds the host shard (dtype pt); the unselected elements
  // (all, before the first selection) go into `shard`.
  void Apply(const void* stage, void* shard, DataType pt) const;

 private:
  struct Matrix {
    ops::ColumnBlock block;  // this shard's part of the parameter
    int64_t pos = 0;         // first element of the block in the shard
    int64_t norms_at = 0;    // first column in the norms buffer
    int64_t k = 1;
    bool has_selection = false;
    ops::ColumnSelection sel, old_sel;
    int64_t packed_at = 0, packed_n = 0;  // in the topk state
    std::vector<float> handoff;           // old selection's fp32 values
  };
  ops::ZenFlowConfig cfg_;
  ops::AdamWConfig adamw_;
  int64_t shard_numel_ = 0;
  std::vector<Matrix> mats_;
  std::vector<std::pair<int64_t, int64_t>> rest_;  // [lo, hi) host-only ranges
  std::vector<float> scaled_, host_scaled_, packed_grad_, scratch_;
};

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_ZENFLOW_EXEC_H_
