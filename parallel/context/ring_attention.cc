// Ring attention (context_attention.h, kRing). Rank r of C holds its q, k, v
// chunks; at step s = 0..C-1 it holds the K / V of rank src = r - s (mod C),
// attends its two query chunks to the non-empty chunk pairs of that block
// (ops/attention_block.h), and merges the partial results.
//
// Transfers T(s), s = 1..C-1, on `comm`: send the K / V held at step s-1 to
// rank r+1, receive the K / V of step s from rank r-1 into kv_[s % 2] (one
// SendRecvGroup, so the ring cannot deadlock). Issue order, per step s:
//   T(s+1)  [comm; waits for the blocks of step s-1, which read kv_[(s+1)%2]]
//   record kv_done_[(s+1) % 2] on comm
//   compute waits kv_done_[s % 2] (T(s))            (s > 0)
//   blocks of step s on compute; record compute_done_
// so T(s+1) runs while the blocks of step s compute. Backward adds, per
// step s, after the blocks (which write dK / dV of the held block into
// bd_[s % 2], zeroed first): compute waits dkv_done_[s % 2] (the dK / dV of
// the same block that ranks r-s .. r-1 accumulated, D(s), received into
// din_[s % 2]) and adds it; then D(s+1) on comm (waits for that add): send
// bd_[s % 2] to r+1, receive into din_[(s+1) % 2]. D(C) brings this rank's
// own dK / dV home. A buffer is rewritten only after its last reader: bd_
// two steps later, after compute has waited for the D that sent it; din_
// after the add that read it (D(s+1) waits for step s).
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/ops/attention_block.h"
#include "baton/parallel/context/variants.h"
#include "baton/runtime/stream_ops.h"

namespace baton::context::internal {
namespace {

class RingAttention final : public ContextAttention {
 public:
  RingAttention(Communicator& group, Device& device, const ops::AttentionShape& local,
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
  struct Held {
    const void* k;
    const void* v;
  };
  int cp() const { return split_.cp(); }
  int next() const { return (rank_ + 1) % cp(); }
  int prev() const { return (rank_ + cp() - 1) % cp(); }
  size_t kv_bytes() const { return kv_elems_ * DataTypeSize(local_.dtype); }
  // The K / V held at step s: the caller's at step 0, else kv_[s % 2].
  Held HeldAt(int s, const void* k, const void* v) const;
  float* F(const DeviceBuffer& b) const { return static_cast<float*>(b.data()); }

  // T(s) of the header comment, and its event.
  Status IssueKvTransfer(Stream& comm, int s, Held send);
  // D(s): bd_[(s-1) % 2] to the next rank, into din_[s % 2] from the previous.
  Status IssueDkvTransfer(Stream& compute, Stream& comm, int s);
  // The forward / backward blocks of step s (the non-empty chunk pairs).
  Status ForwardBlocks(Stream& compute, int s, const void* q, Held kv, float* lse,
                       bool (&started)[2]);
  Status BackwardBlocks(Stream& compute, int s, const void* dout, const void* q, Held kv,
                        const float* lse);

  DeviceBuffer kv_[2];      // K then V, dtype, 2 x kv_elems_
  DeviceBuffer acc_;        // running out (forward), dq (backward): float q_elems_
  DeviceBuffer part_;       // a block's partial out: float q_elems_
  DeviceBuffer part_lse_;   // its lse: float lse_elems_
  DeviceBuffer delta_;      // float lse_elems_
  DeviceBuffer bd_[2];      // dK then dV of the block held: float 2 x kv_elems_
  DeviceBuffer din_[2];     // the same, received
  std::unique_ptr<Event> kv_done_[2], dkv_done_[2], compute_done_;
};

Status RingAttention::Init() {
  BATON_RETURN_IF_ERROR(InitBase());
  const size_t f = sizeof(float);
  BATON_ASSIGN_OR_RETURN(acc_, Allocate(q_elems_ * f));
  BATON_ASSIGN_OR_RETURN(part_, Allocate(q_elems_ * f));
  BATON_ASSIGN_OR_RETURN(part_lse_, Allocate(lse_elems_ * f));
  BATON_ASSIGN_OR_RETURN(delta_, Allocate(lse_elems_ * f));
  BATON_ASSIGN_OR_RETURN(bd_[0], Allocate(2 * kv_elems_ * f));
  for (int i = 0; i < 2; ++i) {
    BATON_ASSIGN_OR_RETURN(kv_done_[i], NewEvent());
    BATON_ASSIGN_OR_RETURN(dkv_done_[i], NewEvent());
  }
  BATON_ASSIGN_OR_RETURN(compute_done_, NewEvent());
  if (cp() == 1) return absl::OkStatus();  // no transfers: one block buffer
  BATON_ASSIGN_OR_RETURN(bd_[1], Allocate(2 * kv_elems_ * f));
  for (int i = 0; i < 2; ++i) {
    BATON_ASSIGN_OR_RETURN(kv_[i], Allocate(2 * kv_bytes()));
    BATON_ASSIGN_OR_RETURN(din_[i], Allocate(2 * kv_elems_ * f));
  }
  return absl::OkStatus();
}

RingAttention::Held RingAttention::HeldAt(int s, const void* k, const void* v) const {
  if (s == 0) return {k, v};
  const char* base = static_cast<const char*>(kv_[s % 2].data());
  return {base, base + kv_bytes()};
}

Status RingAttention::IssueKvTransfer(Stream& comm, int s, Held send) {
  char* into = static_cast<char*>(kv_[s % 2].data());
  const P2POp ops[] = {P2POp::Send(send.k, kv_elems_, local_.dtype, next()),
                       P2POp::Send(send.v, kv_elems_, local_.dtype, next()),
                       P2POp::Recv(into, kv_elems_, local_.dtype, prev()),
                       P2POp::Recv(into + kv_bytes(), kv_elems_, local_.dtype, prev())};
  BATON_RETURN_IF_ERROR(Observe(ContextWork::kKvTransfer, s, comm, [&] {
    return group_.SendRecvGroup(ops, comm, TransferOptions());
  }));
  return kv_done_[s % 2]->Record(comm);
}

Status RingAttention::IssueDkvTransfer(Stream& compute, Stream& comm, int s) {
  BATON_RETURN_IF_ERROR(compute_done_->Record(compute));
  BATON_RETURN_IF_ERROR(comm.Wait(*compute_done_));
  const size_t n = 2 * kv_elems_;
  const P2POp ops[] = {P2POp::Send(bd_[(s - 1) % 2].data(), n, DataType::kF32, next()),
                       P2POp::Recv(din_[s % 2].data(), n, DataType::kF32, prev())};
  BATON_RETURN_IF_ERROR(Observe(ContextWork::kDkvTransfer, s, comm, [&] {
    return group_.SendRecvGroup(ops, comm, TransferOptions());
  }));
  return dkv_done_[s % 2]->Record(comm);
}

Status RingAttention::ForwardBlocks(Stream& compute, int s, const void* q, Held kv, float* lse,
                                    bool (&started)[2]) {
  const int src = (rank_ - s + cp()) % cp();
  const ops::AttentionBlockShape base = LocalBlockBase();
  for (int qs = 0; qs < 2; ++qs) {
    for (int ks = 0; ks < 2; ++ks) {
      const int64_t qc = split_.ChunkOf(rank_, qs), kc = split_.ChunkOf(src, ks);
      if (ops::ChunkMaskOf(qc, kc) == ops::ChunkMask::kEmpty) continue;
      const ops::AttentionBlockShape blk = ops::ChunkBlock(base, split_.chunk(), qs, qc, ks, kc);
      if (!started[qs]) {  // the first block of these rows writes the result
        BATON_RETURN_IF_ERROR(
            ops::AttentionBlockForward(compute, blk, q, kv.k, kv.v, F(acc_), lse));
        started[qs] = true;
        continue;
      }
      BATON_RETURN_IF_ERROR(
          ops::AttentionBlockForward(compute, blk, q, kv.k, kv.v, F(part_), F(part_lse_)));
      BATON_RETURN_IF_ERROR(
          ops::AttentionBlockMerge(compute, blk, F(acc_), lse, F(part_), F(part_lse_)));
    }
  }
  return absl::OkStatus();
}

Status RingAttention::DoForward(Stream& compute, Stream& comm, const void* q, const void* k,
                                const void* v, void* out, float* lse) {
  bool started[2] = {false, false};
  for (int s = 0; s < cp(); ++s) {
    if (s + 1 < cp()) {
      if (s + 1 >= 3) BATON_RETURN_IF_ERROR(comm.Wait(*compute_done_));
      BATON_RETURN_IF_ERROR(IssueKvTransfer(comm, s + 1, HeldAt(s, k, v)));
    }
    if (s > 0) BATON_RETURN_IF_ERROR(compute.Wait(*kv_done_[s % 2]));
    BATON_RETURN_IF_ERROR(Observe(ContextWork::kForwardBlocks, s, compute, [&] {
      return ForwardBlocks(compute, s, q, HeldAt(s, k, v), lse, started);
    }));
    BATON_RETURN_IF_ERROR(compute_done_->Record(compute));
  }
  return CastFromF32(compute, out, F(acc_), local_.dtype, q_elems_);
}

Status RingAttention::BackwardBlocks(Stream& compute, int s, const void* dout, const void* q,
                                     Held kv, const float* lse) {
  const int src = (rank_ - s + cp()) % cp();
  const ops::AttentionBlockShape base = LocalBlockBase();
  float* dk = F(bd_[s % 2]);
  BATON_RETURN_IF_ERROR(compute.MemsetAsync(dk, 0, 2 * kv_elems_ * sizeof(float)));
  for (int qs = 0; qs < 2; ++qs) {
    for (int ks = 0; ks < 2; ++ks) {
      const int64_t qc = split_.ChunkOf(rank_, qs), kc = split_.ChunkOf(src, ks);
      if (ops::ChunkMaskOf(qc, kc) == ops::ChunkMask::kEmpty) continue;
      BATON_RETURN_IF_ERROR(ops::AttentionBlockBackward(
          compute, ops::ChunkBlock(base, split_.chunk(), qs, qc, ks, kc), dout, q, kv.k, kv.v,
          lse, F(delta_), F(acc_), dk, dk + kv_elems_));
    }
  }
  return absl::OkStatus();
}

Status RingAttention::DoBackward(Stream& compute, Stream& comm, const void* dout,
                                 const void* q, const void* k, const void* v, const void* out,
                                 const float* lse, void* dq, void* dk, void* dv) {
  ops::AttentionBlockShape rows = LocalBlockBase();
  rows.q_len = local_.seq;
  BATON_RETURN_IF_ERROR(ops::AttentionBlockDelta(compute, rows, dout, out, F(delta_)));
  BATON_RETURN_IF_ERROR(compute.MemsetAsync(acc_.data(), 0, q_elems_ * sizeof(float)));
  for (int s = 0; s < cp(); ++s) {
    if (s + 1 < cp()) {
      if (s + 1 >= 3) BATON_RETURN_IF_ERROR(comm.Wait(*compute_done_));
      BATON_RETURN_IF_ERROR(IssueKvTransfer(comm, s + 1, HeldAt(s, k, v)));
    }
    if (s > 0) BATON_RETURN_IF_ERROR(compute.Wait(*kv_done_[s % 2]));
    BATON_RETURN_IF_ERROR(Observe(ContextWork::kBackwardBlocks, s, compute, [&] {
      return BackwardBlocks(compute, s, dout, q, HeldAt(s, k, v), lse);
    }));
    if (s > 0) {
      BATON_RETURN_IF_ERROR(compute.Wait(*dkv_done_[s % 2]));
      BATON_RETURN_IF_ERROR(AccumulateInto(compute, bd_[s % 2].data(), din_[s % 2].data(),
                                           DataType::kF32, 2 * kv_elems_));
    }
    if (cp() > 1) BATON_RETURN_IF_ERROR(IssueDkvTransfer(compute, comm, s + 1));
  }
  const float* grads = F(bd_[0]);
  if (cp() > 1) {
    BATON_RETURN_IF_ERROR(compute.Wait(*dkv_done_[cp() % 2]));
    grads = F(din_[cp() % 2]);
  }
  BATON_RETURN_IF_ERROR(CastFromF32(compute, dk, grads, local_.dtype, kv_elems_));
  BATON_RETURN_IF_ERROR(CastFromF32(compute, dv, grads + kv_elems_, local_.dtype, kv_elems_));
  return CastFromF32(compute, dq, F(acc_), local_.dtype, q_elems_);
}

}  // namespace

StatusOr<std::unique_ptr<ContextAttention>> NewRingAttention(
    Communicator& group, Device& device, const ops::AttentionShape& local,
    const ContextSplit& split, const ContextAttentionOptions& options) {
  auto ring = std::make_unique<RingAttention>(group, device, local, split, options);
  BATON_RETURN_IF_ERROR(ring->Init());
  return std::unique_ptr<ContextAttention>(std::move(ring));
}

}  // namespace baton::context::internal
