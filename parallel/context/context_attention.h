// Causal GQA attention over the context group: each rank of a group of C
// ranks holds the load-balanced chunks of every sequence (split.h) of q, k
// and v, and gets the rows of ops/attention.h's output, log-sum-exp and
// gradients that belong to its chunks, equal to the unsplit attention's.
// Two variants, chosen by ContextAttentionOptions::kind:
//
//   kRing       ring attention (Megatron-Core, torchtitan): the K / V blocks
//               travel around the group with point-to-point transfers
//               (Communicator::SendRecvGroup: send to rank + 1, receive from
//               rank - 1), C steps; at each step the blocks of the K / V
//               held are attended to (ops/attention_block.h) while the next
//               block is in transfer, and the partial results are merged by
//               the online softmax. Backward: the same rotation of K / V,
//               and the dK / dV accumulated for each block travel with it
//               and come home after C steps. Per rank and layer: C - 1
//               transfers of the local K and V forward; C - 1 of K / V and
//               C of dK / dV (float) backward.
//   kAllGather  Llama 3's form (suited to GQA, where K / V are small): an
//               AllGather of K and V over the group, local attention of the
//               rank's two query chunks against the key chunks before them
//               (one block per key chunk, merged); backward gathers K / V
//               again (nothing is kept between the calls) and
//               ReduceScatters dK / dV (float) back to their ranks.
//
// Tensors of Forward / Backward: ops/attention.h's, with `local` the rank's
// shape: local.seq = 2 chunks = the global seq / C (rows batch-major, slot 0
// then slot 1 of each sequence, split.h). Conventions as AttentionForward /
// AttentionBackward: out, dq, dk, dv in local.dtype (=), lse float
// [batch, heads, local.seq]. Inside, partial outputs, lse and gradient
// accumulators are float; each result is rounded to dtype once at the end.
// Both variants attend one chunk of queries to one chunk of keys at a time
// (ops/attention_block.h), so on CUDA a chunk (seq / 2C tokens) may hold up
// to 4096 tokens, whatever the sequence's length.
//
// Streams and events (runtime/device.h's protocol). Each call takes the
// `compute` stream (the caller's, where q, k, v, dout are produced and the
// results consumed) and a `comm` stream for the transfers (may be the same
// stream: correct, without overlap). A call:
//   * records an entry event on `compute` and makes `comm` wait on it (and
//     both wait on the previous call's exit event), so the transfers read
//     the inputs and reuse the workspace only after the work before the
//     call;
//   * enqueues the attention blocks, merges and casts on `compute`, the
//     transfers / collectives on `comm`; a block waits (Stream::Wait on an
//     event recorded on `comm`) only for the transfer that brought its K / V
//     (ring: the transfer of step s+1 runs while the blocks of step s
//     compute; two K / V buffers alternate, and a transfer waits for the
//     blocks that read its buffer two steps before);
//   * ends with `compute` having waited for every transfer it issued, then
//     records its exit event; it never blocks the host (no Synchronize, no
//     host wait) and enqueues no host work of its own on `comm` beyond what
//     the communicator does.
// So the caller orders everything after the call by `compute` alone:
// outputs may be read, and inputs reused, by work that follows the call on
// `compute` (or waits on an event recorded there after it).
//
// Buffers. The caller owns q, k, v, dout, out, lse, dq, dk, dv (memory of
// the device, valid until `compute` passes the call). The object owns its
// workspace (workspace_bytes(); allocated at Create; with Q, KV and L the
// bytes of the local q, of the local k and of lse in float, and e the
// dtype's size / 4: ring 2 Q + 2 L + 8 KV + 4 e KV (C > 1); all-gather
// 2 Q + 2 L + 2 KV + 4 C (1 + e) KV, the whole sequence's K / V and their
// float gradients twice over) and its events; one
// call at a time (not thread-safe), calls in the same order on every rank
// of the group (they issue transfers of options.tag on `group`, which must
// be issued in one order: communicator.h).
//
// Failures. Bad arguments: InvalidArgument from the call, nothing
// enqueued. A transfer that fails (a peer that stopped: DeadlineExceeded
// within the timeout naming this rank, the peer, the op and its bytes; a
// peer that aborted: Unavailable) puts `comm` into its error state and,
// through the events, `compute` (host streams: runtime/device.h); the
// communicator is broken then (communicator.h) and every transfer carries
// options.position into the flight recorder and the hang report. An error
// returned while issuing leaves what was issued enqueued: discard the
// object and the communicator.
#ifndef BATON_PARALLEL_CONTEXT_CONTEXT_ATTENTION_H_
#define BATON_PARALLEL_CONTEXT_CONTEXT_ATTENTION_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "baton/comm/communicator.h"
#include "baton/ops/attention.h"
#include "baton/ops/attention_block.h"
#include "baton/parallel/context/split.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::context {

enum class ContextAttentionKind { kRing, kAllGather };
const char* ContextAttentionKindName(ContextAttentionKind kind);  // "ring", "allgather"
// InvalidArgument naming the choices for anything else.
StatusOr<ContextAttentionKind> ParseContextAttentionKind(absl::string_view name);

// The pieces of work a call issues, for an observer (traces, tests).
enum class ContextWork {
  kKvTransfer,      // ring: K / V from the previous rank (comm)
  kDkvTransfer,     // ring backward: dK / dV from the previous rank (comm)
  kAllGather,       // all-gather: K and V gathered (comm)
  kReduceScatter,   // all-gather backward: dK and dV reduce-scattered (comm)
  kForwardBlocks,   // the attention blocks of one step (compute)
  kBackwardBlocks,  // their backward (compute)
};
// "kv transfer", "dkv transfer", "all-gather", "reduce-scatter",
// "attention blocks", "attention blocks backward".
const char* ContextWorkName(ContextWork what);

// Sees each piece of work as it is issued. `issue()` enqueues the work on
// `stream` and must be called exactly once; the observer may enqueue work
// of its own on `stream` before and after it (a trace's timestamps, a
// test's gate) and returns issue()'s status or its own error (which the
// call returns). `step`: the ring step whose blocks compute or use what a
// transfer brings (1..C for transfers: T(s) brings step s's K / V, D(C)
// this rank's own dK / dV), 0 for the all-gather variant. Called on the
// calling thread.
class ContextAttentionObserver {
 public:
  virtual ~ContextAttentionObserver() = default;
  virtual Status Around(ContextWork what, int step, Stream& stream,
                        const std::function<Status()>& issue) = 0;
};

struct ContextAttentionOptions {
  ContextAttentionKind kind = ContextAttentionKind::kRing;
  // The tag of every transfer on the group (0..255; communicator.h).
  uint32_t tag = 0;
  // Per transfer; zero: the communicator's default.
  absl::Duration timeout = absl::ZeroDuration();
  // Recorded with every transfer (flight recorder, hang report).
  SchedulePosition position;
  // Not owned; null: none. Must outlive the object.
  ContextAttentionObserver* observer = nullptr;
};

class ContextAttention {
 public:
  // `group`: the context group (its size is C, its rank this rank's place
  // in the split); `device`: the streams' device, whose memory the
  // workspace is. Both not owned; must outlive the object. InvalidArgument
  // for a bad local shape (ops/attention.h's checks, an odd local.seq: it
  // must hold two equal chunks) or a group whose backend cannot move this
  // device's memory (CommCaps); ResourceExhausted when the workspace does
  // not fit.
  static StatusOr<std::unique_ptr<ContextAttention>> Create(
      Communicator& group, Device& device, const ops::AttentionShape& local,
      const ContextAttentionOptions& options);

  virtual ~ContextAttention() = default;
  ContextAttention(const ContextAttention&) = delete;
  ContextAttention& operator=(const ContextAttention&) = delete;

  ContextAttentionKind kind() const { return options_.kind; }
  const ops::AttentionShape& local_shape() const { return local_; }
  const ContextSplit& split() const { return split_; }
  size_t workspace_bytes() const { return workspace_bytes_; }

  // AttentionForward over the group (see above).
  [[nodiscard]] Status Forward(Stream& compute, Stream& comm, const void* q, const void* k,
                               const void* v, void* out, float* lse);
  // AttentionBackward over the group: `out` and `lse` are Forward's.
  [[nodiscard]] Status Backward(Stream& compute, Stream& comm, const void* dout, const void* q,
                                const void* k, const void* v, const void* out, const float* lse,
                                void* dq, void* dk, void* dv);

 protected:
  ContextAttention(Communicator& group, Device& device, const ops::AttentionShape& local,
                   const ContextSplit& split, const ContextAttentionOptions& options);

  // The variant's work between the entry and exit events.
  virtual Status DoForward(Stream& compute, Stream& comm, const void* q, const void* k,
                           const void* v, void* out, float* lse) = 0;
  virtual Status DoBackward(Stream& compute, Stream& comm, const void* dout, const void* q,
                            const void* k, const void* v, const void* out, const float* lse,
                            void* dq, void* dk, void* dv) = 0;

  // The entry and exit events; called once by the variant's factory.
  Status InitBase();
  // A workspace buffer of `bytes`, counted in workspace_bytes().
  StatusOr<DeviceBuffer> Allocate(size_t bytes);
  StatusOr<std::unique_ptr<Event>> NewEvent() { return device_.CreateEvent(); }
  CollectiveOptions TransferOptions() const;
  // issue() through options_.observer (or alone without one).
  Status Observe(ContextWork what, int step, Stream& stream,
                 const std::function<Status()>& issue) const;
  // The block shape of the local tensors (q and kv sides local.seq rows).
  ops::AttentionBlockShape LocalBlockBase() const;

  Communicator& group_;
  Device& device_;
  const ops::AttentionShape local_;
  const ContextSplit split_;
  const ContextAttentionOptions options_;
  const int rank_;
  const int64_t q_elems_;   // batch * local.seq * heads * head_dim
  const int64_t kv_elems_;  // batch * local.seq * kv_heads * head_dim
  const int64_t lse_elems_;  // batch * heads * local.seq

 private:
  Status Begin(Stream& compute, Stream& comm);
  Status CheckStreams(Stream& compute, Stream& comm) const;

  size_t workspace_bytes_ = 0;
  std::unique_ptr<Event> entry_, exit_;
};

}  // namespace baton::context

#endif  // BATON_PARALLEL_CONTEXT_CONTEXT_ATTENTION_H_
