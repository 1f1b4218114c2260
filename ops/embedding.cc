#include "baton/ops/embedding.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

Status Check(const char* op, const EmbeddingShape& s) {
  BATON_RETURN_IF_ERROR(CheckPositive(
      op, {{"tokens", s.tokens}, {"vocab", s.vocab}, {"hidden", s.hidden}}));
  return CheckFloatType(op, "dtype", s.dtype);
}

Status CheckIds(const char* op, const EmbeddingShape& s, const int32_t* ids) {
  for (int64_t t = 0; t < s.tokens; ++t) {
    if (ids[t] < 0 || ids[t] >= s.vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          op, ": token ", t, " has id ", ids[t], ", outside [0, ", s.vocab, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status EmbeddingForward(Stream& stream, const EmbeddingShape& s,
                        const int32_t* ids, const void* table, void* y) {
  constexpr const char* kOp = "EmbeddingForward";
  BATON_RETURN_IF_ERROR(Check(kOp, s));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"ids", ids}, {"table", table}, {"y", y}}));
  return OnStream(
      stream, kOp,
      [=]() {
        BATON_RETURN_IF_ERROR(CheckIds(kOp, s, ids));
        for (int64_t t = 0; t < s.tokens; ++t) {
          const int64_t src = int64_t{ids[t]} * s.hidden, dst = t * s.hidden;
          for (int64_t i = 0; i < s.hidden; ++i) {
            StoreF(y, s.dtype, dst + i, LoadF(table, s.dtype, src + i));
          }
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchEmbeddingForward(
            ids, table, y, s.tokens, s.vocab, s.hidden,
            static_cast<int>(s.dtype), st);
      }));
}

Status EmbeddingBackward(Stream& stream, const EmbeddingShape& s,
                         const int32_t* ids, const void* dy, void* dtable,
                         DataType dtable_dtype, bool accumulate) {
  constexpr const char* kOp = "EmbeddingBackward";
  BATON_RETURN_IF_ERROR(Check(kOp, s));
  BATON_RETURN_IF_ERROR(
      CheckNotNull(kOp, {{"ids", ids}, {"dy", dy}, {"dtable", dtable}}));
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "dtable dtype", dtable_dtype));
  return OnStream(
      stream, kOp,
      [=]() {
        BATON_RETURN_IF_ERROR(CheckIds(kOp, s, ids));
        const int64_t n = s.vocab * s.hidden;
        std::vector<float> acc(n);
        for (int64_t i = 0; i < n; ++i) {
          acc[i] = accumulate ? LoadF(dtable, dtable_dtype, i) : 0.0f;
        }
        for (int64_t t = 0; t < s.tokens; ++t) {
          float* row = acc.data() + int64_t{ids[t]} * s.hidden;
          for (int64_t i = 0; i < s.hidden; ++i) {
            row[i] += LoadF(dy, s.dtype, t * s.hidden + i);
          }
        }
        for (int64_t i = 0; i < n; ++i) StoreF(dtable, dtable_dtype, i, acc[i]);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchEmbeddingBackward(
            ids, dy, dtable, static_cast<int>(dtable_dtype), accumulate,
            s.tokens, s.vocab, s.hidden, static_cast<int>(s.dtype), st);
      }));
}

}  // namespace baton::ops
