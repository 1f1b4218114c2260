// Point-to-point of the inproc backend on host streams (not a public
// header; the contract is communicator.h's "Point-to-point").
//
// A Mailbox is shared by the ranks (threads) of one group. A group of ops
// runs as ONE host work item on the issuing rank's stream:
//   1. it posts every op (sends publish their buffer and size, receives
//      their buffer and size) under the mailbox's mutex, keyed by
//      (source, destination, tag, sequence number);
//   2. for each receive, it waits for the matching send, compares the byte
//      sizes (a difference fails both sides, naming both sizes), copies the
//      data into its buffer and marks the message delivered;
//   3. for each send, it waits until its message was delivered, so the
//      sender's stream does not move on (and reuse the buffer) before the
//      receiver has read it.
// Every op is posted before any wait, so a group's sends and receives never
// wait on each other; ops of different groups follow their streams' order.
//
// Failures: a wait that passes the deadline fails the message
// (DeadlineExceeded naming the rank, the peer, the op and its bytes), so a
// late peer fails too instead of touching buffers that were given up; a
// message the receiver is already copying is waited for. Abort() fails
// every message and every later group with its status.
//
// Thread-safe.
#ifndef BATON_COMM_INPROC_P2P_H_
#define BATON_COMM_INPROC_P2P_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/comm/communicator.h"
#include "baton/comm/flight_recorder.h"

namespace baton::inproc_internal {

// One op of a group with its sequence number and flight record.
struct P2PPost {
  P2POp op;
  uint64_t seq = 0;
  uint64_t record = FlightRecorder::kNoRecord;
};

class Mailbox {
 public:
  // Runs the group `posts` of `rank` (steps 1-3 above). `report` turns a
  // failure into the status returned (the hang report's verdict added);
  // `rec` gets each op's start and completion.
  Status RunGroup(int rank, const std::vector<P2PPost>& posts, uint32_t tag,
                  absl::Duration timeout, FlightRecorder* rec,
                  const std::function<Status(Status)>& report);

  // Fails every open message and every later group with `s`.
  void Abort(Status s);

 private:
  struct Message {
    const void* src = nullptr;
    size_t send_bytes = 0;
    bool has_send = false;
    void* dst = nullptr;
    size_t recv_bytes = 0;
    bool has_recv = false;
    bool taken = false;      // the receiver is copying
    bool delivered = false;  // the copy is done
    Status status;
  };
  // (source, destination, tag, sequence number)
  using Key = std::tuple<int, int, uint32_t, uint64_t>;

  std::shared_ptr<Message> PostLocked(int rank, const P2PPost& p,
                                      uint32_t tag)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  Status Receive(int rank, const P2PPost& p, uint32_t tag, Message& m,
                 absl::Time deadline, absl::Duration timeout,
                 const std::function<Status(Status)>& report);
  Status AwaitDelivery(int rank, const P2PPost& p, uint32_t tag, Message& m,
                       absl::Time deadline, absl::Duration timeout,
                       const std::function<Status(Status)>& report);
  void Erase(const Key& key, const Message* m) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  absl::Mutex mu_;
  std::map<Key, std::shared_ptr<Message>> messages_ ABSL_GUARDED_BY(mu_);
  Status aborted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace baton::inproc_internal

#endif  // BATON_COMM_INPROC_P2P_H_
