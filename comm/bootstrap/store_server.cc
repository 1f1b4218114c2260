#include "baton/comm/bootstrap/store_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace baton::store_internal {
namespace {

using store_wire::Code;
using store_wire::Parse;
using store_wire::Request;

constexpr int64_t kMaxPollMs = 100;
constexpr int kMaxAcceptsPerRound = 64;

bool SameToken(absl::string_view a, absl::string_view b) {
  // Compares every byte whatever the first difference.
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  }
  return diff == 0;
}

}  // namespace

StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  auto s = std::unique_ptr<Server>(new Server(options));
  s->listen_fd_ =
      ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s->listen_fd_ < 0) {
    return absl::InternalError(
        absl::StrCat("store: socket: ", std::strerror(errno)));
  }
  int one = 1;
  ::setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(options.port));
  if (::bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr),
             sizeof(addr)) != 0) {
    const int err = errno;
    ::close(s->listen_fd_);
    s->listen_fd_ = -1;
    return absl::UnavailableError(absl::StrCat(
        "store: cannot listen on port ", options.port, " (",
        std::strerror(err), "); set BATON_STORE_PORT to a free port"));
  }
  if (::listen(s->listen_fd_, 1024) != 0) {
    return absl::InternalError(
        absl::StrCat("store: listen: ", std::strerror(errno)));
  }
  socklen_t len = sizeof(addr);
  ::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
  s->port_ = ntohs(addr.sin_port);
  s->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (s->wake_fd_ < 0) {
    return absl::InternalError(
        absl::StrCat("store: eventfd: ", std::strerror(errno)));
  }
  s->thread_ = std::thread([p = s.get()] { p->Loop(); });
  return s;
}

Server::~Server() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  for (Conn& c : conns_) {
    if (c.fd >= 0) ::close(c.fd);
  }
  if (listen_fd_ >= 0) ::close(listen_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

void Server::Loop() {
  bool stopping = false;
  absl::Time drain_until = absl::InfiniteFuture();
  std::vector<pollfd> fds;
  std::vector<uint64_t> ids;
  for (;;) {
    const absl::Time now = absl::Now();
    if (stopping) {
      std::vector<int> ranks;
      for (const Conn& c : conns_) {
        if (c.rank >= 0) ranks.push_back(c.rank);
      }
      if (ranks.empty()) return;
      if (now >= drain_until) {
        std::sort(ranks.begin(), ranks.end());
        std::fprintf(stderr,
                     "baton store: stopped serving after waiting %s for "
                     "rank(s) %s to disconnect\n",
                     absl::FormatDuration(o_.linger).c_str(),
                     absl::StrJoin(ranks, ", ").c_str());
        return;
      }
    }
    fds.clear();
    ids.clear();
    fds.push_back({wake_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, static_cast<short>(stopping ? 0 : POLLIN), 0});
    for (const Conn& c : conns_) {
      short ev = 0;
      const size_t pending = c.out.size() - c.out_off;
      if (pending > 0) ev |= POLLOUT;
      if (pending < o_.out_high_water) ev |= POLLIN;
      fds.push_back({c.fd, ev, 0});
      ids.push_back(c.id);
    }
    int64_t timeout_ms = kMaxPollMs;
    for (const Waiter& w : waiters_) {
      timeout_ms = std::min(
          timeout_ms,
          std::max<int64_t>(0, absl::ToInt64Milliseconds(w.deadline - now) + 1));
    }
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(timeout_ms));
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "baton store: poll failed: %s\n",
                   std::strerror(errno));
      return;
    }
    if (n > 0) {
      if (fds[0].revents != 0 && !stopping) {
        // Stop requested: keep serving until the other ranks have
        // disconnected (they may still be reading the answer to their last
        // request), for at most the linger time.
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof(v));
        stopping = true;
        drain_until = absl::Now() + o_.linger;
        // Connections that never said hello do not hold the store open.
        for (Conn& c : conns_) {
          if (c.rank < 0) Drop(c);
        }
      }
      if (fds[1].revents & POLLIN) Accept();
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        Conn* c = Find(ids[i - 2]);
        if (c == nullptr || c->dead) continue;
        if (fds[i].revents & (POLLOUT | POLLERR | POLLHUP)) {
          Flush(*c);
          // Requests held back while replies were queued.
          if (!c->dead && !c->in.empty()) Process(*c);
        }
        if (!c->dead && (fds[i].revents & (POLLIN | POLLHUP | POLLERR))) {
          ReadFrom(*c);
        }
      }
    }
    ExpireAndCheckStalls(absl::Now());
    conns_.remove_if([](const Conn& c) { return c.dead; });
    UpdateBuffered();
  }
}

void Server::Accept() {
  // A bounded batch per round, so a flood of connections cannot starve the
  // reads of the others.
  for (int i = 0; i < kMaxAcceptsPerRound; ++i) {
    sockaddr_in peer{};
    socklen_t len = sizeof(peer);
    const int fd = ::accept4(listen_fd_, reinterpret_cast<sockaddr*>(&peer), &len,
                             SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) return;  // EAGAIN, or a transient error: poll again
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Conn c;
    c.id = next_id_++;
    c.fd = fd;
    c.addr = peer.sin_addr.s_addr;
    c.accepted = absl::Now();
    conns_.push_back(std::move(c));
    Conn& added = conns_.back();
    // A rank's hello is usually on the wire already: identified now, it can
    // never be taken for a stranger below.
    ReadFrom(added);
    if (!added.dead && added.rank < 0) MakeRoom(added);
  }
}

void Server::MakeRoom(const Conn& newest) {
  std::map<uint32_t, int> per_address;
  int total = 0;
  for (const Conn& c : conns_) {
    if (c.dead || c.rank >= 0) continue;
    ++per_address[c.addr];
    ++total;
  }
  uint32_t victim_addr = newest.addr;
  if (per_address[newest.addr] <= o_.max_unidentified_per_address) {
    if (total <= o_.max_unidentified) return;
    // The address holding the most (its oldest connection goes).
    for (const auto& [addr, n] : per_address) {
      if (n > per_address[victim_addr]) victim_addr = addr;
    }
  }
  for (Conn& c : conns_) {  // accept order: the first match is the oldest
    if (!c.dead && c.rank < 0 && c.addr == victim_addr) {
      stats_.dropped.fetch_add(1);
      Drop(c);
      return;
    }
  }
}

Server::Conn* Server::Find(uint64_t id) {
  for (Conn& c : conns_) {
    if (c.id == id && !c.dead) return &c;
  }
  return nullptr;
}

void Server::UpdateBuffered() {
  int64_t total = 0;
  for (const Conn& c : conns_) total += c.in.capacity() + c.out.capacity();
  stats_.buffered_bytes.store(total);
}

void Server::Drop(Conn& c) {
  if (c.dead) return;
  const uint64_t id = c.id;
  waiters_.remove_if([id](const Waiter& w) { return w.conn == id; });
  ::close(c.fd);
  c.fd = -1;
  c.dead = true;
  c.in = std::string();
  c.out = std::string();
  c.out_off = 0;
}

void Server::Flush(Conn& c) {
  while (c.out_off < c.out.size()) {
    const ssize_t n = ::send(c.fd, c.out.data() + c.out_off,
                             c.out.size() - c.out_off,
                             MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      c.out_off += static_cast<size_t>(n);
      c.out_since = absl::Now();
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    Drop(c);  // the peer is gone
    return;
  }
  c.out.clear();
  c.out_off = 0;
  c.out_since = absl::InfiniteFuture();
}

void Server::Reply(Conn& c, Code code, absl::string_view payload) {
  if (c.dead) return;
  if (c.out_off == c.out.size()) c.out_since = absl::Now();
  c.out += store_wire::EncodeResponse(code, payload);
  stats_.requests.fetch_add(1);
  Flush(c);
}

void Server::Refuse(Conn& c, Code code, absl::string_view why) {
  Reply(c, code, why);
  stats_.dropped.fetch_add(1);
  Drop(c);
}

void Server::ReadFrom(Conn& c) {
  // At most one request plus one read's worth is ever buffered.
  char buf[65536];
  for (int rounds = 0; rounds < 16 && !c.dead; ++rounds) {
    if (c.out.size() - c.out_off >= o_.out_high_water) return;
    const ssize_t n = ::recv(c.fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK &&
                   errno != EINTR)) {
      Drop(c);
      return;
    }
    if (n < 0) return;
    c.in.append(buf, static_cast<size_t>(n));
    Process(c);
  }
}

void Server::Process(Conn& c) {
  size_t start = 0;
  while (!c.dead && c.out.size() - c.out_off < o_.out_high_water) {
    Request req;
    size_t used = 0;
    std::string why;
    const Parse p = store_wire::ParseRequest(
        absl::string_view(c.in).substr(start), o_.limits, &req, &used, &why);
    if (p == Parse::kBad) {
      Refuse(c, store_wire::kInvalid, absl::StrCat("refused: ", why));
      return;
    }
    if (p == Parse::kNeedMore) break;
    start += used;
    Handle(c, req);
  }
  if (c.dead) return;
  c.in.erase(0, start);
  if (c.in.empty()) {
    if (c.in.capacity() > 65536) c.in.shrink_to_fit();
    c.in_since = absl::InfiniteFuture();
  } else if (c.in_since == absl::InfiniteFuture() || start > 0) {
    c.in_since = absl::Now();
  }
}

void Server::Hello(Conn& c, const Request& req) {
  if (c.rank >= 0) {
    Refuse(c, store_wire::kInvalid, "a second hello on one connection");
    return;
  }
  if (req.key != store_wire::kProtocol) {
    Refuse(c, store_wire::kInvalid,
           absl::StrCat("not a baton store client (protocol '",
                        absl::CHexEscape(req.key.substr(0, 64)),
                        "', expected '", store_wire::kProtocol, "')"));
    return;
  }
  if (!SameToken(req.value, o_.token)) {
    Refuse(c, store_wire::kDenied,
           "BATON_STORE_TOKEN differs from rank 0's (every rank of a job "
           "must get the same token from its launcher)");
    return;
  }
  const int64_t rank = req.arg >> 32;
  const int64_t world = static_cast<int64_t>(req.arg & 0xffffffff);
  if (world != o_.world_size) {
    Refuse(c, store_wire::kInvalid,
           absl::StrCat("world size mismatch: rank ", rank,
                        " was started with world size ", world,
                        ", the store on rank 0 has ", o_.world_size));
    return;
  }
  if (rank < 0 || rank >= world) {
    Refuse(c, store_wire::kInvalid,
           absl::StrCat("rank ", rank, " is outside [0, ", world, ")"));
    return;
  }
  for (const Conn& o : conns_) {
    if (&o != &c && !o.dead && o.rank == rank) {
      Refuse(c, store_wire::kExists,
             absl::StrCat("rank ", rank, " is already connected"));
      return;
    }
  }
  c.rank = static_cast<int>(rank);
  Reply(c, store_wire::kOk, "");
}

void Server::Answer(const std::string& key, const std::string& value) {
  // Take the waiters out first: a reply can drop its connection, which
  // edits waiters_.
  std::vector<uint64_t> ready;
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->key == key) {
      ready.push_back(it->conn);
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  for (uint64_t id : ready) {
    if (Conn* w = Find(id); w != nullptr) {
      --w->parked;
      Reply(*w, store_wire::kOk, value);
    }
  }
}

void Server::Handle(Conn& c, Request& req) {
  if (req.op == store_wire::kHello) {
    Hello(c, req);
    return;
  }
  if (c.rank < 0) {
    Refuse(c, store_wire::kDenied, "a request before the hello");
    return;
  }
  switch (req.op) {
    case store_wire::kSet: {
      auto it = data_.find(req.key);
      const size_t old = it == data_.end() ? 0 : it->first.size() + it->second.size();
      const size_t now = req.key.size() + req.value.size();
      if (data_bytes_ - old + now > o_.max_store_bytes) {
        Reply(c, store_wire::kFull,
              absl::StrCat("the store holds ", data_bytes_,
                           " bytes; setting '", absl::CHexEscape(req.key),
                           "' would pass its limit of ", o_.max_store_bytes));
        return;
      }
      data_bytes_ = data_bytes_ - old + now;
      data_[req.key] = req.value;
      Reply(c, store_wire::kOk, "");
      Answer(req.key, req.value);
      return;
    }
    case store_wire::kGet: {
      auto it = data_.find(req.key);
      if (it != data_.end()) {
        Reply(c, store_wire::kOk, it->second);
        return;
      }
      if (c.parked >= o_.max_parked_gets) {
        Refuse(c, store_wire::kInvalid,
               absl::StrCat("more than ", o_.max_parked_gets,
                            " Gets waiting on one connection"));
        return;
      }
      ++c.parked;
      const int64_t ms = std::max<int64_t>(req.arg, 0);
      waiters_.push_back(
          {c.id, std::move(req.key), absl::Now() + absl::Milliseconds(ms)});
      return;
    }
    case store_wire::kAdd: {
      int64_t v = 0;
      auto it = data_.find(req.key);
      if (it != data_.end() && !absl::SimpleAtoi(it->second, &v)) {
        Reply(c, store_wire::kInvalid,
              absl::StrCat("key '", absl::CHexEscape(req.key),
                           "' holds a value that is not a counter"));
        return;
      }
      int64_t sum = 0;
      if (__builtin_add_overflow(v, req.arg, &sum)) {
        Reply(c, store_wire::kInvalid,
              absl::StrCat("counter '", absl::CHexEscape(req.key),
                           "' would overflow"));
        return;
      }
      std::string s = absl::StrCat(sum);
      const size_t old = it == data_.end() ? 0 : req.key.size() + it->second.size();
      if (data_bytes_ - old + req.key.size() + s.size() > o_.max_store_bytes) {
        Reply(c, store_wire::kFull, "the store is full");
        return;
      }
      data_bytes_ = data_bytes_ - old + req.key.size() + s.size();
      data_[req.key] = s;
      Reply(c, store_wire::kOk, s);
      Answer(req.key, s);
      return;
    }
    default:
      Refuse(c, store_wire::kInvalid, "unknown request");
  }
}

void Server::ExpireAndCheckStalls(absl::Time now) {
  std::vector<Waiter> expired;  // replied to after the list is done
  for (auto it = waiters_.begin(); it != waiters_.end();) {
    if (it->deadline <= now) {
      expired.push_back(std::move(*it));
      it = waiters_.erase(it);
    } else {
      ++it;
    }
  }
  for (const Waiter& w : expired) {
    if (Conn* c = Find(w.conn); c != nullptr) {
      --c->parked;
      Reply(*c, store_wire::kTimeout, w.key);
    }
  }
  for (Conn& c : conns_) {
    if (c.dead) continue;
    if (c.rank < 0 && now - c.accepted > o_.hello_timeout) {
      stats_.dropped.fetch_add(1);
      Drop(c);  // never said hello
    } else if (now - c.out_since > o_.stall_timeout ||
               now - c.in_since > o_.stall_timeout) {
      // Replies it does not read, or a request it never finishes.
      stats_.dropped.fetch_add(1);
      Drop(c);
    }
  }
}

}  // namespace baton::store_internal
