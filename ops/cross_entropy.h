// Softmax cross-entropy over the vocabulary, forward and backward fused: one
// pass computes each token's loss and, when asked, the gradient of the
// logits, which may overwrite the logits in place (no extra [tokens, vocab]
// buffer).
//
// Math, for logits z [tokens, vocab] and targets y [tokens] (int32 in
// [0, vocab)):
//   lse_t      = log sum_v exp(z[t,v])
//   loss[t]    = lse_t - z[t, y_t]                                (=, fp32)
//   dz[t,v]    = grad_scale * (exp(z[t,v] - lse_t) - [v == y_t])  (=)
// grad_scale is the derivative of the caller's total loss by loss[t]; for a
// mean over the tokens it is 1 / tokens. z and dz share one dtype (f32 or
// bf16); arithmetic is fp32, except that the host path sums the
// exponentials of a row in fp64 (at vocab 128k a float sum is off by ~1e-5
// of the loss).
//
// Targets are data: out-of-range ones are InvalidArgument from the CPU host
// work (the stream carries it) and NaN loss on CUDA.
// Launchers follow ops/op_util.h; dlogits may be null (forward only) or
// equal to logits.
#ifndef BATON_OPS_CROSS_ENTROPY_H_
#define BATON_OPS_CROSS_ENTROPY_H_

#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct CrossEntropyShape {
  int64_t tokens = 0;
  int64_t vocab = 0;
  DataType dtype = DataType::kF32;  // logits, dlogits
};

Status CrossEntropy(Stream& stream, const CrossEntropyShape& shape,
                    const void* logits, const int32_t* targets, float* loss,
                    void* dlogits, float grad_scale);

}  // namespace baton::ops

#endif  // BATON_OPS_CROSS_ENTROPY_H_
