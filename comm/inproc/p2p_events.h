// Point-to-point of the inproc backend on the event protocol: CUDA streams
// (device memory of one GPU, the ranks being threads), or host streams with
// CommConfig::inproc_event_protocol (not a public header; the contract is
// communicator.h's "Point-to-point", the protocol the one of inproc.h).
//
// Work is enqueued when a group is ISSUED (CUDA host functions may not call
// CUDA), and no issuing thread ever waits for another rank. Per message
// (source, destination, tag, sequence number):
//   1. At the group's issue, rank r records `ready` on its stream (all
//      earlier work on its buffers), then posts every op of the group under
//      the mailbox's mutex: its buffer, byte size, `ready`, its stream's
//      error sink and its flight record.
//   2. The side that posts a message first gets a word of
//      Device::AllocateValues and a target larger than any before; it
//      enqueues WaitValue(word, target) on its stream and moves on.
//   3. The side that posts second matches the message (it leaves the
//      table), compares the byte sizes, makes its stream wait on the first
//      side's `ready` (recorded before it was posted: device.h rule 3),
//      enqueues MemcpyAsync(recv, send) (device to device on a GPU) and
//      WriteValue(word, target), which releases the first side's stream.
// Neither stream moves past the message before the data has moved, so the
// receiver's buffer is not read and the sender's not reused early. A group
// enqueues its copies (step 3) before its waits (step 2): groups are posted
// whole under the mutex, so ops of one group never wait on each other, and
// groups follow their streams' order (as on host streams: a send completes
// only once its receive was posted). On the device the waits are the
// collectives' (inproc.h): a stream stuck in a wait can hold back streams
// sharing its hardware queue.
//
// Failures (the host path's, p2p.h): a message whose second side did not
// post within the timeout is failed by a watchdog thread (DeadlineExceeded
// naming the rank, the peer, the op and its bytes); a late peer then fails
// too. Sizes that differ fail both sides (InvalidArgument naming both
// sizes): the second side's call returns it, the first side's stream
// reports it. Abort() fails every open message and every later group. A
// failed message first fails the waiting side's stream through its error
// sink (or the host work a stream without a sink runs after the wait),
// completes its flight record as failed and marks its rank failed
// (RankStatus), then writes the word from the host (HostWriteValue), which
// releases that stream. Flight records: issued at the call, completed when
// the message is matched and its copy enqueued (the event protocol's
// collectives do likewise; the host does not see the streams finish).
// Streams must have completed their groups before the mailbox is destroyed.
//
// Thread-safe.
#ifndef BATON_COMM_INPROC_P2P_EVENTS_H_
#define BATON_COMM_INPROC_P2P_EVENTS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/comm/communicator.h"
#include "baton/comm/flight_recorder.h"
#include "baton/comm/inproc/p2p.h"
#include "baton/comm/inproc/signal_words.h"
#include "baton/runtime/device.h"

namespace baton::inproc_internal {

class StreamMailbox {
 public:
  // `size`: the ranks of the group; `report` turns a failure into the
  // status given out (the hang report's verdict added).
  StreamMailbox(int size, std::function<Status(Status)> report);
  ~StreamMailbox();
  StreamMailbox(const StreamMailbox&) = delete;
  StreamMailbox& operator=(const StreamMailbox&) = delete;

  // Issues the group `posts` of `rank` on `stream` (steps 1-3). Returns
  // the first failure found at the call (a mismatch, a message that failed
  // before this side posted it, Abort, a failed enqueue); the group's other
  // ops are enqueued regardless. Every post's record is completed by this
  // call or later by the peer or the watchdog. `device`: the ranks' device
  // (its AllocateValues words and events).
  Status Issue(int rank, const std::vector<P2PPost>& posts, uint32_t tag,
               absl::Duration timeout, FlightRecorder* rec, Device& device,
               Stream& stream);

  // Fails every open message and every later group with `s`.
  void Abort(Status s);

  // The first failure of a message `rank` was waiting for (OK if none).
  Status RankStatus(int rank);

 private:
  // rank's `ready` of one group, shared by the messages it posted first;
  // back to rank's pool once every peer has waited on it.
  struct Ready {
    int rank = 0;
    std::unique_ptr<Event> event;
    int users = 0;
  };
  struct Side {
    int rank = 0;
    P2POp op;
    uint64_t seq = 0;
    FlightRecorder* rec = nullptr;
    uint64_t record = FlightRecorder::kNoRecord;
  };
  struct Message {
    Side first;  // the side that posted first, whose stream waits
    std::shared_ptr<Ready> ready;  // first's `ready` until waited on
    std::shared_ptr<StreamErrorSink> sink;  // first's stream's, or null
    uint64_t* word = nullptr;
    uint64_t target = 0;
    uint32_t tag = 0;
    absl::Time deadline;
    absl::Duration timeout;
    bool failed = false;  // guarded by the mailbox's mutex
    // What a stream without a sink reports after its wait.
    Status Check() const {
      absl::MutexLock lock(&mu);
      return status;
    }
    mutable absl::Mutex mu;
    Status status ABSL_GUARDED_BY(mu);
  };
  // (source, destination, tag, sequence number)
  using Key = std::tuple<int, int, uint32_t, uint64_t>;

  StatusOr<std::shared_ptr<Ready>> TakeReady(int rank, Device& device);
  void ReleaseReadyLocked(std::shared_ptr<Ready>& ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Fails `m` (if not yet failed): its first side's stream, record and
  // rank, then releases that stream. Removes it from the open table.
  void FailLocked(const Key& key, const std::shared_ptr<Message>& m, Status s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Watch();

  const int size_;
  const std::function<Status(Status)> report_;
  absl::Mutex mu_;
  absl::CondVar cv_;  // wakes the watchdog
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;  // started with the first open message
  std::map<Key, std::shared_ptr<Message>> open_ ABSL_GUARDED_BY(mu_);
  // Messages failed before their second side posted them.
  std::map<Key, Status> failed_ ABSL_GUARDED_BY(mu_);
  std::vector<Status> rank_status_ ABSL_GUARDED_BY(mu_);
  Status aborted_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::unique_ptr<Event>>> free_events_
      ABSL_GUARDED_BY(mu_);
  SignalWords words_ ABSL_GUARDED_BY(mu_){256};
};

}  // namespace baton::inproc_internal

#endif  // BATON_COMM_INPROC_P2P_EVENTS_H_
