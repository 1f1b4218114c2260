#include "baton/ops/zenflow_stream.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"
#include "baton/ops/zenflow_kernels.h"
#include "baton/runtime/stream_ops.h"

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

// f(i, packed index or -1) for the block's elements in order, the host
// form of the kernels' slot-table walk: the packed index counts the
// selected elements before i. The host work of the ops below runs through
// RunOnStream without FTZ/DAZ (unlike ops/op_util.h's OnStream): the host
// ops' arithmetic.
template <typename F>
void ForEachElement(const ColumnBlock& b, const int32_t* table, F f) {
  int64_t c = b.first % b.cols, k = 0;
  for (int64_t i = 0; i < b.n; ++i) {
    f(i, table[c] >= 0 ? k++ : int64_t{-1});
    if (++c == b.cols) c = 0;
  }
}

}  // namespace

Status WriteColumnSlotTable(const ColumnSelection& selection, int32_t* table) {
  return WriteColumnSlotTable(selection, selection, table);
}

Status WriteColumnSlotTable(const ColumnSelection& a, const ColumnSelection& b,
                            int32_t* table) {
  constexpr const char* kOp = "WriteColumnSlotTable";
  if (a.cols() != b.cols()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": the selections have ", a.cols(), " and ", b.cols(), " columns"));
  }
  BATON_RETURN_IF_ERROR(CheckCols(kOp, a.cols()));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"table", table}}));
  int32_t prefix = 0;
  for (int64_t c = 0; c < a.cols(); ++c) {
    table[c] = a.selected(c) || b.selected(c) ? prefix++ : -1 - prefix;
  }
  table[a.cols()] = prefix;
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

int64_t ColumnSquaresScratch(const ColumnBlock& b) {
  if (b.n <= 0 || b.cols < 1 || b.first < 0) return 0;
  const int64_t rows = ops_internal::ZenFlowVirtualRows(b.first % b.cols, b.n, b.cols);
  const int64_t chunks =
      (rows + ops_internal::kZenFlowRowsPerChunk - 1) / ops_internal::kZenFlowRowsPerChunk;
  return chunks > 1 ? chunks * b.cols : 0;
}

Status AccumulateColumnSquares(Stream& stream, const void* grad, DataType t,
                               const ColumnBlock& b, float scale, float* norms,
                               float* scratch) {
  constexpr const char* kOp = "AccumulateColumnSquares";
  BATON_RETURN_IF_ERROR(CheckColumnBlock(kOp, b));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "grad dtype", t));
  BATON_RETURN_IF_ERROR(CheckScale(kOp, scale));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"grad", grad}, {"norms", norms}}));
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  auto host = [=]() {
    int64_t c = c0;
    for (int64_t i = 0; i < b.n; ++i) {
      const float v = LoadF(grad, t, i) * scale;
      norms[c] += v * v;
      if (++c == b.cols) c = 0;
    }
    return absl::OkStatus();
  };
  return RunOnStream(stream, kOp, host, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowColumnSquares(
                      grad, static_cast<int>(t), c0, b.n, b.cols, scale, norms, scratch, st);
                }));
}

Status SplitGradient(Stream& stream, const void* grad, DataType t, const ColumnBlock& b,
                     float scale, const DeviceColumnSlots& s, float* selected, float* rest) {
  constexpr const char* kOp = "SplitGradient";
  BATON_RETURN_IF_ERROR(CheckSlots(kOp, b, s));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "grad dtype", t));
  BATON_RETURN_IF_ERROR(CheckScale(kOp, scale));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"grad", grad}, {"selected", selected}}));
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  [[maybe_unused]] const int32_t* table = s.table;
  auto host = [=]() {
    ForEachElement(b, table, [&](int64_t i, int64_t k) {
      if (k < 0 && rest == nullptr) return;
      const float v = LoadF(grad, t, i) * scale;
      if (k >= 0) {
        selected[k] = v;
      } else {
        rest[i] += v;
      }
    });
    return absl::OkStatus();
  };
  return RunOnStream(stream, kOp, host, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowSplit(grad, static_cast<int>(t), c0,
                                                          b.n, b.cols, table, scale,
                                                          selected, rest, st);
                }));
}

Status GatherColumns(Stream& stream, const float* src, const ColumnBlock& b,
                     const DeviceColumnSlots& s, float* packed) {
  constexpr const char* kOp = "GatherColumns";
  BATON_RETURN_IF_ERROR(CheckSlots(kOp, b, s));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"src", src}, {"packed", packed}}));
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  [[maybe_unused]] const int32_t* table = s.table;
  auto host = [=]() {
    ForEachElement(b, table, [&](int64_t i, int64_t k) {
      if (k >= 0) packed[k] = src[i];
    });
    return absl::OkStatus();
  };
  return RunOnStream(stream, kOp, host, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowGather(src, c0, b.n, b.cols, table,
                                                           packed, st);
                }));
}

Status ScatterColumns(Stream& stream, const float* packed, const ColumnBlock& b,
                      const DeviceColumnSlots& s, void* dst, DataType dst_dtype) {
  constexpr const char* kOp = "ScatterColumns";
  BATON_RETURN_IF_ERROR(CheckSlots(kOp, b, s));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "dst dtype", dst_dtype));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"packed", packed}, {"dst", dst}}));
  [[maybe_unused]] const int64_t c0 = b.first % b.cols;
  [[maybe_unused]] const int32_t* table = s.table;
  auto host = [=]() {
    ForEachElement(b, table, [&](int64_t i, int64_t k) {
      if (k >= 0) StoreF(dst, dst_dtype, i, packed[k]);
    });
    return absl::OkStatus();
  };
  return RunOnStream(stream, kOp, host, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowScatter(packed, c0, b.n, b.cols, table,
                                                            dst, static_cast<int>(dst_dtype),
                                                            st);
                }));
}

Status CopyColumns(Stream& stream, const void* src, void* dst, DataType t,
                   const ColumnBlock& b, const DeviceColumnSlots& s, WhichColumns which) {
  constexpr const char* kOp = "CopyColumns";
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
  auto host = [=]() {
    const size_t es = DataTypeSize(t);
    const char* from = static_cast<const char*>(src);
    char* to = static_cast<char*>(dst);
    ForEachElement(b, table, [&](int64_t i, int64_t k) {
      if ((k >= 0) == want_selected) std::memcpy(to + i * es, from + i * es, es);
    });
    return absl::OkStatus();
  };
  return RunOnStream(stream, kOp, host, BATON_OPS_CUDA([=](void* st) {
                  return ops_internal::LaunchZenFlowCopy(src, dst, static_cast<int>(t), c0,
                                                         b.n, b.cols, table, want_selected,
                                                         st);
                }));
}

}  // namespace baton::ops
