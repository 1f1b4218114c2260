#include "baton/comm/hang_report.h"

#include <algorithm>
#include <climits>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace baton {
namespace {

using States = std::vector<std::optional<RankState>>;

// A record and the world rank that recorded it.
struct Seen {
  int rank = 0;
  const CollectiveRecord* record = nullptr;
};

// (communicator key, tag, sequence number).
using Place = std::tuple<std::string, uint32_t, uint64_t>;

const std::string& KeyOf(const RankState& s, const CollectiveRecord& r) {
  static const std::string kUnknown = "?";
  return r.comm >= 0 && r.comm < static_cast<int>(s.comms.size())
             ? s.comms[r.comm].key
             : kUnknown;
}

// Whether two ranks' records of one place describe the same call.
bool SameCall(const CollectiveRecord& a, const CollectiveRecord& b) {
  if (a.kind != b.kind) return false;
  if (a.kind != CollectiveKind::kBarrier &&
      (a.count != b.count || a.type != b.type)) {
    return false;
  }
  const bool reduces = a.kind == CollectiveKind::kReduceScatter ||
                       a.kind == CollectiveKind::kAllReduce;
  if (reduces && a.op != b.op) return false;
  if (a.kind == CollectiveKind::kBroadcast && a.root != b.root) return false;
  const SchedulePosition& p = a.position;
  const SchedulePosition& q = b.position;
  if (p.given() && q.given()) {
    return p.step == q.step && p.node == q.node && p.bucket == q.bucket &&
           p.group == q.group;
  }
  return true;
}

// Whether `a` comes before `b` in the schedule: by (step, node) when both
// positions are given, else by issue time.
bool Earlier(const CollectiveRecord& a, const CollectiveRecord& b) {
  const SchedulePosition& p = a.position;
  const SchedulePosition& q = b.position;
  if (p.step >= 0 && q.step >= 0 && p.node >= 0 && q.node >= 0) {
    return std::make_pair(p.step, p.node) < std::make_pair(q.step, q.node);
  }
  return a.issue_ns < b.issue_ns;
}

// A communicator as the reports describe it.
struct CommView {
  std::vector<int> world_ranks;
  // Per reporting member: its state and its communicator number there.
  std::map<int, std::pair<const RankState*, int>> members;
};

std::map<std::string, CommView> Communicators(const States& states) {
  std::map<std::string, CommView> out;
  for (const auto& s : states) {
    if (!s) continue;
    for (size_t c = 0; c < s->comms.size(); ++c) {
      CommView& v = out[s->comms[c].key];
      if (v.world_ranks.empty()) v.world_ranks = s->comms[c].world_ranks;
      v.members[s->world_rank] = {&*s, static_cast<int>(c)};
    }
  }
  return out;
}

const CollectiveRecord* FindRecord(const RankState& s, int comm, uint32_t tag,
                                   uint64_t seq) {
  for (const CollectiveRecord& r : s.records) {
    if (IsPointToPoint(r.kind)) continue;  // numbered per pair, not per tag
    if (r.comm == comm && r.tag == tag && r.seq == seq) return &r;
  }
  return nullptr;
}

// The latest record of `s` (optionally only completed ones).
const CollectiveRecord* Latest(const RankState& s, bool completed) {
  const CollectiveRecord* best = nullptr;
  for (const CollectiveRecord& r : s.records) {
    if (completed && (r.done_ns == 0 || r.failed)) continue;
    if (best == nullptr || r.index > best->index) best = &r;
  }
  return best;
}

// The oldest record of `s` not completed.
const CollectiveRecord* FirstPending(const RankState& s) {
  for (const CollectiveRecord& r : s.records) {
    if (r.done_ns == 0 || r.failed) return &r;
  }
  return nullptr;
}

std::string InComm(const std::string& key, const std::vector<int>& world) {
  return absl::StrCat("in communicator '", key, "' (world ranks ",
                      RankList(world), ")");
}

// ---- 1. Abort ----
bool FindAbort(const States& states, HangVerdict* v) {
  const RankState* first = nullptr;
  for (const auto& s : states) {
    if (s && s->aborted_ns != 0 &&
        (first == nullptr || s->aborted_ns < first->aborted_ns)) {
      first = &*s;
    }
  }
  if (first == nullptr) return false;
  v->kind = HangVerdict::Kind::kAborted;
  v->rank = first->world_rank;
  v->culprits = {v->rank};
  for (const auto& s : states) {
    if (s && s->world_rank != v->rank && FirstPending(*s) != nullptr) {
      v->waiting.push_back(s->world_rank);
    }
  }
  std::string where;
  if (const CollectiveRecord* r = FirstPending(*first)) {
    v->have_collective = true;
    v->collective = *r;
    v->comm_key = KeyOf(*first, *r);
    v->comm_world_ranks = first->comms[r->comm].world_ranks;
    where = absl::StrCat(" while in ", DescribeCollective(*r), " ",
                         InComm(v->comm_key, v->comm_world_ranks));
  }
  v->summary = absl::StrCat("rank ", v->rank, " aborted", where,
                            v->waiting.empty() ? "" : "; ranks ",
                            v->waiting.empty() ? "" : RankList(v->waiting),
                            v->waiting.empty() ? "" : " were waiting");
  return true;
}

// ---- 2. Divergence ----
bool FindDivergence(const States& states, HangVerdict* v) {
  std::map<Place, std::vector<Seen>> places;
  for (const auto& s : states) {
    if (!s) continue;
    for (const CollectiveRecord& r : s->records) {
      if (IsPointToPoint(r.kind)) continue;  // numbered per pair, not per tag
      places[Place{KeyOf(*s, r), r.tag, r.seq}].push_back(Seen{s->world_rank, &r});
    }
  }
  bool found = false;
  for (const auto& [place, seen] : places) {
    if (seen.size() < 2) continue;
    // Sets of ranks that agree, in the order of their lowest rank.
    std::vector<std::vector<Seen>> sets;
    std::vector<Seen> sorted = seen;
    std::sort(sorted.begin(), sorted.end(),
              [](const Seen& a, const Seen& b) { return a.rank < b.rank; });
    for (const Seen& x : sorted) {
      auto it = std::find_if(sets.begin(), sets.end(), [&](const auto& set) {
        return SameCall(*set[0].record, *x.record);
      });
      if (it == sets.end()) {
        sets.push_back({x});
      } else {
        it->push_back(x);
      }
    }
    if (sets.size() < 2) continue;
    size_t major = 0;
    for (size_t i = 1; i < sets.size(); ++i) {
      if (sets[i].size() > sets[major].size()) major = i;
    }
    const CollectiveRecord& expected = *sets[major][0].record;
    if (found && !Earlier(expected, v->collective)) continue;
    found = true;
    *v = HangVerdict{};
    v->kind = HangVerdict::Kind::kDiverged;
    v->have_collective = true;
    v->collective = expected;
    v->comm_key = std::get<0>(place);
    std::vector<int> agree;
    for (size_t i = 0; i < sets.size(); ++i) {
      for (const Seen& x : sets[i]) {
        if (i == major) {
          agree.push_back(x.rank);
          if (x.record->done_ns == 0) v->waiting.push_back(x.rank);
        } else {
          v->culprits.push_back(x.rank);
        }
      }
    }
    std::sort(v->culprits.begin(), v->culprits.end());
    v->rank = v->culprits.front();
    for (const Seen& x : seen) {
      if (x.rank == v->rank) v->theirs = *x.record;
    }
    v->have_theirs = true;
    const RankState& any = *states[agree.front()];
    for (const auto& c : any.comms) {
      if (c.key == v->comm_key) v->comm_world_ranks = c.world_ranks;
    }
    v->summary = absl::StrCat(
        "rank ", v->rank, " diverged from the schedule ",
        InComm(v->comm_key, v->comm_world_ranks), ": where ranks ",
        RankList(agree), " issued ", DescribeCollective(expected),
        ", it issued ", DescribeCollective(v->theirs),
        v->culprits.size() > 1
            ? absl::StrCat(" (ranks ", RankList(v->culprits), " differ)")
            : std::string());
  }
  return found;
}

// ---- 3 and 4. Lag ----
struct LagCandidate {
  HangVerdict::Kind kind = HangVerdict::Kind::kStuck;
  std::string key;
  std::vector<int> world;
  uint32_t tag = 0;
  uint64_t seq = 0;
  std::vector<int> laggards, silent, waiting;
  const CollectiveRecord* record = nullptr;  // from a waiting rank
};

bool Before(const LagCandidate& a, const LagCandidate& b) {
  auto rank_of = [](HangVerdict::Kind k) {
    return k == HangVerdict::Kind::kStuck ? 1 : 0;
  };
  if (rank_of(a.kind) != rank_of(b.kind)) return rank_of(a.kind) < rank_of(b.kind);
  if (a.record == nullptr || b.record == nullptr) return a.record != nullptr;
  return Earlier(*a.record, *b.record);
}

std::vector<LagCandidate> LagCandidates(const States& states) {
  std::vector<LagCandidate> out;
  for (const auto& [key, view] : Communicators(states)) {
    std::set<uint32_t> tags;
    for (const auto& [rank, m] : view.members) {
      for (const RankState::Tag& t : m.first->comms[m.second].tags) tags.insert(t.tag);
    }
    for (uint32_t tag : tags) {
      std::map<int, std::pair<uint64_t, uint64_t>> counts;  // issued, completed
      for (const auto& [rank, m] : view.members) {
        std::pair<uint64_t, uint64_t> c{0, 0};
        for (const RankState::Tag& t : m.first->comms[m.second].tags) {
          if (t.tag == tag) c = {t.issued, t.completed};
        }
        counts[rank] = c;
      }
      uint64_t low = UINT64_MAX, high = 0;
      for (const auto& [rank, c] : counts) {
        low = std::min(low, c.second);
        high = std::max(high, c.first);
      }
      if (high <= low) continue;  // all that was issued completed
      LagCandidate cand;
      cand.key = key;
      cand.world = view.world_ranks;
      cand.tag = tag;
      cand.seq = low;
      for (const auto& [rank, c] : counts) {
        if (c.first <= low) {
          cand.laggards.push_back(rank);
        } else if (c.second <= low) {
          cand.waiting.push_back(rank);
          const auto& m = view.members.at(rank);
          if (cand.record == nullptr) {
            cand.record = FindRecord(*m.first, m.second, tag, low);
          }
        }
      }
      for (int w : view.world_ranks) {
        if (view.members.count(w) == 0) cand.silent.push_back(w);
      }
      if (cand.waiting.empty()) continue;
      cand.kind = !cand.laggards.empty() ? HangVerdict::Kind::kLagging
                  : !cand.silent.empty() ? HangVerdict::Kind::kSilent
                                         : HangVerdict::Kind::kStuck;
      out.push_back(std::move(cand));
    }
  }
  return out;
}

bool FindLag(const States& states, HangVerdict* v) {
  std::vector<LagCandidate> cands = LagCandidates(states);
  if (cands.empty()) return false;
  const LagCandidate& c =
      *std::min_element(cands.begin(), cands.end(), Before);
  v->kind = c.kind;
  v->comm_key = c.key;
  v->comm_world_ranks = c.world;
  v->waiting = c.waiting;
  v->culprits = c.kind == HangVerdict::Kind::kLagging ? c.laggards : c.silent;
  v->rank = v->culprits.empty() ? -1 : v->culprits.front();
  std::string what = absl::StrCat(
      CollectiveName(c.record != nullptr ? c.record->kind
                                         : CollectiveKind::kBarrier),
      " #", c.seq, " (tag ", c.tag, ")");
  if (c.record != nullptr) {
    v->have_collective = true;
    v->collective = *c.record;
    what = DescribeCollective(*c.record);
  }
  const std::string where = InComm(c.key, c.world);
  const std::string wait = absl::StrCat(
      c.waiting.size() == 1 ? "rank " : "ranks ", RankList(c.waiting),
      c.waiting.size() == 1 ? " issued it and waits" : " issued it and wait");
  switch (c.kind) {
    case HangVerdict::Kind::kLagging: {
      std::string last;
      if (states[v->rank]) {
        if (const CollectiveRecord* r = Latest(*states[v->rank], false)) {
          v->have_theirs = true;
          v->theirs = *r;
          last = absl::StrCat("; its last issued: ", DescribeCollective(*r),
                              r->done_ns != 0 ? " (completed)" : " (pending)");
        }
      }
      v->summary = absl::StrCat(
          v->culprits.size() == 1 ? "rank " : "ranks ", RankList(v->culprits),
          v->culprits.size() == 1 ? " lags: it has not issued " : " lag: they have not issued ",
          what, " ", where, "; ", wait, last);
      break;
    }
    case HangVerdict::Kind::kSilent:
      v->summary = absl::StrCat(
          v->culprits.size() == 1 ? "rank " : "ranks ", RankList(v->culprits),
          " did not report (stalled, dead, or its store connection is gone) "
          "and every rank that did is waiting in ",
          what, " ", where, "; ", wait);
      break;
    default:
      v->summary = absl::StrCat(
          "no rank lags: ", wait, " in ", what, " ", where,
          ", and none completed it (a transport stall, or a rank that died "
          "inside it)");
      break;
  }
  return true;
}

}  // namespace

std::string RankList(const std::vector<int>& ranks) {
  std::vector<int> r = ranks;
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  std::vector<std::string> parts;
  for (size_t i = 0; i < r.size();) {
    size_t j = i;
    while (j + 1 < r.size() && r[j + 1] == r[j] + 1) ++j;
    parts.push_back(j >= i + 2 ? absl::StrCat(r[i], "-", r[j])
                               : absl::StrCat(r[i]));
    if (j == i + 1) parts.push_back(absl::StrCat(r[j]));
    i = j + 1;
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, ",");
}

std::string DescribeCollective(const CollectiveRecord& r) {
  std::string out = absl::StrCat(CollectiveName(r.kind), " #", r.seq,
                                 " (tag ", r.tag, ")");
  const SchedulePosition& p = r.position;
  if (p.step >= 0) absl::StrAppend(&out, " step ", p.step);
  if (p.node >= 0) absl::StrAppend(&out, " node ", p.node);
  if (p.bucket >= 0) absl::StrAppend(&out, " bucket ", p.bucket);
  if (p.group != 0) absl::StrAppend(&out, " group ", MeshGroupBitsName(p.group));
  if (p.peer >= 0) absl::StrAppend(&out, " peer ", p.peer);
  if (r.kind != CollectiveKind::kBarrier) {
    absl::StrAppend(&out, ", ", r.count, " x ", DataTypeName(r.type));
  }
  return out;
}

HangVerdict AnalyzeHang(const States& states) {
  HangVerdict v;
  if (FindAbort(states, &v) || FindDivergence(states, &v) || FindLag(states, &v)) {
    return v;
  }
  v.kind = HangVerdict::Kind::kNone;
  std::vector<int> missing;
  for (size_t w = 0; w < states.size(); ++w) {
    if (!states[w]) missing.push_back(static_cast<int>(w));
  }
  v.summary = missing.empty()
                  ? "no rank lags or diverged: every collective issued was "
                    "completed by every member"
                  : absl::StrCat("no reporting rank waits for another; ranks ",
                                 RankList(missing), " did not report");
  return v;
}

std::string FormatHangReport(const States& states, const HangVerdict& v,
                             absl::string_view cause) {
  std::string backend = "?";
  for (const auto& s : states) {
    if (s && !s->backend.empty()) backend = s->backend;
  }
  std::string out = absl::StrCat("=== baton hang report (", backend, ", ",
                                 states.size(), " ranks) ===\n");
  absl::StrAppend(&out, "cause: ", cause, "\n");
  absl::StrAppend(&out, "verdict: ", v.summary, "\n");
  // One line per rank; identical lines merged.
  std::vector<std::pair<std::string, std::vector<int>>> lines;
  auto add = [&](std::string text, int rank) {
    for (auto& [t, ranks] : lines) {
      if (t == text) {
        ranks.push_back(rank);
        return;
      }
    }
    lines.push_back({std::move(text), {rank}});
  };
  for (size_t w = 0; w < states.size(); ++w) {
    const auto& s = states[w];
    if (!s) {
      add("did not report", static_cast<int>(w));
      continue;
    }
    const CollectiveRecord* pending = FirstPending(*s);
    const CollectiveRecord* last = Latest(*s, false);
    const CollectiveRecord* done = Latest(*s, true);
    std::string text = pending != nullptr
                           ? absl::StrCat("waiting in ", DescribeCollective(*pending),
                                          " of '", KeyOf(*s, *pending), "'")
                           : std::string("waiting in no collective");
    if (last != nullptr && last != pending) {
      absl::StrAppend(&text, "; last issued ", DescribeCollective(*last));
    }
    absl::StrAppend(&text, "; last completed ",
                    done != nullptr ? DescribeCollective(*done) : "none");
    if (s->aborted_ns != 0) absl::StrAppend(&text, "; ABORTED");
    add(std::move(text), static_cast<int>(w));
  }
  for (const auto& [text, ranks] : lines) {
    absl::StrAppend(&out, ranks.size() == 1 ? "rank " : "ranks ",
                    RankList(ranks), ": ", text, "\n");
  }
  // Issued / completed per communicator and tag, ranks with equal counts
  // merged.
  absl::StrAppend(&out, "issued/completed per communicator and tag:\n");
  for (const auto& [key, view] : Communicators(states)) {
    std::set<uint32_t> tags;
    for (const auto& [rank, m] : view.members) {
      for (const RankState::Tag& t : m.first->comms[m.second].tags) tags.insert(t.tag);
    }
    for (uint32_t tag : tags) {
      std::map<std::pair<uint64_t, uint64_t>, std::vector<int>> groups;
      for (const auto& [rank, m] : view.members) {
        std::pair<uint64_t, uint64_t> c{0, 0};
        for (const RankState::Tag& t : m.first->comms[m.second].tags) {
          if (t.tag == tag) c = {t.issued, t.completed};
        }
        groups[c].push_back(rank);
      }
      std::vector<std::string> parts;
      for (const auto& [c, ranks] : groups) {
        parts.push_back(absl::StrCat(c.first, "/", c.second, " on ",
                                     ranks.size() == 1 ? "rank " : "ranks ",
                                     RankList(ranks)));
      }
      absl::StrAppend(&out, "  '", key, "' tag ", tag, ": ",
                      absl::StrJoin(parts, "; "), "\n");
    }
  }
  absl::StrAppend(&out, "=== end of hang report ===\n");
  return out;
}

}  // namespace baton
