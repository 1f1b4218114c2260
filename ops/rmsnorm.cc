#include "baton/ops/rmsnorm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

Status CheckShape(const RmsNormShape& s, const char* op) {
  BATON_RETURN_IF_ERROR(
      CheckPositive(op, {{"tokens", s.tokens}, {"hidden", s.hidden}}));
  BATON_RETURN_IF_ERROR(CheckFloatType(op, "dtype", s.dtype));
  if (!(s.eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": eps must be positive"));
  }
  return absl::OkStatus();
}

// The CPU paths work on kRows rows at a time, widened to float (AVX2 when
// the CPU has it, ops/host_convert.h): each row's sum is still added
// element by element in index order (so the results are bit-identical to
// the plain scalar loop), but the kRows sums are independent chains the
// CPU overlaps, instead of one add latency per element. The element-wise
// parts are plain float loops over contiguous arrays.
constexpr int64_t kRows = 8;

// sums[r] = sum over i of a[r][i] * b[r][i] * c[i] (c null: a * b), added
// in index order, for `rows` rows of n elements (rows <= kRows).
void RowDots(const float* a, const float* b, const float* c, int64_t rows, int64_t n,
             float* sums) {
  float acc[kRows] = {};
  if (rows == kRows) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t r = 0; r < kRows; ++r) {
        acc[r] += c != nullptr ? a[r * n + i] * c[i] * b[r * n + i] : a[r * n + i] * b[r * n + i];
      }
    }
  } else {
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t i = 0; i < n; ++i) {
        acc[r] += c != nullptr ? a[r * n + i] * c[i] * b[r * n + i] : a[r * n + i] * b[r * n + i];
      }
    }
  }
  for (int64_t r = 0; r < rows; ++r) sums[r] = acc[r];
}

}  // namespace

void RmsNormForwardCpu(const RmsNormShape& s, const void* x, const void* w,
                       void* y, float* rstd) {
  const int64_t h = s.hidden;
  std::vector<float> wf(h), xf(kRows * h), yf(h);
  WidenRow(w, s.dtype, h, wf.data());
  for (int64_t t0 = 0; t0 < s.tokens; t0 += kRows) {
    const int64_t rows = std::min(kRows, s.tokens - t0);
    WidenRow(ElementAt(x, s.dtype, t0 * h), s.dtype, rows * h, xf.data());
    float sums[kRows];
    RowDots(xf.data(), xf.data(), nullptr, rows, h, sums);
    for (int64_t r = 0; r < rows; ++r) {
      const float rr = 1.0f / std::sqrt(sums[r] / static_cast<float>(h) + s.eps);
      rstd[t0 + r] = rr;
      const float* xr = xf.data() + r * h;
      for (int64_t i = 0; i < h; ++i) yf[i] = xr[i] * rr * wf[i];
      NarrowRow(yf.data(), h, s.dtype, ElementAt(y, s.dtype, (t0 + r) * h));
    }
  }
}

void RmsNormBackwardCpu(const RmsNormShape& s, const void* dy, const void* x,
                        const void* w, const float* rstd, void* dx,
                        bool accumulate_dx, void* dw, DataType dw_dtype,
                        bool accumulate_dw) {
  const int64_t h = s.hidden;
  std::vector<float> dw_acc(h, 0.0f), wf(h), gf(kRows * h), xf(kRows * h), prev(h, 0.0f),
      out(h);
  WidenRow(w, s.dtype, h, wf.data());
  for (int64_t t0 = 0; t0 < s.tokens; t0 += kRows) {
    const int64_t rows = std::min(kRows, s.tokens - t0);
    WidenRow(ElementAt(dy, s.dtype, t0 * h), s.dtype, rows * h, gf.data());
    WidenRow(ElementAt(x, s.dtype, t0 * h), s.dtype, rows * h, xf.data());
    float cs[kRows];
    RowDots(gf.data(), xf.data(), wf.data(), rows, h, cs);  // (dy * w) * x
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = t0 + r;
      const float rr = rstd[t];
      const float c = cs[r] / static_cast<float>(h);
      const float* g = gf.data() + r * h;
      const float* xv = xf.data() + r * h;
      void* dxr = ElementAt(dx, s.dtype, t * h);
      if (accumulate_dx) WidenRow(dxr, s.dtype, h, prev.data());  // else zeros
      for (int64_t i = 0; i < h; ++i) {
        out[i] = prev[i] + rr * (g[i] * wf[i] - xv[i] * rr * rr * c);
        dw_acc[i] += g[i] * xv[i] * rr;
      }
      NarrowRow(out.data(), h, s.dtype, dxr);
    }
  }
  for (int64_t i = 0; i < s.hidden; ++i) {
    const float prev_dw = accumulate_dw ? LoadF(dw, dw_dtype, i) : 0.0f;
    StoreF(dw, dw_dtype, i, prev_dw + dw_acc[i]);
  }
}

Status RmsNormForward(Stream& stream, const RmsNormShape& s, const void* x,
                      const void* w, void* y, float* rstd) {
  constexpr const char* kOp = "RmsNormForward";
  BATON_RETURN_IF_ERROR(CheckShape(s, kOp));
  BATON_RETURN_IF_ERROR(
      CheckNotNull(kOp, {{"x", x}, {"w", w}, {"y", y}, {"rstd", rstd}}));
  return OnStream(
      stream, kOp,
      [=]() {
        RmsNormForwardCpu(s, x, w, y, rstd);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchRmsNormForward(x, w, y, rstd, s.tokens,
                                                  s.hidden,
                                                  static_cast<int>(s.dtype),
                                                  s.eps, st);
      }));
}

Status RmsNormBackward(Stream& stream, const RmsNormShape& s, const void* dy,
                       const void* x, const void* w, const float* rstd,
                       void* dx, bool accumulate_dx, void* dw,
                       DataType dw_dtype, bool accumulate_dw) {
  constexpr const char* kOp = "RmsNormBackward";
  BATON_RETURN_IF_ERROR(CheckShape(s, kOp));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"dy", dy},
                                           {"x", x},
                                           {"w", w},
                                           {"rstd", rstd},
                                           {"dx", dx},
                                           {"dw", dw}}));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "dw dtype", dw_dtype));
  return OnStream(
      stream, kOp,
      [=]() {
        RmsNormBackwardCpu(s, dy, x, w, rstd, dx, accumulate_dx, dw, dw_dtype,
                           accumulate_dw);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchRmsNormBackward(
            dy, x, w, rstd, dx, accumulate_dx, dw, static_cast<int>(dw_dtype),
            accumulate_dw, s.tokens, s.hidden, static_cast<int>(s.dtype), st);
      }));
}

}  // namespace baton::ops
