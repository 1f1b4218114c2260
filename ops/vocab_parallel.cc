#include "baton/ops/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

Status CheckShard(const char* op, int64_t rows, const VocabShard& v) {
  if (v.start < 0 || v.start + rows > v.vocab) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": rows [", v.start, ", ", v.start + rows,
                                                   ") outside the vocabulary of ", v.vocab));
  }
  return absl::OkStatus();
}

Status CheckEmbedding(const char* op, const EmbeddingShape& s, const VocabShard& v) {
  BATON_RETURN_IF_ERROR(CheckPositive(
      op, {{"tokens", s.tokens}, {"vocab", s.vocab}, {"hidden", s.hidden}}));
  BATON_RETURN_IF_ERROR(CheckFloatType(op, "dtype", s.dtype));
  return CheckShard(op, s.vocab, v);
}

Status CheckXent(const char* op, const CrossEntropyShape& s) {
  BATON_RETURN_IF_ERROR(CheckPositive(op, {{"tokens", s.tokens}, {"vocab", s.vocab}}));
  return CheckFloatType(op, "dtype", s.dtype);
}

// InvalidArgument for an id (target) outside the whole vocabulary.
Status CheckTokens(const char* op, const char* what, int64_t tokens, const int32_t* ids,
                   int64_t vocab) {
  for (int64_t t = 0; t < tokens; ++t) {
    if (ids[t] < 0 || ids[t] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": token ", t, " has ", what, " ",
                                                     ids[t], ", outside [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status VocabShardEmbeddingForward(Stream& stream, const EmbeddingShape& s,
                                  const VocabShard& v, const int32_t* ids, const void* table,
                                  void* y) {
  constexpr const char* kOp = "VocabShardEmbeddingForward";
  BATON_RETURN_IF_ERROR(CheckEmbedding(kOp, s, v));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"ids", ids}, {"table", table}, {"y", y}}));
  return OnStream(
      stream, kOp,
      [=]() {
        BATON_RETURN_IF_ERROR(CheckTokens(kOp, "id", s.tokens, ids, v.vocab));
        for (int64_t t = 0; t < s.tokens; ++t) {
          const int64_t row = int64_t{ids[t]} - v.start, dst = t * s.hidden;
          const bool mine = row >= 0 && row < s.vocab;
          for (int64_t i = 0; i < s.hidden; ++i) {
            StoreF(y, s.dtype, dst + i, mine ? LoadF(table, s.dtype, row * s.hidden + i) : 0.0f);
          }
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchVocabEmbeddingForward(ids, table, y, s.tokens, v.start,
                                                         s.vocab, v.vocab, s.hidden,
                                                         static_cast<int>(s.dtype), st);
      }));
}

Status VocabShardEmbeddingBackward(Stream& stream, const EmbeddingShape& s,
                                   const VocabShard& v, const int32_t* ids, const void* dy,
                                   void* dtable, DataType dtable_dtype, bool accumulate) {
  constexpr const char* kOp = "VocabShardEmbeddingBackward";
  BATON_RETURN_IF_ERROR(CheckEmbedding(kOp, s, v));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"ids", ids}, {"dy", dy}, {"dtable", dtable}}));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "dtable dtype", dtable_dtype));
  return OnStream(
      stream, kOp,
      [=]() {
        BATON_RETURN_IF_ERROR(CheckTokens(kOp, "id", s.tokens, ids, v.vocab));
        const int64_t n = s.vocab * s.hidden;
        std::vector<float> acc(n);
        for (int64_t i = 0; i < n; ++i) {
          acc[i] = accumulate ? LoadF(dtable, dtable_dtype, i) : 0.0f;
        }
        for (int64_t t = 0; t < s.tokens; ++t) {  // token order: deterministic
          const int64_t row = int64_t{ids[t]} - v.start;
          if (row < 0 || row >= s.vocab) continue;
          float* r = acc.data() + row * s.hidden;
          for (int64_t i = 0; i < s.hidden; ++i) r[i] += LoadF(dy, s.dtype, t * s.hidden + i);
        }
        for (int64_t i = 0; i < n; ++i) StoreF(dtable, dtable_dtype, i, acc[i]);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchVocabEmbeddingBackward(
            ids, dy, dtable, static_cast<int>(dtable_dtype), accumulate, s.tokens, v.start,
            s.vocab, v.vocab, s.hidden, static_cast<int>(s.dtype), st);
      }));
}

Status VocabParallelRowMax(Stream& stream, const CrossEntropyShape& s, const void* logits,
                           float* row_max) {
  constexpr const char* kOp = "VocabParallelRowMax";
  BATON_RETURN_IF_ERROR(CheckXent(kOp, s));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"logits", logits}, {"row_max", row_max}}));
  return OnStream(
      stream, kOp,
      [=]() {
        for (int64_t t = 0; t < s.tokens; ++t) {
          float m = -INFINITY;
          for (int64_t v = 0; v < s.vocab; ++v) m = std::max(m, LoadF(logits, s.dtype, t * s.vocab + v));
          row_max[t] = m;
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchVocabRowMax(logits, row_max, s.tokens, s.vocab,
                                               static_cast<int>(s.dtype), st);
      }));
}

Status VocabParallelSums(Stream& stream, const CrossEntropyShape& s, const VocabShard& v,
                         const void* logits, const int32_t* targets, const float* row_max,
                         float* sum_exp, float* target_logit) {
  constexpr const char* kOp = "VocabParallelSums";
  BATON_RETURN_IF_ERROR(CheckXent(kOp, s));
  BATON_RETURN_IF_ERROR(CheckShard(kOp, s.vocab, v));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"logits", logits},
                                           {"targets", targets},
                                           {"row_max", row_max},
                                           {"sum_exp", sum_exp},
                                           {"target_logit", target_logit}}));
  return OnStream(
      stream, kOp,
      [=]() {
        BATON_RETURN_IF_ERROR(CheckTokens(kOp, "target", s.tokens, targets, v.vocab));
        for (int64_t t = 0; t < s.tokens; ++t) {
          const int64_t row = t * s.vocab;
          double sum = 0;  // as cross_entropy.h: exp in float, the sum in double
          for (int64_t c = 0; c < s.vocab; ++c) {
            sum += std::exp(LoadF(logits, s.dtype, row + c) - row_max[t]);
          }
          sum_exp[t] = static_cast<float>(sum);
          const int64_t y = int64_t{targets[t]} - v.start;
          target_logit[t] = y >= 0 && y < s.vocab ? LoadF(logits, s.dtype, row + y) : 0.0f;
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchVocabSums(logits, targets, row_max, sum_exp, target_logit,
                                             s.tokens, v.start, s.vocab, v.vocab,
                                             static_cast<int>(s.dtype), st);
      }));
}

Status VocabParallelLoss(Stream& stream, const CrossEntropyShape& s, const VocabShard& v,
                         const void* logits, const int32_t* targets, const float* row_max,
                         const float* sum_exp, const float* target_logit, float* loss,
                         void* dlogits, float grad_scale) {
  constexpr const char* kOp = "VocabParallelLoss";
  BATON_RETURN_IF_ERROR(CheckXent(kOp, s));
  BATON_RETURN_IF_ERROR(CheckShard(kOp, s.vocab, v));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"logits", logits},
                                           {"targets", targets},
                                           {"row_max", row_max},
                                           {"sum_exp", sum_exp},
                                           {"target_logit", target_logit},
                                           {"loss", loss}}));
  if (!std::isfinite(grad_scale)) {
    return absl::InvalidArgumentError("VocabParallelLoss: grad_scale is not finite");
  }
  return OnStream(
      stream, kOp,
      [=]() {
        BATON_RETURN_IF_ERROR(CheckTokens(kOp, "target", s.tokens, targets, v.vocab));
        for (int64_t t = 0; t < s.tokens; ++t) {
          loss[t] = static_cast<float>(row_max[t] + std::log(static_cast<double>(sum_exp[t])) -
                                       target_logit[t]);
          if (dlogits == nullptr) continue;
          const float inv = 1.0f / sum_exp[t];
          const int64_t row = t * s.vocab, y = int64_t{targets[t]} - v.start;
          for (int64_t c = 0; c < s.vocab; ++c) {
            const float p = std::exp(LoadF(logits, s.dtype, row + c) - row_max[t]) * inv;
            StoreF(dlogits, s.dtype, row + c, grad_scale * (p - (c == y ? 1.0f : 0.0f)));
          }
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchVocabLoss(logits, targets, row_max, sum_exp, target_logit,
                                             loss, dlogits, grad_scale, s.tokens, v.start,
                                             s.vocab, v.vocab, static_cast<int>(s.dtype), st);
      }));
}

}  // namespace baton::ops
