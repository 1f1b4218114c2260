#include "baton/ops/testing/zenflow_reference.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "absl/strings/str_cat.h"

namespace baton::ops {

StatusOr<ZenFlowReference> ZenFlowReference::Create(
    const ZenFlowReferenceOptions& o, std::vector<float> weights) {
  if (o.rows < 1 || o.cols < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZenFlowReference: rows and cols must be positive, got ", o.rows, " x ", o.cols));
  }
  if (static_cast<int64_t>(weights.size()) != o.rows * o.cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZenFlowReference: ", weights.size(), " weights for ", o.rows, " x ", o.cols));
  }
  BATON_RETURN_IF_ERROR(CheckZenFlowConfig(o.zenflow));
  if (o.staleness < 0 || o.staleness >= o.zenflow.update_interval) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZenFlowReference: staleness must be in [0, update_interval = ",
        o.zenflow.update_interval, "), got ", o.staleness));
  }
  ZenFlowReference r;
  r.o_ = o;
  BATON_ASSIGN_OR_RETURN(r.k_, ZenFlowSelectCount(o.zenflow.topk_ratio, o.cols));
  const size_t n = weights.size();
  r.host_ = weights;
  r.device_ = std::move(weights);
  r.host_m_.assign(n, 0.0f);
  r.host_v_.assign(n, 0.0f);
  r.accum_.assign(n, 0.0f);
  r.sel_m_.assign(n, 0.0f);
  r.sel_v_.assign(n, 0.0f);
  r.norms_.assign(o.cols, 0.0f);
  r.is_selected_.assign(o.cols, false);
  return r;
}

// AdamWStep's element update (ops/adamw.cc), operation for operation.
void ZenFlowReference::AdamW(float* w, float* m1, float* m2, float g,
                             int64_t t) const {
  const AdamWConfig& c = o_.adamw;
  const float bc1 = 1.0f - static_cast<float>(std::pow(c.beta1, t));
  const float bc2 = 1.0f - static_cast<float>(std::pow(c.beta2, t));
  const float m = c.beta1 * *m1 + (1.0f - c.beta1) * g;
  const float v = c.beta2 * *m2 + (1.0f - c.beta2) * g * g;
  *m1 = m;
  *m2 = v;
  *w = *w * (1.0f - c.lr * c.weight_decay) - c.lr * (m / bc1) / (std::sqrt(v / bc2) + c.eps);
}

Status ZenFlowReference::Step(const std::vector<float>& grad) {
  const int64_t rows = o_.rows, cols = o_.cols;
  if (static_cast<int64_t>(grad.size()) != rows * cols) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ZenFlowReference::Step: ", grad.size(), " gradient values for ", rows, " x ", cols));
  }
#if defined(__SSE__)
  const unsigned int csr = _mm_getcsr();
#endif
  const int64_t s = step_;
  const ZenFlowConfig& z = o_.zenflow;

  // 1. The column proxy, row by row.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      const float g = grad[r * cols + j];
      norms_[j] += g * g;
    }
  }

  // 2. Selection.
  if (s % z.select_interval == 0) {
    // Columns leaving the selection hand their device values to the host
    // master (a pending host update never updated them: they were selected
    // during its window).
    const std::vector<bool> was = is_selected_;
    for (int64_t j : selected_) {
      for (int64_t r = 0; r < rows; ++r) host_[r * cols + j] = device_[r * cols + j];
    }
    std::vector<int64_t> order(cols);
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      const float x = norms_[a], y = norms_[b];
      if (std::isnan(x) || std::isnan(y)) {
        if (std::isnan(x) && std::isnan(y)) return a < b;
        return std::isnan(x);
      }
      return x > y || (x == y && a < b);
    });
    selected_.assign(order.begin(), order.begin() + k_);
    std::sort(selected_.begin(), selected_.end());
    is_selected_.assign(cols, false);
    for (int64_t j : selected_) is_selected_[j] = true;
    // Newly selected columns start from the host master, after the host
    // update of the window that just ended (which a stale device copy may
    // not show yet).
    for (int64_t j : selected_) {
      if (was[j]) continue;
      for (int64_t r = 0; r < rows; ++r) device_[r * cols + j] = host_[r * cols + j];
    }
    std::fill(norms_.begin(), norms_.end(), 0.0f);
    std::fill(sel_m_.begin(), sel_m_.end(), 0.0f);
    std::fill(sel_v_.begin(), sel_v_.end(), 0.0f);
    sel_step_ = 0;
  }

  // 4. The host accumulation, outside FTZ/DAZ: plain float adds, as
  // SplitGradient does.
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      if (!is_selected_[j]) accum_[r * cols + j] += grad[r * cols + j];
    }
  }

#if defined(__SSE__)
  _mm_setcsr(csr | 0x8040);  // FTZ/DAZ for the AdamW arithmetic, as AdamWStep
#endif
  // 3. The device path (independent of 4).
  ++sel_step_;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j : selected_) {
      const int64_t e = r * cols + j;
      AdamW(&device_[e], &sel_m_[e], &sel_v_[e], grad[e] * 1.0f, sel_step_);
    }
  }

  // 5. The host update at the end of an accumulation window.
  if ((s + 1) % z.update_interval == 0) {
    ++host_step_;
    const float scale = 1.0f / static_cast<float>(z.update_interval);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) {
        const int64_t e = r * cols + j;
        if (!is_selected_[j]) AdamW(&host_[e], &host_m_[e], &host_v_[e], accum_[e] * scale, host_step_);
      }
    }
    std::fill(accum_.begin(), accum_.end(), 0.0f);
    pending_ = true;
    pending_w_ = host_;
    pending_cols_.assign(cols, false);
    for (int64_t j = 0; j < cols; ++j) pending_cols_[j] = !is_selected_[j];
    pending_at_ = s + 1 + o_.staleness;
  }
#if defined(__SSE__)
  _mm_setcsr(csr);
#endif

  ++step_;
  // 6. A host update reaches the device weights before this forward: the
  // columns it updated that are not selected now (a column selected since
  // took the update from the host master when it was selected, and the
  // device path has moved it on).
  if (pending_ && pending_at_ == step_) {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < cols; ++j) {
        if (pending_cols_[j] && !is_selected_[j]) {
          device_[r * cols + j] = pending_w_[r * cols + j];
        }
      }
    }
    pending_ = false;
  }
  return absl::OkStatus();
}

}  // namespace baton::ops
