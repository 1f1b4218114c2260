// The simulator's compute model: every kernel one rank runs in a training
// step, each looked up by shape in a measured KernelTable
// (sim/kernel_table.h), summed per step-graph node.
//
// Kernels per node, for T = seq x micro_batch tokens, hidden h, H heads,
// G KV heads, head dim d, FFN width F, vocabulary V (GEMM shapes m x n x k
// as the table names them: forward (T, out, in), dgrad (T, in, out),
// wgrad (in, out, T)):
//   block forward    RMSNorm; fused QKV GEMM (n = (H + 2G) d); RoPE on q
//                    and k (eager: 3 passes each, fp32 in and out); flash
//                    attention; O GEMM; residual add; RMSNorm; fused
//                    gate/up GEMM (n = 2F); SwiGLU; down GEMM; residual add.
//   block recompute  the forward again.
//   block backward   per GEMM a dgrad and a wgrad; attention, SwiGLU and two
//                    RMSNorm backwards; RoPE backward; two residual-gradient
//                    adds; with gradient accumulation (a later micro-step or
//                    a tied weight) one add per parameter into its gradient.
//   embedding        forward a row gather; backward PyTorch's dense
//                    embedding backward: zero the V x h gradient, sort the
//                    token ids (kEmbeddingSortKernels small kernels), then a
//                    segmented sum of T rows in fp32.
//   final norm       RMSNorm forward / backward.
//   LM head + loss   forward: the head GEMM and cross-entropy over V in fp32
//                    (the table's op includes the cast); backward:
//                    cross-entropy backward, dgrad and wgrad of the head.
//   optimizer        per bucket shard of P parameters: gradient-norm
//                    clipping (a read of the fp32 gradient for the norm, a
//                    read-write to scale it) and fused AdamW (the table's
//                    curve by parameters).
//   cast / copy / accumulate   device copies of 6 / 2 / 3 bytes per element
//                    byte (fp32 master -> bf16; read + write; a + b -> a).
// Each kernel costs max(its table time scaled to the GPU, the table's
// launch cost): an eager framework issues kernels back to back at
// launch_overhead_us each, so a kernel shorter than that leaves the GPU
// waiting on the host, and a longer one hides its successor's launch.
//
// Other GPUs: the table's curves scaled by published peaks. A
// compute-bound kernel (GEMM, attention) takes the table time x
// table.peak_tflops / cluster.peak_tflops; a memory-bound one (norms,
// SwiGLU, loss, optimizer, copies) x table.hbm_gbps / cluster.hbm_gbps.
// This keeps each curve's shape (tile quantization, small-shape roll-off)
// and assumes the same fraction of peak on both GPUs; for the A100 preset
// the factors are 989/312 and 3000/1800. A table measured on the
// simulated GPU itself (--kernel-table, or one with no peak_tflops /
// hbm_gbps fields) is not scaled.
//
// Plain data after construction; const methods are thread-safe.
#ifndef BATON_SIM_COMPUTE_MODEL_H_
#define BATON_SIM_COMPUTE_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/model.h"
#include "baton/sim/cluster.h"
#include "baton/sim/kernel_table.h"

namespace baton::sim {

constexpr int kEmbeddingSortKernels = 6;

// An attention kernel other than the table's, given by its fraction of the
// simulated GPU's dense peak: for a software stack whose attention kernel is
// known from published figures rather than measured (sim/validation_test.cc
// uses it for 2023 runs on Triton FlashAttention). Utilizations of 0 keep
// the table's curves. pad_head_dim: the kernel is Triton FlashAttention,
// which rounds the head dimension up to a power of two (at least 16) and
// pays for the padded width (BLOCK_HEADDIM = max(next_power_of_2(d), 16)),
// up to 128; otherwise the kernel is FlashAttention's CUDA one (see
// KernelHeadDim).
struct AttentionKernel {
  double fwd_utilization = 0;
  double bwd_utilization = 0;  // of 2.5x the forward's FLOPs
  bool pad_head_dim = false;
  // Positions enter inside the attention kernel (ALiBi biases): no RoPE
  // kernels. Applies even when the utilizations are 0.
  bool no_rope = false;
  bool active() const { return fwd_utilization > 0 && bwd_utilization > 0; }
};

// The head dimension the attention kernel runs at for a model's head_dim,
// whose width its FLOPs (and the table lookup) count:
//   pad_head_dim (Triton FlashAttention as llm-foundry ships it,
//     mosaicml/llm-foundry llmfoundry/models/layers/flash_attn_triton.py, a
//     copy of Dao-AILab/flash-attention flash_attn/flash_attn_triton.py):
//     max(next power of two, 16); InvalidArgument beyond 128 (the kernel
//     asserts d <= 128).
//   otherwise FlashAttention's CUDA kernels, the flash SDPA backend of the
//     shipped table: compiled for head dims 32, 64, 96, 128, 160, 192, 256
//     and a head dim runs the smallest template that holds it
//     (FlashAttention-2, Dao-AILab/flash-attention
//     csrc/flash_attn/src/static_switch.h HEADDIM_SWITCH, which PyTorch's
//     flash backend vendors). FlashAttention-3 on Hopper rounds to 64, 96,
//     128, 192, 256 (hopper/flash_api.cpp round_up_headdim): the same for
//     65-128 and 193-256 (MPT-30B's 112 runs as 128 in both), not for
//     d <= 32, 33-63 or 129-160; cuDNN's fused attention is closed source
//     and not modelled. Beyond 256 no flash template exists (PyTorch falls
//     back to another SDPA backend): the head dim is kept as is.
StatusOr<int64_t> KernelHeadDim(const AttentionKernel& kernel, int64_t head_dim);

// Named attention kernels (`simulate --attention-kernel=NAME`), one constant
// set per GPU type, from published figures (sources in compute_model.cc):
//   table         the kernel table's attention (default; the shipped table's
//                 is PyTorch 2.11 flash SDPA)
//   triton        FlashAttention in Triton as MosaicML's llm-foundry ran it in
//                 2023 (flash_attn_triton.py): FlashAttention-2's published
//                 fraction of peak on the GPU over 1.4 forward and 2 backward,
//                 the head dim padded to a power of two
//   triton-alibi  triton with the positions as ALiBi biases inside the
//                 kernel (no RoPE kernels): the MPT runs of the validation
//                 table
// `gpu` is the cluster's name (ClusterSpec::name); the Triton kernels have
// figures for "h100" and "a100". InvalidArgument naming the problem for an
// unknown name or a GPU without figures.
StatusOr<AttentionKernel> AttentionKernelPreset(const std::string& name,
                                                const std::string& gpu);
std::vector<std::string> AttentionKernelNames();

// The rest of a run's software stack (`simulate --kernel-stack`,
// `--gemm-dtype`): variants of the kernel table's kernels, one rule each,
// no constant fitted to a run.
//   eager     (default) the table's kernels as PyTorch eager launches
//             them, one kernel per op (the shipped table: PyTorch 2.11).
//   compiled  torch.compile (Inductor): every chain of memory-bound ops is
//             one fused kernel that moves only the bytes it must, at the
//             device copy rate (an upper bound for generated kernels):
//             residual add + RMSNorm forward 8 bytes per element of the
//             hidden state (read x, r; write r', y), its backward 8 in two
//             kernels (dx, then the weight's column sums); SwiGLU forward
//             6 (read g, u; write), backward 10; RoPE 4 per q / k element
//             each way; cross-entropy fused with its cast, 2 bytes per
//             logit forward, 4 backward. GEMMs and attention unchanged.
//   fp8       float8 linears (torchao Float8Linear / Transformer Engine,
//             dynamic tensorwise scaling): the block's four GEMMs (QKV,
//             output, gate/up, down: forward, dgrad, wgrad) at the table's
//             bf16 time x peak_tflops / fp8_tflops (the same fraction of
//             the GPU's FP8 peak; InvalidArgument on a GPU without FP8),
//             plus the casts: per linear forward an amax and a cast of
//             the input and of the weight (5 bytes per element: read,
//             read, write one byte), backward of the output gradient, and
//             fp8 transposes of the input and weight for the wgrad and
//             dgrad (2 bytes per element); two kernels per cast eager, one
//             compiled. The embedding, LM head and attention stay bf16.
struct KernelStack {
  bool compiled = false;
  bool fp8 = false;
  bool eager_bf16() const { return !compiled && !fp8; }
};
// "eager" or "compiled"; "bf16" or "fp8". InvalidArgument naming the flag
// for another name, or fp8 on a cluster whose fp8_tflops is 0.
StatusOr<KernelStack> KernelStackFor(const std::string& stack, const std::string& gemm_dtype,
                                     const ClusterSpec& cluster);

// How one rank's kernels are cut by tensor and context parallelism
// (scheduler/policy.h): GEMM widths, heads and vocabulary / tp (rounded
// up), norms and residuals on tokens / tp with sequence parallelism,
// tokens / cp, and ring attention over cp ranks: each rank holds s / cp
// queries (a load-balanced causal split) and computes 1 / cp of the causal
// attention at the rate the table gives at sequence s / cp.
struct ShardShape {
  int tp = 1;
  bool sp = false;
  int cp = 1;
  bool trivial() const { return tp == 1 && cp == 1; }
};

// A node's time and how many kernels make it.
struct KernelSum {
  double seconds = 0;
  int kernels = 0;
  void Add(double kernel_s, double launch_s) {
    seconds += kernel_s > launch_s ? kernel_s : launch_s;
    ++kernels;
  }
};

// One block's kernels split at its tensor-parallel collectives
// (scheduler/step_graph.h BlockSegment): per segment the forward, the
// whole backward, its input-gradient part (zero-bubble B) and the time of
// the GEMMs inside (what a fused collective overlaps); the weight-gradient
// GEMMs (zero-bubble W); the attention kernel's forward and backward (what
// context parallelism's ring overlaps).
struct BlockSegments {
  KernelSum fwd[4], bwd[4], bwd_input[4];
  KernelSum weight;
  double gemm_fwd[4] = {0, 0, 0, 0};
  double gemm_bwd[4] = {0, 0, 0, 0};
  double gemm_bwd_input[4] = {0, 0, 0, 0};
  double attn_fwd = 0, attn_bwd = 0;
  KernelSum Forward() const;
  KernelSum Backward() const;
};

class ComputeModel {
 public:
  // `table` must outlive the model. InvalidArgument if the table lacks an
  // op the model needs (rmsnorm, swiglu, cross_entropy) or the attention
  // kernel cannot run the model's head dim (KernelHeadDim). The table's
  // attention is looked up at the model's head dim when the table has a
  // row at it (a table measured at that shape: the padding is in its
  // time), else at KernelHeadDim's, counting that width's FLOPs (the
  // shipped table has 128 only).
  // `stack` and `shard` (defaults: the table's eager bf16 kernels, one
  // rank) change the kernels as KernelStack and ShardShape say; `tokens`
  // is the whole micro-batch (seq x micro_batch) before the context split.
  // InvalidArgument also for fp8 on a cluster without FP8, or a shard size
  // < 1.
  static StatusOr<ComputeModel> Create(const KernelTable& table,
                                       const ClusterSpec& cluster,
                                       const scheduler::ModelSpec& model,
                                       int64_t tokens, int64_t micro_batch,
                                       int64_t seq,
                                       const AttentionKernel& attention = {},
                                       const KernelStack& stack = {},
                                       const ShardShape& shard = {});

  KernelSum BlockForward() const { return block_fwd_; }
  // The attention core's forward alone (selective recompute).
  KernelSum AttentionCoreForward() const { return attn_core_fwd_; }
  KernelSum BlockBackward(bool accumulate) const {
    return accumulate ? block_bwd_acc_ : block_bwd_;
  }
  // The backward of a block whose weights are frozen (LoRA's base): the
  // dgrads only, no wgrad GEMMs (plus the adapters' GEMMs after AddLora).
  KernelSum BlockBackwardFrozen() const { return block_bwd_frozen_; }
  // LoRA adapters of `rank` on the targeted matrices (scheduler/layout.h
  // kAllLoraTargets bits): each matrix [out, in] adds to the block's
  // forward x A^T (T x rank x in), the alpha / rank scale, and (.) B^T
  // (T x out x rank); to the frozen backward the dgrads and wgrads of both
  // and the scale. Call once, after Create.
  void AddLora(int64_t rank, uint32_t targets);
  KernelSum EmbeddingForward() const { return emb_fwd_; }
  KernelSum EmbeddingBackward() const { return emb_bwd_; }
  KernelSum FinalNormForward() const { return norm_fwd_; }
  KernelSum FinalNormBackward() const { return norm_bwd_; }
  KernelSum LmHeadForward() const { return head_fwd_; }
  KernelSum LmHeadBackward() const { return head_bwd_; }
  KernelSum LmHeadBackwardFrozen() const { return head_bwd_frozen_; }  // no wgrad
  // The optimizer over `params` elements: gradient norm, clip, fused AdamW
  // (the table's), its memory traffic times `adam_traffic` (adamw8bit
  // moves 18 bytes a parameter where fp32 AdamW moves 30: 0.6).
  KernelSum Optimizer(double params, double adam_traffic = 1.0) const;
  // The block by segments (always computed; with the default stack and
  // shard BlockForward / BlockBackward(false) are their sums up to
  // rounding). Backward without gradient-accumulation adds: Megatron's
  // wgrad GEMMs accumulate into the fp32 main gradient.
  const BlockSegments& Segments() const { return seg_; }
  // Zero-bubble splits of the other units' backward (input part, weight
  // part): the head's cross-entropy and dgrad / its wgrad; the embedding's
  // whole backward is its weight part; the final norm's its input part.
  KernelSum LmHeadBackwardInput() const { return head_bwd_in_; }
  KernelSum LmHeadBackwardWeight() const { return head_bwd_w_; }
  // One device copy kernel moving `bytes` (read + write counted).
  KernelSum CopyBytes(double bytes) const;

  // The primitives the kernels above are priced with, for the other
  // cost models built on them (sim/moe_cost.h): a bf16 GEMM of (m x k) @
  // (k x n) at the table's rate scaled to the GPU, a device copy of
  // `bytes` (read + write counted), a memory-bound op of the table.
  double GemmSeconds(double m, double n, double k) const { return Gemm(m, n, k); }
  double CopySeconds(double bytes) const { return Copy(bytes); }
  StatusOr<double> OpSeconds(const char* op, double bytes, bool backward) const {
    return Op(op, bytes, backward);
  }

  double compute_scale() const { return compute_scale_; }
  double memory_scale() const { return memory_scale_; }
  double launch_s() const { return launch_s_; }

 private:
  ComputeModel(const KernelTable& t) : t_(&t) {}
  double Gemm(double m, double n, double k) const;
  double Copy(double bytes) const;
  StatusOr<double> Op(const char* op, double bytes, bool backward) const;
  // Adds the embedding's, the final norm's and the head's kernels (the
  // norm's and the loss's times given) for T tokens of width h, vocab V.
  void AddEndUnits(double norm_f, double norm_b, double ce_f, double ce_b, double T,
                   double h, double V);
  // Fills seg_ and the head's split (compute_segments.cc).
  Status BuildSegments(const ClusterSpec& cluster, const scheduler::ModelSpec& m,
                       double tokens, double micro_batch, double seq,
                       const AttentionKernel& attention, const KernelStack& stack,
                       const ShardShape& shard);
  // The attention kernel's time for b sequences of `seq` with `heads` /
  // `kv_heads` (the table's, or the AttentionKernel's utilization).
  StatusOr<double> Attention(const ClusterSpec& cluster, const scheduler::ModelSpec& m,
                             const AttentionKernel& attention, double b, double heads,
                             double kv_heads, double seq, bool backward) const;

  const KernelTable* t_;
  double compute_scale_ = 1, memory_scale_ = 1, launch_s_ = 0, copy_Bps_ = 1;
  KernelSum attn_core_fwd_, block_bwd_frozen_, head_bwd_frozen_;
  // The model's dimensions (AddLora): tokens, hidden, FFN, heads x head
  // dim, KV heads x head dim.
  double T_ = 0, h_ = 0, F_ = 0, q_ = 0, kv_ = 0;
  KernelSum block_fwd_, block_bwd_, block_bwd_acc_, emb_fwd_, emb_bwd_,
      norm_fwd_, norm_bwd_, head_fwd_, head_bwd_, head_bwd_in_, head_bwd_w_;
  BlockSegments seg_;
};

}  // namespace baton::sim

#endif  // BATON_SIM_COMPUTE_MODEL_H_
