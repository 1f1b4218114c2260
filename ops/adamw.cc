#include "baton/ops/adamw.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {

Status CheckAdamWArgs(const char* op, const AdamWConfig& c, const AdamWArgs& a) {
  if (!(c.lr >= 0) || !(c.beta1 >= 0 && c.beta1 < 1) ||
      !(c.beta2 >= 0 && c.beta2 < 1) || !(c.eps > 0) ||
      !(c.weight_decay >= 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": bad config (lr ", c.lr, ", betas ", c.beta1, "/", c.beta2,
        ", eps ", c.eps, ", weight_decay ", c.weight_decay,
        "): need lr >= 0, betas in [0, 1), eps > 0, weight_decay >= 0"));
  }
  if (a.n < 0 || a.step < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": need n >= 0 and step >= 1, got ", a.n, " and ", a.step));
  }
  if (a.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(op, {{"master", a.master},
                                          {"grad", a.grad},
                                          {"moment1", a.moment1},
                                          {"moment2", a.moment2}}));
  BATON_RETURN_IF_ERROR(CheckFloatType(op, "grad dtype", a.grad_dtype));
  if (a.param != nullptr) {
    BATON_RETURN_IF_ERROR(CheckFloatType(op, "param dtype", a.param_dtype));
  }
  return absl::OkStatus();
}

Status AdamWStep(Stream& stream, const AdamWConfig& c, const AdamWArgs& a) {
  constexpr const char* kOp = "AdamWStep";
  BATON_RETURN_IF_ERROR(CheckAdamWArgs(kOp, c, a));
  if (a.n == 0) return absl::OkStatus();
  const float bc1 = 1.0f - static_cast<float>(std::pow(c.beta1, a.step));
  const float bc2 = 1.0f - static_cast<float>(std::pow(c.beta2, a.step));
  return OnStream(
      stream, kOp,
      [=]() {
        for (int64_t i = 0; i < a.n; ++i) {
          const float g = LoadF(a.grad, a.grad_dtype, i) * a.grad_scale;
          const float m = c.beta1 * a.moment1[i] + (1.0f - c.beta1) * g;
          const float v = c.beta2 * a.moment2[i] + (1.0f - c.beta2) * g * g;
          a.moment1[i] = m;
          a.moment2[i] = v;
          const float p = a.master[i] * (1.0f - c.lr * c.weight_decay) -
                          c.lr * (m / bc1) / (std::sqrt(v / bc2) + c.eps);
          a.master[i] = p;
          if (a.param != nullptr) StoreF(a.param, a.param_dtype, i, p);
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchAdamW(
            a.master, a.grad, static_cast<int>(a.grad_dtype), a.moment1,
            a.moment2, a.param, static_cast<int>(a.param_dtype), a.n,
            a.grad_scale, c.lr, c.beta1, c.beta2, c.eps, c.weight_decay, bc1,
            bc2, st);
      }));
}

}  // namespace baton::ops
