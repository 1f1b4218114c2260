// AdamW on fp32 master shards, fused with the cast of the updated master
// into the parameter-dtype shard that feeds the next all-gather (so the
// update and the cast are one pass over memory).
//
// Math, elementwise over n elements, at step t >= 1 (1-based), PyTorch's
// AdamW (decoupled weight decay):
//   g        = grad * grad_scale
//   m        = beta1 m + (1 - beta1) g                         (=, fp32)
//   v        = beta2 v + (1 - beta2) g^2                       (=, fp32)
//   master   = master (1 - lr wd)
//              - lr (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)
//   param    = round(master) into param_dtype                  (=, if given)
// grad has its own dtype (the reduce dtype: f32 or bf16). grad_scale is
// what the executor passes (1 / (ranks * micro_steps) for a mean).
// Launchers follow ops/op_util.h; param may be null (no cast).
#ifndef BATON_OPS_ADAMW_H_
#define BATON_OPS_ADAMW_H_

#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
};

struct AdamWArgs {
  int64_t n = 0;
  int64_t step = 1;  // 1-based, for the bias corrections
  float grad_scale = 1.0f;
  float* master = nullptr;
  const void* grad = nullptr;
  DataType grad_dtype = DataType::kF32;
  float* moment1 = nullptr;
  float* moment2 = nullptr;
  void* param = nullptr;  // optional
  DataType param_dtype = DataType::kBF16;
};

// AdamWStep's checks, for every AdamW kernel (ops/host_adamw.h too):
// InvalidArgument, its message starting with `op`, for a bad config
// (lr < 0, betas outside [0, 1), eps <= 0, weight_decay < 0), n < 0,
// step < 1, null buffers (when n > 0), or a non-float dtype.
Status CheckAdamWArgs(const char* op, const AdamWConfig& config, const AdamWArgs& args);

// InvalidArgument for a bad config (lr < 0, betas outside [0, 1), eps <= 0,
// weight_decay < 0), n < 0, step < 1, null buffers, or a non-float dtype.
Status AdamWStep(Stream& stream, const AdamWConfig& config,
                 const AdamWArgs& args);

}  // namespace baton::ops

#endif  // BATON_OPS_ADAMW_H_
