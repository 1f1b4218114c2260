#include "baton/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/ops/cudnn_attention.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

#ifdef BATON_HAVE_CUDA
constexpr int64_t kCudaMaxSeq = ops_internal::kAttentionCudaMaxSeq;
constexpr int64_t kCudaMaxHeadDim = ops_internal::kAttentionCudaMaxHeadDim;
#else
constexpr int64_t kCudaMaxSeq = 4096;  // unused without CUDA
constexpr int64_t kCudaMaxHeadDim = 512;
#endif

Status Check(const char* op, Stream& stream, const AttentionShape& s) {
  BATON_RETURN_IF_ERROR(CheckPositive(op, {{"batch", s.batch},
                                           {"seq", s.seq},
                                           {"heads", s.heads},
                                           {"kv_heads", s.kv_heads},
                                           {"head_dim", s.head_dim}}));
  if (s.heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": kv_heads ", s.kv_heads, " does not divide heads ", s.heads));
  }
  BATON_RETURN_IF_ERROR(CheckFloatType(op, "dtype", s.dtype));
  return absl::OkStatus();
}

// The limits of baton's own CUDA kernels (cuDNN's path has its own).
Status CheckCudaKernel(const char* op, Stream& stream, const AttentionShape& s) {
  if (stream.kind() == DeviceKind::kCuda &&
      (s.seq > kCudaMaxSeq || s.head_dim > kCudaMaxHeadDim)) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": the CUDA kernels take seq <= ", kCudaMaxSeq, " and head_dim <= ",
        kCudaMaxHeadDim, ", got ", s.seq, " and ", s.head_dim));
  }
  return absl::OkStatus();
}

// cuDNN's fused attention (ops/cudnn_attention.h) where it is enabled and
// applies; nullopt lets baton's kernels run (no cuDNN, a shape it does not
// take, or no cuDNN plan for the shape), else the call's own status.
std::optional<Status> TryCudnn(Stream& stream, const AttentionShape& s,
                               const std::function<Status()>& run) {
  if (!CudnnAttentionEnabled() || !CudnnAttentionApplies(stream, s).ok()) {
    return std::nullopt;
  }
  Status st = run();
  if (absl::IsUnimplemented(st)) return std::nullopt;
  return st;
}

float Dot(const float* a, const float* b, int64_t n) {
  float sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Row pointers into fp32 copies of the inputs.
struct Rows {
  const float* base;
  int64_t width;  // heads * head_dim of this tensor
  int64_t head_dim;
  const float* at(int64_t token, int64_t head) const {
    return base + token * width + head * head_dim;
  }
};

void ForwardCpu(const AttentionShape& s, const void* q, const void* k,
                const void* v, void* out, float* lse) {
  const int64_t d = s.head_dim, qw = s.heads * d, kw = s.kv_heads * d;
  const int64_t rows = s.batch * s.seq, group = s.heads / s.kv_heads;
  std::vector<float> qs, ks, vs;
  const Rows Q{AsFloats(q, s.dtype, rows * qw, qs), qw, d};
  const Rows K{AsFloats(k, s.dtype, rows * kw, ks), kw, d};
  const Rows V{AsFloats(v, s.dtype, rows * kw, vs), kw, d};
  const float c = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> p(s.seq), acc(d);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < s.seq; ++i) {
        const float* qi = Q.at(b * s.seq + i, h);
        float m = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = c * Dot(qi, K.at(b * s.seq + j, g), d);
          m = std::max(m, p[j]);
        }
        float l = 0;
        for (int64_t j = 0; j <= i; ++j) {
          p[j] = std::exp(p[j] - m);
          l += p[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j <= i; ++j) {
          const float* vj = V.at(b * s.seq + j, g);
          for (int64_t e = 0; e < d; ++e) acc[e] += p[j] * vj[e];
        }
        const int64_t o = (b * s.seq + i) * qw + h * d;
        for (int64_t e = 0; e < d; ++e) StoreF(out, s.dtype, o + e, acc[e] / l);
        lse[(b * s.heads + h) * s.seq + i] = m + std::log(l);
      }
    }
  }
}

void BackwardCpu(const AttentionShape& s, const void* dout, const void* q,
                 const void* k, const void* v, const void* out,
                 const float* lse, void* dq, void* dk, void* dv) {
  const int64_t d = s.head_dim, qw = s.heads * d, kw = s.kv_heads * d;
  const int64_t rows = s.batch * s.seq, group = s.heads / s.kv_heads;
  std::vector<float> qs, ks, vs, os, dos;
  const Rows Q{AsFloats(q, s.dtype, rows * qw, qs), qw, d};
  const Rows K{AsFloats(k, s.dtype, rows * kw, ks), kw, d};
  const Rows V{AsFloats(v, s.dtype, rows * kw, vs), kw, d};
  const Rows O{AsFloats(out, s.dtype, rows * qw, os), qw, d};
  const Rows DO{AsFloats(dout, s.dtype, rows * qw, dos), qw, d};
  const float c = 1.0f / std::sqrt(static_cast<float>(d));
  std::vector<float> dqa(rows * qw, 0.0f), dka(rows * kw, 0.0f),
      dva(rows * kw, 0.0f);
  for (int64_t b = 0; b < s.batch; ++b) {
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < s.seq; ++i) {
        const int64_t ti = b * s.seq + i;
        const float* qi = Q.at(ti, h);
        const float* doi = DO.at(ti, h);
        const float di = Dot(doi, O.at(ti, h), d);
        const float li = lse[(b * s.heads + h) * s.seq + i];
        float* dqi = dqa.data() + ti * qw + h * d;
        for (int64_t j = 0; j <= i; ++j) {
          const int64_t tj = b * s.seq + j;
          const float* kj = K.at(tj, g);
          const float* vj = V.at(tj, g);
          const float p = std::exp(c * Dot(qi, kj, d) - li);
          const float ds = p * (Dot(doi, vj, d) - di);
          float* dkj = dka.data() + tj * kw + g * d;
          float* dvj = dva.data() + tj * kw + g * d;
          for (int64_t e = 0; e < d; ++e) {
            dqi[e] += c * ds * kj[e];
            dkj[e] += c * ds * qi[e];
            dvj[e] += p * doi[e];
          }
        }
      }
    }
  }
  for (int64_t i = 0; i < rows * qw; ++i) StoreF(dq, s.dtype, i, dqa[i]);
  for (int64_t i = 0; i < rows * kw; ++i) {
    StoreF(dk, s.dtype, i, dka[i]);
    StoreF(dv, s.dtype, i, dva[i]);
  }
}

}  // namespace

Status AttentionForward(Stream& stream, const AttentionShape& s, const void* q,
                        const void* k, const void* v, void* out, float* lse) {
  constexpr const char* kOp = "AttentionForward";
  BATON_RETURN_IF_ERROR(Check(kOp, stream, s));
  BATON_RETURN_IF_ERROR(CheckNotNull(
      kOp, {{"q", q}, {"k", k}, {"v", v}, {"out", out}, {"lse", lse}}));
  if (auto done = TryCudnn(stream, s, [&] {
        return CudnnAttentionForward(stream, s, q, k, v, out, lse);
      })) {
    return *done;
  }
  BATON_RETURN_IF_ERROR(CheckCudaKernel(kOp, stream, s));
  return OnStream(
      stream, kOp,
      [=]() {
        ForwardCpu(s, q, k, v, out, lse);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchAttentionForward(
            q, k, v, out, lse, s.batch, s.seq, s.heads, s.kv_heads, s.head_dim,
            static_cast<int>(s.dtype), st);
      }));
}

Status AttentionBackward(Stream& stream, const AttentionShape& s,
                         const void* dout, const void* q, const void* k,
                         const void* v, const void* out, const float* lse,
                         void* dq, void* dk, void* dv) {
  constexpr const char* kOp = "AttentionBackward";
  BATON_RETURN_IF_ERROR(Check(kOp, stream, s));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"dout", dout},
                                           {"q", q},
                                           {"k", k},
                                           {"v", v},
                                           {"out", out},
                                           {"lse", lse},
                                           {"dq", dq},
                                           {"dk", dk},
                                           {"dv", dv}}));
  if (auto done = TryCudnn(stream, s, [&] {
        return CudnnAttentionBackward(stream, s, dout, q, k, v, out, lse, dq, dk, dv);
      })) {
    return *done;
  }
  BATON_RETURN_IF_ERROR(CheckCudaKernel(kOp, stream, s));
  return OnStream(
      stream, kOp,
      [=]() {
        BackwardCpu(s, dout, q, k, v, out, lse, dq, dk, dv);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchAttentionBackward(
            dout, q, k, v, out, lse, dq, dk, dv, s.batch, s.seq, s.heads,
            s.kv_heads, s.head_dim, static_cast<int>(s.dtype), st);
      }));
}

}  // namespace baton::ops
