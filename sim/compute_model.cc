#include "baton/sim/compute_model.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace baton::sim {

std::vector<std::string> AttentionKernelNames() {
  return {"table", "triton", "triton-alibi"};
}

StatusOr<AttentionKernel> AttentionKernelPreset(const std::string& name,
                                                const std::string& gpu) {
  if (name == "table") return AttentionKernel{};
  if (name != "triton" && name != "triton-alibi") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown attention kernel \"", name, "\"; kernels: ",
                     absl::StrJoin(AttentionKernelNames(), ", ")));
  }
  // FlashAttention-2 reaches up to 73% of the A100's dense peak (Dao 2023,
  // arXiv:2307.08691 section 4.1) and 35% of the H100's (Shah et al. 2024,
  // FlashAttention-3, arXiv:2407.08608 abstract), and is 1.3-1.5x faster
  // than FlashAttention in Triton forward and about 2x backward (Dao 2023,
  // section 4.1). Triton FlashAttention pads the head dimension
  // (KernelHeadDim: mosaicml/llm-foundry
  // llmfoundry/models/layers/flash_attn_triton.py, BLOCK_HEADDIM =
  // max(triton.next_power_of_2(d), 16)).
  double fa2 = 0;
  if (gpu == "h100") fa2 = 0.35;
  if (gpu == "a100") fa2 = 0.73;
  if (fa2 == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "attention kernel \"", name, "\" has published figures for the h100 "
        "and a100 clusters only, not \"", gpu, "\""));
  }
  AttentionKernel k;
  k.fwd_utilization = fa2 / 1.4;
  k.bwd_utilization = fa2 / 2;
  k.pad_head_dim = true;
  k.no_rope = name == "triton-alibi";
  return k;
}

StatusOr<int64_t> KernelHeadDim(const AttentionKernel& kernel, int64_t head_dim) {
  if (head_dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("head_dim must be positive, got ", head_dim));
  }
  if (kernel.pad_head_dim) {
    // llmfoundry/models/layers/flash_attn_triton.py, _flash_attn_forward:
    // assert d <= 128; BLOCK_HEADDIM = max(triton.next_power_of_2(d), 16).
    if (head_dim > 128) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the Triton FlashAttention kernel runs head dims up to 128 "
          "(flash_attn_triton.py asserts d <= 128); the model's is ", head_dim));
    }
    int64_t w = 16;
    while (w < head_dim) w *= 2;
    return w;
  }
  // FlashAttention-2 csrc/flash_attn/src/static_switch.h HEADDIM_SWITCH.
  for (int64_t t : {32, 64, 96, 128, 160, 192, 256}) {
    if (head_dim <= t) return t;
  }
  return head_dim;
}

double ComputeModel::Gemm(double m, double n, double k) const {
  // A GEMM also reads and writes its operands: it is never faster than
  // that traffic at the device's copy rate (the tiny shapes of test models).
  const double traffic = 2 * (m * k + k * n + m * n) / copy_Bps_;
  return std::max(t_->GemmSeconds(m, n, k) * compute_scale_, traffic);
}

double ComputeModel::Copy(double bytes) const { return bytes / copy_Bps_; }

StatusOr<double> ComputeModel::Op(const char* op, double bytes,
                                  bool backward) const {
  BATON_ASSIGN_OR_RETURN(const double s, t_->ElementwiseSeconds(op, bytes, backward));
  return s * memory_scale_;
}

KernelSum ComputeModel::Optimizer(double params, double adam_traffic) const {
  KernelSum k;
  k.Add(Copy(params * 4), launch_s_);      // gradient norm: read fp32 grad
  k.Add(Copy(params * 8), launch_s_);      // clip: scale it in place
  k.Add(t_->AdamwSeconds(params) * memory_scale_ * adam_traffic, launch_s_);
  return k;
}

void ComputeModel::AddLora(int64_t rank, uint32_t targets) {
  const double r = static_cast<double>(rank), T = T_, L = launch_s_;
  // [out, in] of q, k, v, o, gate, up, down (scheduler/layout.h order).
  const double shapes[7][2] = {{q_, h_}, {kv_, h_}, {kv_, h_}, {h_, q_},
                               {F_, h_}, {F_, h_}, {h_, F_}};
  for (int t = 0; t < 7; ++t) {
    if (!(targets & (1u << t))) continue;
    const double out = shapes[t][0], in = shapes[t][1];
    block_fwd_.Add(Gemm(T, r, in), L);      // u = x A^T
    block_fwd_.Add(Copy(T * r * 4), L);     // u *= alpha / r
    block_fwd_.Add(Gemm(T, out, r), L);     // y += u B^T
    KernelSum& z = block_bwd_frozen_;
    z.Add(Gemm(T, r, out), L);    // du = dy B
    z.Add(Gemm(out, r, T), L);    // dB = dy^T u
    z.Add(Copy(T * r * 4), L);    // du *= alpha / r
    z.Add(Gemm(r, in, T), L);     // dA = du^T x
    z.Add(Gemm(T, in, r), L);     // dx += du A
  }
}

KernelSum ComputeModel::CopyBytes(double bytes) const {
  KernelSum k;
  k.Add(Copy(bytes), launch_s_);
  return k;
}

// The embedding, the final norm and the head (their kernels as the
// executor's units run them).
void ComputeModel::AddEndUnits(double norm_f, double norm_b, double ce_f, double ce_b,
                               double T, double h, double V) {
  const double L = launch_s_;
  emb_fwd_.Add(Copy(T * h * 4), L);
  emb_bwd_.Add(Copy(V * h * 2), L);  // zero the dense gradient
  for (int i = 0; i < kEmbeddingSortKernels; ++i) emb_bwd_.Add(Copy(T * 8), L);
  emb_bwd_.Add(Copy(T * h * 8), L);  // segmented sum in fp32, write bf16

  norm_fwd_.Add(norm_f, L);
  norm_bwd_.Add(norm_b, L);

  head_fwd_.Add(Gemm(T, V, h), L);
  head_fwd_.Add(ce_f, L);
  head_bwd_.Add(ce_b, L);
  head_bwd_.Add(Gemm(T, h, V), L);
  head_bwd_.Add(Gemm(h, V, T), L);
  head_bwd_frozen_.Add(ce_b, L);
  head_bwd_frozen_.Add(Gemm(T, h, V), L);
  head_bwd_in_.Add(ce_b, L);
  head_bwd_in_.Add(Gemm(T, h, V), L);
  head_bwd_w_.Add(Gemm(h, V, T), L);
}

StatusOr<ComputeModel> ComputeModel::Create(const KernelTable& table,
                                            const ClusterSpec& cluster,
                                            const scheduler::ModelSpec& m,
                                            int64_t tokens_i, int64_t micro_batch,
                                            int64_t seq,
                                            const AttentionKernel& attention,
                                            const KernelStack& stack,
                                            const ShardShape& shard) {
  if (shard.tp < 1 || shard.cp < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "compute model: tensor and context parallel sizes must be >= 1, got ", shard.tp,
        " and ", shard.cp));
  }
  if (stack.fp8 && !(cluster.fp8_tflops > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--gemm-dtype=fp8: cluster ", cluster.name, " has no FP8 peak (fp8_tflops 0)"));
  }
  ComputeModel c(table);
  c.compute_scale_ = table.peak_tflops > 0 ? table.peak_tflops / cluster.peak_tflops : 1;
  c.memory_scale_ = table.hbm_gbps > 0 ? table.hbm_gbps / cluster.hbm_gbps : 1;
  c.launch_s_ = table.launch_us * 1e-6;
  const double copy_gbps = table.copy_gbps > 0   ? table.copy_gbps
                           : table.hbm_gbps > 0 ? table.hbm_gbps
                                                : cluster.hbm_gbps;
  c.copy_Bps_ = copy_gbps * 1e9 / c.memory_scale_;
  const double T = static_cast<double>(tokens_i);
  const double h = static_cast<double>(m.hidden);
  const double F = static_cast<double>(m.intermediate);
  const double V = static_cast<double>(m.vocab);
  const double d = static_cast<double>(m.head_dim);
  const double H = static_cast<double>(m.heads);
  const double G = static_cast<double>(m.kv_heads);
  const double qkv = (H + 2 * G) * d;
  const double L = c.launch_s_;
  const double b = static_cast<double>(micro_batch);
  const double s = static_cast<double>(seq);

  BATON_ASSIGN_OR_RETURN(const double norm_f, c.Op("rmsnorm", T * h * 4, false));
  BATON_ASSIGN_OR_RETURN(const double norm_b, c.Op("rmsnorm", T * h * 4, true));
  BATON_ASSIGN_OR_RETURN(const double glu_f, c.Op("swiglu", T * F * 6, false));
  BATON_ASSIGN_OR_RETURN(const double glu_b, c.Op("swiglu", T * F * 6, true));
  BATON_ASSIGN_OR_RETURN(const double ce_f, c.Op("cross_entropy", T * V * 2, false));
  BATON_ASSIGN_OR_RETURN(const double ce_b, c.Op("cross_entropy", T * V * 2, true));
  BATON_ASSIGN_OR_RETURN(const double attn_f,
                         c.Attention(cluster, m, attention, b, H, G, s, false));
  BATON_ASSIGN_OR_RETURN(const double attn_b,
                         c.Attention(cluster, m, attention, b, H, G, s, true));
  const double residual = c.Copy(T * h * 6);
  const int rope_passes = attention.no_rope ? 0 : 3;
  const double rope_q = c.Copy(T * H * d * 8), rope_k = c.Copy(T * G * d * 8);

  KernelSum& f = c.block_fwd_;
  f.Add(norm_f, L);
  f.Add(c.Gemm(T, qkv, h), L);
  for (int i = 0; i < rope_passes; ++i) {
    f.Add(rope_q, L);
    f.Add(rope_k, L);
  }
  f.Add(attn_f, L);
  c.attn_core_fwd_.Add(attn_f, L);
  f.Add(c.Gemm(T, h, H * d), L);
  f.Add(residual, L);
  f.Add(norm_f, L);
  f.Add(c.Gemm(T, 2 * F, h), L);
  f.Add(glu_f, L);
  f.Add(c.Gemm(T, h, F), L);
  f.Add(residual, L);

  KernelSum& g = c.block_bwd_;
  g.Add(residual, L);
  g.Add(c.Gemm(T, F, h), L);  // down dgrad
  g.Add(c.Gemm(F, h, T), L);  // down wgrad
  g.Add(glu_b, L);
  g.Add(c.Gemm(T, h, 2 * F), L);
  g.Add(c.Gemm(h, 2 * F, T), L);
  g.Add(norm_b, L);
  g.Add(residual, L);
  g.Add(c.Gemm(T, H * d, h), L);  // o
  g.Add(c.Gemm(H * d, h, T), L);
  g.Add(attn_b, L);
  for (int i = 0; i < rope_passes; ++i) {
    g.Add(rope_q, L);
    g.Add(rope_k, L);
  }
  g.Add(c.Gemm(T, h, qkv), L);
  g.Add(c.Gemm(h, qkv, T), L);
  g.Add(norm_b, L);
  c.block_bwd_acc_ = g;
  KernelSum& z = c.block_bwd_frozen_;  // g without the wgrad GEMMs
  z.Add(residual, L);
  z.Add(c.Gemm(T, F, h), L);
  z.Add(glu_b, L);
  z.Add(c.Gemm(T, h, 2 * F), L);
  z.Add(norm_b, L);
  z.Add(residual, L);
  z.Add(c.Gemm(T, H * d, h), L);
  z.Add(attn_b, L);
  for (int i = 0; i < rope_passes; ++i) {
    z.Add(rope_q, L);
    z.Add(rope_k, L);
  }
  z.Add(c.Gemm(T, h, qkv), L);
  z.Add(norm_b, L);
  c.T_ = T;
  c.h_ = h;
  c.F_ = F;
  c.q_ = H * d;
  c.kv_ = G * d;
  // One add per parameter tensor (2 norms + q, k, v, o, gate, up, down)
  // of bf16 gradients: read both, write one.
  const double sizes[] = {h, h, H * d * h, G * d * h, G * d * h, H * d * h,
                          F * h, F * h, F * h};
  for (double n : sizes) c.block_bwd_acc_.Add(c.Copy(n * 6), L);

  c.AddEndUnits(norm_f, norm_b, ce_f, ce_b, T, h, V);
  // The segments (and, for another stack or a shard, every unit's kernels
  // from them): compute_segments.cc.
  BATON_RETURN_IF_ERROR(c.BuildSegments(cluster, m, T, b, s, attention, stack, shard));
  return c;
}

}  // namespace baton::sim
