#include "baton/scheduler/zenflow_buffers.h"

#include <algorithm>
#include <cmath>

namespace baton::scheduler {
namespace {

bool IsMatrix(const ParamSlot& p) { return p.shape.size() == 2 && p.numel > 0; }

// Elements of the selected-state bound of `p` in the shard [lo, hi).
int64_t Bound(const ParamSlot& p, int64_t lo, int64_t hi, double ratio) {
  const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
  if (a >= b) return 0;
  const int64_t cols = p.shape[1];
  const int64_t rows = (b - 1 - p.offset) / cols - (a - p.offset) / cols + 1;
  return std::min(b - a, ZenFlowSelectedColumns(ratio, cols) * rows);
}

}  // namespace

int64_t ZenFlowSelectedColumns(double topk_ratio, int64_t cols) {
  const auto k = static_cast<int64_t>(std::floor(topk_ratio * static_cast<double>(cols)));
  return std::min(cols, std::max<int64_t>(k, 1));
}

int64_t ZenFlowTopkStateNumel(const Bucket& bk, int shards, double ratio) {
  int64_t most = 0;
  for (int r = 0; r < shards; ++r) {
    const int64_t lo = r * bk.shard_numel, hi = lo + bk.shard_numel;
    int64_t sum = 0;
    for (const ParamSlot& p : bk.params) {
      if (IsMatrix(p)) sum += Bound(p, lo, hi, ratio);
    }
    most = std::max(most, sum);
  }
  return 3 * std::max<int64_t>(most, 1);
}

int64_t ZenFlowNormsNumel(const Bucket& bk) {
  int64_t n = 0;
  for (const ParamSlot& p : bk.params) {
    if (IsMatrix(p)) n += p.shape[1];
  }
  return std::max<int64_t>(n, 1);
}

}  // namespace baton::scheduler
