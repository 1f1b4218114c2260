// Tensor parallelism's split of a model's parameters (Megatron-LM's
// column- and row-parallel linears), as the executor's layout stores it.
//
// Each of tp ranks holds a slice of every block: the column-parallel
// linears (wq, wk, wv, w_gate, w_up; PyTorch's [out, in]) keep a block of
// output rows, so rank r owns heads [r h / tp, (r + 1) h / tp) and KV heads
// likewise (the grouped-query mapping of q head to KV head is kept); the
// row-parallel linears (wo, w_down) keep the matching block of input
// columns. The embedding table and the head (both [vocab, hidden]; one
// matrix when tied) are vocabulary-parallel (Megatron's
// VocabParallelEmbedding and parallel lm_head): rank r keeps vocabulary
// rows [r V / tp, (r + 1) V / tp). Its embedding looks up the tokens in
// that range (zero rows elsewhere) and the outputs are all-reduced; its
// head computes the logits of its vocabulary slice only, and the loss is
// the parallel cross-entropy (ops/vocab_parallel.h). Norms are replicated
// (every rank holds them whole; their gradients are equal on every tensor
// rank, as the activations they see are all-reduced). A rank's slice is
// laid out as the model TensorParallelSlice returns (heads / tp,
// kv_heads / tp, intermediate / tp, vocab / tp), so its ModelLayout,
// sharded over the data ranks, stores exactly the rank's TP slice: FSDP
// of TP-sharded parameters. Under sequence parallelism the embedding and
// head stay vocabulary-parallel: the embedding's partial lookups are
// reduce-scattered to the sequence shards and the head's input gathered
// from them (examples/llama_trainer_vocab.cc). vocab_parallel = false
// (the embedding and head replicated) is for callers that keep them whole.
//
// Plain functions; thread-safe.
#ifndef BATON_SCHEDULER_TENSOR_PARALLEL_H_
#define BATON_SCHEDULER_TENSOR_PARALLEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/model.h"

namespace baton::scheduler {

// The model one of `tp` tensor ranks computes: heads, KV heads, the FFN
// width and the vocabulary divided by tp; hidden and head_dim unchanged.
// InvalidArgument, one line naming the model's size, for tp < 1 or tp not
// dividing the heads, the KV heads, the FFN width or the vocabulary
// ("--vocab=V not divisible by --tp=T ..."). vocab_parallel false: the
// vocabulary is whole (not divided, not checked).
StatusOr<ModelSpec> TensorParallelSlice(const ModelSpec& spec, int tp,
                                        bool vocab_parallel = true);

// How a parameter (by its name "<unit>.<param>") is split over the tensor
// ranks.
enum class TensorSplit : uint8_t {
  kReplicated,  // norms
  kRows,        // column-parallel linears, embedding and head: a block of
                // output (vocabulary) rows
  kColumns,     // row-parallel linears: a block of input columns
};
// ranks; vocab_parallel false: the embedding and head kReplicated.
TensorSplit TensorSplitOf(const std::string& name, bool vocab_parallel);

// The index in the whole parameter of element `i` of tensor rank `rank`'s
// slice, whose shape is `slice_shape` (the slice model's, row-major; 1 or 2
// dimensions). Replicated parameters: i itself.
int64_t TensorWholeIndex(TensorSplit split, const std::vector<int64_t>& slice_shape, int tp,
                         int rank, int64_t i);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_TENSOR_PARALLEL_H_
