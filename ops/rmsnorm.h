// RMSNorm, fused, forward and backward: the op around which YaFSDP saves
// copies, so its backward writes the weight gradient straight into that
// parameter's slice of the gradient buffer.
//
// Math, for x of shape [tokens, hidden] and weight w of shape [hidden]:
//   r[t]    = 1 / sqrt(mean_i x[t,i]^2 + eps)               (saved, fp32)
//   y[t,i]  = x[t,i] * r[t] * w[i]                          (=)
// Backward, given dy:
//   c[t]    = (1/hidden) * sum_j dy[t,j] * w[j] * x[t,j]
//   dx[t,i] = r[t] * (dy[t,i] * w[i] - x[t,i] * r[t]^2 * c[t])
//                                               (= or += : `accumulate_dx`,
//             so a residual branch adds its gradient without a copy)
//   dw[i]   = sum_t dy[t,i] * x[t,i] * r[t]     (= or += : `accumulate_dw`)
// x, w, y, dy, dx share one dtype (f32 or bf16); dw has its own (the
// gradient buffer's). All arithmetic is fp32; bf16 is rounded once on store.
//
// Launchers follow ops/op_util.h: InvalidArgument for null pointers,
// non-positive sizes, an integer dtype or eps <= 0 (nothing is enqueued).
#ifndef BATON_OPS_RMSNORM_H_
#define BATON_OPS_RMSNORM_H_

#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct RmsNormShape {
  int64_t tokens = 0;
  int64_t hidden = 0;
  DataType dtype = DataType::kF32;  // x, w, y, dy, dx
  float eps = 1e-5f;
};

Status RmsNormForward(Stream& stream, const RmsNormShape& shape, const void* x,
                      const void* w, void* y, float* rstd);

Status RmsNormBackward(Stream& stream, const RmsNormShape& shape,
                       const void* dy, const void* x, const void* w,
                       const float* rstd, void* dx, bool accumulate_dx,
                       void* dw, DataType dw_dtype, bool accumulate_dw);

// The CPU implementations the host path runs (and the tests compare with).
void RmsNormForwardCpu(const RmsNormShape& shape, const void* x, const void* w,
                       void* y, float* rstd);
void RmsNormBackwardCpu(const RmsNormShape& shape, const void* dy,
                        const void* x, const void* w, const float* rstd,
                        void* dx, bool accumulate_dx, void* dw,
                        DataType dw_dtype, bool accumulate_dw);

}  // namespace baton::ops

#endif  // BATON_OPS_RMSNORM_H_
