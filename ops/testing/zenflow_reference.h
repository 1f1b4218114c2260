// A plain reference of ZenFlow's algorithm (ops/zenflow.h) over whole
// matrices, for tests: an executor running ZenFlow (device path, host path,
// staleness) must produce the same weights, step by step. Test-only.
//
// Written independently of the ops: plain loops over a full [rows x cols]
// matrix, no blocks, no packing, no threads. The AdamW arithmetic is
// AdamWStep's (ops/adamw.h) float operation for float operation, run with
// subnormals flushed (FTZ/DAZ) as AdamWStep's host work is, so an executor
// that uses AdamWStep / HostAdamW on the host runtime matches it bit for
// bit: the device path with grad_scale 1, the host path with grad_scale
// 1.0f / float(update_interval) on the accumulated sum. The proxy and the
// accumulation are plain float adds without FTZ/DAZ, as the ops do them. Column norms add in row order (an executor that adds per-shard
// partial sums in another order may round differently; the selection then
// changes only between columns whose norms tie to rounding).
//
// Not thread-safe; copyable.
#ifndef BATON_OPS_TESTING_ZENFLOW_REFERENCE_H_
#define BATON_OPS_TESTING_ZENFLOW_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "baton/ops/adamw.h"
#include "baton/ops/zenflow.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct ZenFlowReferenceOptions {
  int64_t rows = 1;
  int64_t cols = 1;
  AdamWConfig adamw;
  ZenFlowConfig zenflow;
  // Steps the forward runs on before a host update reaches the device
  // weights: 0 (synchronous) .. update_interval - 1. The update of the
  // window ending at step s reaches them before the forward of step
  // s + 1 + staleness, in the columns it updated that are not selected
  // then; a selection at step s + 1 (after that step's forward) starts its
  // newly selected columns from the host master, the update included.
  int64_t staleness = 0;
};

class ZenFlowReference {
 public:
  // InvalidArgument for rows or cols < 1, weights not rows * cols long, a
  // bad zenflow config (CheckZenFlowConfig) or staleness outside
  // [0, update_interval).
  static StatusOr<ZenFlowReference> Create(const ZenFlowReferenceOptions& options,
                                           std::vector<float> weights);

  // One step, s = step(), with `grad` (rows * cols) computed at weights().
  // InvalidArgument for a wrong size.
  Status Step(const std::vector<float>& grad);

  // The weights the forward of step step() sees.
  const std::vector<float>& weights() const { return device_; }
  // The host master (fp32) and moments.
  const std::vector<float>& host_master() const { return host_; }
  // Selected columns, increasing (empty before the first step).
  const std::vector<int64_t>& selected() const { return selected_; }
  // Steps done so far.
  int64_t step() const { return step_; }
  // Host updates done so far.
  int64_t host_updates() const { return host_step_; }

 private:
  ZenFlowReference() = default;
  void AdamW(float* w, float* m, float* v, float g, int64_t t) const;

  ZenFlowReferenceOptions o_;
  int64_t k_ = 1;
  std::vector<float> device_, host_, host_m_, host_v_, accum_, norms_;
  std::vector<float> sel_m_, sel_v_;  // [rows x cols], used in selected columns
  std::vector<int64_t> selected_;
  std::vector<bool> is_selected_;
  int64_t step_ = 0, sel_step_ = 0, host_step_ = 0;
  // A host update on its way to the device: the weights it carries, the
  // columns it updated, and the first step whose forward sees it.
  bool pending_ = false;
  std::vector<float> pending_w_;
  std::vector<bool> pending_cols_;
  int64_t pending_at_ = 0;
};

}  // namespace baton::ops

#endif  // BATON_OPS_TESTING_ZENFLOW_REFERENCE_H_
