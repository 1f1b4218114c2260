#include "baton/scheduler/tensor_parallel.h"

#include "absl/strings/str_cat.h"

namespace baton::scheduler {

StatusOr<ModelSpec> TensorParallelSlice(const ModelSpec& spec, int tp, bool vocab_parallel) {
  if (tp < 1) {
    return absl::InvalidArgumentError(absl::StrCat("--tp must be at least 1, got ", tp));
  }
  auto check = [&](const char* what, int64_t n) -> Status {
    if (n % tp == 0) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("--tp=", tp, " does not divide the model's ",
                                                   n, " ", what, " (", spec.name, ")"));
  };
  BATON_RETURN_IF_ERROR(check("heads", spec.heads));
  BATON_RETURN_IF_ERROR(check("KV heads", spec.kv_heads));
  BATON_RETURN_IF_ERROR(check("FFN width", spec.intermediate));
  if (vocab_parallel && spec.vocab % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab=", spec.vocab, " not divisible by --tp=", tp,
        " (the embedding and the head split by vocabulary rows; ", spec.name, ")"));
  }
  ModelSpec s = spec;
  s.heads /= tp;
  s.kv_heads /= tp;
  s.intermediate /= tp;
  if (vocab_parallel) s.vocab /= tp;
  return s;
}

TensorSplit TensorSplitOf(const std::string& name, bool vocab_parallel) {
  const size_t dot = name.rfind('.');
  const std::string p = dot == std::string::npos ? name : name.substr(dot + 1);
  if (p == "wq" || p == "wk" || p == "wv" || p == "w_gate" || p == "w_up") {
    return TensorSplit::kRows;
  }
  if (p == "wo" || p == "w_down") return TensorSplit::kColumns;
  // The vocabulary-parallel embedding and head: a block of vocabulary rows.
  if (vocab_parallel &&
      (name == "embedding.tok_embeddings.weight" || name == "lm_head.output.weight")) {
    return TensorSplit::kRows;
  }
  return TensorSplit::kReplicated;
}

int64_t TensorWholeIndex(TensorSplit split, const std::vector<int64_t>& slice_shape, int tp,
                         int rank, int64_t i) {
  if (split == TensorSplit::kReplicated || slice_shape.size() != 2) return i;
  const int64_t rows = slice_shape[0], cols = slice_shape[1];
  if (split == TensorSplit::kRows) return rank * rows * cols + i;
  const int64_t r = i / cols, c = i % cols;
  return r * cols * tp + rank * cols + c;
}

}  // namespace baton::scheduler
