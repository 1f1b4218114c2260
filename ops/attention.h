// Causal self-attention with grouped key/value heads (GQA), a
// straightforward version: scores are materialized one query row at a time
// and only the row's log-sum-exp is saved for the backward (which recomputes
// the probabilities), as FlashAttention does, without its tiling.
//
// Shapes (rows are batch-major tokens, t = b * seq + i):
//   q, out, dq      [batch * seq, heads * head_dim]
//   k, v, dk, dv    [batch * seq, kv_heads * head_dim]
//   lse             [batch, heads, seq] float
// Query head h reads key/value head h / (heads / kv_heads).
// Math, per batch b, head h, query i, with c = 1 / sqrt(head_dim):
//   s_ij     = c * q_i . k_j            for j <= i (causal)
//   lse_i    = log sum_j exp(s_ij);  p_ij = exp(s_ij - lse_i)
//   out_i    = sum_j p_ij v_j                                  (=)
// Backward, given dout:
//   D_i      = dout_i . out_i
//   ds_ij    = p_ij * (dout_i . v_j - D_i)
//   dq_i     = c * sum_j ds_ij k_j                             (=)
//   dk_j     = c * sum_{h in group, i >= j} ds_ij q_i          (=)
//   dv_j     = sum_{h in group, i >= j} p_ij dout_i            (=)
// One dtype (f32 or bf16) for the tensors; fp32 arithmetic; lse fp32.
// The CUDA kernels keep a query row's scores in shared memory: seq <= 4096
// and head_dim <= 512 there (InvalidArgument otherwise).
// Launchers follow ops/op_util.h.
#ifndef BATON_OPS_ATTENTION_H_
#define BATON_OPS_ATTENTION_H_

#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct AttentionShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // divides heads
  int64_t head_dim = 0;
  DataType dtype = DataType::kF32;
};

Status AttentionForward(Stream& stream, const AttentionShape& shape,
                        const void* q, const void* k, const void* v, void* out,
                        float* lse);
Status AttentionBackward(Stream& stream, const AttentionShape& shape,
                         const void* dout, const void* q, const void* k,
                         const void* v, const void* out, const float* lse,
                         void* dq, void* dk, void* dv);

}  // namespace baton::ops

#endif  // BATON_OPS_ATTENTION_H_
