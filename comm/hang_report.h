// The hang report (issue 38): from every rank's flight-recorder snapshot
// (comm/flight_recorder.h; a rank that could not report is missing), the
// one rank to blame, the collective and bucket it is stuck on and the
// ranks waiting for it, decided from the schedule every rank must follow:
//
//   1. aborted   a rank called Abort: the earliest one.
//   2. diverged  ranks recorded different collectives under one
//                (communicator, tag, sequence number): different kind,
//                count, type, op or root, or different SchedulePositions
//                (when both were given). The ranks outside the largest
//                agreeing set (ties: the set holding the lowest rank) are
//                named, at the earliest such place in the schedule.
//   3. lagging   per communicator and tag, the first sequence number some
//                member has not completed: members that issued it wait in
//                it; members that did not issue it lag and are named, the
//                lowest first. A member that did not report is "silent"
//                when no reporting member lags. The earliest such
//                collective in the schedule (by step and node when given,
//                else by issue time) is the one reported.
//   4. stuck     every member issued it and none completed it: no rank is
//                behind (a transport stall, or a rank that died inside it).
//   5. none      everything issued was completed.
//
// Ranks are world ranks everywhere (sub-communicators of Split map their
// ranks through RankState::Comm::world_ranks).
//
// Pure functions of their input; thread-safe.
#ifndef BATON_COMM_HANG_REPORT_H_
#define BATON_COMM_HANG_REPORT_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/comm/flight_recorder.h"

namespace baton {

struct HangVerdict {
  enum class Kind { kNone, kAborted, kDiverged, kLagging, kSilent, kStuck };
  Kind kind = Kind::kNone;
  int rank = -1;               // the rank named (world rank; -1: none)
  std::vector<int> culprits;   // every rank found at fault (world ranks)
  std::vector<int> waiting;    // ranks that issued the collective and wait
  // The collective: the one the ranks wait in (lagging, silent, stuck), or
  // the majority's at the divergence.
  bool have_collective = false;
  CollectiveRecord collective;
  // Diverged: what the culprit recorded there instead. Lagging: the
  // culprit's last issued collective.
  bool have_theirs = false;
  CollectiveRecord theirs;
  std::string comm_key;            // the communicator it belongs to
  std::vector<int> comm_world_ranks;
  std::string summary;  // one line, e.g. "rank 2 lags: it has not issued ..."
};

// `states[w]`: world rank w's snapshot, or nullopt if it did not report.
HangVerdict AnalyzeHang(const std::vector<std::optional<RankState>>& states);

// The whole report: a header naming `cause` (the failure that triggered
// it), the verdict, one line per rank (ranks with the same line merged)
// and the issued / completed counters per communicator and tag.
std::string FormatHangReport(
    const std::vector<std::optional<RankState>>& states,
    const HangVerdict& verdict, absl::string_view cause);

// "all_gather #4 (tag 1) step 1 node 12 bucket 3 group dp_shard+hpz, 4096 x
// bfloat16" (position fields only when given).
std::string DescribeCollective(const CollectiveRecord& r);

// "0-3", "0,2,5-7".
std::string RankList(const std::vector<int>& ranks);

}  // namespace baton

#endif  // BATON_COMM_HANG_REPORT_H_
