// Test-only helpers shared by the attention tests (attention_test.cc for
// baton's kernels, cudnn_attention_test.cc for cuDNN's): the float64
// reference and one case's inputs and outputs on a device.
#ifndef BATON_OPS_TESTING_ATTENTION_REFERENCE_H_
#define BATON_OPS_TESTING_ATTENTION_REFERENCE_H_

#include <cstdint>
#include <vector>

#include "baton/ops/attention.h"
#include "baton/runtime/device.h"

namespace baton::ops::testing {

// Float64 causal GQA attention over token-major [batch * seq, heads *
// head_dim] q / out and [batch * seq, kv_heads * head_dim] k / v: out, lse
// ([batch, heads, seq]) and, when `dout` is not empty, the analytic
// backward (ops/attention.h's formulas).
struct AttentionReference {
  std::vector<double> out, lse, dq, dk, dv;
};
AttentionReference Float64Attention(const AttentionShape& s, const std::vector<double>& q,
                                    const std::vector<double>& k, const std::vector<double>& v,
                                    const std::vector<double>& dout = {});

// One case: random inputs rounded to s.dtype (seeded by the sizes), their
// device copies, and poisoned outputs of s.dtype (lse in f32).
struct AttentionCase {
  int64_t nq = 0, nk = 0;  // elements of q / out / dq and of k / v / dk / dv
  std::vector<double> q, k, v, dout;
  DeviceBuffer bq, bk, bv, bdo, bo, blse, bdq, bdk, bdv;
};
AttentionCase MakeAttentionCase(Device& device, Stream& stream, const AttentionShape& s);

}  // namespace baton::ops::testing

#endif  // BATON_OPS_TESTING_ATTENTION_REFERENCE_H_
