#include "baton/ops/zenflow.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

namespace baton::ops {
namespace {

// Calls fn(e - block.first, selected(e)) for every element e of the block.
template <typename Fn>
void ForEach(const ColumnBlock& b, const ColumnSelection& s, Fn&& fn) {
  int64_t col = b.n > 0 ? b.first % b.cols : 0;
  const uint8_t* mask = s.mask();
  for (int64_t i = 0; i < b.n; ++i) {
    fn(i, mask[col] != 0);
    if (++col == b.cols) col = 0;
  }
}

Status CheckSelection(const char* op, const ColumnBlock& b,
                      const ColumnSelection& s) {
  BATON_RETURN_IF_ERROR(CheckColumnBlock(op, b));
  if (s.cols() != b.cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the selection has ", s.cols(), " columns, the block ", b.cols));
  }
  return absl::OkStatus();
}

}  // namespace

Status CheckZenFlowConfig(const ZenFlowConfig& c) {
  if (!(c.topk_ratio > 0.0 && c.topk_ratio <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zenflow topk_ratio must be in (0, 1], got ", c.topk_ratio));
  }
  if (c.update_interval < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zenflow update_interval must be at least 1, got ", c.update_interval));
  }
  if (c.select_interval < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zenflow select_interval must be at least 1, got ", c.select_interval));
  }
  if (c.select_interval % c.update_interval != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zenflow select_interval (", c.select_interval,
        ") must be a multiple of update_interval (", c.update_interval,
        "): a selection may not fall inside an accumulation window"));
  }
  return absl::OkStatus();
}

StatusOr<int64_t> ZenFlowSelectCount(double topk_ratio, int64_t cols) {
  if (!(topk_ratio > 0.0 && topk_ratio <= 1.0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zenflow topk_ratio must be in (0, 1], got ", topk_ratio));
  }
  if (cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ZenFlowSelectCount: cols must be positive, got ", cols));
  }
  const auto k = static_cast<int64_t>(std::floor(topk_ratio * static_cast<double>(cols)));
  return std::min(cols, std::max<int64_t>(1, k));
}

Status CheckColumnBlock(const char* op, const ColumnBlock& b) {
  if (b.first < 0 || b.n < 0 || b.cols < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bad block (first ", b.first, ", n ", b.n, ", cols ", b.cols,
        "): need first >= 0, n >= 0, cols >= 1"));
  }
  return absl::OkStatus();
}

StatusOr<ColumnSelection> ColumnSelection::Create(int64_t cols,
                                                  std::vector<int64_t> columns) {
  if (cols < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("ColumnSelection: cols must be positive, got ", cols));
  }
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i] < 0 || columns[i] >= cols || (i > 0 && columns[i] <= columns[i - 1])) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ColumnSelection: columns must increase strictly within [0, ", cols,
          "), got ", columns[i], " at position ", i));
    }
  }
  ColumnSelection s;
  s.mask_.assign(cols, 0);
  for (int64_t c : columns) s.mask_[c] = 1;
  s.columns_ = std::move(columns);
  return s;
}

int64_t ColumnSelection::CountIn(const ColumnBlock& b) const {
  if (b.n <= 0 || b.cols != cols()) return 0;
  const int64_t per_row = static_cast<int64_t>(columns_.size());
  // Whole rows, then the partial pieces at either end.
  const int64_t start_col = b.first % b.cols;
  int64_t count = 0, i = 0;
  int64_t col = start_col;
  while (i < b.n && col != 0) {
    count += mask_[col];
    ++i;
    if (++col == b.cols) col = 0;
  }
  const int64_t rows = (b.n - i) / b.cols;
  count += rows * per_row;
  i += rows * b.cols;
  for (col = 0; i < b.n; ++i, ++col) count += mask_[col];
  return count;
}

Status AccumulateColumnSquares(const void* grad, DataType t,
                               const ColumnBlock& b, float* norms) {
  constexpr const char* kOp = "AccumulateColumnSquares";
  BATON_RETURN_IF_ERROR(CheckColumnBlock(kOp, b));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "grad dtype", t));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"grad", grad}, {"norms", norms}}));
  int64_t col = b.first % b.cols;
  int64_t i = 0;
  // Row by row so that the inner loop runs over contiguous columns.
  while (i < b.n) {
    const int64_t len = std::min(b.n - i, b.cols - col);
    if (t == DataType::kF32) {
      const float* __restrict__ g = static_cast<const float*>(grad) + i;
      float* __restrict__ out = norms + col;
      for (int64_t j = 0; j < len; ++j) out[j] += g[j] * g[j];
    } else {
      const uint16_t* __restrict__ g = static_cast<const uint16_t*>(grad) + i;
      float* __restrict__ out = norms + col;
      for (int64_t j = 0; j < len; ++j) {
        const float x = Bf16ToFloat(g[j]);
        out[j] += x * x;
      }
    }
    i += len;
    col = 0;
  }
  return absl::OkStatus();
}

StatusOr<ColumnSelection> SelectTopColumns(const float* norms, int64_t cols,
                                           int64_t k) {
  constexpr const char* kOp = "SelectTopColumns";
  if (cols < 1 || k < 1 || k > cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": need 1 <= k <= cols, got k ", k, " and cols ", cols));
  }
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"norms", norms}}));
  std::vector<int64_t> order(cols);
  std::iota(order.begin(), order.end(), 0);
  // A strict total order: NaN first, then larger norms, then lower index.
  auto before = [norms](int64_t a, int64_t b) {
    const bool na = std::isnan(norms[a]), nb = std::isnan(norms[b]);
    if (na != nb) return na;
    if (!na && norms[a] != norms[b]) return norms[a] > norms[b];
    return a < b;
  };
  std::nth_element(order.begin(), order.begin() + (k - 1), order.end(), before);
  order.resize(k);
  std::sort(order.begin(), order.end());
  return ColumnSelection::Create(cols, std::move(order));
}

Status SplitGradient(const void* grad, DataType t, const ColumnBlock& b,
                     const ColumnSelection& s, float* selected, float* rest) {
  constexpr const char* kOp = "SplitGradient";
  BATON_RETURN_IF_ERROR(CheckSelection(kOp, b, s));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "grad dtype", t));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"grad", grad}, {"rest", rest}}));
  if (s.CountIn(b) > 0) BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"selected", selected}}));
  int64_t k = 0;
  ForEach(b, s, [&](int64_t i, bool sel) {
    const float g = LoadF(grad, t, i);
    if (sel) {
      selected[k++] = g;
    } else {
      rest[i] += g;
    }
  });
  return absl::OkStatus();
}

Status GatherColumns(const float* src, const ColumnBlock& b,
                     const ColumnSelection& s, float* packed) {
  constexpr const char* kOp = "GatherColumns";
  BATON_RETURN_IF_ERROR(CheckSelection(kOp, b, s));
  if (s.CountIn(b) == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"src", src}, {"packed", packed}}));
  int64_t k = 0;
  ForEach(b, s, [&](int64_t i, bool sel) {
    if (sel) packed[k++] = src[i];
  });
  return absl::OkStatus();
}

Status ScatterColumns(const float* packed, const ColumnBlock& b,
                      const ColumnSelection& s, float* dst) {
  constexpr const char* kOp = "ScatterColumns";
  BATON_RETURN_IF_ERROR(CheckSelection(kOp, b, s));
  if (s.CountIn(b) == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"packed", packed}, {"dst", dst}}));
  int64_t k = 0;
  ForEach(b, s, [&](int64_t i, bool sel) {
    if (sel) dst[i] = packed[k++];
  });
  return absl::OkStatus();
}

Status CopyColumns(const float* src, float* dst, const ColumnBlock& b,
                   const ColumnSelection& s, WhichColumns which) {
  constexpr const char* kOp = "CopyColumns";
  BATON_RETURN_IF_ERROR(CheckSelection(kOp, b, s));
  if (b.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"src", src}, {"dst", dst}}));
  const bool want = which == WhichColumns::kSelected;
  ForEach(b, s, [&](int64_t i, bool sel) {
    if (sel == want) dst[i] = src[i];
  });
  return absl::OkStatus();
}

}  // namespace baton::ops
