// Blockwise attention with the online softmax: the pieces that context
// parallelism (parallel/context/: ring attention, all-gather K / V) builds
// causal GQA attention from, one block of queries against one block of
// keys / values at a time (FlashAttention's and ring attention's math,
// without their tiling).
//
// Tensors (rows batch-major as in ops/attention.h; q-side tensors have
// q_seq rows per sequence, kv-side tensors kv_seq):
//   q, dout            [batch * q_seq, heads * head_dim]      dtype
//   k, v               [batch * kv_seq, kv_heads * head_dim]  dtype
//   out (partial), dq  [batch * q_seq, heads * head_dim]      float
//   lse, delta         [batch, heads, q_seq]                  float
//   dk, dv             [batch * kv_seq, kv_heads * head_dim]  float
// A block is the query rows [q_begin, q_begin + q_len) against the key rows
// [kv_begin, kv_begin + kv_len) of every sequence; a call reads and writes
// only the block's rows (other rows of the same tensors are untouched, so
// blocks of one tensor may be issued one after another on a stream).
//
// Mask. kNone: every query of the block sees every key of the block.
// kCausal: query row q_begin + i sits at sequence position q_pos + i, key
// row kv_begin + j at kv_pos + j, and the query sees the key iff
// kv_pos + j <= q_pos + i. Between two equal chunks of one causal sequence
// the mask is full, diagonal-causal or empty (ChunkMaskOf); the positions
// also describe a query chunk against a longer prefix of keys (all-gather).
//
// Math, per batch b, head h (key / value head g = h / (heads / kv_heads)),
// query row i of the block with its visible keys J_i, c = 1 / sqrt(head_dim):
//   Forward (=):  s_ij = c q_i . k_j;  lse_i = log sum_{j in J_i} exp(s_ij)
//                 out_i = sum_{j in J_i} exp(s_ij - lse_i) v_j
//                 (J_i empty: out_i = 0, lse_i = -inf)
//   Merge (in place, the online softmax's rescaling of a running result a
//   by a partial result p of other keys):
//                 L = log(exp(lse_a) + exp(lse_p))
//                 out_a = exp(lse_a - L) out_a + exp(lse_p - L) out_p;  lse_a = L
//                 (lse_p = -inf leaves a as it is; lse_a = -inf takes p)
//   Delta (=):    delta_i = dout_i . out_i  (out: the FINAL output, dtype)
//   Backward (+=), given the final lse_i and delta_i of every query row
//   (over all its blocks): p_ij = exp(s_ij - lse_i),
//                 ds_ij = p_ij (dout_i . v_j - delta_i)
//                 dq_i += c sum_{j in J_i} ds_ij k_j
//                 dk_j += c sum_{h in group, i : j in J_i} ds_ij q_i
//                 dv_j += sum_{h in group, i : j in J_i} p_ij dout_i
// Summing the backward over the blocks that cover the keys of each query
// gives AttentionBackward's gradients; merging the forward's partials gives
// AttentionForward's out and lse.
// fp32 arithmetic; partial outputs, lse and the gradients' accumulators are
// float so that a result assembled from many blocks is rounded once, by the
// caller's cast (runtime/stream_ops.h CastFromF32).
// The CUDA kernels keep one row of scores in shared memory: q_len and
// kv_len <= 4096 and head_dim <= 512 there (InvalidArgument otherwise).
// Launchers follow ops/op_util.h: arguments checked first (InvalidArgument
// naming the op and the argument, nothing enqueued), then the work is
// enqueued on `stream`; pointers must stay valid until it has run.
#ifndef BATON_OPS_ATTENTION_BLOCK_H_
#define BATON_OPS_ATTENTION_BLOCK_H_

#include <cstdint>

#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"

namespace baton::ops {

enum class BlockMask { kNone, kCausal };

struct AttentionBlockShape {
  int64_t batch = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;  // divides heads
  int64_t head_dim = 0;
  DataType dtype = DataType::kF32;  // of q, k, v, dout, and Delta's out
  int64_t q_seq = 0;     // rows per sequence of the q-side tensors
  int64_t q_begin = 0;   // the block's query rows: [q_begin, q_begin + q_len)
  int64_t q_len = 0;
  int64_t kv_seq = 0;    // rows per sequence of the kv-side tensors
  int64_t kv_begin = 0;  // the block's key rows: [kv_begin, kv_begin + kv_len)
  int64_t kv_len = 0;
  BlockMask mask = BlockMask::kCausal;
  int64_t q_pos = 0;   // kCausal: sequence position of query row q_begin
  int64_t kv_pos = 0;  // kCausal: sequence position of key row kv_begin
};

// The causal mask between chunk q_chunk of the queries and chunk kv_chunk
// of the keys, for equal-length chunks of one sequence.
enum class ChunkMask { kFull, kDiagonal, kEmpty };
ChunkMask ChunkMaskOf(int64_t q_chunk, int64_t kv_chunk);
const char* ChunkMaskName(ChunkMask m);  // "full", "diagonal", "empty"

// The block of query chunk q_chunk (rows [q_slot * chunk, +chunk) of the
// q-side tensors) against key chunk kv_chunk (rows [kv_slot * chunk,
// +chunk) of the kv-side tensors): kCausal at the chunks' sequence
// positions, so full, diagonal or empty as ChunkMaskOf says (empty: every
// query row sees no key). The dimensions come from `base`; its windows,
// mask and positions are replaced.
AttentionBlockShape ChunkBlock(const AttentionBlockShape& base, int64_t chunk,
                               int64_t q_slot, int64_t q_chunk, int64_t kv_slot,
                               int64_t kv_chunk);

Status AttentionBlockForward(Stream& stream, const AttentionBlockShape& shape,
                             const void* q, const void* k, const void* v,
                             float* out, float* lse);

// Merges the partial (out_p, lse_p) into the running (out_a, lse_a) over
// the block's query rows (shape's q-side fields; kv-side ones unused).
Status AttentionBlockMerge(Stream& stream, const AttentionBlockShape& shape,
                           float* out_a, float* lse_a, const float* out_p,
                           const float* lse_p);

// delta over the block's query rows; dout and out are dtype.
Status AttentionBlockDelta(Stream& stream, const AttentionBlockShape& shape,
                           const void* dout, const void* out, float* delta);

Status AttentionBlockBackward(Stream& stream, const AttentionBlockShape& shape,
                              const void* dout, const void* q, const void* k,
                              const void* v, const float* lse,
                              const float* delta, float* dq, float* dk,
                              float* dv);

}  // namespace baton::ops

#endif  // BATON_OPS_ATTENTION_BLOCK_H_
