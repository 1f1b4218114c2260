#include "baton/comm/inproc/p2p.h"

#include <cstring>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/comm/backend_util.h"

namespace baton::inproc_internal {
namespace {

std::string Where(int rank, const P2POp& op, uint32_t tag, uint64_t seq) {
  return absl::StrCat("inproc ", P2PLabel(op, tag, seq), " on rank ", rank);
}

}  // namespace

std::shared_ptr<Mailbox::Message> Mailbox::PostLocked(int rank,
                                                      const P2PPost& p,
                                                      uint32_t tag) {
  const bool send = p.op.kind == P2POp::Kind::kSend;
  const Key key = send ? Key{rank, p.op.peer, tag, p.seq}
                       : Key{p.op.peer, rank, tag, p.seq};
  std::shared_ptr<Message>& m = messages_[key];
  if (m == nullptr) m = std::make_shared<Message>();
  if (send) {
    m->src = p.op.send;
    m->send_bytes = p.op.bytes();
    m->has_send = true;
  } else {
    m->dst = p.op.recv;
    m->recv_bytes = p.op.bytes();
    m->has_recv = true;
  }
  return m;
}

void Mailbox::Erase(const Key& key, const Message* m) {
  auto it = messages_.find(key);
  if (it != messages_.end() && it->second.get() == m) messages_.erase(it);
}

Status Mailbox::RunGroup(int rank, const std::vector<P2PPost>& posts,
                         uint32_t tag, absl::Duration timeout,
                         FlightRecorder* rec,
                         const std::function<Status(Status)>& report) {
  const absl::Time deadline = absl::Now() + timeout;
  std::vector<std::shared_ptr<Message>> msgs;
  {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return aborted_;
    for (const P2PPost& p : posts) msgs.push_back(PostLocked(rank, p, tag));
  }
  for (const P2PPost& p : posts) rec->Start(p.record);
  Status first;
  // Receives first: they complete without waiting on this rank's sends.
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < posts.size(); ++i) {
      const P2PPost& p = posts[i];
      const bool send = p.op.kind == P2POp::Kind::kSend;
      if (send != (pass == 1)) continue;
      Status s = send ? AwaitDelivery(rank, p, tag, *msgs[i], deadline,
                                      timeout, report)
                      : Receive(rank, p, tag, *msgs[i], deadline, timeout,
                                report);
      rec->Complete(p.record, s.ok());
      if (first.ok() && !s.ok()) first = s;
    }
  }
  return first;
}

Status Mailbox::Receive(int rank, const P2PPost& p, uint32_t tag, Message& m,
                        absl::Time deadline, absl::Duration timeout,
                        const std::function<Status(Status)>& report) {
  absl::MutexLock lock(&mu_);
  auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return m.has_send || !m.status.ok() || !aborted_.ok();
  };
  const bool in_time = mu_.AwaitWithDeadline(absl::Condition(&ready), deadline);
  if (!m.status.ok()) return m.status;
  if (!aborted_.ok()) return aborted_;
  if (!in_time) {
    m.status = report(absl::DeadlineExceededError(absl::StrCat(
        Where(rank, p.op, tag, p.seq), ": rank ", p.op.peer,
        " did not send it within ", absl::FormatDuration(timeout))));
    return m.status;
  }
  if (m.send_bytes != m.recv_bytes) {
    m.status = report(absl::InvalidArgumentError(absl::StrCat(
        "inproc send #", p.seq, " (tag ", tag, ") from rank ", p.op.peer,
        " to rank ", rank, ": mismatched sizes: rank ", p.op.peer, " sends ",
        m.send_bytes, " bytes but rank ", rank, " receives ", m.recv_bytes,
        " bytes")));
    return m.status;
  }
  m.taken = true;
  const void* src = m.src;
  void* dst = m.dst;
  const size_t bytes = m.recv_bytes;
  mu_.Unlock();
  if (bytes > 0) std::memcpy(dst, src, bytes);
  mu_.Lock();
  m.delivered = true;
  return Status();
}

Status Mailbox::AwaitDelivery(int rank, const P2PPost& p, uint32_t tag,
                              Message& m, absl::Time deadline,
                              absl::Duration timeout,
                              const std::function<Status(Status)>& report) {
  absl::MutexLock lock(&mu_);
  auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return m.delivered || !m.status.ok() || (!aborted_.ok() && !m.taken);
  };
  bool in_time = mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  // The receiver is copying from our buffer: let it finish.
  if (!in_time && m.taken) {
    auto delivered = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return m.delivered;
    };
    mu_.Await(absl::Condition(&delivered));
    in_time = true;
  }
  if (m.delivered) {
    Erase(Key{rank, p.op.peer, tag, p.seq}, &m);
    return Status();
  }
  if (!m.status.ok()) return m.status;
  if (!aborted_.ok()) return aborted_;
  m.status = report(absl::DeadlineExceededError(absl::StrCat(
      Where(rank, p.op, tag, p.seq), ": rank ", p.op.peer,
      " did not receive it within ", absl::FormatDuration(timeout))));
  return m.status;
}

void Mailbox::Abort(Status s) {
  absl::MutexLock lock(&mu_);
  if (aborted_.ok()) aborted_ = std::move(s);
}

}  // namespace baton::inproc_internal
