// Sequence parallelism in the llama trainer (llama_trainer.h, "Sequence
// parallelism"): the units' compute on this tensor rank's sequence shard,
// around the graph's AG-TP / RS-TP nodes.
#include <chrono>

#include "absl/strings/str_cat.h"
#include "baton/examples/llama_trainer.h"
#include "baton/ops/cross_entropy.h"
#include "baton/ops/embedding.h"
#include "baton/ops/swiglu.h"
#include "baton/runtime/stream_ops.h"
#include "baton/scheduler/tensor_parallel.h"

namespace baton::examples {

using scheduler::BlockSegment;
using scheduler::NodeKind;
using scheduler::SegmentBit;

Status LlamaRank::SpGradAllReduce(const scheduler::ComputeContext& ctx, int i) {
  // Once per step: after the last micro-step's backward has accumulated the
  // shard's contributions of every micro-step.
  // (zb-h1: the weight pass's; its input-gradient pass has no gradients.)
  if (i < 0 || static_cast<size_t>(i) >= ctx.grads.size() || ctx.grads[i].data == nullptr ||
      ctx.micro_step != micro_steps_ - 1) {
    return absl::OkStatus();
  }
  // Only the norms' gradients (the embedding and head are split by
  // vocabulary: their gradients are whole on each rank's slice).
  if (scheduler::TensorSplitOf(ctx.params[i].param->name, /*vocab_parallel=*/true) !=
      scheduler::TensorSplit::kReplicated) {
    return absl::InternalError(absl::StrCat(ctx.params[i].param->name,
                                            ": not a replicated parameter"));
  }
  CollectiveOptions opts;
  opts.tag = scheduler::kFirstTrainerTag;
  return SpTimed(*ctx.stream, [&] {
    return ctx.tensor.comm->AllReduce(ctx.grads[i].data, ctx.grads[i].data,
                                      static_cast<size_t>(ctx.params[i].param->numel),
                                      ctx.grads[i].dtype, ReduceOp::kSum, *ctx.stream, opts);
  });
}

Status LlamaRank::SpReduceScatter(const scheduler::ComputeContext& ctx, const void* dn) {
  CollectiveOptions opts;
  opts.tag = scheduler::kFirstTrainerTag;
  return SpTimed(*ctx.stream, [&] {
    return ctx.tensor.comm->ReduceScatter(dn, sp_dn_, static_cast<size_t>(sp_rows_ * d_.H),
                                          dtype_, ReduceOp::kSum, *ctx.stream, opts);
  });
}

Status LlamaRank::MeasureTensorWaits(bool on) {
  if (on && device_.kind() != DeviceKind::kHost) {
    return absl::UnimplementedError("llama trainer: tensor waits are measured on the host device");
  }
  measure_tp_ = on;
  return absl::OkStatus();
}

double LlamaRank::TakeTensorWaitMs() { return static_cast<double>(tp_wait_ns_.exchange(0)) / 1e6; }

Status LlamaRank::SpTimed(Stream& cs, const std::function<Status()>& f) {
  if (!measure_tp_) return f();
  auto now = [] {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  };
  BATON_RETURN_IF_ERROR(cs.Enqueue([this, now]() -> Status {
    tp_mark_ns_ = now();
    return absl::OkStatus();
  }));
  BATON_RETURN_IF_ERROR(f());
  return cs.Enqueue([this, now]() -> Status {
    tp_wait_ns_ += now() - tp_mark_ns_;
    return absl::OkStatus();
  });
}

Status LlamaRank::SpRowParallel(const scheduler::ComputeContext& ctx, const char* w,
                                const ops::LinearShape& shape, const void* res, const void* x,
                                void* out) {
  BATON_RETURN_IF_ERROR(Project(ctx, w, shape, x, out, false));
  const size_t e = DataTypeSize(dtype_);
  char* mine = static_cast<char*>(out) + static_cast<size_t>(ctx.tensor.rank * sp_rows_ * d_.H) * e;
  return AccumulateInto(*ctx.stream, mine, res, dtype_, static_cast<size_t>(sp_rows_ * d_.H));
}

Status LlamaRank::SpComputeUnit(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  Acts& acts = ActsOf(ctx.micro_step);
  const bool backward = ctx.kind == NodeKind::kBackward;
  if (ctx.kind == NodeKind::kBackwardWeight) return WeightUnit(ctx);  // llama_trainer_zb.cc
  if (ctx.kind == NodeKind::kRecompute) {
    if (ctx.recompute == scheduler::Recompute::kSelective) return AttentionCore(ctx);
    return absl::UnimplementedError("llama trainer: full recompute with sequence parallelism");
  }
  switch (ctx.spec->kind) {
    case scheduler::UnitKind::kEmbedding:
      // Vocabulary-parallel under SP too (SP needs TP > 1): the partial
      // lookups reduce-scattered to the shards, llama_trainer_vocab.cc.
      return VocabEmbedding(ctx);
    case scheduler::UnitKind::kBlock:
      if (ctx.tensor.chunks > 0) {  // tp_comm_overlap: llama_trainer_sp_overlap.cc
        if (ctx.tensor.stream == nullptr) {
          return absl::InternalError(absl::StrCat(ctx.spec->name, ": no tensor stream"));
        }
        if (!backward) return SpOverlapForward(ctx);
        if (ctx.tensor.segments & SegmentBit(BlockSegment::kMlp)) {
          BATON_RETURN_IF_ERROR(SpOverlapMlpBackward(ctx));
        }
        if (ctx.tensor.segments & SegmentBit(BlockSegment::kAttention)) {
          BATON_RETURN_IF_ERROR(SpOverlapAttentionBackward(ctx));
        }
        return absl::OkStatus();
      }
      if (!backward) return SpBlockForward(ctx);
      if (ctx.tensor.segments & SegmentBit(BlockSegment::kMlp)) {
        BATON_RETURN_IF_ERROR(SpMlpBackward(ctx));
      }
      if (ctx.tensor.segments & SegmentBit(BlockSegment::kAttention)) {
        BATON_RETURN_IF_ERROR(SpAttentionBackward(ctx));
      }
      return absl::OkStatus();
    case scheduler::UnitKind::kFinalNorm: {
      void* x = acts.h[spec_.layers];
      if (!backward) {
        if (ctx.tensor.input != nullptr) {  // the last block's output shard
          BATON_RETURN_IF_ERROR(st.MemcpyAsync(x, ctx.tensor.input, io_bytes_));
        }
        return ops::RmsNormForward(st, sp_norm_, x, ctx.params[0].data, acts.nf, acts.rstdf);
      }
      const int next = 1 - cur_;
      // zb-h1: d(nf)'s shard kept for the weight pass, no weight gradient.
      const bool keep = ctx.weight_deferred;
      if (keep) {
        BATON_RETURN_IF_ERROR(st.MemcpyAsync(deferred_[ctx.micro_step].nf, gres_[cur_], io_bytes_));
      }
      const bool frozen = keep || ctx.grads[0].data == nullptr;
      BATON_RETURN_IF_ERROR(ops::RmsNormBackward(
          st, sp_norm_, gres_[cur_], x, ctx.params[0].data, acts.rstdf, gres_[next], false,
          frozen ? frozen_dw_ : ctx.grads[0].data, frozen ? DataType::kF32 : ctx.grads[0].dtype,
          !frozen && ctx.grad_accumulate[0]));
      cur_ = next;
      BATON_RETURN_IF_ERROR(SpGradAllReduce(ctx, 0));
      if (ctx.tensor.output != nullptr) {
        BATON_RETURN_IF_ERROR(st.MemcpyAsync(ctx.tensor.output, gres_[cur_], io_bytes_));
      }
      return absl::OkStatus();
    }
    case scheduler::UnitKind::kLmHead:
      return VocabHead(ctx);  // the final norm's shards gathered first
  }
  return absl::InternalError("unknown unit kind");
}

Status LlamaRank::SpBlockForward(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  const int b = ctx.spec->block;
  Acts& acts = ActsOf(ctx.micro_step);
  BlockActs& a = acts.blocks[b];
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV, F = d_.F;
  const uint8_t seg = ctx.tensor.segments;
  auto p = [&](const char* name) { return ctx.params[Find(ctx, name)].data; };
  auto need = [&](const void* buf, const char* what) -> Status {
    if (buf != nullptr) return absl::OkStatus();
    return absl::InternalError(absl::StrCat(ctx.spec->name, ": a sequence-parallel block part "
                                            "without its ", what));
  };
  if (seg == SegmentBit(BlockSegment::kAttnNorm) || seg == SegmentBit(BlockSegment::kMlpNorm)) {
    // The norm on the shard: the input is the previous part's reduce-
    // scattered output (the first block's: the embedding's or the pipeline's
    // already in h[b]); the normed shard goes to the gather.
    const bool attn = seg == SegmentBit(BlockSegment::kAttnNorm);
    void* x = attn ? acts.h[b] : a.x1;
    if (ctx.tensor.input != nullptr) {
      BATON_RETURN_IF_ERROR(st.MemcpyAsync(x, ctx.tensor.input, io_bytes_));
    } else if (!attn) {
      return need(nullptr, "reduce-scattered attention output");
    }
    BATON_RETURN_IF_ERROR(need(ctx.tensor.output, "normed output"));
    return ops::RmsNormForward(st, sp_norm_, x, p(attn ? "attn_norm.weight" : "mlp_norm.weight"),
                               ctx.tensor.output, attn ? a.rstd1 : a.rstd2);
  }
  BATON_RETURN_IF_ERROR(need(ctx.tensor.input, "gathered input"));
  BATON_RETURN_IF_ERROR(need(ctx.tensor.output, "partial output"));
  if (seg == SegmentBit(BlockSegment::kAttention)) {
    // The gathered normed input is kept whole for the backward's wgrad.
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(a.n1, ctx.tensor.input, d_.act_bytes));
    BATON_RETURN_IF_ERROR(Project(ctx, "wq", {T, H, Q, dtype_}, a.n1, a.q, false));
    BATON_RETURN_IF_ERROR(Project(ctx, "wk", {T, H, KV, dtype_}, a.n1, a.k, false));
    BATON_RETURN_IF_ERROR(Project(ctx, "wv", {T, H, KV, dtype_}, a.n1, a.v, false));
    BATON_RETURN_IF_ERROR(ops::RotaryForward(st, d_.rope_q, a.q));
    BATON_RETURN_IF_ERROR(ops::RotaryForward(st, d_.rope_k, a.k));
    BATON_RETURN_IF_ERROR(ops::AttentionForward(st, d_.attn, a.q, a.k, a.v, a.o, a.lse));
    return SpRowParallel(ctx, "wo", {T, Q, H, dtype_}, acts.h[b], a.o, ctx.tensor.output);
  }
  if (seg == SegmentBit(BlockSegment::kMlp)) {
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(a.n2, ctx.tensor.input, d_.act_bytes));
    BATON_RETURN_IF_ERROR(Project(ctx, "w_gate", {T, H, F, dtype_}, a.n2, a.g, false));
    BATON_RETURN_IF_ERROR(Project(ctx, "w_up", {T, H, F, dtype_}, a.n2, a.u, false));
    BATON_RETURN_IF_ERROR(ops::SwiGluForward(st, {T, F, dtype_}, a.g, a.u, a.s));
    return SpRowParallel(ctx, "w_down", {T, F, H, dtype_}, a.x1, a.s, ctx.tensor.output);
  }
  return absl::InternalError(absl::StrCat(
      ctx.spec->name, ": a sequence-parallel block part that is neither a norm nor an "
      "attention / MLP body"));
}

// ctx.tensor.input: d(x2) gathered [T, H]; on return gres_[cur_] holds
// d(x1)'s shard, also in ctx.tensor.output (the next gather's input).
Status LlamaRank::SpMlpBackward(const scheduler::ComputeContext& ctx) {
  BlockActs& a = ActsOf(ctx.micro_step).blocks[ctx.spec->block];
  const char* dy = static_cast<const char*>(ctx.tensor.input);
  if (dy == nullptr) {
    return absl::InternalError(absl::StrCat(ctx.spec->name, ": no gathered output gradient"));
  }
  const NormGrad gm = NormGradOf(ctx, "mlp_norm.weight");
  // zb-h1: the weight pass's gradients (the gathered d(x2), d gate, d up
  // and the norm's reduce-scattered d n2) go to the micro-step's set.
  BlockDeferred* keep =
      ctx.weight_deferred ? &deferred_[ctx.micro_step].blocks[ctx.spec->block] : nullptr;
  Stream& st = *ctx.stream;
  if (keep) BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dx2, dy, d_.act_bytes));
  BATON_RETURN_IF_ERROR(
      MlpBodyBackward(ctx, a, dy, keep ? keep->dg : dg_, keep ? keep->du : du_, dn_));
  BATON_RETURN_IF_ERROR(SpReduceScatter(ctx, dn_));
  if (keep) BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dn2, sp_dn_, io_bytes_));
  // d(x1) = d(x2) + the norm's path, on this rank's rows.
  return SpNormBackward(ctx, dy, "mlp_norm.weight", a.x1, a.rstd2, gm);
}

Status LlamaRank::SpNormBackward(const scheduler::ComputeContext& ctx, const char* dy,
                                 const char* norm, const void* x, const float* rstd,
                                 const NormGrad& g) {
  Stream& st = *ctx.stream;
  const size_t e = DataTypeSize(dtype_);
  const int next = 1 - cur_;
  BATON_RETURN_IF_ERROR(st.MemcpyAsync(gres_[next], dy + ctx.tensor.rank * sp_rows_ * d_.H * e,
                                       io_bytes_));
  BATON_RETURN_IF_ERROR(ops::RmsNormBackward(st, sp_norm_, sp_dn_, x,
                                             ctx.params[Find(ctx, norm)].data, rstd,
                                             gres_[next], true, g.data, g.dtype, g.acc));
  cur_ = next;
  BATON_RETURN_IF_ERROR(SpGradAllReduce(ctx, Find(ctx, norm)));
  if (ctx.tensor.output != nullptr) {
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(ctx.tensor.output, gres_[cur_], io_bytes_));
  }
  return absl::OkStatus();
}

// ctx.tensor.input: d(x1) gathered; on return gres_[cur_] holds d(block
// input)'s shard, also in ctx.tensor.output when a gather reads it.
Status LlamaRank::SpAttentionBackward(const scheduler::ComputeContext& ctx) {
  const int b = ctx.spec->block;
  Acts& acts = ActsOf(ctx.micro_step);
  BlockActs& a = acts.blocks[b];
  const char* dy = static_cast<const char*>(ctx.tensor.input);
  if (dy == nullptr) {
    return absl::InternalError(absl::StrCat(ctx.spec->name, ": no gathered output gradient"));
  }
  const NormGrad ga = NormGradOf(ctx, "attn_norm.weight");
  // zb-h1: as SpMlpBackward (d x1 gathered, d q / k / v, d n1's shard).
  BlockDeferred* keep = ctx.weight_deferred ? &deferred_[ctx.micro_step].blocks[b] : nullptr;
  Stream& st = *ctx.stream;
  if (keep) BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dx1, dy, d_.act_bytes));
  BATON_RETURN_IF_ERROR(AttentionBodyBackward(ctx, a, dy, keep ? keep->dq : dq_,
                                              keep ? keep->dk : dk_, keep ? keep->dv : dv_,
                                              dn_));
  BATON_RETURN_IF_ERROR(SpReduceScatter(ctx, dn_));
  if (keep) BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dn1, sp_dn_, io_bytes_));
  return SpNormBackward(ctx, dy, "attn_norm.weight", acts.h[b], a.rstd1, ga);
}

}  // namespace baton::examples
