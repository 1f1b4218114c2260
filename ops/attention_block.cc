#include "baton/ops/attention_block.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/attention_block_kernels.h"
#endif

namespace baton::ops {
namespace {

constexpr int64_t kCudaMaxLen = 4096;      // ops_internal::kBlockCudaMaxLen
constexpr int64_t kCudaMaxHeadDim = 512;   // ops_internal::kBlockCudaMaxHeadDim
#ifdef BATON_HAVE_CUDA
static_assert(kCudaMaxLen == ops_internal::kBlockCudaMaxLen, "one limit");
static_assert(kCudaMaxHeadDim == ops_internal::kBlockCudaMaxHeadDim, "one limit");
#endif

Status CheckWindow(const char* op, const char* side, int64_t seq, int64_t begin,
                   int64_t len) {
  if (begin < 0 || begin > seq - len) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": ", side, " rows [", begin, ", ", begin + len, ") are outside the ", seq,
        " rows of a sequence"));
  }
  return absl::OkStatus();
}

// `kv`: the call reads the kv-side fields (all but Merge and Delta).
Status Check(const char* op, Stream& stream, const AttentionBlockShape& s, bool kv) {
  BATON_RETURN_IF_ERROR(CheckPositive(op, {{"batch", s.batch},
                                           {"heads", s.heads},
                                           {"kv_heads", s.kv_heads},
                                           {"head_dim", s.head_dim},
                                           {"q_seq", s.q_seq},
                                           {"q_len", s.q_len}}));
  if (s.heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": kv_heads ", s.kv_heads, " does not divide heads ", s.heads));
  }
  BATON_RETURN_IF_ERROR(CheckFloatType(op, "dtype", s.dtype));
  BATON_RETURN_IF_ERROR(CheckWindow(op, "query", s.q_seq, s.q_begin, s.q_len));
  if (kv) {
    BATON_RETURN_IF_ERROR(CheckPositive(op, {{"kv_seq", s.kv_seq}, {"kv_len", s.kv_len}}));
    BATON_RETURN_IF_ERROR(CheckWindow(op, "key", s.kv_seq, s.kv_begin, s.kv_len));
  }
  if (stream.kind() == DeviceKind::kCuda &&
      (s.q_len > kCudaMaxLen || (kv && s.kv_len > kCudaMaxLen) ||
       s.head_dim > kCudaMaxHeadDim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the CUDA kernels take q_len and kv_len <= ", kCudaMaxLen,
        " and head_dim <= ", kCudaMaxHeadDim, ", got ", s.q_len, ", ", s.kv_len, " and ",
        s.head_dim));
  }
  return absl::OkStatus();
}

#ifdef BATON_HAVE_CUDA
ops_internal::BlockDims Dims(const AttentionBlockShape& s) {
  return {s.batch,    s.heads,    s.kv_heads, s.head_dim,
          static_cast<int>(s.dtype), s.q_seq, s.q_begin, s.q_len,
          s.kv_seq,   s.kv_begin, s.kv_len,   s.mask == BlockMask::kCausal ? 1 : 0,
          s.q_pos,    s.kv_pos};
}
#endif

// The keys query row i of the block sees: rows [0, n) of the key block.
int64_t Visible(const AttentionBlockShape& s, int64_t i) {
  if (s.mask == BlockMask::kNone) return s.kv_len;
  return std::clamp<int64_t>(s.q_pos + i - s.kv_pos + 1, 0, s.kv_len);
}

float Dot(const float* a, const float* b, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// The block's rows of one tensor as floats, [batch][len][width].
class Window {
 public:
  Window(const void* p, DataType t, int64_t batch, int64_t seq, int64_t begin, int64_t len,
         int64_t width, int64_t head_dim)
      : len_(len), width_(width), head_dim_(head_dim), rows_(batch * len * width) {
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t from = (b * seq + begin) * width, to = b * len * width;
      for (int64_t e = 0; e < len * width; ++e) rows_[to + e] = LoadF(p, t, from + e);
    }
  }
  const float* at(int64_t b, int64_t i, int64_t head) const {
    return rows_.data() + (b * len_ + i) * width_ + head * head_dim_;
  }

 private:
  int64_t len_, width_, head_dim_;
  std::vector<float> rows_;
};

// Element offsets of (batch b, block row i, head) in the q-side and kv-side
// tensors, and of (b, h, block row i) in lse / delta.
struct Index {
  const AttentionBlockShape& s;
  int64_t q(int64_t b, int64_t i, int64_t h) const {
    return ((b * s.q_seq + s.q_begin + i) * s.heads + h) * s.head_dim;
  }
  int64_t kv(int64_t b, int64_t j, int64_t g) const {
    return ((b * s.kv_seq + s.kv_begin + j) * s.kv_heads + g) * s.head_dim;
  }
  int64_t row(int64_t b, int64_t h, int64_t i) const {
    return (b * s.heads + h) * s.q_seq + s.q_begin + i;
  }
};

void ForwardCpu(const AttentionBlockShape& s, const void* q, const void* k, const void* v,
                float* out, float* lse) {
  const int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  const Window Q(q, s.dtype, s.batch, s.q_seq, s.q_begin, s.q_len, s.heads * d, d);
  const Window K(k, s.dtype, s.batch, s.kv_seq, s.kv_begin, s.kv_len, s.kv_heads * d, d);
  const Window V(v, s.dtype, s.batch, s.kv_seq, s.kv_begin, s.kv_len, s.kv_heads * d, d);
  const Index at{s};
  const float c = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> p(s.kv_len);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < s.q_len; ++i) {
        float* o = out + at.q(b, i, h);
        std::fill(o, o + d, 0.0f);
        const int64_t n = Visible(s, i);
        if (n == 0) {
          lse[at.row(b, h, i)] = -INFINITY;
          continue;
        }
        float m = -INFINITY;
        for (int64_t j = 0; j < n; ++j) m = std::max(m, p[j] = c * Dot(Q.at(b, i, h), K.at(b, j, g), d));
        float l = 0;
        for (int64_t j = 0; j < n; ++j) l += (p[j] = std::exp(p[j] - m));
        for (int64_t j = 0; j < n; ++j) {
          const float* vj = V.at(b, j, g);
          for (int64_t e = 0; e < d; ++e) o[e] += p[j] * vj[e];
        }
        for (int64_t e = 0; e < d; ++e) o[e] /= l;
        lse[at.row(b, h, i)] = m + std::log(l);
      }
    }
  }
}

void MergeCpu(const AttentionBlockShape& s, float* out_a, float* lse_a, const float* out_p,
              const float* lse_p) {
  const Index at{s};
  const int64_t d = s.head_dim;
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < s.q_len; ++i) {
        const int64_t r = at.row(b, h, i), o = at.q(b, i, h);
        const float la = lse_a[r], lp = lse_p[r];
        if (lp == -INFINITY) continue;
        if (la == -INFINITY) {
          std::copy(out_p + o, out_p + o + d, out_a + o);
          lse_a[r] = lp;
          continue;
        }
        const float big = std::max(la, lp);
        const float total = big + std::log1p(std::exp(-std::abs(la - lp)));
        const float wa = std::exp(la - total), wp = std::exp(lp - total);
        for (int64_t e = 0; e < d; ++e) out_a[o + e] = wa * out_a[o + e] + wp * out_p[o + e];
        lse_a[r] = total;
      }
    }
  }
}

void DeltaCpu(const AttentionBlockShape& s, const void* dout, const void* out, float* delta) {
  const Index at{s};
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      for (int64_t i = 0; i < s.q_len; ++i) {
        const int64_t o = at.q(b, i, h);
        float sum = 0;
        for (int64_t e = 0; e < s.head_dim; ++e) {
          sum += LoadF(dout, s.dtype, o + e) * LoadF(out, s.dtype, o + e);
        }
        delta[at.row(b, h, i)] = sum;
      }
    }
  }
}

void BackwardCpu(const AttentionBlockShape& s, const void* dout, const void* q, const void* k,
                 const void* v, const float* lse, const float* delta, float* dq, float* dk,
                 float* dv) {
  const int64_t d = s.head_dim, group = s.heads / s.kv_heads;
  const Window Q(q, s.dtype, s.batch, s.q_seq, s.q_begin, s.q_len, s.heads * d, d);
  const Window DO(dout, s.dtype, s.batch, s.q_seq, s.q_begin, s.q_len, s.heads * d, d);
  const Window K(k, s.dtype, s.batch, s.kv_seq, s.kv_begin, s.kv_len, s.kv_heads * d, d);
  const Window V(v, s.dtype, s.batch, s.kv_seq, s.kv_begin, s.kv_len, s.kv_heads * d, d);
  const Index at{s};
  const float c = 1.0f / std::sqrt(static_cast<float>(d));
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < s.q_len; ++i) {
        const int64_t n = Visible(s, i);
        const float* qi = Q.at(b, i, h);
        const float* doi = DO.at(b, i, h);
        const float li = lse[at.row(b, h, i)], di = delta[at.row(b, h, i)];
        float* dqi = dq + at.q(b, i, h);
        for (int64_t j = 0; j < n; ++j) {
          const float* kj = K.at(b, j, g);
          const float* vj = V.at(b, j, g);
          const float p = std::exp(c * Dot(qi, kj, d) - li);
          const float ds = p * (Dot(doi, vj, d) - di);
          float* dkj = dk + at.kv(b, j, g);
          float* dvj = dv + at.kv(b, j, g);
          for (int64_t e = 0; e < d; ++e) {
            dqi[e] += c * ds * kj[e];
            dkj[e] += c * ds * qi[e];
            dvj[e] += p * doi[e];
          }
        }
      }
    }
  }
}

}  // namespace

ChunkMask ChunkMaskOf(int64_t q_chunk, int64_t kv_chunk) {
  if (kv_chunk < q_chunk) return ChunkMask::kFull;
  return kv_chunk == q_chunk ? ChunkMask::kDiagonal : ChunkMask::kEmpty;
}

const char* ChunkMaskName(ChunkMask m) {
  switch (m) {
    case ChunkMask::kFull:
      return "full";
    case ChunkMask::kDiagonal:
      return "diagonal";
    case ChunkMask::kEmpty:
      return "empty";
  }
  return "?";
}

AttentionBlockShape ChunkBlock(const AttentionBlockShape& base, int64_t chunk, int64_t q_slot,
                               int64_t q_chunk, int64_t kv_slot, int64_t kv_chunk) {
  AttentionBlockShape s = base;
  s.q_begin = q_slot * chunk;
  s.q_len = chunk;
  s.kv_begin = kv_slot * chunk;
  s.kv_len = chunk;
  s.mask = BlockMask::kCausal;
  s.q_pos = q_chunk * chunk;
  s.kv_pos = kv_chunk * chunk;
  return s;
}

Status AttentionBlockForward(Stream& stream, const AttentionBlockShape& s, const void* q,
                             const void* k, const void* v, float* out, float* lse) {
  constexpr const char* kOp = "AttentionBlockForward";
  BATON_RETURN_IF_ERROR(Check(kOp, stream, s, true));
  BATON_RETURN_IF_ERROR(CheckNotNull(
      kOp, {{"q", q}, {"k", k}, {"v", v}, {"out", out}, {"lse", lse}}));
  return OnStream(
      stream, kOp,
      [=]() {
        ForwardCpu(s, q, k, v, out, lse);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchAttentionBlockForward(q, k, v, out, lse, Dims(s), st);
      }));
}

Status AttentionBlockMerge(Stream& stream, const AttentionBlockShape& s, float* out_a,
                           float* lse_a, const float* out_p, const float* lse_p) {
  constexpr const char* kOp = "AttentionBlockMerge";
  BATON_RETURN_IF_ERROR(Check(kOp, stream, s, false));
  BATON_RETURN_IF_ERROR(CheckNotNull(
      kOp, {{"out_a", out_a}, {"lse_a", lse_a}, {"out_p", out_p}, {"lse_p", lse_p}}));
  return OnStream(
      stream, kOp,
      [=]() {
        MergeCpu(s, out_a, lse_a, out_p, lse_p);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchAttentionBlockMerge(out_a, lse_a, out_p, lse_p, Dims(s), st);
      }));
}

Status AttentionBlockDelta(Stream& stream, const AttentionBlockShape& s, const void* dout,
                           const void* out, float* delta) {
  constexpr const char* kOp = "AttentionBlockDelta";
  BATON_RETURN_IF_ERROR(Check(kOp, stream, s, false));
  BATON_RETURN_IF_ERROR(
      CheckNotNull(kOp, {{"dout", dout}, {"out", out}, {"delta", delta}}));
  return OnStream(
      stream, kOp,
      [=]() {
        DeltaCpu(s, dout, out, delta);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchAttentionBlockDelta(dout, out, delta, Dims(s), st);
      }));
}

Status AttentionBlockBackward(Stream& stream, const AttentionBlockShape& s, const void* dout,
                              const void* q, const void* k, const void* v, const float* lse,
                              const float* delta, float* dq, float* dk, float* dv) {
  constexpr const char* kOp = "AttentionBlockBackward";
  BATON_RETURN_IF_ERROR(Check(kOp, stream, s, true));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"dout", dout},
                                           {"q", q},
                                           {"k", k},
                                           {"v", v},
                                           {"lse", lse},
                                           {"delta", delta},
                                           {"dq", dq},
                                           {"dk", dk},
                                           {"dv", dv}}));
  return OnStream(
      stream, kOp,
      [=]() {
        BackwardCpu(s, dout, q, k, v, lse, delta, dq, dk, dv);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchAttentionBlockBackward(dout, q, k, v, lse, delta, dq, dk,
                                                          dv, Dims(s), st);
      }));
}

}  // namespace baton::ops
