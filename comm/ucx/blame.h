// Naming the rank that failed, the same way on every rank (issue 16, item
// 13). In a ring, a rank only sees its neighbours: when rank 2 of 6 dies,
// ranks 1 and 3 see it, and rank 4 sees only rank 3 stop (or, once rank 3
// gives up, rank 3's connection close), so on its own it would blame the
// live rank 3. Instead, the first rank to see a failure posts it in the
// store and everyone else reports that post:
//
//   * a rank with hard evidence (the transport reported an error on the
//     link to peer P) claims "rank P failed" at once: the first claim wins
//     (an atomic counter), and the others read the winning one;
//   * a rank that only saw peer P go silent (a timeout) first records
//     "I wait on P" (and on whom else it waits now, in other threads or
//     communicators), then gives the ranks with hard evidence `grace` to
//     post. If none did, it follows the records from there (P waits on Q,
//     Q waits on ..., breadth first) to the first rank that has no record,
//     i.e. waits on no one: that one is dead, stopped or never issued the
//     collective, and is named. When every rank reached waits on another
//     (a cycle), P is named.
//     A live rank that waits long posts its record early (WaitNotice
//     below, after a quarter of its timeout), not only when it times out
//     itself: a rank that waits on it but timed out first then finds the
//     record and follows it, where a record posted only at the live rank's
//     own timeout could come too late and the live rank be named. The
//     records are followed for at most `grace`; a record of "-" (the waits
//     ended) counts as none.
//
// A rank posts before it returns its error to the caller, so before it can
// close its connections: a consequence never gets posted before its cause.
// If the store itself is unreachable, rank 0 (which hosts it) is named.
//
// Ranks here are world ranks, and a job's communicators (a communicator and
// the ones Split makes from it) share one prefix: a rank that dies is named
// alike by every survivor, whichever communicator each saw it in (a
// pipeline's stage neighbours, a data group's members, the world), and the
// chain of waits crosses communicators.
// Every store call has a deadline; the whole attribution takes at most
// about 2 x grace + 3 x store_timeout (one more when another thread of this
// rank is writing its wait record at the time).
#ifndef BATON_COMM_UCX_BLAME_H_
#define BATON_COMM_UCX_BLAME_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/time/time.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/ucx/ring.h"
#include "baton/runtime/status.h"

namespace baton::ucx_internal {

struct BlameOptions {
  std::string prefix;  // store keys, e.g. "<group>/ucx/"
  int rank = 0;        // this rank's world rank
  int size = 1;        // the world size (ranks read from the store are below)
  // How the messages name a world rank ("rank 3 (pipeline stage 1)");
  // empty: "rank N".
  std::function<std::string(int)> name;
  absl::Duration grace = absl::Milliseconds(500);
  absl::Duration store_timeout = absl::Seconds(2);
};

// The status this rank reports for its failure `own`, which points at
// `suspect` (its world rank). With no suspect (or no store) returns `own` unchanged.
// Otherwise the message starts with the failed rank as the first rank to
// see it named it, e.g. "rank 2 failed (seen first by rank 3): ...; on
// rank 5: <own message>"; the code is Unavailable for a failure the
// transport reported and DeadlineExceeded for a silent rank.
Status AttributeFailure(Store* store, const BlameOptions& options,
                        const Status& own, Suspect suspect);

// This rank's early record of one long wait: while the wait lasts,
// "<prefix>silent/<rank>" names the peer it waits on (Waiting, each time
// that peer changes); Finish(false) withdraws it, Finish(true) (the wait
// failed) leaves it for good. Waits of one rank in several threads and
// communicators of a failure group share the record: it lists the peers of
// all of them, oldest first ("3,1"; "-" when none is left). Store calls
// have `options.store_timeout`; one that fails is not retried (the record
// is a hint: without it the search stops at this rank, as if it did not
// wait). Thread-compatible (one thread per WaitNotice); the shared record
// is guarded by a process-wide mutex, held during its store write.
class WaitNotice {
 public:
  WaitNotice(Store* store, const BlameOptions& options);
  ~WaitNotice();  // Finish(false) unless finished
  WaitNotice(const WaitNotice&) = delete;
  WaitNotice& operator=(const WaitNotice&) = delete;

  void Waiting(int peer);  // a world rank
  void Finish(bool failed);

 private:
  Store* const store_;
  const std::string key_;
  const absl::Duration store_timeout_;
  const uint64_t id_;
  int peer_ = -1;
  bool finished_ = false;
};

}  // namespace baton::ucx_internal

#endif  // BATON_COMM_UCX_BLAME_H_
