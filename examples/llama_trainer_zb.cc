// LlamaRank under pipeline schedule zb-h1: the deferred weight-gradient
// pass (llama_trainer.h). The input-gradient pass (ComputeUnit with
// ComputeContext::weight_deferred) keeps, per micro-step, the gradients at
// the outputs of the unit's weights; this pass turns them into the weight
// gradients with the same kernels and operands as the unsplit backward,
// so the sums are the same. With tensor parallelism each of a block's
// backward parts (ComputeContext::tensor.segments: the MLP with its norm,
// the attention with its norm) has its own weight pass, which runs no
// tensor collective: the input-gradient part all-reduced (reduce-
// scattered, with sequence parallelism) the input gradients and kept the
// results. Under sequence parallelism the norms' weight gradients are
// partial per tensor rank (each rank's sequence shard): the last
// micro-step's weight pass sums them over the tensor group once
// (SpGradAllReduce), as the unsplit backward does.
#include "absl/strings/str_cat.h"
#include "baton/examples/llama_trainer.h"
#include "baton/ops/embedding.h"
#include "baton/ops/linear.h"
#include "baton/ops/rmsnorm.h"
#include "baton/ops/vocab_parallel.h"
#include "baton/scheduler/step_graph.h"

namespace baton::examples {

void LlamaRank::AllocateDeferred() {
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV, F = d_.F;
  const size_t e = DataTypeSize(dtype_);
  deferred_.resize(micro_steps_);
  for (Deferred& d : deferred_) {
    d.emb = Buf(T * H * e);
    d.nf = Buf(T * H * e);
    for (int64_t b = 0; b < spec_.layers; ++b) {
      BlockDeferred k;
      k.dx2 = Buf(T * H * e);
      k.dg = Buf(T * F * e);
      k.du = Buf(T * F * e);
      k.dn2 = Buf(T * H * e);
      k.dx1 = Buf(T * H * e);
      k.dq = Buf(T * Q * e);
      k.dk = Buf(T * KV * e);
      k.dv = Buf(T * KV * e);
      k.dn1 = Buf(T * H * e);
      d.blocks.push_back(k);
    }
  }
  wdx_ = Buf(T * H * e);
}

Status LlamaRank::ProjectWeight(const scheduler::ComputeContext& ctx, const char* w,
                                const ops::LinearShape& s, const void* dy, const void* x) {
  const int iw = Find(ctx, w);
  if (iw < 0 || Find(ctx, absl::StrCat(w, ".lora_a").c_str()) >= 0) {
    return absl::InternalError(
        absl::StrCat(ctx.spec->name, ": zb-h1's weight pass of ", w, " (absent, or adapted)"));
  }
  const scheduler::TensorView& gw = ctx.grads[iw];
  if (gw.data == nullptr) return absl::OkStatus();  // frozen
  return ops::LinearBackward(*ctx.stream, s, dy, x, ctx.params[iw].data, nullptr, false, gw.data,
                             gw.dtype, ctx.grad_accumulate[iw]);
}

Status LlamaRank::NormWeight(const scheduler::ComputeContext& ctx, const char* name,
                             const void* dy, const void* x, const float* rstd) {
  const int i = Find(ctx, name);
  const scheduler::TensorView& g = ctx.grads[i];
  if (g.data == nullptr) return absl::OkStatus();  // frozen
  // Sequence parallelism: this rank's rows, then the sum over the tensor
  // group after the last micro-step's.
  BATON_RETURN_IF_ERROR(ops::RmsNormBackward(*ctx.stream, sp_ ? sp_norm_ : d_.norm, dy, x,
                                             ctx.params[i].data, rstd, wdx_, false, g.data,
                                             g.dtype, ctx.grad_accumulate[i]));
  return sp_ ? SpGradAllReduce(ctx, i) : absl::OkStatus();
}

Status LlamaRank::BlockWeight(const scheduler::ComputeContext& ctx) {
  using scheduler::BlockSegment;
  using scheduler::SegmentBit;
  const int b = ctx.spec->block;
  const int m = ctx.micro_step;
  Acts& acts = ActsOf(m);
  const BlockActs& a = acts.blocks[b];
  const BlockDeferred& k = deferred_[m].blocks[b];
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV, F = d_.F;
  // A tensor-parallel part covers its segments only (0: the whole block).
  const uint8_t seg = ctx.tensor.segments;
  if (seg == 0 || (seg & SegmentBit(BlockSegment::kMlp))) {
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "w_down", {T, F, H, dtype_}, k.dx2, a.s));
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "w_gate", {T, H, F, dtype_}, k.dg, a.n2));
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "w_up", {T, H, F, dtype_}, k.du, a.n2));
    BATON_RETURN_IF_ERROR(NormWeight(ctx, "mlp_norm.weight", k.dn2, a.x1, a.rstd2));
  }
  if (seg != 0 && !(seg & SegmentBit(BlockSegment::kAttention))) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "wo", {T, Q, H, dtype_}, k.dx1, a.o));
  BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "wq", {T, H, Q, dtype_}, k.dq, a.n1));
  BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "wk", {T, H, KV, dtype_}, k.dk, a.n1));
  BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "wv", {T, H, KV, dtype_}, k.dv, a.n1));
  return NormWeight(ctx, "attn_norm.weight", k.dn1, acts.h[b], a.rstd1);
}

Status LlamaRank::WeightUnit(const scheduler::ComputeContext& ctx) {
  if (!zb_ || ctx.micro_step < 0 || ctx.micro_step >= static_cast<int>(deferred_.size())) {
    return absl::InternalError(absl::StrCat(ctx.spec->name, ": a weight-gradient pass of micro-step ",
                                            ctx.micro_step, " on a graph that is not zb-h1"));
  }
  const int m = ctx.micro_step;
  Acts& acts = ActsOf(m);
  const Deferred& k = deferred_[m];
  const int64_t T = d_.T, H = d_.H, V = d_.V;
  switch (ctx.spec->kind) {
    case scheduler::UnitKind::kEmbedding: {
      if (ctx.grads[0].data == nullptr) return absl::OkStatus();  // frozen
      if (vocab_parallel_) {  // this rank's vocabulary rows; k.emb whole
        return ops::VocabShardEmbeddingBackward(*ctx.stream, {T, V, H, dtype_}, Shard(),
                                                ids_[m], k.emb, ctx.grads[0].data,
                                                ctx.grads[0].dtype, ctx.grad_accumulate[0]);
      }
      return ops::EmbeddingBackward(*ctx.stream, {T, V, H, dtype_}, ids_[m], k.emb,
                                    ctx.grads[0].data, ctx.grads[0].dtype,
                                    ctx.grad_accumulate[0]);
    }
    case scheduler::UnitKind::kBlock:
      return BlockWeight(ctx);
    case scheduler::UnitKind::kFinalNorm: {
      const scheduler::TensorView& g = ctx.grads[0];
      if (g.data == nullptr) return absl::OkStatus();
      BATON_RETURN_IF_ERROR(ops::RmsNormBackward(
          *ctx.stream, sp_ ? sp_norm_ : d_.norm, k.nf, acts.h[spec_.layers], ctx.params[0].data,
          acts.rstdf, wdx_, false, g.data, g.dtype, ctx.grad_accumulate[0]));
      return sp_ ? SpGradAllReduce(ctx, 0) : absl::OkStatus();
    }
    case scheduler::UnitKind::kLmHead: {
      const scheduler::TensorView& g = ctx.grads[0];
      if (g.data == nullptr) return absl::OkStatus();
      return ops::LinearBackward(*ctx.stream, {T, H, V, dtype_}, acts.logits, acts.nf,
                                 ctx.params[0].data, nullptr, false, g.data, g.dtype,
                                 ctx.grad_accumulate[0]);
    }
  }
  return absl::InternalError("unknown unit kind");
}

}  // namespace baton::examples
