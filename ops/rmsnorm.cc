#include "baton/ops/rmsnorm.h"

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

}  // namespace

void RmsNormForwardCpu(const RmsNormShape& s, const void* x, const void* w,
                       void* y, float* rstd) {
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t row = t * s.hidden;
    float sum = 0;
    for (int64_t i = 0; i < s.hidden; ++i) {
      const float v = LoadF(x, s.dtype, row + i);
      sum += v * v;
    }
    const float r = 1.0f / std::sqrt(sum / static_cast<float>(s.hidden) + s.eps);
    rstd[t] = r;
    for (int64_t i = 0; i < s.hidden; ++i) {
      StoreF(y, s.dtype, row + i,
             LoadF(x, s.dtype, row + i) * r * LoadF(w, s.dtype, i));
    }
  }
}

void RmsNormBackwardCpu(const RmsNormShape& s, const void* dy, const void* x,
                        const void* w, const float* rstd, void* dx,
                        bool accumulate_dx, void* dw, DataType dw_dtype,
                        bool accumulate_dw) {
  std::vector<float> dw_acc(s.hidden, 0.0f);
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t row = t * s.hidden;
    const float r = rstd[t];
    float c = 0;
    for (int64_t i = 0; i < s.hidden; ++i) {
      c += LoadF(dy, s.dtype, row + i) * LoadF(w, s.dtype, i) *
           LoadF(x, s.dtype, row + i);
    }
    c /= static_cast<float>(s.hidden);
    for (int64_t i = 0; i < s.hidden; ++i) {
      const float xv = LoadF(x, s.dtype, row + i);
      const float g = LoadF(dy, s.dtype, row + i);
      const float prev = accumulate_dx ? LoadF(dx, s.dtype, row + i) : 0.0f;
      StoreF(dx, s.dtype, row + i,
             prev + r * (g * LoadF(w, s.dtype, i) - xv * r * r * c));
      dw_acc[i] += g * xv * r;
    }
  }
  for (int64_t i = 0; i < s.hidden; ++i) {
    const float prev = accumulate_dw ? LoadF(dw, dw_dtype, i) : 0.0f;
    StoreF(dw, dw_dtype, i, prev + dw_acc[i]);
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
