// Sequence parallelism with tp_comm_overlap in the llama trainer
// (llama_trainer.h, "Sequence parallelism"): the gathers and
// reduce-scatters decomposed around the GEMMs (collective matmul), on the
// tensor stream, ordered against the compute stream by events both ways.
#include "absl/strings/str_cat.h"
#include "baton/examples/llama_trainer.h"
#include "baton/ops/swiglu.h"
#include "baton/runtime/stream_ops.h"

namespace baton::examples {

using scheduler::BlockSegment;
using scheduler::RecordSpan;
using scheduler::SegmentBit;
using scheduler::StreamClass;

Status LlamaRank::SpEnsureEvents(int n) {
  while (static_cast<int>(sp_events_.size()) < n) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Event> ev, device_.CreateEvent());
    sp_events_.push_back(std::move(ev));
  }
  return absl::OkStatus();
}

Status LlamaRank::SpGatherRows(const scheduler::ComputeContext& ctx, void* buf, int64_t width,
                               const std::function<Status(int64_t, int64_t)>& rows_fn) {
  const int tp = ctx.tensor.size, r = ctx.tensor.rank;
  const int64_t R = sp_rows_;
  const size_t block = static_cast<size_t>(R * width) * DataTypeSize(dtype_);
  Stream& cs = *ctx.stream;
  Stream& ts = *ctx.tensor.stream;
  BATON_RETURN_IF_ERROR(SpEnsureEvents(2 * tp + 2));
  // The tensor stream starts after what the compute stream wrote (this
  // rank's block) and read (the buffer's previous contents).
  BATON_RETURN_IF_ERROR(sp_events_[0]->Record(cs));
  BATON_RETURN_IF_ERROR(ts.Wait(*sp_events_[0]));
  CollectiveOptions opts;
  opts.tag = scheduler::kFirstTrainerTag + 1;  // the tensor stream's own
  for (int c = 0; c < tp; ++c) {
    char* b = static_cast<char*>(buf) + c * block;
    BATON_RETURN_IF_ERROR(
        RecordSpan(ctx.spans, ts, StreamClass::kTensor, "AG chunk", c, ctx.step, [&] {
          return ctx.tensor.comm->Broadcast(b, b, static_cast<size_t>(R * width), dtype_, c, ts,
                                            opts);
        }));
    BATON_RETURN_IF_ERROR(sp_events_[1 + c]->Record(ts));
  }
  // This rank's own block first (no wait), then each as it arrives.
  auto gemm = [&](int c) {
    return RecordSpan(ctx.spans, cs, StreamClass::kCompute, "GEMM chunk", c, ctx.step,
                      [&] { return rows_fn(c * R, R); });
  };
  BATON_RETURN_IF_ERROR(gemm(r));
  for (int c = 0; c < tp; ++c) {
    if (c == r) continue;
    BATON_RETURN_IF_ERROR(SpTimed(cs, [&] { return cs.Wait(*sp_events_[1 + c]); }));
    BATON_RETURN_IF_ERROR(gemm(c));
  }
  // Every broadcast (this rank's as root too) is done before the compute
  // stream writes the buffer again.
  return SpTimed(cs, [&] { return cs.Wait(*sp_events_[tp]); });
}

Status LlamaRank::SpScatterRows(const scheduler::ComputeContext& ctx, void* out, const void* res,
                                const std::function<Status(int64_t, int64_t, void*)>& rows_fn) {
  const int tp = ctx.tensor.size, r = ctx.tensor.rank;
  const int64_t R = sp_rows_, H = d_.H;
  const int k = R % tp == 0 ? tp : 1;
  const int64_t sub = R / k;
  const size_t e = DataTypeSize(dtype_);
  const size_t sub_bytes = static_cast<size_t>(sub * H) * e;
  Stream& cs = *ctx.stream;
  Stream& ts = *ctx.tensor.stream;
  BATON_RETURN_IF_ERROR(SpEnsureEvents(2 * tp + 2));
  CollectiveOptions opts;
  opts.tag = scheduler::kFirstTrainerTag + 1;
  for (int j = 0; j < k; ++j) {
    // Chunk j: rows j * sub.. of every rank's block, staged rank-major as
    // the reduce-scatter takes them; its GEMMs on the compute stream, its
    // reduce-scatter on the tensor stream beside the next chunk's GEMMs.
    char* stage = static_cast<char*>(sp_stage_) + j * tp * sub_bytes;
    BATON_RETURN_IF_ERROR(RecordSpan(
        ctx.spans, cs, StreamClass::kCompute, "GEMM chunk", j, ctx.step, [&]() -> Status {
          for (int c = 0; c < tp; ++c) {
            BATON_RETURN_IF_ERROR(rows_fn(c * R + j * sub, sub, stage + c * sub_bytes));
          }
          return absl::OkStatus();
        }));
    if (res != nullptr) {
      BATON_RETURN_IF_ERROR(AccumulateInto(cs, stage + r * sub_bytes,
                                           static_cast<const char*>(res) + j * sub_bytes, dtype_,
                                           static_cast<size_t>(sub * H)));
    }
    BATON_RETURN_IF_ERROR(sp_events_[tp + 1 + j]->Record(cs));
    BATON_RETURN_IF_ERROR(ts.Wait(*sp_events_[tp + 1 + j]));
    BATON_RETURN_IF_ERROR(
        RecordSpan(ctx.spans, ts, StreamClass::kTensor, "RS chunk", j, ctx.step, [&] {
          return ctx.tensor.comm->ReduceScatter(stage, static_cast<char*>(out) + j * sub_bytes,
                                                static_cast<size_t>(sub * H), dtype_,
                                                ReduceOp::kSum, ts, opts);
        }));
  }
  BATON_RETURN_IF_ERROR(sp_events_[2 * tp + 1]->Record(ts));
  return SpTimed(cs, [&] { return cs.Wait(*sp_events_[2 * tp + 1]); });
}

Status LlamaRank::SpOverlapForward(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  const int b = ctx.spec->block;
  Acts& acts = ActsOf(ctx.micro_step);
  BlockActs& a = acts.blocks[b];
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV, F = d_.F;
  const size_t e = DataTypeSize(dtype_);
  const size_t mine = static_cast<size_t>(ctx.tensor.rank * sp_rows_ * H) * e;
  auto p = [&](const char* name) { return ctx.params[Find(ctx, name)].data; };
  auto at = [e](void* buf, int64_t row, int64_t width) {
    return static_cast<char*>(buf) + static_cast<size_t>(row * width) * e;
  };
  if (ctx.tensor.segments & SegmentBit(BlockSegment::kAttention)) {
    // h[b]: the previous block's reduce-scattered output (or the
    // embedding's, or the pipeline's). The normed shard goes to its rows
    // of n1, the other ranks' arrive there, each block's QKV as it lands.
    BATON_RETURN_IF_ERROR(ops::RmsNormForward(st, sp_norm_, acts.h[b], p("attn_norm.weight"),
                                              static_cast<char*>(a.n1) + mine, a.rstd1));
    BATON_RETURN_IF_ERROR(SpGatherRows(ctx, a.n1, H, [&](int64_t row, int64_t rows) -> Status {
      void* x = at(a.n1, row, H);
      BATON_RETURN_IF_ERROR(Project(ctx, "wq", {rows, H, Q, dtype_}, x, at(a.q, row, Q), false));
      BATON_RETURN_IF_ERROR(Project(ctx, "wk", {rows, H, KV, dtype_}, x, at(a.k, row, KV), false));
      return Project(ctx, "wv", {rows, H, KV, dtype_}, x, at(a.v, row, KV), false);
    }));
    BATON_RETURN_IF_ERROR(ops::RotaryForward(st, d_.rope_q, a.q));
    BATON_RETURN_IF_ERROR(ops::RotaryForward(st, d_.rope_k, a.k));
    BATON_RETURN_IF_ERROR(ops::AttentionForward(st, d_.attn, a.q, a.k, a.v, a.o, a.lse));
    BATON_RETURN_IF_ERROR(SpScatterRows(
        ctx, a.x1, acts.h[b], [&](int64_t row, int64_t rows, void* dst) {
          return Project(ctx, "wo", {rows, Q, H, dtype_}, at(a.o, row, Q), dst, false);
        }));
  }
  if (ctx.tensor.segments & SegmentBit(BlockSegment::kMlp)) {
    BATON_RETURN_IF_ERROR(ops::RmsNormForward(st, sp_norm_, a.x1, p("mlp_norm.weight"),
                                              static_cast<char*>(a.n2) + mine, a.rstd2));
    BATON_RETURN_IF_ERROR(SpGatherRows(ctx, a.n2, H, [&](int64_t row, int64_t rows) -> Status {
      void* x = at(a.n2, row, H);
      BATON_RETURN_IF_ERROR(
          Project(ctx, "w_gate", {rows, H, F, dtype_}, x, at(a.g, row, F), false));
      return Project(ctx, "w_up", {rows, H, F, dtype_}, x, at(a.u, row, F), false);
    }));
    BATON_RETURN_IF_ERROR(ops::SwiGluForward(st, {T, F, dtype_}, a.g, a.u, a.s));
    BATON_RETURN_IF_ERROR(SpScatterRows(
        ctx, acts.h[b + 1], a.x1, [&](int64_t row, int64_t rows, void* dst) {
          return Project(ctx, "w_down", {rows, F, H, dtype_}, at(a.s, row, F), dst, false);
        }));
  }
  return absl::OkStatus();
}

// gres_[cur_] holds d(x2)'s shard; on return gres_[cur_] (the other
// buffer) holds d(x1)'s.
Status LlamaRank::SpOverlapMlpBackward(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  BlockActs& a = ActsOf(ctx.micro_step).blocks[ctx.spec->block];
  const int64_t T = d_.T, H = d_.H, F = d_.F;
  const size_t e = DataTypeSize(dtype_);
  auto at = [e](void* buf, int64_t row, int64_t width) {
    return static_cast<char*>(buf) + static_cast<size_t>(row * width) * e;
  };
  auto w = [&](const char* name) { return ctx.params[Find(ctx, name)].data; };
  const NormGrad gm = NormGradOf(ctx, "mlp_norm.weight");
  const size_t mine = static_cast<size_t>(ctx.tensor.rank * sp_rows_ * H) * e;
  BATON_RETURN_IF_ERROR(st.MemcpyAsync(static_cast<char*>(sp_dy_) + mine, gres_[cur_], io_bytes_));
  // The output gradient's gather, each block's dgrad through w_down as it
  // lands; the wgrad over the whole.
  BATON_RETURN_IF_ERROR(SpGatherRows(ctx, sp_dy_, H, [&](int64_t row, int64_t rows) {
    return ops::LinearBackward(st, {rows, F, H, dtype_}, at(sp_dy_, row, H), at(a.s, row, F),
                               w("w_down"), at(ds_, row, F), false, nullptr, DataType::kF32,
                               false);
  }));
  // zb-h1: no wgrads; what the weight pass reads (the gathered d(x2),
  // d gate, d up and the norm's d n2 shard) goes to the micro-step's set.
  BlockDeferred* keep =
      ctx.weight_deferred ? &deferred_[ctx.micro_step].blocks[ctx.spec->block] : nullptr;
  void* dg = keep ? keep->dg : dg_;
  void* du = keep ? keep->du : du_;
  if (keep) {
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dx2, sp_dy_, d_.act_bytes));
  } else {
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "w_down", {T, F, H, dtype_}, sp_dy_, a.s));
  }
  BATON_RETURN_IF_ERROR(ops::SwiGluBackward(st, {T, F, dtype_}, ds_, a.g, a.u, dg, du));
  if (!keep) {
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "w_gate", {T, H, F, dtype_}, dg, a.n2));
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "w_up", {T, H, F, dtype_}, du, a.n2));
  }
  // The input gradient's reduce-scatter beside its dgrad GEMMs.
  BATON_RETURN_IF_ERROR(SpScatterRows(ctx, sp_dn_, nullptr, [&](int64_t row, int64_t rows,
                                                               void* dst) -> Status {
    BATON_RETURN_IF_ERROR(ops::LinearBackward(st, {rows, H, F, dtype_}, at(dg, row, F),
                                              at(a.n2, row, H), w("w_gate"), dst, false, nullptr,
                                              DataType::kF32, false));
    return ops::LinearBackward(st, {rows, H, F, dtype_}, at(du, row, F), at(a.n2, row, H),
                               w("w_up"), dst, true, nullptr, DataType::kF32, false);
  }));
  if (keep) BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dn2, sp_dn_, io_bytes_));
  const int next = 1 - cur_;
  BATON_RETURN_IF_ERROR(st.MemcpyAsync(gres_[next], gres_[cur_], io_bytes_));
  BATON_RETURN_IF_ERROR(ops::RmsNormBackward(st, sp_norm_, sp_dn_, a.x1, w("mlp_norm.weight"),
                                             a.rstd2, gres_[next], true, gm.data, gm.dtype,
                                             gm.acc));
  cur_ = next;
  return SpGradAllReduce(ctx, Find(ctx, "mlp_norm.weight"));
}

// gres_[cur_] holds d(x1)'s shard; on return gres_[cur_] (the other
// buffer) holds d(block input)'s.
Status LlamaRank::SpOverlapAttentionBackward(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  const int b = ctx.spec->block;
  Acts& acts = ActsOf(ctx.micro_step);
  BlockActs& a = acts.blocks[b];
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV;
  const size_t e = DataTypeSize(dtype_);
  auto at = [e](void* buf, int64_t row, int64_t width) {
    return static_cast<char*>(buf) + static_cast<size_t>(row * width) * e;
  };
  auto w = [&](const char* name) { return ctx.params[Find(ctx, name)].data; };
  const NormGrad ga = NormGradOf(ctx, "attn_norm.weight");
  const size_t mine = static_cast<size_t>(ctx.tensor.rank * sp_rows_ * H) * e;
  BATON_RETURN_IF_ERROR(st.MemcpyAsync(static_cast<char*>(sp_dy_) + mine, gres_[cur_], io_bytes_));
  BATON_RETURN_IF_ERROR(SpGatherRows(ctx, sp_dy_, H, [&](int64_t row, int64_t rows) {
    return ops::LinearBackward(st, {rows, Q, H, dtype_}, at(sp_dy_, row, H), at(a.o, row, Q),
                               w("wo"), at(do_, row, Q), false, nullptr, DataType::kF32, false);
  }));
  // zb-h1: as SpOverlapMlpBackward (d x1 gathered, d q / k / v, d n1's
  // shard kept; no wgrads).
  BlockDeferred* keep = ctx.weight_deferred ? &deferred_[ctx.micro_step].blocks[b] : nullptr;
  void* dq = keep ? keep->dq : dq_;
  void* dk = keep ? keep->dk : dk_;
  void* dv = keep ? keep->dv : dv_;
  if (keep) {
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dx1, sp_dy_, d_.act_bytes));
  } else {
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "wo", {T, Q, H, dtype_}, sp_dy_, a.o));
  }
  BATON_RETURN_IF_ERROR(
      ops::AttentionBackward(st, d_.attn, do_, a.q, a.k, a.v, a.o, a.lse, dq, dk, dv));
  BATON_RETURN_IF_ERROR(ops::RotaryBackward(st, d_.rope_q, dq));
  BATON_RETURN_IF_ERROR(ops::RotaryBackward(st, d_.rope_k, dk));
  if (!keep) {
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "wq", {T, H, Q, dtype_}, dq, a.n1));
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "wk", {T, H, KV, dtype_}, dk, a.n1));
    BATON_RETURN_IF_ERROR(ProjectWeight(ctx, "wv", {T, H, KV, dtype_}, dv, a.n1));
  }
  BATON_RETURN_IF_ERROR(SpScatterRows(ctx, sp_dn_, nullptr, [&](int64_t row, int64_t rows,
                                                               void* dst) -> Status {
    void* x = at(a.n1, row, H);
    BATON_RETURN_IF_ERROR(ops::LinearBackward(st, {rows, H, Q, dtype_}, at(dq, row, Q), x,
                                              w("wq"), dst, false, nullptr, DataType::kF32,
                                              false));
    BATON_RETURN_IF_ERROR(ops::LinearBackward(st, {rows, H, KV, dtype_}, at(dk, row, KV), x,
                                              w("wk"), dst, true, nullptr, DataType::kF32,
                                              false));
    return ops::LinearBackward(st, {rows, H, KV, dtype_}, at(dv, row, KV), x, w("wv"), dst, true,
                               nullptr, DataType::kF32, false);
  }));
  if (keep) BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dn1, sp_dn_, io_bytes_));
  const int next = 1 - cur_;
  BATON_RETURN_IF_ERROR(st.MemcpyAsync(gres_[next], gres_[cur_], io_bytes_));
  BATON_RETURN_IF_ERROR(ops::RmsNormBackward(st, sp_norm_, sp_dn_, acts.h[b],
                                             w("attn_norm.weight"), a.rstd1, gres_[next], true,
                                             ga.data, ga.dtype, ga.acc));
  cur_ = next;
  return SpGradAllReduce(ctx, Find(ctx, "attn_norm.weight"));
}

}  // namespace baton::examples
