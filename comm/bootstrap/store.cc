#include "baton/comm/bootstrap/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <list>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace baton {
namespace {

enum Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kAdd = 4 };
enum Code : uint8_t { kOk = 0, kTimeout = 1, kInvalid = 2, kExists = 3 };

std::string Errno(const char* what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

void PutU64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), 8);
}
uint64_t GetU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string EncodeRequest(Op op, absl::string_view key, absl::string_view value,
                          int64_t arg) {
  std::string m(1, static_cast<char>(op));
  PutU64(&m, key.size());
  m.append(key.data(), key.size());
  PutU64(&m, value.size());
  m.append(value.data(), value.size());
  PutU64(&m, static_cast<uint64_t>(arg));
  return m;
}

std::string EncodeResponse(Code code, absl::string_view payload) {
  std::string m(1, static_cast<char>(code));
  PutU64(&m, payload.size());
  m.append(payload.data(), payload.size());
  return m;
}

bool SendAll(int fd, absl::string_view data) {
  size_t off = 0;
  while (off < data.size()) {
    const ssize_t n =
        ::send(fd, data.data() + off, data.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

// Parses one request from the front of `buf`; returns bytes used, 0 if
// incomplete.
size_t ParseRequest(const std::string& buf, Op* op, std::string* key,
                    std::string* value, int64_t* arg) {
  size_t p = 0;
  if (buf.size() < 9) return 0;
  *op = static_cast<Op>(buf[0]);
  const uint64_t klen = GetU64(buf.data() + 1);
  p = 9;
  if (buf.size() < p + klen + 8) return 0;
  *key = buf.substr(p, klen);
  p += klen;
  const uint64_t vlen = GetU64(buf.data() + p);
  p += 8;
  if (buf.size() < p + vlen + 8) return 0;
  *value = buf.substr(p, vlen);
  p += vlen;
  *arg = static_cast<int64_t>(GetU64(buf.data() + p));
  return p + 8;
}

}  // namespace

// ---------------------------------------------------------------------------
// Server: one thread, poll() over the listening socket, the clients and an
// eventfd used to stop it. Gets for missing keys are parked until a Set or
// their deadline.
class TcpStore::Server {
 public:
  static StatusOr<std::unique_ptr<Server>> Start(int port, int world_size,
                                                 absl::Duration linger) {
    auto s = std::unique_ptr<Server>(new Server(world_size, linger));
    s->listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd_ < 0) return absl::InternalError(Errno("store: socket"));
    int one = 1;
    ::setsockopt(s->listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    if (::bind(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr),
               sizeof(addr)) != 0) {
      return absl::UnavailableError(absl::StrCat(
          "store: cannot listen on port ", port, " (", std::strerror(errno),
          "); set MASTER_PORT to a free port"));
    }
    if (::listen(s->listen_fd_, 1024) != 0) {
      return absl::InternalError(Errno("store: listen"));
    }
    socklen_t len = sizeof(addr);
    ::getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    s->port_ = ntohs(addr.sin_port);
    s->wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->wake_fd_ < 0) return absl::InternalError(Errno("store: eventfd"));
    s->thread_ = std::thread([p = s.get()] { p->Loop(); });
    return s;
  }

  ~Server() {
    if (thread_.joinable()) {
      uint64_t one = 1;
      (void)!::write(wake_fd_, &one, sizeof(one));
      thread_.join();
    }
    for (Conn& c : conns_) ::close(c.fd);
    if (listen_fd_ >= 0) ::close(listen_fd_);
    if (wake_fd_ >= 0) ::close(wake_fd_);
  }

  int port() const { return port_; }

 private:
  struct Conn {
    int fd;
    std::string in;
    int rank = -1;
  };
  struct Waiter {
    int fd;
    std::string key;
    absl::Time deadline;
  };

  Server(int world_size, absl::Duration linger)
      : world_size_(world_size), linger_(linger) {}

  void Loop() {
    bool stopping = false;
    absl::Time drain_until = absl::InfiniteFuture();
    for (;;) {
      if (stopping && (conns_.empty() || absl::Now() > drain_until)) return;
      std::vector<pollfd> fds;
      fds.push_back({wake_fd_, POLLIN, 0});
      fds.push_back({listen_fd_, POLLIN, 0});
      for (const Conn& c : conns_) fds.push_back({c.fd, POLLIN, 0});
      int timeout_ms = stopping ? 50 : -1;
      const absl::Time now = absl::Now();
      for (const Waiter& w : waiters_) {
        const int64_t ms = std::max<int64_t>(
            0, absl::ToInt64Milliseconds(w.deadline - now) + 1);
        if (timeout_ms < 0 || ms < timeout_ms) timeout_ms = static_cast<int>(ms);
      }
      const int n = ::poll(fds.data(), fds.size(), timeout_ms);
      if (n < 0 && errno != EINTR) return;
      if (fds[0].revents != 0 && !stopping) {
        // Stop requested: keep serving until the other ranks have
        // disconnected (they may still be reading the answer to their last
        // request), for at most linger_.
        uint64_t v;
        (void)!::read(wake_fd_, &v, sizeof(v));
        stopping = true;
        drain_until = absl::Now() + linger_;
        continue;
      }
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) {
          int one = 1;
          ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
          conns_.push_back(Conn{fd, {}});
        }
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        ReadFrom(fds[i].fd);
      }
      conns_.remove_if([](const Conn& c) { return c.fd < 0; });
      ExpireWaiters();
    }
  }

  Conn* Find(int fd) {
    for (Conn& c : conns_) {
      if (c.fd == fd) return &c;
    }
    return nullptr;
  }

  void ReadFrom(int fd) {
    Conn* c = Find(fd);
    char buf[65536];
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
      Drop(c);
      return;
    }
    if (n < 0) return;
    c->in.append(buf, static_cast<size_t>(n));
    for (;;) {
      Op op;
      std::string key, value;
      int64_t arg;
      const size_t used = ParseRequest(c->in, &op, &key, &value, &arg);
      if (used == 0) break;
      c->in.erase(0, used);
      Handle(c, op, key, value, arg);
      if (c->fd < 0) return;
    }
  }

  void Drop(Conn* c) {
    waiters_.remove_if([&](const Waiter& w) { return w.fd == c->fd; });
    ::close(c->fd);
    c->fd = -1;
  }

  void Reply(Conn* c, Code code, absl::string_view payload) {
    if (!SendAll(c->fd, EncodeResponse(code, payload))) Drop(c);
  }

  void Handle(Conn* c, Op op, const std::string& key, const std::string& value,
              int64_t arg) {
    switch (op) {
      case kHello: {
        const int rank = static_cast<int>(arg >> 32);
        const int world = static_cast<int>(arg & 0xffffffff);
        if (world != world_size_) {
          Reply(c, kInvalid,
                absl::StrCat("world size mismatch: rank ", rank,
                             " was started with world size ", world,
                             ", the store on rank 0 has ", world_size_));
          return;
        }
        for (const Conn& o : conns_) {
          if (&o != c && o.fd >= 0 && o.rank == rank) {
            Reply(c, kExists, absl::StrCat("rank ", rank,
                                            " is already connected"));
            return;
          }
        }
        c->rank = rank;
        Reply(c, kOk, "");
        return;
      }
      case kSet: {
        data_[key] = value;
        Reply(c, kOk, "");
        // Answer parked Gets of this key.
        for (auto it = waiters_.begin(); it != waiters_.end();) {
          if (it->key == key) {
            Conn* w = Find(it->fd);
            it = waiters_.erase(it);
            if (w != nullptr) Reply(w, kOk, value);
          } else {
            ++it;
          }
        }
        return;
      }
      case kGet: {
        auto it = data_.find(key);
        if (it != data_.end()) {
          Reply(c, kOk, it->second);
        } else {
          waiters_.push_back(
              Waiter{c->fd, key, absl::Now() + absl::Milliseconds(arg)});
        }
        return;
      }
      case kAdd: {
        int64_t v = 0;
        auto it = data_.find(key);
        if (it != data_.end()) (void)absl::SimpleAtoi(it->second, &v);
        v += arg;
        const std::string s = absl::StrCat(v);
        data_[key] = s;
        Reply(c, kOk, s);
        for (auto w = waiters_.begin(); w != waiters_.end();) {
          if (w->key == key) {
            Conn* wc = Find(w->fd);
            w = waiters_.erase(w);
            if (wc != nullptr) Reply(wc, kOk, s);
          } else {
            ++w;
          }
        }
        return;
      }
    }
    Reply(c, kInvalid, "unknown request");
  }

  void ExpireWaiters() {
    const absl::Time now = absl::Now();
    for (auto it = waiters_.begin(); it != waiters_.end();) {
      if (it->deadline <= now) {
        Conn* c = Find(it->fd);
        const std::string key = it->key;
        it = waiters_.erase(it);
        if (c != nullptr) Reply(c, kTimeout, key);
      } else {
        ++it;
      }
    }
  }

  const int world_size_;
  const absl::Duration linger_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;
  int port_ = 0;
  std::thread thread_;
  // Touched only by the server thread.
  std::list<Conn> conns_;
  std::list<Waiter> waiters_;
  std::map<std::string, std::string> data_;
};

// ---------------------------------------------------------------------------
// Client: one blocking connection; requests are serialized by a mutex and
// every read has a deadline, so a dead server gives an error, not a hang.
class TcpStore::Client {
 public:
  static StatusOr<std::unique_ptr<Client>> Connect(const TcpStoreOptions& o) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    const std::string port = absl::StrCat(o.port);
    const int rc = ::getaddrinfo(o.host.c_str(), port.c_str(), &hints, &res);
    if (rc != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("store: cannot resolve MASTER_ADDR '", o.host,
                       "': ", ::gai_strerror(rc)));
    }
    const absl::Time deadline = absl::Now() + o.connect_timeout;
    int fd = -1;
    std::string last_error;
    absl::Duration backoff = absl::Milliseconds(10);
    while (fd < 0) {
      fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (::connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
      last_error = std::strerror(errno);
      ::close(fd);
      fd = -1;
      if (absl::Now() + backoff > deadline) break;
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Milliseconds(200));
    }
    ::freeaddrinfo(res);
    if (fd < 0) {
      return absl::DeadlineExceededError(absl::StrCat(
          "store: could not reach rank 0 at ", o.host, ":", o.port, " within ",
          absl::FormatDuration(o.connect_timeout), " (", last_error,
          "); is rank 0 running with the same MASTER_ADDR/MASTER_PORT?"));
    }
    int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::unique_ptr<Client>(new Client(fd));
    const int64_t hello = (static_cast<int64_t>(o.rank) << 32) |
                          static_cast<uint32_t>(o.world_size);
    BATON_ASSIGN_OR_RETURN(
        std::string ignored,
        c->Call(kHello, "", "", hello, o.connect_timeout));
    (void)ignored;
    return c;
  }

  ~Client() { ::close(fd_); }

  // Sends one request and waits up to `wait` (+ slack) for its answer.
  StatusOr<std::string> Call(Op op, absl::string_view key,
                             absl::string_view value, int64_t arg,
                             absl::Duration wait) {
    absl::MutexLock lock(&mu_);
    if (!SendAll(fd_, EncodeRequest(op, key, value, arg))) {
      return absl::UnavailableError(
          Errno("store: lost the connection to rank 0"));
    }
    const absl::Time deadline = absl::Now() + wait + absl::Seconds(5);
    std::string in;
    for (;;) {
      if (in.size() >= 9) {
        const uint64_t len = GetU64(in.data() + 1);
        if (in.size() >= 9 + len) break;
      }
      const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (ms <= 0) {
        return absl::DeadlineExceededError(
            absl::StrCat("store: rank 0 did not answer within ",
                         absl::FormatDuration(wait + absl::Seconds(5))));
      }
      pollfd p{fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(ms));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) continue;
      char buf[65536];
      const ssize_t r = ::recv(fd_, buf, sizeof(buf), 0);
      if (r <= 0) {
        return absl::UnavailableError(
            "store: rank 0 closed the connection (did rank 0 exit?)");
      }
      in.append(buf, static_cast<size_t>(r));
    }
    const Code code = static_cast<Code>(in[0]);
    std::string payload = in.substr(9);
    switch (code) {
      case kOk:
        return payload;
      case kTimeout:
        return absl::DeadlineExceededError(absl::StrCat(
            "store: key '", payload, "' did not appear within ",
            absl::FormatDuration(wait), " (a rank never arrived?)"));
      case kExists:
        return absl::AlreadyExistsError(absl::StrCat("store: ", payload));
      default:
        return absl::InvalidArgumentError(absl::StrCat("store: ", payload));
    }
  }

 private:
  explicit Client(int fd) : fd_(fd) {}
  absl::Mutex mu_;
  const int fd_;
};

// ---------------------------------------------------------------------------

TcpStore::TcpStore(const TcpStoreOptions& options) : options_(options) {}
TcpStore::~TcpStore() {
  client_.reset();
  server_.reset();
}

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Create(
    const TcpStoreOptions& options) {
  if (options.world_size < 1 || options.rank < 0 ||
      options.rank >= options.world_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: rank ", options.rank, " is outside [0, ",
                     options.world_size, ")"));
  }
  if (options.port < 0 || options.port > 65535 ||
      (options.port == 0 && options.rank != 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("store: bad port ", options.port));
  }
  auto store = std::unique_ptr<TcpStore>(new TcpStore(options));
  if (options.rank == 0) {
    BATON_ASSIGN_OR_RETURN(store->server_,
                           Server::Start(options.port, options.world_size,
                                         options.linger));
    store->options_.port = store->server_->port();
  }
  BATON_ASSIGN_OR_RETURN(store->client_, Client::Connect(store->options_));
  return store;
}

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Create(const LaunchInfo& info,
                                                     absl::Duration timeout) {
  TcpStoreOptions o;
  o.host = info.master_addr;
  o.port = info.master_port;
  o.rank = info.rank;
  o.world_size = info.world_size;
  o.connect_timeout = timeout;
  return Create(o);
}

Status TcpStore::Set(absl::string_view key, absl::string_view value) {
  return client_->Call(kSet, key, value, 0, absl::Seconds(30)).status();
}

StatusOr<std::string> TcpStore::Get(absl::string_view key,
                                    absl::Duration timeout) {
  return client_->Call(kGet, key, "", absl::ToInt64Milliseconds(timeout),
                       timeout);
}

StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta) {
  BATON_ASSIGN_OR_RETURN(std::string v,
                         client_->Call(kAdd, key, "", delta, absl::Seconds(30)));
  int64_t out = 0;
  if (!absl::SimpleAtoi(v, &out)) {
    return absl::InternalError(absl::StrCat("store: bad counter '", v, "'"));
  }
  return out;
}

Status TcpStore::Barrier(absl::string_view name, absl::Duration timeout) {
  int call;
  {
    absl::MutexLock lock(&barrier_mu_);
    call = barrier_calls_[std::string(name)]++;
  }
  const std::string count_key =
      absl::StrCat("barrier/", name, "/", call, "/count");
  const std::string done_key = absl::StrCat("barrier/", name, "/", call, "/done");
  BATON_ASSIGN_OR_RETURN(int64_t arrived, Add(count_key, 1));
  if (arrived == options_.world_size) {
    BATON_RETURN_IF_ERROR(Set(done_key, "1"));
  }
  StatusOr<std::string> done = Get(done_key, timeout);
  if (!done.ok() && absl::IsDeadlineExceeded(done.status())) {
    StatusOr<int64_t> n = Add(count_key, 0);
    return absl::DeadlineExceededError(absl::StrCat(
        "store barrier '", name, "': ", n.ok() ? *n : -1, " of ",
        options_.world_size, " ranks arrived within ",
        absl::FormatDuration(timeout)));
  }
  return done.status();
}

StatusOr<int> PickFreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(Errno("socket"));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return absl::UnavailableError(Errno("pick a free port"));
  }
  ::close(fd);
  return static_cast<int>(ntohs(addr.sin_port));
}

}  // namespace baton
