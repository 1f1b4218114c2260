#include "baton/ops/swiglu.h"

#include <cmath>

#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

Status Check(const char* op, const SwiGluShape& s) {
  BATON_RETURN_IF_ERROR(CheckPositive(op, {{"rows", s.rows}, {"width", s.width}}));
  return CheckFloatType(op, "dtype", s.dtype);
}

float Sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

}  // namespace

Status SwiGluForward(Stream& stream, const SwiGluShape& s, const void* g,
                     const void* u, void* h) {
  constexpr const char* kOp = "SwiGluForward";
  BATON_RETURN_IF_ERROR(Check(kOp, s));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"g", g}, {"u", u}, {"h", h}}));
  return OnStream(
      stream, kOp,
      [=]() {
        const int64_t n = s.rows * s.width;
        for (int64_t i = 0; i < n; ++i) {
          const float gv = LoadF(g, s.dtype, i);
          StoreF(h, s.dtype, i, gv * Sigmoid(gv) * LoadF(u, s.dtype, i));
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchSwiGluForward(
            g, u, h, s.rows * s.width, static_cast<int>(s.dtype), st);
      }));
}

Status SwiGluBackward(Stream& stream, const SwiGluShape& s, const void* dh,
                      const void* g, const void* u, void* dg, void* du) {
  constexpr const char* kOp = "SwiGluBackward";
  BATON_RETURN_IF_ERROR(Check(kOp, s));
  BATON_RETURN_IF_ERROR(CheckNotNull(
      kOp, {{"dh", dh}, {"g", g}, {"u", u}, {"dg", dg}, {"du", du}}));
  return OnStream(
      stream, kOp,
      [=]() {
        const int64_t n = s.rows * s.width;
        for (int64_t i = 0; i < n; ++i) {
          const float gv = LoadF(g, s.dtype, i), uv = LoadF(u, s.dtype, i),
                      d = LoadF(dh, s.dtype, i);
          const float sg = Sigmoid(gv);
          StoreF(dg, s.dtype, i, d * uv * sg * (1.0f + gv * (1.0f - sg)));
          StoreF(du, s.dtype, i, d * gv * sg);
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchSwiGluBackward(
            dh, g, u, dg, du, s.rows * s.width, static_cast<int>(s.dtype), st);
      }));
}

}  // namespace baton::ops
