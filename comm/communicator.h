// Collective communication: the one interface everything above comm/ uses.
//
// A Communicator is one rank's handle on a group of `size()` ranks. Backends
// (chosen by name in CreateCommunicator, comm/factory.h):
//
//   inproc  ranks are threads of one process; buffers are host memory (host
//           streams) or memory of one GPU (CUDA streams).
//   ucx     one rank per process; host memory; UCP tag messages in a ring,
//           pipelined in chunks.
//   nccl    one rank per GPU; device memory; CUDA streams.
//
// Ordering contract (the NCCL rule, for every backend):
//   * Each collective is ENQUEUED on `stream` and returns as soon as it is
//     queued. Completion is observed through the stream (Synchronize, or an
//     event recorded after it). Buffers must stay valid and untouched by
//     other streams until then.
//   * Collectives are matched across ranks by (options.tag, the number of
//     collectives issued before it with that tag on this communicator). Every
//     rank must therefore issue the collectives of one tag in the same order.
//     Collectives of different tags may be issued in different orders on
//     different ranks and may run concurrently (on different streams).
//   * A Communicator may be called from several threads; calls with the same
//     tag must then be ordered by the caller.
//
// Buffers and counts (NCCL conventions):
//   AllGather(send, recv, count):     send has `count` elements, recv has
//       size()*count; rank r's input lands at recv + r*count.
//       In place when send == recv + rank*count.
//   ReduceScatter(send, recv, count): send has size()*count, recv has
//       `count`; rank r gets the reduction of block r.
//       In place when recv == send + rank*count.
//   AllReduce(send, recv, count):     both `count`; send == recv is in place.
//   Broadcast(send, recv, count, root): root's send is copied to every recv;
//       send is read on the root only; send == recv is in place.
//   Barrier(): completes on every rank only after every rank enqueued it and
//       the work before it on each rank's stream completed.
//   count == 0 is valid and still synchronizes the ranks.
//
// Errors:
//   * Bad arguments (null buffer with count > 0, root out of range, a stream
//     of the wrong kind, overlapping buffers that are not in place) return
//     InvalidArgument from the call; nothing is enqueued.
//   * Failures found while the collective runs put the stream in its error
//     state (runtime/device.h) and are also returned by health():
//       - a peer that does not arrive within the timeout: DeadlineExceeded,
//         naming the collective, its sequence number and the peer(s);
//       - a peer that died or aborted: Unavailable naming the peer;
//       - ranks that disagree on count, type, op or root: InvalidArgument
//         naming both values (inproc and ucx check a small header; nccl does
//         not, as NCCL itself cannot).
//     After such a failure the communicator is broken: later collectives fail
//     at once with the same error. Create a new one to continue.
//   * Hang report (docs/hangs.md): on such a failure every backend also
//     reports this rank's last issued and completed collectives (with their
//     SchedulePosition): inproc over the ranks of the process, ucx and nccl
//     through the store. One rank prints ONE report (CommConfig::
//     on_hang_report) naming the rank that lags or diverged, the collective
//     and bucket, and the ranks waiting for it; every failing rank's error
//     message ends with that verdict ("; hang report: rank 2 lags: ...").
//
// Sub-communicators (Split, the ncclCommSplit contract):
//   * Split(colour, key) is collective over every rank of this communicator
//     and blocks the calling thread until every rank has called it (or the
//     timeout passes: DeadlineExceeded). Every rank must call Split in the
//     same order relative to its other Splits; it need not be ordered with
//     the collectives on streams (those may be in flight).
//   * Ranks that pass the same colour >= 0 form one child communicator;
//     child ranks are numbered by key, then by rank in this communicator. A
//     negative colour (kSplitNoColour) opts out: OK with a null pointer.
//   * A child is an ordinary Communicator with its own tag space and
//     sequence numbers: its collectives never match the parent's or a
//     sibling's, so parent and child collectives (of any tags) may be in
//     flight together on different streams. Where the ranks' streams wait
//     for one another's issued work (nccl; inproc on CUDA streams or the
//     event protocol), every rank must issue the collectives of parent and
//     children in one order (NCCL's rule for concurrent communicators);
//     inproc's host path and ucx also accept different orders. It uses the parent's device
//     (and store, on ucx), which must outlive it; it may outlive the parent.
//   * A broken parent returns its error and creates nothing. Backends
//     without sub-communicators return Unimplemented.
//
// Point-to-point (Send, Recv, SendRecvGroup; NCCL's ncclSend / ncclRecv):
//   * SendRecvGroup(ops) posts every op of the list at once (as NCCL's
//     ncclGroupStart / ncclGroupEnd around them) and is ENQUEUED on
//     `stream` like a collective: the group completes on the stream when all
//     its ops have. Send and Recv are groups of one op.
//   * Matching: the k-th send from rank a to rank b with tag t matches the
//     k-th receive on rank b from rank a with tag t (counted per ordered
//     pair and tag, separately from the collectives' sequence numbers).
//     Only the ranks of a pair meet; the other ranks need not call.
//   * A send may complete only once its receive was posted (it then knows
//     the receiver's size): two ranks that exchange must put both ops in
//     one group, or order them (one sends first, the other receives first),
//     else they wait on each other until the timeout (as on NCCL).
//   * A send and its receive must agree on the byte size (count x type
//     size); a difference fails BOTH ranks with InvalidArgument naming the
//     two sizes (nccl cannot check it: NCCL's behaviour is undefined).
//   * Refused at the call (InvalidArgument, nothing enqueued): a peer out of
//     range 0..size()-1, a peer equal to this rank (self-sends are not
//     supported: copy locally), a null buffer with count > 0, a count whose
//     byte size overflows, a bad data type, an empty group, a group with
//     more than kMaxGroupOps ops. Also the tag and timeout checks of the
//     collectives.
//   * Failures while it runs follow the collectives' rules: a peer that
//     does not post the matching op within the timeout: DeadlineExceeded
//     naming this rank, the peer, the op (send / recv), its bytes and tag;
//     a dead or aborted peer: Unavailable naming the peer. The
//     communicator is then broken, as after a collective's failure.
//   * Every op is recorded in the flight recorder (kind kSend / kRecv,
//     SchedulePosition::peer = the peer's world rank, seq = its number in
//     its (pair, tag)); the hang report's cross-rank matching of the
//     collectives skips them.
#ifndef BATON_COMM_COMMUNICATOR_H_
#define BATON_COMM_COMMUNICATOR_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "absl/time/time.h"
#include "baton/comm/reduce.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton {

class FlightRecorder;  // comm/flight_recorder.h

enum class CollectiveKind : uint8_t {
  kAllGather = 0,
  kReduceScatter = 1,
  kAllReduce = 2,
  kBroadcast = 3,
  kBarrier = 4,
  // Point-to-point (Send / Recv / SendRecvGroup): recorded like the
  // collectives (comm/flight_recorder.h), never matched with them.
  kSend = 5,
  kRecv = 6,
};
// "all_gather", "reduce_scatter", "all_reduce", "broadcast", "barrier",
// "send", "recv". ParseCollective knows the five collectives only.
const char* CollectiveName(CollectiveKind kind);
StatusOr<CollectiveKind> ParseCollective(absl::string_view name);

// Where a collective sits in the static schedule of a step (issue 38).
// The executor fills it for every collective of the step graph; a trainer
// may fill it for its own. Backends copy it into their flight recorder
// (comm/flight_recorder.h), so a hang or straggler report can say "step 3,
// node 12, bucket 4, group dp_shard+hpz" instead of a bare sequence number.
// Plain value; the defaults mean "not given".
struct SchedulePosition {
  int64_t step = -1;    // steps issued before this one
  int32_t node = -1;    // index of the step graph's node
  int32_t bucket = -1;  // the bucket it moves
  // Point-to-point (Send / Recv, once they exist): the other side, as a
  // world rank. -1 for collectives.
  int32_t peer = -1;
  // The mesh group it runs over: scheduler::MeshGroup::bits() (bit d is
  // mesh dimension d: pp, dp_replicate, dp_shard, hpz, cp, tp, ep, edp);
  // 0: none.
  uint8_t group = 0;
  // Check mode: inproc and ucx compare the positions of the calls they
  // match (with the kind, count and type they always compare) and fail
  // with InvalidArgument naming both positions when they differ, so a rank
  // that skipped a collective is caught at the next one instead of moving
  // the wrong bucket. Compared only when every rank sets it. nccl cannot
  // compare (NCCL matches on the device); scheduler/schedule_check.h
  // compares whole schedules before the first step instead.
  bool check = false;

  bool given() const { return step >= 0 || node >= 0 || bucket >= 0; }
};

// One op of SendRecvGroup: `count` elements of `type` sent from `send` to
// `peer`, or received from `peer` into `recv`. Plain value.
struct P2POp {
  enum class Kind : uint8_t { kSend, kRecv };
  Kind kind = Kind::kSend;
  int peer = -1;
  const void* send = nullptr;  // kSend
  void* recv = nullptr;        // kRecv
  size_t count = 0;
  DataType type = DataType::kF32;

  static P2POp Send(const void* buf, size_t count, DataType type, int peer) {
    P2POp o;
    o.kind = Kind::kSend;
    o.peer = peer;
    o.send = buf;
    o.count = count;
    o.type = type;
    return o;
  }
  static P2POp Recv(void* buf, size_t count, DataType type, int peer) {
    P2POp o;
    o.kind = Kind::kRecv;
    o.peer = peer;
    o.recv = buf;
    o.count = count;
    o.type = type;
    return o;
  }
  size_t bytes() const { return count * DataTypeSize(type); }
};

struct CollectiveOptions {
  // Give up after this long without completing; zero means the
  // communicator's default (CommConfig::timeout).
  absl::Duration timeout = absl::ZeroDuration();
  // Matching key, 0..255 (see the ordering contract above).
  uint32_t tag = 0;
  // bf16/f16 reductions: keep partial sums in fp32 and round once at the
  // end. On the ucx ring this sends fp32 partials (twice the bytes).
  // Unsupported (InvalidArgument) on nccl: reduce an fp32 buffer instead.
  // Ignored for ReduceOp::kMax (exact in any type; comm/reduce.h).
  bool accumulate_fp32 = false;
  // Its place in the schedule (see SchedulePosition).
  SchedulePosition position;
};

// What a communicator can do. Code above comm/ asks these instead of
// comparing backend names.
struct CommCaps {
  // CollectiveOptions::accumulate_fp32 is honoured (else InvalidArgument).
  bool accumulate_fp32 = false;
  // Collectives enqueued on a CUDA stream that is being captured replay
  // correctly from the CUDA graph (ranks are matched on the device, not at
  // issue time on the host).
  bool graph_capture = false;
  // Buffers may be host memory (with host streams).
  bool host_memory = false;
  // Buffers may be device memory (with CUDA streams).
  bool device_memory = false;
  // Send / Recv / SendRecvGroup work (else Unimplemented), on the memory
  // kinds named by p2p_host_memory and p2p_device_memory.
  bool p2p_host_memory = false;
  bool p2p_device_memory = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "inproc", "ucx" or "nccl": for messages and reports only; decide on
  // caps(), never on the name.
  virtual const char* backend() const = 0;
  virtual CommCaps caps() const = 0;

  [[nodiscard]] virtual Status AllGather(const void* send, void* recv,
                                         size_t count, DataType type,
                                         Stream& stream,
                                         const CollectiveOptions& options) = 0;
  [[nodiscard]] virtual Status ReduceScatter(
      const void* send, void* recv, size_t count, DataType type, ReduceOp op,
      Stream& stream, const CollectiveOptions& options) = 0;
  [[nodiscard]] virtual Status AllReduce(const void* send, void* recv,
                                         size_t count, DataType type,
                                         ReduceOp op, Stream& stream,
                                         const CollectiveOptions& options) = 0;
  [[nodiscard]] virtual Status Broadcast(const void* send, void* recv,
                                         size_t count, DataType type, int root,
                                         Stream& stream,
                                         const CollectiveOptions& options) = 0;
  [[nodiscard]] virtual Status Barrier(Stream& stream,
                                       const CollectiveOptions& options) = 0;

  // Point-to-point (see "Point-to-point" above). The base answers
  // Unimplemented.
  static constexpr size_t kMaxGroupOps = 4096;
  [[nodiscard]] virtual Status SendRecvGroup(absl::Span<const P2POp> ops,
                                             Stream& stream,
                                             const CollectiveOptions& options);
  [[nodiscard]] Status Send(const void* send, size_t count, DataType type,
                            int peer, Stream& stream,
                            const CollectiveOptions& options) {
    const P2POp op = P2POp::Send(send, count, type, peer);
    return SendRecvGroup(absl::MakeConstSpan(&op, 1), stream, options);
  }
  [[nodiscard]] Status Recv(void* recv, size_t count, DataType type, int peer,
                            Stream& stream, const CollectiveOptions& options) {
    const P2POp op = P2POp::Recv(recv, count, type, peer);
    return SendRecvGroup(absl::MakeConstSpan(&op, 1), stream, options);
  }

  // The bandwidth limit of the medium this backend moves data through,
  // measured now with `bytes`-sized transfers (mean over `iters` after a
  // warm-up, the statistic the benchmark uses for collectives): a
  // single-thread memcpy (inproc, host memory), a raw UCX tag transfer from
  // each rank to the next one at the same time (ucx), a device-to-device copy
  // (nccl). Collective: every rank calls it; every rank gets the same
  // figure (the slowest rank's, where ranks measure). For benchmarks.
  struct Limit {
    double gbps = 0;      // decimal GB/s
    std::string medium;   // "memcpy", "ucx-tag", "d2d"
  };
  virtual StatusOr<Limit> MeasureLimit(size_t bytes, int iters) = 0;

  // OK, or the first failure seen by a collective of this communicator.
  virtual Status health() = 0;

  // What this rank issued and completed (comm/flight_recorder.h), shared
  // by this communicator and the children Split made from it. Owned by
  // them; valid while any of them lives. Null for a backend without one.
  virtual FlightRecorder* recorder() { return nullptr; }

  // A sub-communicator of the ranks passing the same colour (see
  // "Sub-communicators" above); null for a negative colour.
  static constexpr int kSplitNoColour = -1;
  virtual StatusOr<std::unique_ptr<Communicator>> Split(int colour, int key);

  // Marks this rank failed: its pending and later collectives end with
  // Unavailable and so do the peers' (promptly on inproc; within the
  // timeout elsewhere). For tear-down after an error and for fault tests.
  virtual void Abort() = 0;

 protected:
  Communicator() = default;
};

// The argument checks shared by every backend (see "Errors" above).
Status ValidateCollective(CollectiveKind kind, int rank, int size,
                          const void* send, const void* recv, size_t count,
                          DataType type, int root,
                          const CollectiveOptions& options);

// The argument checks of SendRecvGroup shared by every backend (see
// "Point-to-point" above); `backend` prefixes the message.
Status ValidateP2P(const char* backend, int rank, int size,
                   absl::Span<const P2POp> ops,
                   const CollectiveOptions& options);

// Byte offsets of a collective's send and receive buffers.
size_t SendBytes(CollectiveKind kind, int size, size_t count, DataType type);
size_t RecvBytes(CollectiveKind kind, int size, size_t count, DataType type);

}  // namespace baton

#endif  // BATON_COMM_COMMUNICATOR_H_
