// Tensor parallelism's vocabulary-parallel embedding and head
// (scheduler/tensor_parallel.h; ops/vocab_parallel.h): this rank's
// vocabulary rows, and the collectives between the ops over the tensor
// group, on the tensor stream.
#include "absl/strings/str_cat.h"
#include "baton/examples/llama_trainer.h"
#include "baton/ops/linear.h"
#include "baton/ops/vocab_parallel.h"

namespace baton::examples {

Status LlamaRank::AllocateVocabParallel() {
  // With sequence parallelism too (the shards gathered and scattered
  // around the vocabulary-parallel ops below).
  vocab_parallel_ = graph_.tensor_slices && graph_.policy.tensor_parallel > 1;
  if (!vocab_parallel_) return absl::OkStatus();
  vp_max_ = static_cast<float*>(Buf(d_.T * 4));
  // The exp sums and the target logits side by side: one SUM all-reduce.
  vp_sum_ = static_cast<float*>(Buf(d_.T * 2 * 4));
  vp_target_ = vp_sum_ + d_.T;
  for (auto& e : vp_events_) {
    BATON_ASSIGN_OR_RETURN(e, device_.CreateEvent());
  }
  return absl::OkStatus();
}

ops::VocabShard LlamaRank::Shard() const {
  return {tensor_rank_ * d_.V, d_.V * graph_.policy.tensor_parallel};
}

Status LlamaRank::TensorReduce(const scheduler::ComputeContext& ctx, void* x, size_t count,
                               DataType type, ReduceOp op) {
  if (ctx.tensor.size < 2) return absl::OkStatus();
  if (ctx.tensor.comm == nullptr || ctx.tensor.stream == nullptr) {
    return absl::InternalError(absl::StrCat(ctx.spec->name, ": a vocabulary-parallel unit "
                                            "without the tensor group's stream"));
  }
  Stream& cs = *ctx.stream;
  Stream& ts = *ctx.tensor.stream;
  CollectiveOptions opts;
  opts.tag = scheduler::kFirstTrainerTag + 1;  // the tensor stream's own
  BATON_RETURN_IF_ERROR(vp_events_[0]->Record(cs));
  BATON_RETURN_IF_ERROR(ts.Wait(*vp_events_[0]));
  BATON_RETURN_IF_ERROR(ctx.tensor.comm->AllReduce(x, x, count, type, op, ts, opts));
  BATON_RETURN_IF_ERROR(vp_events_[1]->Record(ts));
  return cs.Wait(*vp_events_[1]);
}

Status LlamaRank::VocabEmbedding(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  const int m = ctx.micro_step;
  const ops::EmbeddingShape s{d_.T, d_.V, d_.H, dtype_};
  CollectiveOptions opts;
  opts.tag = scheduler::kFirstTrainerTag;
  const size_t shard = static_cast<size_t>(sp_rows_ * d_.H);
  if (ctx.kind != scheduler::NodeKind::kBackward) {
    // This rank's rows (zero for the other ranks' tokens), then the sum;
    // under sequence parallelism summed into the sequence shards.
    void* h0 = ActsOf(m).h[0];
    if (sp_) {
      BATON_RETURN_IF_ERROR(
          ops::VocabShardEmbeddingForward(st, s, Shard(), ids_[m], ctx.params[0].data, dn_));
      return ctx.tensor.comm->ReduceScatter(dn_, h0, shard, dtype_, ReduceOp::kSum, st, opts);
    }
    BATON_RETURN_IF_ERROR(
        ops::VocabShardEmbeddingForward(st, s, Shard(), ids_[m], ctx.params[0].data, h0));
    return TensorReduce(ctx, h0, static_cast<size_t>(d_.T * d_.H), dtype_, ReduceOp::kSum);
  }
  // zb-h1's input-gradient pass: the output's gradient (gathered under
  // sequence parallelism) kept whole for the weight pass.
  void* keep = ctx.weight_deferred ? deferred_[m].emb : nullptr;
  if (keep == nullptr && ctx.grads[0].data == nullptr) return absl::OkStatus();  // frozen
  // The output's gradient is whole on every rank (under sequence
  // parallelism gathered from the shards): each adds its rows'.
  const void* dy = gres_[cur_];
  if (sp_) {
    void* whole = keep != nullptr ? keep : dn_;
    BATON_RETURN_IF_ERROR(ctx.tensor.comm->AllGather(gres_[cur_], whole, shard, dtype_, st, opts));
    dy = whole;
  }
  if (keep != nullptr) {
    return sp_ ? absl::OkStatus() : st.MemcpyAsync(keep, dy, d_.act_bytes);
  }
  return ops::VocabShardEmbeddingBackward(st, s, Shard(), ids_[m], dy, ctx.grads[0].data,
                                          ctx.grads[0].dtype, ctx.grad_accumulate[0]);
}

Status LlamaRank::VocabHead(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  const int m = ctx.micro_step;
  Acts& acts = ActsOf(m);
  const int64_t T = d_.T;
  const ops::LinearShape s{T, d_.H, d_.V, dtype_};
  CollectiveOptions opts;
  opts.tag = scheduler::kFirstTrainerTag;
  const size_t shard = static_cast<size_t>(sp_rows_ * d_.H);
  if (ctx.kind != scheduler::NodeKind::kBackward) {
    if (sp_) {
      // The final norm's sequence shard (acts.nf's first rows) gathered
      // into acts.nf whole, kept for the backward's weight gradient.
      BATON_RETURN_IF_ERROR(st.MemcpyAsync(dn_, acts.nf, io_bytes_));
      BATON_RETURN_IF_ERROR(ctx.tensor.comm->AllGather(dn_, acts.nf, shard, dtype_, st, opts));
    }
    // The logits of this rank's vocabulary slice only, then the parallel
    // cross-entropy: a MAX all-reduce of T floats, then one SUM of 2T (the
    // exp sums and the target logits), never the logits.
    BATON_RETURN_IF_ERROR(ops::LinearForward(st, s, acts.nf, ctx.params[0].data, acts.logits));
    const ops::CrossEntropyShape x{T, d_.V, dtype_};
    BATON_RETURN_IF_ERROR(ops::VocabParallelRowMax(st, x, acts.logits, vp_max_));
    BATON_RETURN_IF_ERROR(TensorReduce(ctx, vp_max_, T, DataType::kF32, ReduceOp::kMax));
    BATON_RETURN_IF_ERROR(ops::VocabParallelSums(st, x, Shard(), acts.logits, targets_[m],
                                                 vp_max_, vp_sum_, vp_target_));
    BATON_RETURN_IF_ERROR(TensorReduce(ctx, vp_sum_, 2 * T, DataType::kF32, ReduceOp::kSum));
    // Loss (the same on every rank) and the slice's logit gradient in place.
    return ops::VocabParallelLoss(st, x, Shard(), acts.logits, targets_[m], vp_max_, vp_sum_,
                                  vp_target_, loss_[m], acts.logits,
                                  1.0f / static_cast<float>(T));
  }
  cur_ = 0;
  // zb-h1's input-gradient pass: no weight gradient (the weight pass reads
  // the logits' gradient, kept in place, and the gathered acts.nf).
  const bool keep = ctx.weight_deferred;
  BATON_RETURN_IF_ERROR(ops::LinearBackward(
      st, s, acts.logits, acts.nf, ctx.params[0].data, sp_ ? dn_ : gres_[cur_], false,
      keep ? nullptr : ctx.grads[0].data, keep ? DataType::kF32 : ctx.grads[0].dtype,
      !keep && ctx.grad_accumulate[0]));
  // Each rank's input gradient is its slice's partial sum (under sequence
  // parallelism summed into the shards).
  if (sp_) {
    return ctx.tensor.comm->ReduceScatter(dn_, gres_[cur_], shard, dtype_, ReduceOp::kSum, st,
                                          opts);
  }
  return TensorReduce(ctx, gres_[cur_], static_cast<size_t>(T * d_.H), dtype_, ReduceOp::kSum);
}

}  // namespace baton::examples
