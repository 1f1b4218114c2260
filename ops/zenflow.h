// ZenFlow's importance-aware split of a 2-D weight's update (DeepSpeed
// ZenFlow, "stall-free offloading"): the most important columns are updated
// on the device every step, the rest are accumulated on the host and
// updated there every update_interval steps, while the device runs on.
//
// Layout. A weight is a row-major [rows x cols] matrix; column j is the
// elements {r * cols + j}. The ops below work on a ColumnBlock, any
// contiguous range [first, first + n) of the flattened matrix (a rank's
// shard need not start or end on a row), element e being in column
// e % cols.
//
// The algorithm, per weight, at step s = 0, 1, ... with gradient G (what
// ops/zenflow_reference.h implements plainly and an executor must match):
//   1. proxy:   norms[j] += sum_r G[r, j]^2          (AccumulateColumnSquares;
//               ranks holding parts of a column add their partial sums)
//   2. select:  when s % select_interval == 0: the host master takes the
//               device's values of the previously selected columns; S =
//               the k = max(1, floor(topk_ratio * cols)) columns with the
//               largest norms (SelectTopColumns); columns new to S start
//               on the device from the host master (after any host update
//               of step 5 before this step); norms = 0; the selected
//               path's moments are zeroed and its step count restarts.
//   3. device:  AdamW on the columns in S with G[:, S], the selected
//               path's own moments, at its own 1-based step count
//               (SplitGradient packs G[:, S]; Gather/ScatterColumns move
//               the selected weights in and out of packed form).
//   4. host:    A[:, not S] += G[:, not S]                  (SplitGradient)
//   5. update:  when (s + 1) % update_interval == 0: AdamW on the host
//               master's unselected columns with gradient A / update_interval
//               and the host moments, at the host's own 1-based count of
//               updates (HostAdamWSkipping); A = 0. The updated columns
//               that are not selected at that moment reach the device
//               weights before the forward of step s + 1 + d, d = the
//               staleness (0 <= d < update_interval): the host update runs
//               while the device computes steps s + 1 .. s + d on older
//               weights. A selection at step s + 1 happens after that
//               step's forward and backward and takes its newly selected
//               columns from the host master after the update (step 2); a
//               column leaving the selection then is not one the update
//               changed, so the late copy never overwrites it.
// select_interval must be a multiple of update_interval, so a selection
// never falls inside an accumulation window.
//
// Where this differs from DeepSpeed's implementation (read, not copied):
// DeepSpeed's proxy is the per-column sum of |G| of the one step at a
// selection boundary, here it is the sum of squares accumulated over the
// select interval; DeepSpeed zeroes the selective optimizer's moments at a
// reselection but keeps its step count, here the count restarts so the
// bias correction matches the zeroed moments; DeepSpeed's "auto" intervals
// are not here (they are policy, resolved before these ops run).
//
// All functions are synchronous host code on host memory, single-threaded,
// deterministic, and check their arguments first (InvalidArgument naming
// the argument; nothing is written then). Results do not depend on how a
// matrix is cut into blocks, except that column sums add in block order.
#ifndef BATON_OPS_ZENFLOW_H_
#define BATON_OPS_ZENFLOW_H_

#include <cstdint>
#include <vector>

#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct ZenFlowConfig {
  double topk_ratio = 0.05;     // in (0, 1]
  int64_t select_interval = 4;  // >= 1, a multiple of update_interval
  int64_t update_interval = 4;  // >= 1
};

// InvalidArgument naming the knob: topk_ratio outside (0, 1] (or NaN),
// select_interval or update_interval < 1, select_interval not a multiple of
// update_interval.
Status CheckZenFlowConfig(const ZenFlowConfig& config);

// Columns selected out of `cols`: max(1, floor(topk_ratio * cols)), at most
// cols. InvalidArgument for cols < 1 or a topk_ratio outside (0, 1].
StatusOr<int64_t> ZenFlowSelectCount(double topk_ratio, int64_t cols);

// Elements [first, first + n) of a row-major matrix with `cols` columns.
struct ColumnBlock {
  int64_t first = 0;
  int64_t n = 0;
  int64_t cols = 1;
};

// InvalidArgument unless first >= 0, n >= 0, cols >= 1.
Status CheckColumnBlock(const char* op, const ColumnBlock& block);

// A set of selected columns of a matrix with cols() columns. Copyable.
class ColumnSelection {
 public:
  // `columns`: strictly increasing, each in [0, cols). InvalidArgument
  // otherwise, or for cols < 1.
  static StatusOr<ColumnSelection> Create(int64_t cols,
                                          std::vector<int64_t> columns);

  int64_t cols() const { return static_cast<int64_t>(mask_.size()); }
  // Increasing column indices.
  const std::vector<int64_t>& columns() const { return columns_; }
  bool selected(int64_t column) const { return mask_[column] != 0; }
  // cols() bytes, 1 for a selected column: HostAdamWSkipping's skip_column.
  const uint8_t* mask() const { return mask_.data(); }
  // Number of elements of `block` in selected columns.
  int64_t CountIn(const ColumnBlock& block) const;

 private:
  std::vector<int64_t> columns_;
  std::vector<uint8_t> mask_;
};

// norms[e % cols] += grad[e]^2 for every element e of the block (f32
// arithmetic, in element order). grad holds block.n elements of dtype t
// (f32 or bf16); norms holds block.cols floats.
Status AccumulateColumnSquares(const void* grad, DataType t,
                               const ColumnBlock& block, float* norms);

// The k columns with the largest norms, returned in increasing column
// order. Ties go to the lower column index; NaN ranks above every number
// (as torch.topk does). InvalidArgument for k outside [1, cols] or null
// norms.
StatusOr<ColumnSelection> SelectTopColumns(const float* norms, int64_t cols,
                                           int64_t k);

// Splits a block's gradient: the elements in selected columns are written,
// in element order, to `selected` (selection.CountIn(block) floats, =); the
// others are added into `rest` (block.n floats, +=; elements of selected
// columns are left as they are). selection.cols() must equal block.cols.
Status SplitGradient(const void* grad, DataType t, const ColumnBlock& block,
                     const ColumnSelection& selection, float* selected,
                     float* rest);

// packed[k] = src[e] for the block's selected elements e in order (=).
Status GatherColumns(const float* src, const ColumnBlock& block,
                     const ColumnSelection& selection, float* packed);
// dst[e] = packed[k], the inverse of GatherColumns (=).
Status ScatterColumns(const float* packed, const ColumnBlock& block,
                      const ColumnSelection& selection, float* dst);

// dst[e] = src[e] for the block's elements in selected columns (kSelected)
// or in the others (kUnselected); the rest of dst is left as it is.
enum class WhichColumns { kSelected, kUnselected };
Status CopyColumns(const float* src, float* dst, const ColumnBlock& block,
                   const ColumnSelection& selection, WhichColumns which);

}  // namespace baton::ops

#endif  // BATON_OPS_ZENFLOW_H_
