#include "baton/ops/zenflow_cuda.h"

#include <cmath>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"
#include "baton/runtime/stream_ops.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/zenflow_kernels.h"
#endif

namespace baton::ops {
namespace {

Status CheckCols(const char* op, int64_t cols) {
  if (cols > kMaxSlotTableCols) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": cols ", cols, " exceeds the slot table's int32 range (at most ",
        kMaxSlotTableCols, ")"));
  }
  return absl::OkStatus();
}

Status CheckScale(const char* op, float scale) {
  if (!std::isfinite(scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": scale must be finite, got ", scale));
  }
  return absl::OkStatus();
}

Status CheckSlots(const char* op, const ColumnBlock& b, const DeviceColumnSlots& s) {
  BATON_RETURN_IF_ERROR(CheckColumnBlock(op, b));
  BATON_RETURN_IF_ERROR(CheckCols(op, b.cols));
  if (s.cols != b.cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the slot table has ", s.cols, " columns, the block ", b.cols));
  }
  return CheckNotNull(op, {{"slot table", s.table}});
}

// After the checks: FailedPrecondition on a host stream (the host ops are
// ops/zenflow.h's), Unimplemented without CUDA, else the launch; a CUDA
// error becomes Internal naming the op (RunOnStream).
Status Launch(Stream& stream, const char* op, std::function<int(void*)> cuda) {
  if (stream.kind() != DeviceKind::kCuda) {
    return absl::FailedPreconditionError(absl::StrCat(
        op, ": needs a CUDA stream, got a ", DeviceKindName(stream.kind()),
        " stream (the host ops are ops/zenflow.h's)"));
  }
  return RunOnStream(
      stream, op, []() { return absl::OkStatus(); }, std::move(cuda));
}

}  // namespace

Status WriteColumnSlotTable(const ColumnSelection& selection, int32_t* table) {
  constexpr const char* kOp = "WriteColumnSlotTable";
  BATON_RETURN_IF_ERROR(CheckCols(kOp, selection.cols()));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"table", table}}));
  int32_t prefix = 0;
  for (int64_t c = 0; c < selection.cols(); ++c) {
    if (selection.selected(c)) {
      table[c] = prefix++;
    } else {
      table[c] = -1 - prefix;
    }
  }
  table[selection.cols()] = prefix;
  return absl::OkStatus();
}

StatusOr<std::vector<int32_t>> ColumnSlotTable(const ColumnSelection& selection) {
  BATON_RETURN_IF_ERROR(CheckCols("ColumnSlotTable", selection.cols()));
  std::vector<int32_t> table(ColumnSlotTableSize(selection.cols()));
  BATON_RETURN_IF_ERROR(WriteColumnSlotTable(selection, table.data()));
  return table;
}

int64_t PackedCapacity(const ColumnBlock& b, int64_t k) {
  if (b.n <= 0 || b.cols < 1 || k <= 0 || b.first < 0) return 0;
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  const int64_t rows = (c0 + b.n + b.cols - 1) / b.cols;
  const int64_t per_rows = k >= b.cols ? b.n : k * rows;
  return per_rows < b.n ? per_rows : b.n;
}

Status AccumulateColumnSquaresCuda(Stream& stream, const void* grad, DataType t,
                                   const ColumnBlock& b, float scale, float* norms) {
  constexpr const char* kOp = "AccumulateColumnSquaresCuda";
  BATON_RETURN_IF_ERROR(CheckColumnBlock(kOp, b));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "grad dtype", t));
  BATON_RETURN_IF_ERROR(CheckScale(kOp, scale));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"grad", grad}, {"norms", norms}}));
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  return Launch(stream, kOp, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowColumnSquares(
                      grad, static_cast<int>(t), c0, b.n, b.cols, scale, norms, st);
                }));
}

Status SplitGradientCuda(Stream& stream, const void* grad, DataType t,
                         const ColumnBlock& b, float scale, const DeviceColumnSlots& s,
                         float* selected, float* rest) {
  constexpr const char* kOp = "SplitGradientCuda";
  BATON_RETURN_IF_ERROR(CheckSlots(kOp, b, s));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "grad dtype", t));
  BATON_RETURN_IF_ERROR(CheckScale(kOp, scale));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(
      CheckNotNull(kOp, {{"grad", grad}, {"selected", selected}, {"rest", rest}}));
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  [[maybe_unused]] const int32_t* table = s.table;
  return Launch(stream, kOp, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowSplit(grad, static_cast<int>(t), c0,
                                                          b.n, b.cols, table, scale,
                                                          selected, rest, st);
                }));
}

Status GatherColumnsCuda(Stream& stream, const float* src, const ColumnBlock& b,
                         const DeviceColumnSlots& s, float* packed) {
  constexpr const char* kOp = "GatherColumnsCuda";
  BATON_RETURN_IF_ERROR(CheckSlots(kOp, b, s));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"src", src}, {"packed", packed}}));
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  [[maybe_unused]] const int32_t* table = s.table;
  return Launch(stream, kOp, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowGather(src, c0, b.n, b.cols, table,
                                                           packed, st);
                }));
}

Status ScatterColumnsCuda(Stream& stream, const float* packed, const ColumnBlock& b,
                          const DeviceColumnSlots& s, void* dst, DataType dst_dtype) {
  constexpr const char* kOp = "ScatterColumnsCuda";
  BATON_RETURN_IF_ERROR(CheckSlots(kOp, b, s));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "dst dtype", dst_dtype));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"packed", packed}, {"dst", dst}}));
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  [[maybe_unused]] const int32_t* table = s.table;
  return Launch(stream, kOp, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowScatter(packed, c0, b.n, b.cols, table,
                                                            dst, static_cast<int>(dst_dtype),
                                                            st);
                }));
}

Status CopyColumnsCuda(Stream& stream, const void* src, void* dst, DataType t,
                       const ColumnBlock& b, const DeviceColumnSlots& s,
                       WhichColumns which) {
  constexpr const char* kOp = "CopyColumnsCuda";
  BATON_RETURN_IF_ERROR(CheckSlots(kOp, b, s));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "dtype", t));
  if (which != WhichColumns::kSelected && which != WhichColumns::kUnselected) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": which must be kSelected or kUnselected, got ", static_cast<int>(which)));
  }
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"src", src}, {"dst", dst}}));
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  [[maybe_unused]] const int32_t* table = s.table;
  [[maybe_unused]] const bool want_selected = which == WhichColumns::kSelected;
  return Launch(stream, kOp, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowCopy(src, dst, static_cast<int>(t), c0,
                                                         b.n, b.cols, table, want_selected,
                                                         st);
                }));
}

}  // namespace baton::ops
