#include "baton/comm/ucx/blame.h"

#include <algorithm>
#include <deque>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"

namespace baton::ucx_internal {
namespace {

// Records are "<U|D>|<message>": U for a failure the transport reported,
// D for a silent rank.
std::string Record(bool dead, absl::string_view message) {
  return absl::StrCat(dead ? "U|" : "D|", message);
}

Status FromRecord(absl::string_view record, int rank, const Status& own) {
  const bool dead = record.substr(0, 2) == "U|";
  const absl::string_view message =
      record.size() >= 2 ? record.substr(2) : record;
  return Status(dead ? absl::StatusCode::kUnavailable
                     : absl::StatusCode::kDeadlineExceeded,
                absl::StrCat(message, "; on rank ", rank, ": ",
                             own.message()));
}

bool StoreUnreachable(const Status& s) {
  return absl::IsUnavailable(s) ||
         (absl::IsDeadlineExceeded(s) &&
          s.message().find("did not appear") == absl::string_view::npos);
}

std::string Name(const BlameOptions& o, int rank) {
  return o.name ? o.name(rank) : absl::StrCat("rank ", rank);
}

Status StoreDown(const BlameOptions& o, const Status& store_status,
                 const Status& own) {
  return absl::UnavailableError(absl::StrCat(
      Name(o, 0), " failed or stopped (its store is unreachable: ",
      store_status.message(), "); on this rank: ", own.message()));
}

// The ranks a "silent/<rank>" record names ("2,1": it waits on 2 and on
// 1), waiting until `until` for one (a missing record and "-" are alike:
// polled until then); nullopt if none came.
std::optional<std::vector<int>> WaitsOn(Store* store, const std::string& key,
                                        int size, absl::Time until) {
  for (;;) {
    StatusOr<std::string> v =
        store->Get(key, std::max(absl::ZeroDuration(), until - absl::Now()));
    if (!v.ok()) return std::nullopt;
    std::vector<int> peers;
    for (absl::string_view f : absl::StrSplit(*v, ',')) {
      int n = -1;
      if (absl::SimpleAtoi(f, &n) && n >= 0 && n < size) peers.push_back(n);
    }
    if (!peers.empty()) return peers;
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return std::nullopt;
    absl::SleepFor(std::min(left, absl::Milliseconds(50)));
  }
}

// The records of this process, per key: the waits (oldest first; a failed
// one stays, first once AttributeFailure named its peer) and what was last
// written.
struct Wait {
  uint64_t id = 0;
  int peer = -1;
  bool failed = false;
};
struct Board {
  std::list<Wait> waits;
  std::string written;
};
ABSL_CONST_INIT absl::Mutex board_mu(absl::kConstInit);
uint64_t board_ids ABSL_GUARDED_BY(board_mu) = 0;
std::map<std::string, Board>& Boards() ABSL_EXCLUSIVE_LOCKS_REQUIRED(board_mu) {
  static auto* boards = new std::map<std::string, Board>;
  return *boards;
}

std::vector<int> Peers(const Board& b) {
  std::vector<int> peers;
  for (const Wait& w : b.waits) {
    if (w.peer >= 0 &&
        std::find(peers.begin(), peers.end(), w.peer) == peers.end()) {
      peers.push_back(w.peer);
    }
  }
  return peers;
}

// Writes the board's record if it changed (under board_mu, so writes of one
// key land in order).
Status Publish(Store* store, const std::string& key, Board& b,
               absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(board_mu) {
  const std::vector<int> peers = Peers(b);
  const std::string want = peers.empty() ? "-" : absl::StrJoin(peers, ",");
  if (want == b.written || (b.written.empty() && want == "-")) return Status();
  Status s = store->Set(key, want, timeout);
  if (s.ok()) b.written = want;
  return s;
}

// AttributeFailure's own record: `suspect` first, then the rank's other
// waits. Returns the peers and the store's answer.
std::pair<std::vector<int>, Status> RecordFailure(Store* store,
                                                  const std::string& key,
                                                  int suspect,
                                                  absl::Duration timeout) {
  absl::MutexLock lock(&board_mu);
  Board& b = Boards()[key];
  b.waits.push_front(Wait{++board_ids, suspect, true});
  Status s = Publish(store, key, b, timeout);
  return {Peers(b), s};
}

}  // namespace

WaitNotice::WaitNotice(Store* store, const BlameOptions& o)
    : store_(store),
      key_(absl::StrCat(o.prefix, "silent/", o.rank)),
      store_timeout_(o.store_timeout),
      id_([] {
        absl::MutexLock lock(&board_mu);
        return ++board_ids;
      }()) {
  absl::MutexLock lock(&board_mu);
  Boards()[key_].waits.push_back(Wait{id_, -1, false});
}

WaitNotice::~WaitNotice() {
  if (!finished_) Finish(false);
}

void WaitNotice::Waiting(int peer) {
  if (finished_ || peer == peer_ || store_ == nullptr) return;
  peer_ = peer;
  absl::MutexLock lock(&board_mu);
  Board& b = Boards()[key_];
  for (Wait& w : b.waits) {
    if (w.id == id_) w.peer = peer;
  }
  (void)Publish(store_, key_, b, store_timeout_);
}

void WaitNotice::Finish(bool failed) {
  if (finished_) return;
  finished_ = true;
  absl::MutexLock lock(&board_mu);
  auto it = Boards().find(key_);
  if (it == Boards().end()) return;
  Board& b = it->second;
  if (failed) {
    for (Wait& w : b.waits) {
      if (w.id == id_) w.failed = true;
    }
    return;  // the record stands
  }
  b.waits.remove_if([this](const Wait& w) { return w.id == id_; });
  if (store_ != nullptr) (void)Publish(store_, key_, b, store_timeout_);
  if (b.waits.empty() && b.written.empty()) Boards().erase(it);
}

Status AttributeFailure(Store* store, const BlameOptions& o, const Status& own,
                        Suspect suspect) {
  if (store == nullptr || suspect.rank < 0 || own.ok()) return own;
  const std::string first_key = absl::StrCat(o.prefix, "failure");
  const std::string claims_key = absl::StrCat(o.prefix, "failure/claims");
  std::string claim;
  if (suspect.dead) {
    claim = absl::StrCat(Name(o, suspect.rank), " failed (seen first by rank ",
                         o.rank, "): ", own.message());
  } else {
    // Say whom we wait on, then give the ranks that saw a death time to
    // post it.
    auto [mine, set] = RecordFailure(
        store, absl::StrCat(o.prefix, "silent/", o.rank), suspect.rank,
        o.store_timeout);
    if (StoreUnreachable(set)) return StoreDown(o, set, own);
    StatusOr<std::string> posted = store->Get(first_key, o.grace);
    if (posted.ok()) return FromRecord(*posted, o.rank, own);
    if (StoreUnreachable(posted.status())) {
      return StoreDown(o, posted.status(), own);
    }
    // Nobody did: follow who waits on whom (breadth first, from the peers
    // this rank waits on, the suspect first) to a rank that waits on no one.
    // When every rank reached waits on another (a cycle), no one is to
    // single out and the suspect is named.
    int culprit = suspect.rank;
    std::set<int> seen = {o.rank};
    std::deque<int> next;
    for (int p : mine) {
      if (seen.insert(p).second) next.push_back(p);
    }
    const absl::Time until = absl::Now() + o.grace;
    while (!next.empty()) {
      const int r = next.front();
      next.pop_front();
      std::optional<std::vector<int>> waits = WaitsOn(
          store, absl::StrCat(o.prefix, "silent/", r), o.size, until);
      if (!waits.has_value()) {
        culprit = r;
        break;
      }
      for (int p : *waits) {
        if (seen.insert(p).second) next.push_back(p);
      }
    }
    claim = absl::StrCat(
        Name(o, culprit),
        " went silent: it neither sent nor took data in time (dead, stopped,"
        " or it never issued the collective; seen first by rank ",
        o.rank, "): ", own.message());
  }
  StatusOr<int64_t> n = store->Add(claims_key, 1, o.store_timeout);
  if (!n.ok()) return StoreDown(o, n.status(), own);
  if (*n == 1) {
    (void)store->Set(first_key, Record(suspect.dead, claim), o.store_timeout);
    return Status(suspect.dead ? absl::StatusCode::kUnavailable
                               : absl::StatusCode::kDeadlineExceeded,
                  claim);
  }
  StatusOr<std::string> posted = store->Get(first_key, o.store_timeout);
  if (posted.ok()) return FromRecord(*posted, o.rank, own);
  if (StoreUnreachable(posted.status())) return StoreDown(o, posted.status(), own);
  return own;
}

}  // namespace baton::ucx_internal
