#include "baton/comm/flight_recorder.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace baton {
namespace {

// The packed fields of a record (FlightRecorder::Slot::words).
struct Packed {
  uint64_t index;
  uint64_t seq;
  uint64_t count;
  uint64_t meta;  // tag 8 | kind 8 | type 8 | op 8 | comm 16 | group 8 | check 8
  uint64_t root_peer;    // root 32 | peer 32
  uint64_t step;
  uint64_t node_bucket;  // node 32 | bucket 32
  uint64_t issue_ns;
};
static_assert(sizeof(Packed) == 8 * sizeof(uint64_t), "Packed is 8 words");

uint64_t Pair(int32_t hi, int32_t lo) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(hi)) << 32) |
         static_cast<uint32_t>(lo);
}
int32_t Hi(uint64_t w) { return static_cast<int32_t>(w >> 32); }
int32_t Lo(uint64_t w) { return static_cast<int32_t>(w & 0xffffffffu); }

size_t RoundUp(size_t n) {
  size_t c = 16;
  while (c < n) c <<= 1;
  return c;
}

constexpr const char* kDimNames[] = {"pp", "dp_replicate", "dp_shard", "hpz",
                                     "cp", "tp", "ep", "edp"};

}  // namespace

std::string MeshGroupBitsName(uint8_t bits) {
  if (bits == 0) return "none";
  std::vector<std::string> names;
  for (int d = 0; d < 8; ++d) {
    if ((bits >> d & 1) == 0) continue;
    names.push_back(kDimNames[d]);
  }
  return absl::StrJoin(names, "+");
}

FlightRecorder::FlightRecorder(size_t capacity)
    : capacity_(RoundUp(capacity)), slots_(new Slot[capacity_]) {}

int FlightRecorder::AddCommunicator(std::string key, int rank,
                                    std::vector<int> world_ranks,
                                    std::string backend) {
  absl::MutexLock lock(&mu_);
  if (owned_.size() >= static_cast<size_t>(kMaxCommunicators)) return -1;
  auto c = std::make_unique<CommSlot>();
  c->key = std::move(key);
  c->rank = rank;
  c->world_ranks = std::move(world_ranks);
  const int id = static_cast<int>(owned_.size());
  comms_[id].store(c.get(), std::memory_order_release);
  owned_.push_back(std::move(c));
  if (backend_.empty()) backend_ = std::move(backend);
  return id;
}

int FlightRecorder::world_rank() const {
  absl::MutexLock lock(&mu_);
  if (owned_.empty()) return 0;
  const CommSlot& w = *owned_[0];
  return w.world_ranks.empty() ? w.rank : w.world_ranks[w.rank];
}

int FlightRecorder::world_size() const {
  absl::MutexLock lock(&mu_);
  return owned_.empty() ? 1 : static_cast<int>(owned_[0]->world_ranks.size());
}

std::string FlightRecorder::world_key() const {
  absl::MutexLock lock(&mu_);
  return owned_.empty() ? std::string() : owned_[0]->key;
}

std::vector<int> FlightRecorder::world_ranks(int comm) const {
  absl::MutexLock lock(&mu_);
  if (comm < 0 || comm >= static_cast<int>(owned_.size())) return {};
  return owned_[comm]->world_ranks;
}

uint64_t FlightRecorder::Issue(int comm, const CollectiveCall& call,
                               const SchedulePosition& position) {
  if (comm < 0 || comm >= kMaxCommunicators) return kNoRecord;
  CommSlot* c = comms_[comm].load(std::memory_order_acquire);
  if (c == nullptr) return kNoRecord;
  const uint64_t i = next_.fetch_add(1, std::memory_order_relaxed);
  Packed p;
  p.index = i;
  p.seq = call.seq;
  p.count = call.count;
  p.meta = (uint64_t{call.tag & 0xff}) |
           (uint64_t{static_cast<uint8_t>(call.kind)} << 8) |
           (uint64_t{static_cast<uint8_t>(call.type)} << 16) |
           (uint64_t{static_cast<uint8_t>(call.op)} << 24) |
           (uint64_t{static_cast<uint16_t>(comm)} << 32) |
           (uint64_t{position.group} << 48) |
           (uint64_t{position.check ? 1u : 0u} << 56);
  p.root_peer = Pair(call.root, position.peer);
  p.step = static_cast<uint64_t>(position.step);
  p.node_bucket = Pair(position.node, position.bucket);
  p.issue_ns = static_cast<uint64_t>(absl::GetCurrentTimeNanos());
  uint64_t w[kWords];
  std::memcpy(w, &p, sizeof(p));
  Slot& s = slots_[i & (capacity_ - 1)];
  s.version.store(2 * i + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (int k = 0; k < kWords; ++k) {
    s.words[k].store(w[k], std::memory_order_relaxed);
  }
  s.start_ns.store(0, std::memory_order_relaxed);
  s.done_ns.store(0, std::memory_order_relaxed);
  s.failed.store(false, std::memory_order_relaxed);
  s.version.store(2 * i + 2, std::memory_order_release);
  // Callers issue one tag's collectives in order (communicator.h). Sends
  // and receives number per peer, not per tag: they have no counters.
  if (!IsPointToPoint(call.kind)) {
    c->issued[call.tag & 0xff].store(call.seq + 1, std::memory_order_relaxed);
  }
  return i;
}

FlightRecorder::Slot* FlightRecorder::Find(uint64_t index) const {
  if (index == kNoRecord) return nullptr;
  Slot& s = slots_[index & (capacity_ - 1)];
  if (s.version.load(std::memory_order_acquire) != 2 * index + 2) {
    return nullptr;
  }
  return &s;
}

void FlightRecorder::Start(uint64_t index) {
  SetStart(index, absl::GetCurrentTimeNanos());
}

void FlightRecorder::SetStart(uint64_t index, int64_t ns) {
  if (Slot* s = Find(index)) s->start_ns.store(ns, std::memory_order_relaxed);
}

void FlightRecorder::Complete(uint64_t index, bool ok) {
  Slot* s = Find(index);
  if (s == nullptr) return;
  s->failed.store(!ok, std::memory_order_relaxed);
  s->done_ns.store(absl::GetCurrentTimeNanos(), std::memory_order_release);
  const uint64_t meta = s->words[3].load(std::memory_order_relaxed);
  const uint64_t seq = s->words[1].load(std::memory_order_relaxed);
  const int comm = static_cast<int>((meta >> 32) & 0xffff);
  CommSlot* c = comms_[comm].load(std::memory_order_acquire);
  if (c == nullptr || !ok) return;
  if (IsPointToPoint(static_cast<CollectiveKind>((meta >> 8) & 0xff))) return;
  std::atomic<uint64_t>& done = c->completed[meta & 0xff];
  uint64_t cur = done.load(std::memory_order_relaxed);
  while (cur < seq + 1 &&
         !done.compare_exchange_weak(cur, seq + 1, std::memory_order_relaxed)) {
  }
}

void FlightRecorder::MarkAborted() {
  int64_t zero = 0;
  aborted_ns_.compare_exchange_strong(zero, absl::GetCurrentTimeNanos());
}

bool FlightRecorder::Read(uint64_t index, CollectiveRecord* out) const {
  const Slot& s = slots_[index & (capacity_ - 1)];
  const uint64_t v1 = s.version.load(std::memory_order_acquire);
  if (v1 != 2 * index + 2) return false;
  uint64_t w[kWords];
  for (int k = 0; k < kWords; ++k) {
    w[k] = s.words[k].load(std::memory_order_relaxed);
  }
  const int64_t start = s.start_ns.load(std::memory_order_relaxed);
  const int64_t done = s.done_ns.load(std::memory_order_acquire);
  const bool failed = s.failed.load(std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_acquire);
  if (s.version.load(std::memory_order_relaxed) != v1) return false;
  Packed p;
  std::memcpy(&p, w, sizeof(p));
  CollectiveRecord& r = *out;
  r.index = p.index;
  r.seq = p.seq;
  r.count = p.count;
  r.tag = static_cast<uint32_t>(p.meta & 0xff);
  r.kind = static_cast<CollectiveKind>((p.meta >> 8) & 0xff);
  r.type = static_cast<DataType>((p.meta >> 16) & 0xff);
  r.op = static_cast<ReduceOp>((p.meta >> 24) & 0xff);
  r.comm = static_cast<int>((p.meta >> 32) & 0xffff);
  r.position.group = static_cast<uint8_t>((p.meta >> 48) & 0xff);
  r.position.check = ((p.meta >> 56) & 1) != 0;
  r.root = Hi(p.root_peer);
  r.position.peer = Lo(p.root_peer);
  r.position.step = static_cast<int64_t>(p.step);
  r.position.node = Hi(p.node_bucket);
  r.position.bucket = Lo(p.node_bucket);
  r.issue_ns = static_cast<int64_t>(p.issue_ns);
  r.start_ns = start;
  r.done_ns = done;
  r.failed = failed;
  return true;
}

RankState FlightRecorder::Snapshot(size_t max_records) const {
  RankState st;
  st.now_ns = absl::GetCurrentTimeNanos();
  st.aborted_ns = aborted_ns_.load(std::memory_order_relaxed);
  {
    absl::MutexLock lock(&mu_);
    st.backend = backend_;
    for (const auto& c : owned_) {
      RankState::Comm out;
      out.key = c->key;
      out.rank = c->rank;
      out.world_ranks = c->world_ranks;
      for (uint32_t t = 0; t < 256; ++t) {
        const uint64_t issued = c->issued[t].load(std::memory_order_relaxed);
        if (issued == 0) continue;
        out.tags.push_back(RankState::Tag{
            t, issued, c->completed[t].load(std::memory_order_relaxed)});
      }
      st.comms.push_back(std::move(out));
    }
    if (!owned_.empty()) {
      const CommSlot& w = *owned_[0];
      st.world_size = static_cast<int>(w.world_ranks.size());
      st.world_rank = w.world_ranks.empty() ? 0 : w.world_ranks[w.rank];
    }
  }
  const uint64_t end = next_.load(std::memory_order_acquire);
  const uint64_t n = std::min<uint64_t>({end, max_records, capacity_});
  for (uint64_t i = end - n; i < end; ++i) {
    CollectiveRecord r;
    if (Read(i, &r)) st.records.push_back(r);
  }
  return st;
}

bool FlightRecorder::StartReport(absl::Duration wait, std::string* verdict) {
  absl::MutexLock lock(&report_mu_);
  if (!report_started_) {
    report_started_ = true;
    return true;
  }
  report_mu_.AwaitWithTimeout(absl::Condition(&report_done_), wait);
  *verdict = verdict_;
  return false;
}

void FlightRecorder::FinishReport(const std::string& verdict) {
  absl::MutexLock lock(&report_mu_);
  verdict_ = verdict;
  report_done_ = true;
}

// ---- Text form ----
//
//   baton-flight 1
//   rank <world rank> <world size> <now> <aborted> <backend>
//   comm <rank> <world ranks, comma-separated> <key, C-escaped, spaces as \x20>
//   tag <comm> <tag> <issued> <completed>
//   rec <index> <comm> <tag> <seq> <kind> <type> <op> <root> <count> <step>
//       <node> <bucket> <peer> <group> <check> <issue> <start> <done> <failed>

std::string SerializeRankState(const RankState& s) {
  std::string out = "baton-flight 1\n";
  absl::StrAppend(&out, "rank ", s.world_rank, " ", s.world_size, " ",
                  s.now_ns, " ", s.aborted_ns, " ",
                  s.backend.empty() ? "-" : s.backend, "\n");
  for (size_t c = 0; c < s.comms.size(); ++c) {
    const RankState::Comm& m = s.comms[c];
    absl::StrAppend(&out, "comm ", m.rank, " ",
                    m.world_ranks.empty() ? "-" : absl::StrJoin(m.world_ranks, ","),
                    " ", absl::StrReplaceAll(absl::CEscape(m.key), {{" ", "\\x20"}}),
                    "\n");
    for (const RankState::Tag& t : m.tags) {
      absl::StrAppend(&out, "tag ", c, " ", t.tag, " ", t.issued, " ",
                      t.completed, "\n");
    }
  }
  for (const CollectiveRecord& r : s.records) {
    const SchedulePosition& p = r.position;
    absl::StrAppend(&out, "rec ", r.index, " ", r.comm, " ", r.tag, " ", r.seq,
                    " ", static_cast<int>(r.kind), " ",
                    static_cast<int>(r.type), " ", static_cast<int>(r.op), " ",
                    r.root, " ", r.count, " ", p.step, " ", p.node, " ",
                    p.bucket, " ", p.peer, " ", static_cast<int>(p.group), " ",
                    p.check ? 1 : 0, " ");
    absl::StrAppend(&out, r.issue_ns, " ", r.start_ns, " ", r.done_ns, " ",
                    r.failed ? 1 : 0, "\n");
  }
  return out;
}

namespace {

constexpr int kMaxWorld = 1 << 20;
constexpr size_t kMaxLines = 1 << 16;

template <typename T>
bool Num(absl::string_view s, T lo, T hi, T* out) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(s, &v)) return false;
  if (v < static_cast<int64_t>(lo) || v > static_cast<int64_t>(hi)) {
    return false;
  }
  *out = static_cast<T>(v);
  return true;
}

bool U64(absl::string_view s, uint64_t* out) {
  return absl::SimpleAtoi(s, out);
}

Status Bad(size_t line, absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("flight record line ", line + 1, ": ", why));
}

bool ParseRecord(const std::vector<absl::string_view>& f, size_t ncomms,
                 CollectiveRecord* r) {
  if (f.size() != 20) return false;
  int kind = 0, type = 0, op = 0, group = 0, check = 0, failed = 0;
  SchedulePosition& p = r->position;
  const bool ok =
      U64(f[1], &r->index) && Num<int>(f[2], 0, static_cast<int>(ncomms) - 1, &r->comm) &&
      Num<uint32_t>(f[3], 0, 255, &r->tag) && U64(f[4], &r->seq) &&
      Num<int>(f[5], 0, static_cast<int>(CollectiveKind::kRecv), &kind) &&
      Num<int>(f[6], 0, static_cast<int>(DataType::kI32), &type) &&
      Num<int>(f[7], 0, static_cast<int>(ReduceOp::kMax), &op) &&
      Num<int32_t>(f[8], -1, INT32_MAX, &r->root) && U64(f[9], &r->count) &&
      Num<int64_t>(f[10], -1, INT64_MAX, &p.step) &&
      Num<int32_t>(f[11], -1, INT32_MAX, &p.node) &&
      Num<int32_t>(f[12], -1, INT32_MAX, &p.bucket) &&
      Num<int32_t>(f[13], -1, kMaxWorld, &p.peer) &&
      Num<int>(f[14], 0, 255, &group) && Num<int>(f[15], 0, 1, &check) &&
      Num<int64_t>(f[16], 0, INT64_MAX, &r->issue_ns) &&
      Num<int64_t>(f[17], 0, INT64_MAX, &r->start_ns) &&
      Num<int64_t>(f[18], 0, INT64_MAX, &r->done_ns) &&
      Num<int>(f[19], 0, 1, &failed);
  if (!ok) return false;
  r->kind = static_cast<CollectiveKind>(kind);
  r->type = static_cast<DataType>(type);
  r->op = static_cast<ReduceOp>(op);
  p.group = static_cast<uint8_t>(group);
  p.check = check != 0;
  r->failed = failed != 0;
  return true;
}

}  // namespace

StatusOr<RankState> ParseRankState(absl::string_view text) {
  std::vector<absl::string_view> lines =
      absl::StrSplit(text, '\n', absl::SkipEmpty());
  if (lines.empty() || lines[0] != "baton-flight 1") {
    return absl::InvalidArgumentError(
        "flight record: does not start with 'baton-flight 1'");
  }
  if (lines.size() > kMaxLines) {
    return absl::InvalidArgumentError("flight record: too many lines");
  }
  RankState s;
  bool have_rank = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::vector<absl::string_view> f = absl::StrSplit(lines[i], ' ');
    if (f[0] == "rank") {
      if (have_rank || f.size() != 6 ||
          !Num<int>(f[2], 1, kMaxWorld, &s.world_size) ||
          !Num<int>(f[1], 0, s.world_size - 1, &s.world_rank) ||
          !Num<int64_t>(f[3], 0, INT64_MAX, &s.now_ns) ||
          !Num<int64_t>(f[4], 0, INT64_MAX, &s.aborted_ns)) {
        return Bad(i, "bad 'rank' line");
      }
      s.backend = f[5] == "-" ? "" : std::string(f[5]);
      have_rank = true;
    } else if (f[0] == "comm" && have_rank) {
      // The key is the rest of the line (C-escaped, no spaces inside).
      if (f.size() != 4 ||
          s.comms.size() >= static_cast<size_t>(FlightRecorder::kMaxCommunicators)) {
        return Bad(i, "bad 'comm' line");
      }
      RankState::Comm c;
      if (f[2] != "-") {
        for (absl::string_view w : absl::StrSplit(f[2], ',')) {
          int v = 0;
          if (!Num<int>(w, 0, s.world_size - 1, &v)) {
            return Bad(i, "a world rank outside the world");
          }
          c.world_ranks.push_back(v);
        }
      }
      const int size = std::max<int>(1, static_cast<int>(c.world_ranks.size()));
      std::string key;
      if (!Num<int>(f[1], 0, size - 1, &c.rank) || !absl::CUnescape(f[3], &key)) {
        return Bad(i, "bad 'comm' line");
      }
      c.key = std::move(key);
      s.comms.push_back(std::move(c));
    } else if (f[0] == "tag" && !s.comms.empty()) {
      RankState::Tag t;
      int comm = 0;
      if (f.size() != 5 ||
          !Num<int>(f[1], 0, static_cast<int>(s.comms.size()) - 1, &comm) ||
          !Num<uint32_t>(f[2], 0, 255, &t.tag) || !U64(f[3], &t.issued) ||
          !U64(f[4], &t.completed)) {
        return Bad(i, "bad 'tag' line");
      }
      s.comms[comm].tags.push_back(t);
    } else if (f[0] == "rec" && !s.comms.empty()) {
      CollectiveRecord r;
      if (!ParseRecord(f, s.comms.size(), &r)) return Bad(i, "bad 'rec' line");
      s.records.push_back(r);
    } else {
      return Bad(i, absl::StrCat("unexpected '", f[0], "'"));
    }
  }
  if (!have_rank) return absl::InvalidArgumentError("flight record: no 'rank' line");
  return s;
}

}  // namespace baton
