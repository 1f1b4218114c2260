#include "baton/comm/bootstrap/store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/bootstrap/store_server.h"

namespace baton {
namespace {

using store_wire::Code;
using store_wire::Op;
using store_wire::Parse;

std::string Errno(const char* what) {
  return absl::StrCat(what, ": ", std::strerror(errno));
}

// Milliseconds left until `deadline`, for poll (at most 1 s per wait).
int PollMs(absl::Time deadline) {
  const int64_t ms = absl::ToInt64Milliseconds(deadline - absl::Now()) + 1;
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 1000));
}

Status CheckTimeout(absl::Duration timeout, const char* what) {
  if (timeout == absl::InfiniteDuration() || timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "store: ", what, " needs a finite, non-negative timeout, got ",
        absl::FormatDuration(timeout)));
  }
  return Status();
}

// One non-blocking connect to `addr` within `deadline`: the socket, or the
// errno that ended the attempt (ETIMEDOUT when the deadline passed).
struct Attempt {
  int fd = -1;
  int err = 0;
};
Attempt ConnectOnce(const addrinfo& addr, absl::Time deadline) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return {-1, errno};
  int err = 0;
  if (::connect(fd, addr.ai_addr, addr.ai_addrlen) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      while (::poll(&p, 1, PollMs(deadline)) == 0 && absl::Now() < deadline) {
      }
      socklen_t len = sizeof(err);
      err = ETIMEDOUT;
      if (p.revents != 0) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    }
  }
  if (err != 0) {
    ::close(fd);
    return {-1, err};
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return {fd, 0};
}

// rank 0's address, resolved once.
class Address {
 public:
  static StatusOr<Address> Resolve(const TcpStoreOptions& o) {
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
    return Address(res);
  }
  Address(Address&& other) : res_(other.res_) { other.res_ = nullptr; }
  ~Address() {
    if (res_ != nullptr) ::freeaddrinfo(res_);
  }
  const addrinfo& get() const { return *res_; }

 private:
  explicit Address(addrinfo* res) : res_(res) {}
  addrinfo* res_;
};

// Connects within connect_timeout, retrying while the server is not up yet.
StatusOr<int> ConnectWithin(const TcpStoreOptions& o, const Address& addr,
                            absl::Time deadline) {
  std::string last_error = "timed out";
  absl::Duration backoff = absl::Milliseconds(10);
  for (;;) {
    const Attempt a = ConnectOnce(addr.get(), deadline);
    if (a.fd >= 0) return a.fd;
    last_error = std::strerror(a.err);
    if (absl::Now() + backoff > deadline) break;
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Milliseconds(200));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "store: could not reach rank 0 at ", o.host, ":", o.port, " within ",
      absl::FormatDuration(o.connect_timeout), " (", last_error,
      "); is rank 0 running with the same MASTER_ADDR/BATON_STORE_PORT?"));
}

}  // namespace

// ---------------------------------------------------------------------------
// Client: one non-blocking connection; requests are serialized by a mutex
// and every send and read has a deadline, so a dead or stalled server gives
// an error, not a hang.
class TcpStore::Client {
 public:
  // Connects and says hello. A connection closed before the hello was
  // answered is tried again until connect_timeout: rank 0's store closes
  // the oldest connections that have not said hello when strangers crowd
  // the port (store_server.h), which may be ours. Once rank 0 no longer
  // accepts connections at all, it exited: Unavailable says so.
  static StatusOr<std::unique_ptr<Client>> Connect(const TcpStoreOptions& o) {
    const absl::Time deadline = absl::Now() + o.connect_timeout;
    BATON_ASSIGN_OR_RETURN(const Address addr, Address::Resolve(o));
    BATON_ASSIGN_OR_RETURN(int fd, ConnectWithin(o, addr, deadline));
    const int64_t hello = (static_cast<int64_t>(o.rank) << 32) |
                          static_cast<uint32_t>(o.world_size);
    absl::Duration backoff = absl::Milliseconds(10);
    for (;;) {
      auto c = std::unique_ptr<Client>(new Client(fd, o.limits));
      StatusOr<std::string> answer = c->Call(store_wire::kHello, store_wire::kProtocol,
                                             o.token, hello, deadline);
      if (answer.ok()) return c;
      if (!absl::IsUnavailable(answer.status()) || absl::Now() + backoff >= deadline) {
        return answer.status();
      }
      absl::SleepFor(backoff);
      backoff = std::min(backoff * 2, absl::Milliseconds(200));
      const Attempt again = ConnectOnce(addr.get(), deadline);
      if (again.err == ECONNREFUSED) {
        return absl::UnavailableError(absl::StrCat(
            "store: rank 0 closed the connection before answering the hello and no longer "
            "accepts connections at ", o.host, ":", o.port, " (did rank 0 exit?)"));
      }
      if (again.fd < 0) return answer.status();  // out of time
      fd = again.fd;
    }
  }

  ~Client() { ::close(fd_); }

  // Sends one request and waits until `deadline` for its answer. Errors
  // of the connection itself (lost, out of time, garbled reply) leave it
  // unusable; answers of rank 0 are mapped to their codes.
  StatusOr<std::string> Call(Op op, absl::string_view key,
                             absl::string_view value, int64_t arg,
                             absl::Time deadline) {
    if (key.size() > limits_.max_key || value.size() > limits_.max_value) {
      return absl::InvalidArgumentError(absl::StrCat(
          "store: key of ", key.size(), " bytes or value of ", value.size(),
          " bytes is over the limits (", limits_.max_key, ", ",
          limits_.max_value, ")"));
    }
    Code code = store_wire::kOk;
    std::string payload;
    {
      absl::MutexLock lock(&mu_);
      if (!broken_.ok()) return broken_;
      Status s = CallLocked(op, key, value, arg, deadline, &code, &payload);
      if (!s.ok()) {
        // A reply may still be on its way: the stream is out of step.
        broken_ = absl::UnavailableError(absl::StrCat(
            "store: the connection to rank 0 is unusable after: ",
            s.message()));
        return s;
      }
    }
    switch (code) {
      case store_wire::kOk:
        return payload;
      case store_wire::kTimeout:
        return absl::DeadlineExceededError(
            absl::StrCat("store: key '", payload, "' did not appear"));
      case store_wire::kExists:
        return absl::AlreadyExistsError(absl::StrCat("store: ", payload));
      case store_wire::kDenied:
        return absl::PermissionDeniedError(absl::StrCat("store: ", payload));
      case store_wire::kFull:
        return absl::ResourceExhaustedError(absl::StrCat("store: ", payload));
      default:
        return absl::InvalidArgumentError(absl::StrCat("store: ", payload));
    }
  }

 private:
  Client(int fd, const store_wire::Limits& limits)
      : fd_(fd), limits_(limits) {}

  Status CallLocked(Op op, absl::string_view key, absl::string_view value,
                    int64_t arg, absl::Time deadline, Code* code,
                    std::string* payload) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const std::string msg = store_wire::EncodeRequest(op, key, value, arg);
    size_t off = 0;
    while (off < msg.size()) {
      const ssize_t n = ::send(fd_, msg.data() + off, msg.size() - off,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        off += static_cast<size_t>(n);
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (absl::Now() >= deadline) {
          return absl::DeadlineExceededError(
              "store: rank 0 did not take our request in time (is it "
              "stopped?)");
        }
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, PollMs(deadline));
        continue;
      }
      return absl::UnavailableError(
          Errno("store: lost the connection to rank 0"));
    }
    std::string in;
    for (;;) {
      size_t used = 0;
      std::string why;
      const Parse p = store_wire::ParseResponse(
          in, limits_.max_response_payload(), code, payload, &used, &why);
      if (p == Parse::kDone) break;
      if (p == Parse::kBad) {
        return absl::InternalError(
            absl::StrCat("store: bad reply from rank 0: ", why));
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            "store: rank 0 did not answer in time (is it stopped?)");
      }
      pollfd pfd{fd_, POLLIN, 0};
      const int n = ::poll(&pfd, 1, PollMs(deadline));
      if (n <= 0) continue;
      char buf[65536];
      const ssize_t r = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (r < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (r <= 0) {
        return absl::UnavailableError(
            "store: rank 0 closed the connection (did rank 0 exit?)");
      }
      in.append(buf, static_cast<size_t>(r));
    }
    return Status();
  }

  absl::Mutex mu_;
  const int fd_;
  const store_wire::Limits limits_;
  Status broken_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------

TcpStore::TcpStore(const TcpStoreOptions& options) : options_(options) {}
TcpStore::~TcpStore() {
  client_.reset();
  server_.reset();  // bounded by options_.linger
}

int64_t TcpStore::dropped_clients() const {
  return server_ == nullptr ? -1 : server_->stats().dropped.load();
}
int64_t TcpStore::buffered_bytes() const {
  return server_ == nullptr ? -1 : server_->stats().buffered_bytes.load();
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
  BATON_RETURN_IF_ERROR(CheckTimeout(options.connect_timeout, "connect"));
  BATON_RETURN_IF_ERROR(CheckTimeout(options.linger, "linger"));
  auto store = std::unique_ptr<TcpStore>(new TcpStore(options));
  if (options.rank == 0) {
    store_internal::ServerOptions so;
    so.port = options.port;
    so.world_size = options.world_size;
    so.token = options.token;
    so.linger = options.linger;
    so.limits = options.limits;
    so.max_store_bytes = options.max_store_bytes;
    so.stall_timeout = options.stall_timeout;
    so.hello_timeout = options.hello_timeout;
    so.max_unidentified = options.max_unidentified;
    so.max_unidentified_per_address = options.max_unidentified_per_address;
    BATON_ASSIGN_OR_RETURN(store->server_, store_internal::Server::Start(so));
    store->options_.port = store->server_->port();
  }
  BATON_ASSIGN_OR_RETURN(store->client_, Client::Connect(store->options_));
  return store;
}

StatusOr<std::unique_ptr<TcpStore>> TcpStore::Create(const LaunchInfo& info,
                                                     absl::Duration timeout) {
  TcpStoreOptions o;
  o.host = info.master_addr;
  o.port = info.store_port;
  o.token = info.store_token;
  o.rank = info.rank;
  o.world_size = info.world_size;
  o.connect_timeout = timeout;
  return Create(o);
}

Status TcpStore::Set(absl::string_view key, absl::string_view value,
                     absl::Duration timeout) {
  BATON_RETURN_IF_ERROR(CheckTimeout(timeout, "Set"));
  return client_
      ->Call(store_wire::kSet, key, value, 0, absl::Now() + timeout)
      .status();
}

StatusOr<std::string> TcpStore::Get(absl::string_view key,
                                    absl::Duration timeout) {
  BATON_RETURN_IF_ERROR(CheckTimeout(timeout, "Get"));
  // Rank 0 answers kTimeout at `timeout`; the slack covers the round trip.
  StatusOr<std::string> v =
      client_->Call(store_wire::kGet, key, "",
                    absl::ToInt64Milliseconds(timeout),
                    absl::Now() + timeout + absl::Seconds(2));
  if (absl::IsDeadlineExceeded(v.status()) &&
      absl::StrContains(v.status().message(), "did not appear")) {
    return absl::DeadlineExceededError(absl::StrCat(
        "store: key '", key, "' did not appear within ",
        absl::FormatDuration(timeout), " (a rank never arrived?)"));
  }
  return v;
}

StatusOr<int64_t> TcpStore::Add(absl::string_view key, int64_t delta,
                                absl::Duration timeout) {
  BATON_RETURN_IF_ERROR(CheckTimeout(timeout, "Add"));
  BATON_ASSIGN_OR_RETURN(
      std::string v,
      client_->Call(store_wire::kAdd, key, "", delta, absl::Now() + timeout));
  int64_t out = 0;
  if (!absl::SimpleAtoi(v, &out)) {
    return absl::InternalError(absl::StrCat("store: bad counter '", v, "'"));
  }
  return out;
}

Status TcpStore::Barrier(absl::string_view name, absl::Duration timeout) {
  BATON_RETURN_IF_ERROR(CheckTimeout(timeout, "Barrier"));
  const absl::Time deadline = absl::Now() + timeout;
  int call;
  {
    absl::MutexLock lock(&barrier_mu_);
    call = barrier_calls_[std::string(name)]++;
  }
  const std::string count_key =
      absl::StrCat("barrier/", name, "/", call, "/count");
  const std::string done_key = absl::StrCat("barrier/", name, "/", call, "/done");
  // The counter's round trips get at least a second even when the
  // barrier's own timeout is shorter.
  auto step = [&] { return std::max(deadline - absl::Now(), absl::Seconds(1)); };
  BATON_ASSIGN_OR_RETURN(int64_t arrived, Add(count_key, 1, step()));
  if (arrived == options_.world_size) {
    BATON_RETURN_IF_ERROR(Set(done_key, "1", step()));
  }
  StatusOr<std::string> done =
      Get(done_key, std::max(absl::ZeroDuration(), deadline - absl::Now()));
  if (!done.ok() && absl::IsDeadlineExceeded(done.status()) &&
      absl::StrContains(done.status().message(), "did not appear")) {
    StatusOr<int64_t> n = Add(count_key, 0, absl::Seconds(5));
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
