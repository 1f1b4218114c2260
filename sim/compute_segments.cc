// The compute model's block segments, software-stack variants and the
// kernels of a tensor / context parallel rank (sim/compute_model.h).
#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/sim/compute_model.h"

namespace baton::sim {

StatusOr<KernelStack> KernelStackFor(const std::string& stack, const std::string& gemm_dtype,
                                     const ClusterSpec& cluster) {
  KernelStack k;
  if (stack == "compiled") {
    k.compiled = true;
  } else if (stack != "eager") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--kernel-stack must be eager or compiled, got \"", stack, "\""));
  }
  if (gemm_dtype == "fp8") {
    k.fp8 = true;
  } else if (gemm_dtype != "bf16") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gemm-dtype must be bf16 or fp8, got \"", gemm_dtype, "\""));
  }
  if (k.fp8 && !(cluster.fp8_tflops > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gemm-dtype=fp8: cluster ", cluster.name,
        " has no FP8 tensor cores (fp8_tflops 0)"));
  }
  return k;
}

KernelSum BlockSegments::Forward() const {
  KernelSum k;
  for (const KernelSum& s : fwd) {
    k.seconds += s.seconds;
    k.kernels += s.kernels;
  }
  return k;
}

KernelSum BlockSegments::Backward() const {
  KernelSum k;
  for (const KernelSum& s : bwd) {
    k.seconds += s.seconds;
    k.kernels += s.kernels;
  }
  return k;
}

StatusOr<double> ComputeModel::Attention(const ClusterSpec& cluster,
                                         const scheduler::ModelSpec& m,
                                         const AttentionKernel& attention, double b,
                                         double heads, double kv_heads, double seq,
                                         bool backward) const {
  BATON_ASSIGN_OR_RETURN(const int64_t kernel_d, KernelHeadDim(attention, m.head_dim));
  const double width = static_cast<double>(kernel_d);
  const double d = static_cast<double>(m.head_dim);
  if (attention.active()) {
    const double flops = 2 * b * heads * seq * seq * width;
    const double peak = cluster.peak_tflops * 1e12;
    return backward ? 2.5 * flops / (attention.bwd_utilization * peak)
                    : flops / (attention.fwd_utilization * peak);
  }
  double table_d = width;
  for (const KernelTable::Attention& a : t_->attention) {
    if (a.head_dim == d) table_d = d;
  }
  return t_->AttentionSeconds(b, heads, kv_heads, seq, table_d, backward) * compute_scale_;
}

namespace {

// Appends `k` into `sum` as it is (its kernels already counted).
void AddAll(KernelSum& sum, const KernelSum& k) {
  sum.seconds += k.seconds;
  sum.kernels += k.kernels;
}

}  // namespace

Status ComputeModel::BuildSegments(const ClusterSpec& cluster, const scheduler::ModelSpec& m,
                                   double tokens, double b, double seq,
                                   const AttentionKernel& attention, const KernelStack& stack,
                                   const ShardShape& shard) {
  const double tp = shard.tp, cp = shard.cp;
  const double T = tokens / cp;             // this rank's tokens
  const double Tn = shard.sp ? T / tp : T;  // norms and residuals
  const double h = static_cast<double>(m.hidden);
  auto div = [&](double x) { return std::ceil(x / tp); };
  const double F = div(static_cast<double>(m.intermediate));
  const double V = div(static_cast<double>(m.vocab));
  const double d = static_cast<double>(m.head_dim);
  const double H = div(static_cast<double>(m.heads));
  const double G = div(static_cast<double>(m.kv_heads));
  const double qkv = (H + 2 * G) * d;
  const double L = launch_s_;
  const double fp8 = stack.fp8 ? cluster.peak_tflops / cluster.fp8_tflops : 1.0;
  BATON_ASSIGN_OR_RETURN(double attn_f,
                         Attention(cluster, m, attention, b, H, G, seq / cp, false));
  BATON_ASSIGN_OR_RETURN(double attn_b,
                         Attention(cluster, m, attention, b, H, G, seq / cp, true));
  attn_f *= cp;  // 1 / cp of the causal attention over seq: cp x that over seq / cp
  attn_b *= cp;
  const bool compiled = stack.compiled;
  // Memory-bound ops: the table's eager kernels, or one fused kernel at
  // the copy rate (KernelStack).
  BATON_ASSIGN_OR_RETURN(const double norm_f, Op("rmsnorm", Tn * h * 4, false));
  BATON_ASSIGN_OR_RETURN(const double norm_b, Op("rmsnorm", Tn * h * 4, true));
  BATON_ASSIGN_OR_RETURN(const double glu_f, Op("swiglu", T * F * 6, false));
  BATON_ASSIGN_OR_RETURN(const double glu_b, Op("swiglu", T * F * 6, true));
  const double residual = Copy(Tn * h * 6);
  const int rope_passes = attention.no_rope ? 0 : 3;
  double rope_q = Copy(T * H * d * 8), rope_k = Copy(T * G * d * 8);
  // The attention's input projections (out, in) and its output
  // projection's input width: fused QKV, or multi-head latent attention's
  // down and up projections (DeepSeek-V2 / V3: q_a, q_b, kv_a, kv_b; the
  // down projections replicated over the tensor group, as Megatron-Core's
  // MLA keeps them; their RMSNorms on the latent) with RoPE on the rope
  // dims only.
  struct Proj {
    double out, in;
  };
  std::vector<Proj> in_proj = {{qkv, h}};
  double o_in = H * d, latent_norm = 0;
  if (m.mla.enabled()) {
    const scheduler::MlaSpec& a = m.mla;
    const double ql = static_cast<double>(a.q_lora_rank),
                 kvl = static_cast<double>(a.kv_lora_rank),
                 rope = static_cast<double>(a.qk_rope_head_dim),
                 v = static_cast<double>(a.v_head_dim),
                 nope = static_cast<double>(a.qk_nope_head_dim);
    in_proj.clear();
    if (ql > 0) {
      in_proj.push_back({ql, h});
      in_proj.push_back({H * d, ql});
    } else {
      in_proj.push_back({H * d, h});
    }
    in_proj.push_back({kvl + rope, h});
    in_proj.push_back({H * (nope + v), kvl});
    o_in = H * v;
    latent_norm = T * (ql + kvl) * 4;
    rope_q = Copy(T * H * rope * 8);
    rope_k = Copy(T * rope * 8);
  }
  // A linear of (T x k) @ (k x n): GEMM at the stack's rate.
  auto linear = [&](KernelSum& k, double& gemm, double mm, double nn, double kk) {
    const double t = Gemm(mm, nn, kk) * fp8;
    gemm += t;
    k.Add(t, L);
  };
  // An fp8 cast of `elems` elements moving `bytes_per` bytes each.
  auto cast = [&](KernelSum& k, double elems, double bytes_per) {
    if (!stack.fp8) return;
    const double t = Copy(elems * bytes_per);
    if (compiled) {
      k.Add(t, L);
    } else {  // amax, then the cast
      k.Add(t * 2 / 5, L);
      k.Add(t * 3 / 5, L);
    }
  };
  BlockSegments& g = seg_;
  g = BlockSegments{};
  g.attn_fwd = attn_f;
  g.attn_bwd = attn_b;
  // Forward.
  if (compiled) {
    g.fwd[0].Add(Copy(Tn * h * 8), L);  // residual add + RMSNorm
  } else {
    g.fwd[0].Add(norm_f, L);
  }
  for (const Proj& pr : in_proj) {
    cast(g.fwd[1], T * pr.in, 5);
    cast(g.fwd[1], pr.in * pr.out, 5);
    linear(g.fwd[1], g.gemm_fwd[1], T, pr.out, pr.in);
  }
  if (latent_norm > 0) {
    BATON_ASSIGN_OR_RETURN(const double ln, Op("rmsnorm", latent_norm, false));
    g.fwd[1].Add(ln, L);
  }
  if (compiled) {
    if (rope_passes > 0) g.fwd[1].Add(Copy(T * (H + G) * d * 4), L);
  } else {
    for (int i = 0; i < rope_passes; ++i) {
      g.fwd[1].Add(rope_q, L);
      g.fwd[1].Add(rope_k, L);
    }
  }
  g.fwd[1].Add(attn_f, L);
  cast(g.fwd[1], T * o_in, 5);
  cast(g.fwd[1], o_in * h, 5);
  linear(g.fwd[1], g.gemm_fwd[1], T, h, o_in);
  if (compiled) {
    g.fwd[2].Add(Copy(Tn * h * 8), L);
  } else {
    g.fwd[2].Add(residual, L);
    g.fwd[2].Add(norm_f, L);
  }
  cast(g.fwd[3], T * h, 5);
  cast(g.fwd[3], h * 2 * F, 5);
  linear(g.fwd[3], g.gemm_fwd[3], T, 2 * F, h);
  g.fwd[3].Add(compiled ? Copy(T * F * 6) : glu_f, L);
  cast(g.fwd[3], T * F, 5);
  cast(g.fwd[3], F * h, 5);
  linear(g.fwd[3], g.gemm_fwd[3], T, h, F);
  if (!compiled) g.fwd[3].Add(residual, L);  // compiled: in the next norm
  // Backward, segment by segment in reverse; each dgrad in the input part,
  // each wgrad in the weight part.
  auto dgrad = [&](int s, double mm, double nn, double kk) {
    double t = 0;
    linear(g.bwd_input[s], t, mm, nn, kk);
    g.gemm_bwd_input[s] += t;
    g.gemm_bwd[s] += t;
  };
  auto wgrad = [&](int s, double mm, double nn, double kk) {
    double t = 0;
    linear(g.weight, t, mm, nn, kk);
    g.gemm_bwd[s] += t;
    KernelSum one;
    one.Add(t, L);
    AddAll(g.bwd[s], one);
  };
  // The output gradient's cast, fp8 transposes of the weight (dgrad) and
  // of the input (wgrad).
  auto bwd_casts = [&](int s, double t_out, double t_in, double w) {
    cast(g.bwd_input[s], t_out, 5);
    cast(g.bwd_input[s], w, 2);
    KernelSum x;
    cast(x, t_in, 2);
    AddAll(g.weight, x);
    AddAll(g.bwd[s], x);
  };
  // MLP.
  if (!compiled) g.bwd_input[3].Add(residual, L);
  bwd_casts(3, T * h, T * F, F * h);
  dgrad(3, T, F, h);
  wgrad(3, F, h, T);
  g.bwd_input[3].Add(compiled ? Copy(T * F * 10) : glu_b, L);
  bwd_casts(3, T * 2 * F, T * h, h * 2 * F);
  dgrad(3, T, h, 2 * F);
  wgrad(3, h, 2 * F, T);
  if (compiled) {
    g.bwd_input[2].Add(Copy(Tn * h * 6), L);  // dx (and the residual)
    g.bwd_input[2].Add(Copy(Tn * h * 2), L);  // the weight's column sums
  } else {
    g.bwd_input[2].Add(norm_b, L);
    g.bwd_input[2].Add(residual, L);
  }
  // Attention.
  bwd_casts(1, T * h, T * o_in, o_in * h);
  dgrad(1, T, o_in, h);
  wgrad(1, o_in, h, T);
  g.bwd_input[1].Add(attn_b, L);
  if (compiled) {
    if (rope_passes > 0) g.bwd_input[1].Add(Copy(T * (H + G) * d * 4), L);
  } else {
    for (int i = 0; i < rope_passes; ++i) {
      g.bwd_input[1].Add(rope_q, L);
      g.bwd_input[1].Add(rope_k, L);
    }
  }
  if (latent_norm > 0) {
    BATON_ASSIGN_OR_RETURN(const double lb, Op("rmsnorm", latent_norm, true));
    g.bwd_input[1].Add(lb, L);
  }
  for (auto it = in_proj.rbegin(); it != in_proj.rend(); ++it) {
    bwd_casts(1, T * it->out, T * it->in, it->in * it->out);
    dgrad(1, T, it->in, it->out);
    wgrad(1, it->in, it->out, T);
  }
  if (compiled) {
    g.bwd_input[0].Add(Copy(Tn * h * 6), L);
    g.bwd_input[0].Add(Copy(Tn * h * 2), L);
  } else {
    g.bwd_input[0].Add(norm_b, L);
  }
  for (int s = 0; s < 4; ++s) AddAll(g.bwd[s], g.bwd_input[s]);
  if (stack.eager_bf16() && shard.trivial()) return absl::OkStatus();
  // Another stack or a shard: every unit from these kernels.
  block_fwd_ = g.Forward();
  block_bwd_ = g.Backward();
  block_bwd_acc_ = block_bwd_;
  const double sizes[] = {h, h, H * d * h, G * d * h, G * d * h, H * d * h,
                          F * h, F * h, F * h};
  for (double n : sizes) block_bwd_acc_.Add(Copy(n * 6), L);
  BATON_ASSIGN_OR_RETURN(const double ce_f, Op("cross_entropy", T * V * 2, false));
  BATON_ASSIGN_OR_RETURN(const double ce_b, Op("cross_entropy", T * V * 2, true));
  emb_fwd_ = {};
  emb_fwd_.Add(Copy(T * h * 4), L);
  emb_bwd_ = {};
  emb_bwd_.Add(Copy(V * h * 2), L);
  for (int i = 0; i < kEmbeddingSortKernels; ++i) emb_bwd_.Add(Copy(T * 8), L);
  emb_bwd_.Add(Copy(T * h * 8), L);
  norm_fwd_ = {};
  norm_bwd_ = {};
  norm_fwd_.Add(compiled ? Copy(Tn * h * 4) : norm_f, L);
  norm_bwd_.Add(compiled ? Copy(Tn * h * 6) : norm_b, L);
  head_fwd_ = {};
  head_bwd_ = {};
  head_bwd_in_ = {};
  head_bwd_w_ = {};
  head_fwd_.Add(Gemm(T, V, h), L);
  head_fwd_.Add(compiled ? Copy(T * V * 2) : ce_f, L);
  head_bwd_in_.Add(compiled ? Copy(T * V * 4) : ce_b, L);
  head_bwd_in_.Add(Gemm(T, h, V), L);
  head_bwd_w_.Add(Gemm(h, V, T), L);
  head_bwd_ = head_bwd_in_;
  AddAll(head_bwd_, head_bwd_w_);
  return absl::OkStatus();
}

}  // namespace baton::sim
