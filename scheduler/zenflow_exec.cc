#include "baton/scheduler/zenflow_exec.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "baton/ops/host_adamw.h"
#include "baton/runtime/dtype.h"

namespace baton::scheduler {
namespace {

bool IsMatrix(const ParamSlot& p) { return p.shape.size() == 2 && p.numel > 0; }

// Elements of the selected-state bound of `p` in the shard [lo, hi).
int64_t Bound(const ParamSlot& p, int64_t lo, int64_t hi, double ratio) {
  const int64_t a = std::max(lo, p.offset), b = std::min(hi, p.offset + p.numel);
  if (a >= b) return 0;
  const int64_t cols = p.shape[1];
  const int64_t rows = (b - 1 - p.offset) / cols - (a - p.offset) / cols + 1;
  const int64_t k = *ops::ZenFlowSelectCount(ratio, cols);
  return std::min(b - a, k * rows);
}

}  // namespace

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

ZenFlowState::ZenFlowState(const Bucket& bk, int shard_rank, int shards,
                           const ops::ZenFlowConfig& config, int64_t staleness,
                           const ops::AdamWConfig& adamw)
    : cfg_(config), staleness_(staleness), adamw_(adamw), shard_numel_(bk.shard_numel) {
  (void)shards;
  const int64_t lo = shard_rank * bk.shard_numel, hi = lo + bk.shard_numel;
  int64_t norms_at = 0;
  std::vector<std::pair<int64_t, int64_t>> taken;
  std::vector<const ParamSlot*> slots;
  for (const ParamSlot& p : bk.params) slots.push_back(&p);
  std::sort(slots.begin(), slots.end(), [](const ParamSlot* a, const ParamSlot* b) {
    return a->offset < b->offset;
  });
  for (const ParamSlot* p : slots) {
    if (!IsMatrix(*p)) continue;
    const int64_t cols = p->shape[1];
    const int64_t a = std::max(lo, p->offset), b = std::min(hi, p->offset + p->numel);
    if (a < b) {
      Matrix m;
      m.block = {a - p->offset, b - a, cols};
      m.pos = a - lo;
      m.norms_at = norms_at;
      m.k = *ops::ZenFlowSelectCount(cfg_.topk_ratio, cols);
      m.sel = *ops::ColumnSelection::Create(cols, {});  // none yet
      mats_.push_back(std::move(m));
      taken.push_back({a - lo, b - lo});
    }
    norms_at += cols;
  }
  int64_t at = 0;
  for (const auto& [a, b] : taken) {
    if (a > at) rest_.push_back({at, a});
    at = b;
  }
  if (shard_numel_ > at) rest_.push_back({at, shard_numel_});
  scaled_.assign(shard_numel_, 0.0f);
  host_scaled_.assign(shard_numel_, 0.0f);
  for (auto& w : window_sel_) {
    for (const Matrix& m : mats_) w.push_back(m.sel);
  }
}

int64_t ZenFlowState::upload_window(int64_t step) const {
  if (step == 0) return kInitialUpload;
  const int64_t t = step - staleness_;  // the step after the window's end
  if (t < cfg_.update_interval || t % cfg_.update_interval != 0) return kNone;
  return t / cfg_.update_interval - 1;
}

Status ZenFlowState::Norms(const void* grad, DataType t, float scale,
                           float* norms) {
  WidenToF32(scaled_.data(), grad, t, scaled_.size());
  for (float& g : scaled_) g *= scale;
  for (const Matrix& m : mats_) {
    BATON_RETURN_IF_ERROR(ops::AccumulateColumnSquares(
        scaled_.data() + m.pos, DataType::kF32, m.block, norms + m.norms_at));
  }
  return absl::OkStatus();
}

Status ZenFlowState::Topk(int64_t step, float* norms, int64_t norms_numel,
                          float* topk, int64_t topk_numel,
                          const float* host_master, void* shard, DataType pt) {
  const int64_t cap = topk_numel / 3;
  float* pm = topk;
  float* m1 = topk + cap;
  float* m2 = topk + 2 * cap;
  if (select_step(step)) {
    // Hand the old selection's fp32 values back; choose; reset the state.
    std::vector<float> next(cap, 0.0f);
    int64_t at = 0;
    for (Matrix& m : mats_) {
      const int64_t cols = m.block.cols;
      m.handoff.assign(pm + m.packed_at, pm + m.packed_at + m.packed_n);
      m.old_sel = m.sel;
      const bool had = m.has_selection;
      BATON_ASSIGN_OR_RETURN(m.sel, ops::SelectTopColumns(norms + m.norms_at,
                                                          cols, m.k));
      m.has_selection = true;
      m.packed_at = at;
      m.packed_n = m.sel.CountIn(m.block);
      if (at + m.packed_n > cap) {
        return absl::InternalError(absl::StrCat(
            "zenflow: ", at + m.packed_n, " selected elements exceed the topk "
            "state of ", cap));
      }
      // Newly selected: the host master; still selected: the device value.
      int64_t kept = 0, fresh = 0;
      for (int64_t i = 0; i < m.block.n; ++i) {
        const int64_t c = (m.block.first + i) % cols;
        const bool old = had && m.old_sel.selected(c);
        float v = host_master[m.pos + i];
        if (old) v = m.handoff[kept];
        if (m.sel.selected(c)) next[at + fresh++] = v;
        if (old) ++kept;
      }
      at += m.packed_n;
      if (!had) m.handoff.clear();
    }
    std::memcpy(pm, next.data(), cap * sizeof(float));
    std::fill(m1, m1 + 2 * cap, 0.0f);
    std::fill(norms, norms + norms_numel, 0.0f);
  }
  // The selected path: AdamW on the packed elements, at its own count.
  ops::AdamWArgs a;
  a.step = step % cfg_.select_interval + 1;
  a.grad_dtype = DataType::kF32;
  for (Matrix& m : mats_) {
    if (m.packed_n == 0) continue;
    packed_grad_.resize(m.packed_n);
    BATON_RETURN_IF_ERROR(ops::GatherColumns(scaled_.data() + m.pos, m.block,
                                             m.sel, packed_grad_.data()));
    a.n = m.packed_n;
    a.master = pm + m.packed_at;
    a.moment1 = m1 + m.packed_at;
    a.moment2 = m2 + m.packed_at;
    a.grad = packed_grad_.data();
    a.param = nullptr;
    BATON_RETURN_IF_ERROR(ops::HostAdamW(adamw_, a, nullptr));
    // Their new values into the device shard.
    const size_t es = DataTypeSize(pt);
    char* dst = static_cast<char*>(shard) + m.pos * es;
    int64_t j = 0;
    for (int64_t i = 0; i < m.block.n; ++i) {
      if (!m.sel.selected((m.block.first + i) % m.block.cols)) continue;
      NarrowFromF32(dst + i * es, a.master + j++, pt, 1);
    }
  }
  return absl::OkStatus();
}

Status ZenFlowState::Accumulate(int64_t step, const void* host_grad, DataType t,
                                float scale, float* master, float* accum) {
  if (select_step(step)) {
    for (Matrix& m : mats_) {
      if (m.handoff.empty()) continue;
      BATON_RETURN_IF_ERROR(ops::ScatterColumns(m.handoff.data(), m.block,
                                                m.old_sel, master + m.pos));
      m.handoff.clear();
    }
  }
  WidenToF32(host_scaled_.data(), host_grad, t, host_scaled_.size());
  for (float& g : host_scaled_) g *= scale;
  for (const Matrix& m : mats_) {
    scratch_.resize(std::max<int64_t>(m.sel.CountIn(m.block), 1));
    BATON_RETURN_IF_ERROR(ops::SplitGradient(host_scaled_.data() + m.pos,
                                             DataType::kF32, m.block, m.sel,
                                             scratch_.data(), accum + m.pos));
  }
  for (const auto& [lo, hi] : rest_) {
    for (int64_t i = lo; i < hi; ++i) accum[i] += host_scaled_[i];
  }
  if (update_step(step)) {
    std::vector<ops::ColumnSelection>& keep = window_sel_[window(step) % 2];
    for (size_t i = 0; i < mats_.size(); ++i) keep[i] = mats_[i].sel;
  }
  return absl::OkStatus();
}

Status ZenFlowState::Update(int64_t w, float* master, float* m1, float* m2,
                            float* accum) {
  const std::vector<ops::ColumnSelection>& sel = window_sel_[w % 2];
  ops::AdamWArgs a;
  a.step = w + 1;
  a.grad_scale = 1.0f / static_cast<float>(cfg_.update_interval);
  a.grad_dtype = DataType::kF32;
  for (size_t i = 0; i < mats_.size(); ++i) {
    const Matrix& m = mats_[i];
    a.n = m.block.n;
    a.master = master + m.pos;
    a.moment1 = m1 + m.pos;
    a.moment2 = m2 + m.pos;
    a.grad = accum + m.pos;
    BATON_RETURN_IF_ERROR(ops::HostAdamWSkipping(adamw_, a, sel[i].mask(),
                                                 m.block.first, m.block.cols,
                                                 nullptr));
  }
  for (const auto& [lo, hi] : rest_) {
    a.n = hi - lo;
    a.master = master + lo;
    a.moment1 = m1 + lo;
    a.moment2 = m2 + lo;
    a.grad = accum + lo;
    BATON_RETURN_IF_ERROR(ops::HostAdamW(adamw_, a, nullptr));
  }
  std::fill(accum, accum + shard_numel_, 0.0f);
  return absl::OkStatus();
}

void ZenFlowState::Apply(int64_t w, const void* stage, void* shard,
                         DataType pt) const {
  const size_t es = DataTypeSize(pt);
  const char* src = static_cast<const char*>(stage);
  char* dst = static_cast<char*>(shard);
  if (w == kInitialUpload) {
    std::memcpy(dst, src, shard_numel_ * es);
    return;
  }
  for (const auto& [lo, hi] : rest_) {
    std::memcpy(dst + lo * es, src + lo * es, (hi - lo) * es);
  }
  const std::vector<ops::ColumnSelection>& updated = window_sel_[w % 2];
  for (size_t k = 0; k < mats_.size(); ++k) {
    const Matrix& m = mats_[k];
    for (int64_t i = 0; i < m.block.n; ++i) {
      const int64_t c = (m.block.first + i) % m.block.cols;
      // Selected during the window (not updated) or now (newer here).
      if (updated[k].selected(c) || m.sel.selected(c)) continue;
      std::memcpy(dst + (m.pos + i) * es, src + (m.pos + i) * es, es);
    }
  }
}

}  // namespace baton::scheduler
