#include "baton/ops/rotary.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

Status Check(const char* op, const RotaryShape& s, const void* x) {
  BATON_RETURN_IF_ERROR(CheckPositive(op, {{"batch", s.batch},
                                           {"seq", s.seq},
                                           {"heads", s.heads},
                                           {"head_dim", s.head_dim}}));
  if (s.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": head_dim must be even, got ", s.head_dim));
  }
  if (!(s.theta > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": theta must be positive"));
  }
  BATON_RETURN_IF_ERROR(CheckFloatType(op, "dtype", s.dtype));
  return CheckNotNull(op, {{"x", x}});
}

void RotateCpu(const RotaryShape& s, void* x, double sign) {
  const int64_t half = s.head_dim / 2;
  for (int64_t t = 0; t < s.batch * s.seq; ++t) {
    const double p = static_cast<double>(t % s.seq);
    for (int64_t i = 0; i < half; ++i) {
      const double a =
          sign * p * std::pow(s.theta, -2.0 * i / static_cast<double>(s.head_dim));
      const float c = static_cast<float>(std::cos(a)), sn = static_cast<float>(std::sin(a));
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t k = (t * s.heads + h) * s.head_dim + i;
        const float x1 = LoadF(x, s.dtype, k), x2 = LoadF(x, s.dtype, k + half);
        StoreF(x, s.dtype, k, x1 * c - x2 * sn);
        StoreF(x, s.dtype, k + half, x2 * c + x1 * sn);
      }
    }
  }
}

Status Rotate(const char* op, Stream& stream, const RotaryShape& s, void* x,
              double sign) {
  BATON_RETURN_IF_ERROR(Check(op, s, x));
  return OnStream(
      stream, op,
      [=]() {
        RotateCpu(s, x, sign);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchRotary(x, s.batch * s.seq, s.seq, s.heads,
                                          s.head_dim, s.theta, sign,
                                          static_cast<int>(s.dtype), st);
      }));
}

}  // namespace

Status RotaryForward(Stream& stream, const RotaryShape& s, void* x) {
  return Rotate("RotaryForward", stream, s, x, 1.0);
}

Status RotaryBackward(Stream& stream, const RotaryShape& s, void* dx) {
  return Rotate("RotaryBackward", stream, s, dx, -1.0);
}

}  // namespace baton::ops
