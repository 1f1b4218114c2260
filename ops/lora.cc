#include "baton/ops/lora.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "baton/ops/linear.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

Status CheckShape(const char* op, const LoraShape& s) {
  BATON_RETURN_IF_ERROR(CheckPositive(
      op, {{"rows", s.rows}, {"in", s.in}, {"out", s.out}, {"rank", s.rank}}));
  BATON_RETURN_IF_ERROR(CheckFloatType(op, "dtype", s.dtype));
  if (!std::isfinite(s.scale)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": scale ", s.scale, " is not finite"));
  }
  return absl::OkStatus();
}

}  // namespace

Status ScaleInPlace(Stream& stream, void* p, int64_t n, DataType t, float s) {
  constexpr const char* kOp = "ScaleInPlace";
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "dtype", t));
  if (n < 0) return absl::InvalidArgumentError("ScaleInPlace: n must not be negative");
  if (n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"p", p}}));
  return OnStream(
      stream, kOp,
      [=]() {
        for (int64_t i = 0; i < n; ++i) StoreF(p, t, i, LoadF(p, t, i) * s);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchScale(p, n, static_cast<int>(t), s, st);
      }));
}

Status LoraForward(Stream& stream, const LoraShape& s, const void* x, const void* w,
                   const void* a, const void* b, void* xa, void* y, bool accumulate_y) {
  constexpr const char* kOp = "LoraForward";
  BATON_RETURN_IF_ERROR(CheckShape(kOp, s));
  BATON_RETURN_IF_ERROR(
      CheckNotNull(kOp, {{"x", x}, {"w", w}, {"a", a}, {"b", b}, {"xa", xa}, {"y", y}}));
  BATON_RETURN_IF_ERROR(LinearForward(stream, {s.rows, s.in, s.out, s.dtype}, x, w, y,
                                      accumulate_y));
  BATON_RETURN_IF_ERROR(LinearForward(stream, {s.rows, s.in, s.rank, s.dtype}, x, a, xa));
  BATON_RETURN_IF_ERROR(ScaleInPlace(stream, xa, s.rows * s.rank, s.dtype, s.scale));
  return LinearForward(stream, {s.rows, s.rank, s.out, s.dtype}, xa, b, y, true);
}

Status LoraBackward(Stream& stream, const LoraShape& s, const void* dy, const void* x,
                    const void* w, const void* a, const void* b, const void* xa,
                    void* scratch, const LoraGrads& g) {
  constexpr const char* kOp = "LoraBackward";
  BATON_RETURN_IF_ERROR(CheckShape(kOp, s));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"dy", dy}, {"x", x}, {"w", w}, {"a", a},
                                           {"b", b}, {"xa", xa}, {"scratch", scratch},
                                           {"da", g.da}, {"db", g.db}}));
  // db = dy^T xa and scratch = dy b (then scaled: u).
  BATON_RETURN_IF_ERROR(LinearBackward(stream, {s.rows, s.rank, s.out, s.dtype}, dy, xa, b,
                                       scratch, false, g.db, g.grad_dtype, g.accumulate_db));
  BATON_RETURN_IF_ERROR(ScaleInPlace(stream, scratch, s.rows * s.rank, s.dtype, s.scale));
  if (g.dx != nullptr) {  // dx (+)= dy w, the frozen base's path
    BATON_RETURN_IF_ERROR(LinearBackward(stream, {s.rows, s.in, s.out, s.dtype}, dy, x, w,
                                         g.dx, g.accumulate_dx, nullptr, g.grad_dtype, false));
  }
  // da = u^T x and dx += u a.
  return LinearBackward(stream, {s.rows, s.in, s.rank, s.dtype}, scratch, x, a, g.dx, true,
                        g.da, g.grad_dtype, g.accumulate_da);
}

}  // namespace baton::ops
