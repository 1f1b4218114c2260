#include "baton/comm/inproc/p2p_events.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/backend_util.h"

namespace baton::inproc_internal {
namespace {

// Words of Device::AllocateValues per allocation.

std::string Where(int rank, const P2POp& op, uint32_t tag, uint64_t seq) {
  return absl::StrCat("inproc ", P2PLabel(op, tag, seq), " on rank ", rank);
}

}  // namespace

StreamMailbox::StreamMailbox(int size, std::function<Status(Status)> report)
    : size_(size), report_(std::move(report)) {
  absl::MutexLock lock(&mu_);
  rank_status_.resize(size_);
  free_events_.resize(size_);
}

StreamMailbox::~StreamMailbox() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
    cv_.Signal();
  }
  if (watchdog_.joinable()) watchdog_.join();
}

Status StreamMailbox::RankStatus(int rank) {
  absl::MutexLock lock(&mu_);
  return rank_status_[rank];
}

StatusOr<std::shared_ptr<StreamMailbox::Ready>> StreamMailbox::TakeReady(
    int rank, Device& device) {
  auto r = std::make_shared<Ready>();
  r->rank = rank;
  r->users = 1;  // the issuing group, until it has posted its ops
  {
    absl::MutexLock lock(&mu_);
    std::vector<std::unique_ptr<Event>>& pool = free_events_[rank];
    if (!pool.empty()) {
      r->event = std::move(pool.back());
      pool.pop_back();
      return r;
    }
  }
  BATON_ASSIGN_OR_RETURN(r->event, device.CreateEvent());
  return r;
}

void StreamMailbox::ReleaseReadyLocked(std::shared_ptr<Ready>& ready) {
  if (ready == nullptr) return;
  if (--ready->users == 0 && ready->event != nullptr) {
    free_events_[ready->rank].push_back(std::move(ready->event));
  }
  ready.reset();
}

void StreamMailbox::FailLocked(const Key& key,
                               const std::shared_ptr<Message>& m, Status s) {
  if (m->failed) return;
  m->failed = true;
  {
    absl::MutexLock lock(&m->mu);
    m->status = s;
  }
  auto it = open_.find(key);
  if (it != open_.end() && it->second == m) {
    open_.erase(it);
    failed_[key] = s;  // for the late side
  }
  if (m->sink != nullptr) m->sink->Fail(s);
  if (m->first.rec != nullptr) m->first.rec->Complete(m->first.record, false);
  if (rank_status_[m->first.rank].ok()) rank_status_[m->first.rank] = s;
  ReleaseReadyLocked(m->ready);
  words_.Write({m->word, m->target});
}

Status StreamMailbox::Issue(int rank, const std::vector<P2PPost>& posts,
                            uint32_t tag, absl::Duration timeout,
                            FlightRecorder* rec, Device& device,
                            Stream& stream) {
  const absl::Time deadline = absl::Now() + timeout;
  auto fail_all = [&](Status s) {
    for (const P2PPost& p : posts) rec->Complete(p.record, false);
    return s;
  };
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return fail_all(aborted_);
  }
  StatusOr<std::shared_ptr<Ready>> taken = TakeReady(rank, device);
  if (!taken.ok()) return fail_all(taken.status());
  std::shared_ptr<Ready> ready = std::move(*taken);
  if (Status s = ready->event->Record(stream); !s.ok()) {
    absl::MutexLock lock(&mu_);
    ReleaseReadyLocked(ready);
    return fail_all(s);
  }
  std::shared_ptr<StreamErrorSink> sink = stream.error_sink();

  struct Copy {
    Key key;
    std::shared_ptr<Message> m;
    uint64_t record;  // this side's
    void* dst;
    const void* src;
    size_t bytes;
  };
  struct Wait {
    Key key;
    std::shared_ptr<Message> m;
  };
  std::vector<Copy> copies;
  std::vector<Wait> waits;
  Status first;
  auto note = [&first](const Status& s) {
    if (first.ok()) first = s;
  };
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) {
      ReleaseReadyLocked(ready);
      return fail_all(aborted_);
    }
    for (const P2PPost& p : posts) {
      const bool send = p.op.kind == P2POp::Kind::kSend;
      const Key key = send ? Key{rank, p.op.peer, tag, p.seq}
                           : Key{p.op.peer, rank, tag, p.seq};
      if (auto f = failed_.find(key); f != failed_.end()) {
        // The peer gave up on it (its timeout): this side fails too.
        note(f->second);
        failed_.erase(f);
        rec->Complete(p.record, false);
        continue;
      }
      auto it = open_.find(key);
      if (it == open_.end()) {
        StatusOr<SignalWords::Word> word = words_.Take(device);
        if (!word.ok()) {
          note(word.status());
          rec->Complete(p.record, false);
          continue;
        }
        auto m = std::make_shared<Message>();
        m->first = Side{rank, p.op, p.seq, rec, p.record};
        m->ready = ready;
        ++ready->users;
        m->sink = sink;
        m->word = word->word;
        m->target = word->target;
        m->tag = tag;
        m->deadline = deadline;
        m->timeout = timeout;
        open_[key] = m;
        waits.push_back(Wait{key, m});
        if (!watchdog_.joinable()) {
          watchdog_ = std::thread([this] { Watch(); });
        }
        cv_.Signal();
        continue;
      }
      std::shared_ptr<Message> m = it->second;
      open_.erase(it);
      const P2POp& peer_op = m->first.op;
      const size_t send_bytes = send ? p.op.bytes() : peer_op.bytes();
      const size_t recv_bytes = send ? peer_op.bytes() : p.op.bytes();
      const int src_rank = std::get<0>(key), dst_rank = std::get<1>(key);
      if (send_bytes != recv_bytes) {
        Status s = report_(absl::InvalidArgumentError(absl::StrCat(
            "inproc send #", p.seq, " (tag ", tag, ") from rank ", src_rank,
            " to rank ", dst_rank, ": mismatched sizes: rank ", src_rank,
            " sends ", send_bytes, " bytes but rank ", dst_rank,
            " receives ", recv_bytes, " bytes")));
        FailLocked(key, m, s);
        note(s);
        rec->Complete(p.record, false);
        continue;
      }
      // The peer's `ready` was recorded before it posted (rule 3).
      Status s = stream.Wait(*m->ready->event);
      ReleaseReadyLocked(m->ready);
      if (!s.ok()) {
        FailLocked(key, m, s);
        note(s);
        rec->Complete(p.record, false);
        continue;
      }
      copies.push_back(Copy{key, m, p.record, send ? peer_op.recv : p.op.recv,
                            send ? p.op.send : peer_op.send, send_bytes});
    }
    ReleaseReadyLocked(ready);
  }
  // The copies this side owes (its peers posted first), then its waits.
  for (const Copy& c : copies) {
    Status s;
    if (c.bytes > 0) s = stream.MemcpyAsync(c.dst, c.src, c.bytes);
    if (s.ok()) s = stream.WriteValue(c.m->word, c.m->target);
    if (!s.ok()) {
      absl::MutexLock lock(&mu_);
      FailLocked(c.key, c.m, s);
      note(s);
      rec->Complete(c.record, false);
      continue;
    }
    if (c.m->first.rec != nullptr) {
      c.m->first.rec->Complete(c.m->first.record, true);
    }
    rec->Complete(c.record, true);
  }
  for (const Wait& w : waits) {
    Status s = stream.WaitValue(w.m->word, w.m->target);
    if (s.ok() && sink == nullptr) {
      s = stream.Enqueue([m = w.m]() { return m->Check(); });
    }
    if (!s.ok()) {
      note(s);
      absl::MutexLock lock(&mu_);
      auto it = open_.find(w.key);
      if (it != open_.end() && it->second == w.m) FailLocked(w.key, w.m, s);
    }
  }
  return first;
}

void StreamMailbox::Abort(Status s) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) aborted_ = std::move(s);
  while (!open_.empty()) {
    auto it = open_.begin();
    const Key key = it->first;
    std::shared_ptr<Message> m = it->second;
    FailLocked(key, m, aborted_);
  }
}

// Fails the open messages whose deadline has passed: nobody else waits on
// the host, so this is what turns a missing peer into DeadlineExceeded.
void StreamMailbox::Watch() {
  absl::MutexLock lock(&mu_);
  while (!stop_) {
    absl::Time next = absl::InfiniteFuture();
    for (const auto& [key, m] : open_) next = std::min(next, m->deadline);
    if (next > absl::Now()) {
      cv_.WaitWithDeadline(&mu_, next);
      continue;
    }
    const absl::Time now = absl::Now();
    std::vector<std::pair<Key, std::shared_ptr<Message>>> expired;
    for (const auto& [key, m] : open_) {
      if (m->deadline <= now) expired.emplace_back(key, m);
    }
    for (const auto& [key, m] : expired) {
      const Side& f = m->first;
      const bool recv = f.op.kind == P2POp::Kind::kRecv;
      FailLocked(key, m,
                 report_(absl::DeadlineExceededError(absl::StrCat(
                     Where(f.rank, f.op, m->tag, f.seq), ": rank ", f.op.peer,
                     recv ? " did not send it within "
                          : " did not receive it within ",
                     absl::FormatDuration(m->timeout)))));
    }
  }
}

}  // namespace baton::inproc_internal
