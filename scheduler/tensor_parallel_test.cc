#include "baton/scheduler/tensor_parallel.h"

#include <vector>

#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

TEST(TensorParallel, SliceDividesHeadsKvHeadsAndFfn) {
  ModelSpec spec = *ModelPreset("tiny");
  auto s = TensorParallelSlice(spec, 2);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->heads, spec.heads / 2);
  EXPECT_EQ(s->kv_heads, spec.kv_heads / 2);
  EXPECT_EQ(s->intermediate, spec.intermediate / 2);
  EXPECT_EQ(s->hidden, spec.hidden);
  EXPECT_EQ(s->head_dim, spec.head_dim);
  EXPECT_EQ(s->vocab, spec.vocab / 2);
}

TEST(TensorParallel, RefusesAVocabularyThatDoesNotDivide) {
  ModelSpec spec = *ModelPreset("tiny");
  spec.vocab = 129;
  auto s = TensorParallelSlice(spec, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("--vocab=129 not divisible by --tp=2"), std::string::npos)
      << s.status();
  // Sequence parallelism's replicated embedding and head: any vocabulary.
  s = TensorParallelSlice(spec, 2, /*vocab_parallel=*/false);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->vocab, 129);
  EXPECT_EQ(TensorSplitOf("embedding.tok_embeddings.weight", false), TensorSplit::kReplicated);
  EXPECT_EQ(TensorSplitOf("lm_head.output.weight", false), TensorSplit::kReplicated);
  EXPECT_EQ(TensorSplitOf("block0.wq", false), TensorSplit::kRows);
}

TEST(TensorParallel, RefusesWhatDoesNotDivide) {
  ModelSpec spec = *ModelPreset("tiny");  // 2 KV heads
  auto s = TensorParallelSlice(spec, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("KV heads"), std::string::npos) << s.status();
  spec.kv_heads = 4;
  spec.intermediate = 6;
  s = TensorParallelSlice(spec, 4);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("FFN width"), std::string::npos) << s.status();
  spec.heads = 6;
  s = TensorParallelSlice(spec, 4);
  EXPECT_NE(s.status().message().find("6 heads"), std::string::npos) << s.status();
  EXPECT_FALSE(TensorParallelSlice(spec, 0).ok());
}

TEST(TensorParallel, SplitsByParameter) {
  for (const char* n : {"block0.wq", "block3.wk", "block0.wv", "block1.w_gate", "block1.w_up"}) {
    EXPECT_EQ(TensorSplitOf(n, true), TensorSplit::kRows) << n;
  }
  EXPECT_EQ(TensorSplitOf("block0.wo", true), TensorSplit::kColumns);
  EXPECT_EQ(TensorSplitOf("block0.w_down", true), TensorSplit::kColumns);
  for (const char* n : {"embedding.tok_embeddings.weight", "lm_head.output.weight"}) {
    EXPECT_EQ(TensorSplitOf(n, true), TensorSplit::kRows) << n;  // vocabulary rows
  }
  for (const char* n : {"block0.attn_norm.weight", "block1.mlp_norm.weight",
                        "final_norm.norm.weight"}) {
    EXPECT_EQ(TensorSplitOf(n, true), TensorSplit::kReplicated) << n;
  }
}

// Every element of a whole [4, 6] matrix is held by exactly one rank's
// slice, at the index the split says.
TEST(TensorParallel, SlicesTileTheWholeParameter) {
  const int tp = 3;
  for (TensorSplit split : {TensorSplit::kRows, TensorSplit::kColumns}) {
    const std::vector<int64_t> slice =
        split == TensorSplit::kRows ? std::vector<int64_t>{2, 6} : std::vector<int64_t>{4, 2};
    const int64_t rows = split == TensorSplit::kRows ? 6 : 4, cols = 6;
    std::vector<int> seen(rows * cols, 0);
    for (int r = 0; r < tp; ++r) {
      for (int64_t i = 0; i < slice[0] * slice[1]; ++i) {
        const int64_t w = TensorWholeIndex(split, slice, tp, r, i);
        ASSERT_GE(w, 0);
        ASSERT_LT(w, rows * cols);
        ++seen[w];
        if (split == TensorSplit::kColumns) {
          EXPECT_EQ(w / cols, i / slice[1]);          // same row
          EXPECT_EQ(w % cols, r * 2 + i % slice[1]);  // rank r's columns
        } else {
          EXPECT_EQ(w / cols, r * 2 + i / cols);      // rank r's rows
        }
      }
    }
    for (int c : seen) EXPECT_EQ(c, 1);
  }
  EXPECT_EQ(TensorWholeIndex(TensorSplit::kReplicated, {8}, 2, 1, 5), 5);
}

}  // namespace
}  // namespace baton::scheduler
