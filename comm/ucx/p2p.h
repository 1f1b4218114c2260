// One group of sends and receives of the ucx backend (communicator.h,
// "Point-to-point") as a state machine driven by the progress thread
// (ucx.cc). Not thread-safe: only that thread touches it.
//
// Per op, tagged UCP messages (tag: user tag (8) | sequence (24) | kind 3
// (2) | sending rank (14) | 0 data, 1 acknowledgement (16)):
//   send  posts the data to the peer and a receive for the peer's
//         acknowledgement; done when both completed and the acknowledgement
//         says the sizes agreed.
//   recv  probes for the peer's message (ucp_tag_probe_nb), which tells its
//         length before any byte lands; equal to this rank's size: receives
//         it into the buffer, then acknowledges; different: acknowledges
//         with its own size and fails, naming both (the sender fails on the
//         acknowledgement), without receiving.
// So a send completes only once the receiver has the data (as on inproc),
// and a mismatch fails both sides at once. A peer that does not post its op
// within the timeout: DeadlineExceeded naming it; a peer whose link failed:
// Unavailable naming it.
#ifndef BATON_COMM_UCX_P2P_H_
#define BATON_COMM_UCX_P2P_H_

#include <ucp/api/ucp.h>

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/time/time.h"
#include "baton/comm/communicator.h"
#include "baton/comm/ucx/ring.h"
#include "baton/runtime/status.h"

namespace baton::ucx_internal {

struct P2PLinks {
  ucp_worker_h worker = nullptr;
  int rank = 0;
  // The endpoint to a peer, created on first use (progress thread).
  std::function<StatusOr<ucp_ep_h>(int peer)> endpoint;
  // OK while the peer is alive; else why not.
  std::function<Status(int peer)> peer_status;
};

class P2PJob {
 public:
  struct Op {
    P2POp op;
    uint64_t seq = 0;
  };
  P2PJob(std::vector<Op> ops, uint32_t tag, const P2PLinks& links,
         absl::Duration timeout);
  ~P2PJob();
  P2PJob(const P2PJob&) = delete;
  P2PJob& operator=(const P2PJob&) = delete;

  // Posts what can be posted and reaps completions. True once finished;
  // then status() is final. After a failure outstanding requests are
  // cancelled; the job must outlive the worker's next progress calls.
  bool Advance();
  const Status& status() const { return status_; }
  Suspect suspect() const { return suspect_; }
  // While unfinished: the peer of the first op not done (-1 if none).
  int waiting_on() const;

  // The 64-bit tag of a message (see above).
  static uint64_t Tag(uint32_t tag, uint64_t seq, int from, bool ack);

 private:
  enum : uint8_t { kIdle = 0, kPosted = 1, kDone = 2 };
  struct Ack {
    uint64_t magic = 0;
    uint64_t recv_bytes = 0;  // the receiver's size
    uint64_t ok = 0;          // 1: the sizes agreed and the data landed
  };
  struct Item {
    Op o;
    uint8_t data = kIdle;
    uint8_t ack = kIdle;
    void* data_req = nullptr;
    void* ack_req = nullptr;
    Ack ack_buf;
    size_t ack_len = 0;
    bool probed = false;   // recv: the message was found
    size_t sent_bytes = 0;  // recv: the sender's size
    bool done = false;
  };

  void AdvanceSend(Item& it);
  void AdvanceRecv(Item& it);
  // kDone / kPosted, or kIdle after setting status_.
  uint8_t Check(void** req, Item& it, const char* what);
  // Takes a just-posted request `r` into *req / *state (kDone when it
  // completed at once); false after failing the job ("LABEL: WHAT failed").
  bool Posted(ucs_status_ptr_t r, Item& it, const char* what, void** req, uint8_t* state);
  // The endpoint to the item's peer, or the job failed naming it.
  StatusOr<ucp_ep_h> Endpoint(Item& it);
  std::string Label(const Item& it) const;
  void Fail(Status s, Suspect who = {});
  void CancelAll();

  std::vector<Item> items_;
  const uint32_t tag_;
  const P2PLinks links_;
  const absl::Time deadline_;
  const absl::Duration timeout_;
  bool finished_ = false;
  Status status_;
  Suspect suspect_;
};

}  // namespace baton::ucx_internal

#endif  // BATON_COMM_UCX_P2P_H_
