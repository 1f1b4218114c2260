// Vocabulary parallelism (Megatron-LM's VocabParallelEmbedding and
// vocab_parallel_cross_entropy): each of tp ranks holds rows
// [start, start + shape.vocab) of the embedding table and of the head's
// output matrix, out of a whole vocabulary of VocabShard::vocab rows. The
// ops here are one rank's part; the caller runs the collectives between
// them over the tensor group (examples/llama_trainer_vocab.cc).
//
// Embedding, for ids [tokens] (int32 in [0, whole vocab)):
//   y[t, :]   = table[ids[t] - start, :] if start <= ids[t] < start + rows,
//               else 0                                   (=)
// (the sum of y over the ranks is the whole table's lookup). Backward:
//   dtable[v, :] = sum over t with ids[t] = start + v of dy[t, :]
//               (= or += : `accumulate`).
//
// Cross-entropy, for this rank's logits z [tokens, rows] (the columns
// start .. start + rows of the whole [tokens, V]) and targets y [tokens]:
//   1. VocabParallelRowMax:  m[t] = max_v z[t, v]
//      (the caller all-reduces MAX over the ranks: M[t])
//   2. VocabParallelSums:    s[t] = sum_v exp(z[t, v] - M[t]);
//                            zy[t] = z[t, y_t - start] on the rank whose
//                            rows hold y_t, 0 on the others
//      (the caller all-reduces SUM of s and of zy: S[t], Zy[t])
//   3. VocabParallelLoss:    loss[t] = M[t] + log S[t] - Zy[t]       (=)
//                            dz[t, v] = grad_scale * (exp(z[t, v] - M[t])
//                                       / S[t] - [start + v == y_t])  (=)
// which is ops/cross_entropy.h's loss and gradient of the whole row. The
// full logits are never gathered: per token three floats cross the group.
// z and dz share one dtype (f32 or bf16); m, s, zy, loss are fp32. The
// host path sums a row's exponentials in fp64 (as cross_entropy.h).
//
// Ids and targets are data: outside [0, whole vocab) they are
// InvalidArgument from the CPU host work (the stream carries it); the CUDA
// path writes NaN (the embedding row, the loss). Launchers follow
// ops/op_util.h; dlogits may be null (loss only) or equal to logits.
#ifndef BATON_OPS_VOCAB_PARALLEL_H_
#define BATON_OPS_VOCAB_PARALLEL_H_

#include <cstdint>

#include "baton/ops/cross_entropy.h"
#include "baton/ops/embedding.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

// This rank's rows of the vocabulary. InvalidArgument (from every op)
// unless 0 <= start and start + rows <= vocab.
struct VocabShard {
  int64_t start = 0;  // first vocabulary row this rank holds
  int64_t vocab = 0;  // the whole vocabulary
};

// shape.vocab: the rows this rank holds.
Status VocabShardEmbeddingForward(Stream& stream, const EmbeddingShape& shape,
                                  const VocabShard& shard, const int32_t* ids,
                                  const void* table, void* y);
Status VocabShardEmbeddingBackward(Stream& stream, const EmbeddingShape& shape,
                                   const VocabShard& shard, const int32_t* ids,
                                   const void* dy, void* dtable, DataType dtable_dtype,
                                   bool accumulate);

// shape.vocab: this rank's columns of the logits.
Status VocabParallelRowMax(Stream& stream, const CrossEntropyShape& shape,
                           const void* logits, float* row_max);
Status VocabParallelSums(Stream& stream, const CrossEntropyShape& shape,
                         const VocabShard& shard, const void* logits,
                         const int32_t* targets, const float* row_max, float* sum_exp,
                         float* target_logit);
Status VocabParallelLoss(Stream& stream, const CrossEntropyShape& shape,
                         const VocabShard& shard, const void* logits,
                         const int32_t* targets, const float* row_max,
                         const float* sum_exp, const float* target_logit, float* loss,
                         void* dlogits, float grad_scale);

}  // namespace baton::ops

#endif  // BATON_OPS_VOCAB_PARALLEL_H_
