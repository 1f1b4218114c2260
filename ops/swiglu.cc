#include "baton/ops/swiglu.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

// The CPU paths go through chunks of kChunk elements widened to float
// (AVX2 when the CPU has it, ops/host_convert.h), computed in float arrays
// and narrowed back: per element the same operations in the same order as
// a plain scalar loop, so the results are bit-identical to it.
constexpr int64_t kChunk = 2048;

}  // namespace

void SwiGluForwardCpu(const SwiGluShape& s, const void* g, const void* u, void* h) {
  const int64_t n = s.rows * s.width;
  std::vector<float> gf(kChunk), uf(kChunk), hf(kChunk);
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    WidenRow(ElementAt(g, s.dtype, i0), s.dtype, m, gf.data());
    WidenRow(ElementAt(u, s.dtype, i0), s.dtype, m, uf.data());
    for (int64_t i = 0; i < m; ++i) hf[i] = gf[i] * Sigmoid(gf[i]) * uf[i];
    NarrowRow(hf.data(), m, s.dtype, ElementAt(h, s.dtype, i0));
  }
}

void SwiGluBackwardCpu(const SwiGluShape& s, const void* dh, const void* g, const void* u,
                       void* dg, void* du) {
  const int64_t n = s.rows * s.width;
  std::vector<float> df(kChunk), gf(kChunk), uf(kChunk), dgf(kChunk), duf(kChunk);
  for (int64_t i0 = 0; i0 < n; i0 += kChunk) {
    const int64_t m = std::min(kChunk, n - i0);
    WidenRow(ElementAt(dh, s.dtype, i0), s.dtype, m, df.data());
    WidenRow(ElementAt(g, s.dtype, i0), s.dtype, m, gf.data());
    WidenRow(ElementAt(u, s.dtype, i0), s.dtype, m, uf.data());
    for (int64_t i = 0; i < m; ++i) {
      const float gv = gf[i], uv = uf[i], d = df[i];
      const float sg = Sigmoid(gv);
      dgf[i] = d * uv * sg * (1.0f + gv * (1.0f - sg));
      duf[i] = d * gv * sg;
    }
    NarrowRow(dgf.data(), m, s.dtype, ElementAt(dg, s.dtype, i0));
    NarrowRow(duf.data(), m, s.dtype, ElementAt(du, s.dtype, i0));
  }
}

Status SwiGluForward(Stream& stream, const SwiGluShape& s, const void* g,
                     const void* u, void* h) {
  constexpr const char* kOp = "SwiGluForward";
  BATON_RETURN_IF_ERROR(Check(kOp, s));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"g", g}, {"u", u}, {"h", h}}));
  return OnStream(
      stream, kOp,
      [=]() {
        SwiGluForwardCpu(s, g, u, h);
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
        SwiGluBackwardCpu(s, dh, g, u, dg, du);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchSwiGluBackward(
            dh, g, u, dg, du, s.rows * s.width, static_cast<int>(s.dtype), st);
      }));
}

}  // namespace baton::ops
