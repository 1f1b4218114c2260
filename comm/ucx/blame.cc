#include "baton/comm/ucx/blame.h"

#include <algorithm>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
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

}  // namespace

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
    Status set = store->Set(absl::StrCat(o.prefix, "silent/", o.rank),
                            absl::StrCat(suspect.rank), o.store_timeout);
    if (StoreUnreachable(set)) return StoreDown(o, set, own);
    StatusOr<std::string> posted = store->Get(first_key, o.grace);
    if (posted.ok()) return FromRecord(*posted, o.rank, own);
    if (StoreUnreachable(posted.status())) {
      return StoreDown(o, posted.status(), own);
    }
    // Nobody did: follow who waits on whom to a rank that waits on no one.
    int culprit = suspect.rank;
    std::set<int> seen = {o.rank};
    bool cycle = false;
    const absl::Time until = absl::Now() + o.grace;
    for (;;) {
      if (seen.count(culprit) != 0) {
        cycle = true;
        break;
      }
      seen.insert(culprit);
      StatusOr<std::string> next = store->Get(
          absl::StrCat(o.prefix, "silent/", culprit),
          std::max(absl::ZeroDuration(), until - absl::Now()));
      int n = -1;
      if (!next.ok() || !absl::SimpleAtoi(*next, &n) || n < 0 ||
          n >= o.size) {
        break;
      }
      culprit = n;
    }
    // Every rank on the chain waits on another: no one to single out.
    if (cycle) culprit = suspect.rank;
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
