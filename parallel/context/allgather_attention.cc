// All-gather K / V (context_attention.h, kAllGather; Llama 3, sec. 3.3.2).
// Forward, rank r of C:
//   comm:    AllGather k -> gk_, v -> gv_ ([C, batch, local seq] rows);
//            record gathered_
//   compute: wait gathered_; UnsplitSequence gk_ -> fk_, gv_ -> fv_ (the
//            whole sequences in order); for each query slot (chunk c of
//            the 2C), one block per key chunk 0..c (full, the last one
//            diagonal; ops/attention_block.h), merged; cast. Blocks of one
//            chunk each keep the CUDA kernels' limit at the chunk's length,
//            not the sequence's.
// Backward: the same gathers (nothing is kept from the forward, so one
// object serves every layer), the blocks' backward into float dK / dV of
// the whole sequences, SplitAllRanks into [C, batch, local seq] order, and
// on comm (after compute records grads_ready_) a ReduceScatter (sum, float)
// of each, which compute waits for (rs_done_) before its casts. With C = 1
// there is no collective: the local rows are the whole sequence.
#include <memory>
#include <utility>

#include "baton/comm/reduce.h"
#include "baton/ops/attention_block.h"
#include "baton/parallel/context/variants.h"
#include "baton/runtime/stream_ops.h"

namespace baton::context::internal {
namespace {

class AllGatherAttention final : public ContextAttention {
 public:
  AllGatherAttention(Communicator& group, Device& device, const ops::AttentionShape& local,
                     const ContextSplit& split, const ContextAttentionOptions& options)
      : ContextAttention(group, device, local, split, options) {}

  Status Init();

 protected:
  Status DoForward(Stream& compute, Stream& comm, const void* q, const void* k, const void* v,
                   void* out, float* lse) override;
  Status DoBackward(Stream& compute, Stream& comm, const void* dout, const void* q,
                    const void* k, const void* v, const void* out, const float* lse, void* dq,
                    void* dk, void* dv) override;

 private:
  int cp() const { return split_.cp(); }
  int64_t full_elems() const { return kv_elems_ * cp(); }
  size_t row_elems() const { return local_.kv_heads * local_.head_dim; }
  float* F(const DeviceBuffer& b) const { return static_cast<float*>(b.data()); }
  // Gathers k and v (C > 1) and puts them in sequence order in fk_ / fv_.
  Status GatherKv(Stream& compute, Stream& comm, const void* k, const void* v);
  // Query slot `slot` against key chunk `kv_chunk` of the whole sequences.
  ops::AttentionBlockShape SlotBlock(int slot, int64_t kv_chunk) const;
  int64_t QueryChunk(int slot) const { return split_.ChunkOf(rank_, slot); }

  DeviceBuffer gk_, gv_;      // gathered, by rank: dtype full_elems()
  DeviceBuffer fk_, fv_;      // in sequence order: dtype full_elems()
  DeviceBuffer acc_;          // out (forward), dq (backward): float q_elems_
  DeviceBuffer part_;         // a block's partial out: float q_elems_
  DeviceBuffer part_lse_;     // its lse: float lse_elems_
  DeviceBuffer delta_;        // float lse_elems_
  DeviceBuffer fdk_, fdv_;    // dK / dV of the whole sequences: float full_elems()
  DeviceBuffer rdk_, rdv_;    // the same by rank: float full_elems()
  DeviceBuffer ldk_, ldv_;    // this rank's, reduced: float kv_elems_
  std::unique_ptr<Event> gathered_, grads_ready_, rs_done_;
};

Status AllGatherAttention::Init() {
  BATON_RETURN_IF_ERROR(InitBase());
  const size_t f = sizeof(float), e = DataTypeSize(local_.dtype);
  BATON_ASSIGN_OR_RETURN(fk_, Allocate(full_elems() * e));
  BATON_ASSIGN_OR_RETURN(fv_, Allocate(full_elems() * e));
  BATON_ASSIGN_OR_RETURN(acc_, Allocate(q_elems_ * f));
  BATON_ASSIGN_OR_RETURN(part_, Allocate(q_elems_ * f));
  BATON_ASSIGN_OR_RETURN(part_lse_, Allocate(lse_elems_ * f));
  BATON_ASSIGN_OR_RETURN(delta_, Allocate(lse_elems_ * f));
  BATON_ASSIGN_OR_RETURN(fdk_, Allocate(full_elems() * f));
  BATON_ASSIGN_OR_RETURN(fdv_, Allocate(full_elems() * f));
  BATON_ASSIGN_OR_RETURN(rdk_, Allocate(full_elems() * f));
  BATON_ASSIGN_OR_RETURN(rdv_, Allocate(full_elems() * f));
  BATON_ASSIGN_OR_RETURN(gathered_, NewEvent());
  BATON_ASSIGN_OR_RETURN(grads_ready_, NewEvent());
  BATON_ASSIGN_OR_RETURN(rs_done_, NewEvent());
  if (cp() == 1) return absl::OkStatus();
  BATON_ASSIGN_OR_RETURN(gk_, Allocate(full_elems() * e));
  BATON_ASSIGN_OR_RETURN(gv_, Allocate(full_elems() * e));
  BATON_ASSIGN_OR_RETURN(ldk_, Allocate(kv_elems_ * f));
  BATON_ASSIGN_OR_RETURN(ldv_, Allocate(kv_elems_ * f));
  return absl::OkStatus();
}

Status AllGatherAttention::GatherKv(Stream& compute, Stream& comm, const void* k,
                                    const void* v) {
  const void* by_rank_k = k;
  const void* by_rank_v = v;
  if (cp() > 1) {
    BATON_RETURN_IF_ERROR(Observe(ContextWork::kAllGather, 0, comm, [&] {
      const CollectiveOptions o = TransferOptions();
      BATON_RETURN_IF_ERROR(group_.AllGather(k, gk_.data(), kv_elems_, local_.dtype, comm, o));
      return group_.AllGather(v, gv_.data(), kv_elems_, local_.dtype, comm, o);
    }));
    BATON_RETURN_IF_ERROR(gathered_->Record(comm));
    BATON_RETURN_IF_ERROR(compute.Wait(*gathered_));
    by_rank_k = gk_.data();
    by_rank_v = gv_.data();
  }
  const size_t row_bytes = row_elems() * DataTypeSize(local_.dtype);
  BATON_RETURN_IF_ERROR(
      UnsplitSequence(compute, split_, local_.batch, row_bytes, by_rank_k, fk_.data()));
  return UnsplitSequence(compute, split_, local_.batch, row_bytes, by_rank_v, fv_.data());
}

ops::AttentionBlockShape AllGatherAttention::SlotBlock(int slot, int64_t kv_chunk) const {
  ops::AttentionBlockShape base = LocalBlockBase();
  base.kv_seq = split_.seq();
  return ops::ChunkBlock(base, split_.chunk(), slot, QueryChunk(slot), kv_chunk, kv_chunk);
}

Status AllGatherAttention::DoForward(Stream& compute, Stream& comm, const void* q,
                                     const void* k, const void* v, void* out, float* lse) {
  BATON_RETURN_IF_ERROR(GatherKv(compute, comm, k, v));
  BATON_RETURN_IF_ERROR(Observe(ContextWork::kForwardBlocks, 0, compute, [&] {
    for (int slot = 0; slot < 2; ++slot) {
      BATON_RETURN_IF_ERROR(ops::AttentionBlockForward(compute, SlotBlock(slot, 0), q,
                                                       fk_.data(), fv_.data(), F(acc_), lse));
      for (int64_t kc = 1; kc <= QueryChunk(slot); ++kc) {
        const ops::AttentionBlockShape blk = SlotBlock(slot, kc);
        BATON_RETURN_IF_ERROR(ops::AttentionBlockForward(compute, blk, q, fk_.data(),
                                                         fv_.data(), F(part_), F(part_lse_)));
        BATON_RETURN_IF_ERROR(
            ops::AttentionBlockMerge(compute, blk, F(acc_), lse, F(part_), F(part_lse_)));
      }
    }
    return absl::OkStatus();
  }));
  return CastFromF32(compute, out, F(acc_), local_.dtype, q_elems_);
}

Status AllGatherAttention::DoBackward(Stream& compute, Stream& comm, const void* dout,
                                      const void* q, const void* k, const void* v,
                                      const void* out, const float* lse, void* dq, void* dk,
                                      void* dv) {
  BATON_RETURN_IF_ERROR(GatherKv(compute, comm, k, v));
  ops::AttentionBlockShape rows = LocalBlockBase();
  rows.q_len = local_.seq;
  BATON_RETURN_IF_ERROR(ops::AttentionBlockDelta(compute, rows, dout, out, F(delta_)));
  BATON_RETURN_IF_ERROR(compute.MemsetAsync(acc_.data(), 0, q_elems_ * sizeof(float)));
  BATON_RETURN_IF_ERROR(compute.MemsetAsync(fdk_.data(), 0, full_elems() * sizeof(float)));
  BATON_RETURN_IF_ERROR(compute.MemsetAsync(fdv_.data(), 0, full_elems() * sizeof(float)));
  BATON_RETURN_IF_ERROR(Observe(ContextWork::kBackwardBlocks, 0, compute, [&] {
    for (int slot = 0; slot < 2; ++slot) {
      for (int64_t kc = 0; kc <= QueryChunk(slot); ++kc) {
        BATON_RETURN_IF_ERROR(ops::AttentionBlockBackward(
            compute, SlotBlock(slot, kc), dout, q, fk_.data(), fv_.data(), lse, F(delta_),
            F(acc_), F(fdk_), F(fdv_)));
      }
    }
    return absl::OkStatus();
  }));
  const size_t row_bytes = row_elems() * sizeof(float);
  BATON_RETURN_IF_ERROR(
      SplitAllRanks(compute, split_, local_.batch, row_bytes, fdk_.data(), rdk_.data()));
  BATON_RETURN_IF_ERROR(
      SplitAllRanks(compute, split_, local_.batch, row_bytes, fdv_.data(), rdv_.data()));
  const float* gk = F(rdk_);
  const float* gv = F(rdv_);
  if (cp() > 1) {
    BATON_RETURN_IF_ERROR(grads_ready_->Record(compute));
    BATON_RETURN_IF_ERROR(comm.Wait(*grads_ready_));
    BATON_RETURN_IF_ERROR(Observe(ContextWork::kReduceScatter, 0, comm, [&] {
      const CollectiveOptions o = TransferOptions();
      BATON_RETURN_IF_ERROR(group_.ReduceScatter(rdk_.data(), ldk_.data(), kv_elems_,
                                                 DataType::kF32, ReduceOp::kSum, comm, o));
      return group_.ReduceScatter(rdv_.data(), ldv_.data(), kv_elems_, DataType::kF32,
                                  ReduceOp::kSum, comm, o);
    }));
    BATON_RETURN_IF_ERROR(rs_done_->Record(comm));
    BATON_RETURN_IF_ERROR(compute.Wait(*rs_done_));
    gk = F(ldk_);
    gv = F(ldv_);
  }
  BATON_RETURN_IF_ERROR(CastFromF32(compute, dk, gk, local_.dtype, kv_elems_));
  BATON_RETURN_IF_ERROR(CastFromF32(compute, dv, gv, local_.dtype, kv_elems_));
  return CastFromF32(compute, dq, F(acc_), local_.dtype, q_elems_);
}

}  // namespace

StatusOr<std::unique_ptr<ContextAttention>> NewAllGatherAttention(
    Communicator& group, Device& device, const ops::AttentionShape& local,
    const ContextSplit& split, const ContextAttentionOptions& options) {
  auto ag = std::make_unique<AllGatherAttention>(group, device, local, split, options);
  BATON_RETURN_IF_ERROR(ag->Init());
  return std::unique_ptr<ContextAttention>(std::move(ag));
}

}  // namespace baton::context::internal
