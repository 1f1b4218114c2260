// The store against clients that misbehave (issue 16): one that sends
// requests and never reads the replies, oversized and unterminated
// requests, requests before the hello, a wrong token, and shutdown while a
// rank stays connected. Each must leave the store serving the other ranks,
// with rank 0's memory bounded and every wait ending.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/bootstrap/store_wire.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

TcpStoreOptions Opts(int port, int rank, int world) {
  TcpStoreOptions o;
  o.port = port;
  o.rank = rank;
  o.world_size = world;
  o.token = "tok";
  o.connect_timeout = absl::Seconds(2);
  o.linger = absl::Milliseconds(500);
  o.stall_timeout = absl::Milliseconds(500);
  o.limits.max_value = 1 << 20;
  return o;
}

// A raw TCP connection to the store, from `from` (a loopback address other
// than 127.0.0.1 stands for another host) when given.
class Raw {
 public:
  explicit Raw(int port, const char* from = nullptr) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    if (from != nullptr) {
      sockaddr_in src{};
      src.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &src.sin_addr);
      ::bind(fd_, reinterpret_cast<sockaddr*>(&src), sizeof(src));
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    ok_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    timeval tv{2, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~Raw() { ::close(fd_); }
  bool ok() const { return ok_; }
  // Bytes actually sent (stops at the first error or timeout).
  size_t Send(const std::string& b) {
    size_t off = 0;
    while (off < b.size()) {
      const ssize_t n =
          ::send(fd_, b.data() + off, b.size() - off, MSG_NOSIGNAL);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    return off;
  }
  // True once the server has closed the connection (EOF or reset), reading
  // and discarding whatever came before, within `within`.
  bool ClosedWithin(absl::Duration within, std::string* got = nullptr) {
    const absl::Time until = absl::Now() + within;
    char buf[4096];
    while (absl::Now() < until) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0) return true;
      if (n < 0 && errno != EAGAIN && errno != EINTR) return true;
      if (n > 0 && got != nullptr) got->append(buf, static_cast<size_t>(n));
    }
    return false;
  }
  // True when the server has closed the connection (checked without
  // waiting; a last reply before the close is read and dropped).
  bool Closed() {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), MSG_DONTWAIT);
      if (n > 0) continue;
      return n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    }
  }
  void Hello(int rank, int world, const std::string& token) {
    Send(store_wire::EncodeRequest(
        store_wire::kHello, store_wire::kProtocol, token,
        (static_cast<int64_t>(rank) << 32) | static_cast<uint32_t>(world)));
  }

 private:
  int fd_ = -1;
  bool ok_ = false;
};

// A second rank checks that the store still answers promptly.
void ExpectServing(TcpStore& other) {
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(other.Set("probe", "x", absl::Seconds(1)).ok());
  auto v = other.Get("probe", absl::Seconds(1));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
}

TEST(StoreHostileTest, ClientThatNeverReadsRepliesCannotFreezeTheStore) {
  auto s0 = TcpStore::Create(Opts(0, 0, 3));
  ASSERT_TRUE(s0.ok()) << s0.status();
  const int port = (*s0)->port();
  auto s1 = TcpStore::Create(Opts(port, 1, 3));
  ASSERT_TRUE(s1.ok());
  // A big value, so that each Get's reply is large.
  ASSERT_TRUE((*s1)->Set("big", std::string(1 << 20, 'v')).ok());
  Raw bad(port);
  ASSERT_TRUE(bad.ok());
  bad.Hello(2, 3, "tok");
  // Gets of 1 MiB each, never reading: the replies fill every socket
  // buffer. The sender stops once the server stops reading it.
  std::string gets;
  for (int i = 0; i < 64; ++i) {
    gets += store_wire::EncodeRequest(store_wire::kGet, "big", "", 1000);
  }
  std::thread flood([&] {
    for (int i = 0; i < 8; ++i) bad.Send(gets);
  });
  absl::SleepFor(absl::Milliseconds(100));
  ExpectServing(**s1);
  // Bounded: one reply past the high-water mark, and a request's worth in.
  EXPECT_LT((*s0)->buffered_bytes(), 8 << 20);
  flood.join();
  // It is dropped once its replies stall for stall_timeout.
  const absl::Time t0 = absl::Now();
  while ((*s0)->dropped_clients() < 1 && absl::Now() - t0 < absl::Seconds(5)) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_EQ((*s0)->dropped_clients(), 1);
  ExpectServing(**s1);
  // Destruction is bounded even with rank 1 still connected (linger).
  const absl::Time d0 = absl::Now();
  s0->reset();
  EXPECT_LT(absl::Now() - d0, absl::Seconds(2));
}

TEST(StoreHostileTest, OversizedRequestIsRefusedAndTheClientDropped) {
  auto s0 = TcpStore::Create(Opts(0, 0, 2));
  ASSERT_TRUE(s0.ok());
  Raw bad((*s0)->port());
  bad.Hello(1, 2, "tok");
  // Announces a 768 MiB value, then streams junk.
  std::string req = store_wire::EncodeRequest(store_wire::kSet, "k", "", 0);
  const uint32_t huge = 768u << 20;
  std::memcpy(&req[5], &huge, 4);
  bad.Send(req);
  std::thread junk([&] { bad.Send(std::string(32 << 20, 'j')); });
  std::string got;
  EXPECT_TRUE(bad.ClosedWithin(absl::Seconds(3), &got));
  junk.join();
  EXPECT_LT((*s0)->buffered_bytes(), 2 << 20);
  EXPECT_GE((*s0)->dropped_clients(), 1);
  // The store still serves (rank 1 may connect again, properly).
  auto s1 = TcpStore::Create(Opts((*s0)->port(), 1, 2));
  ASSERT_TRUE(s1.ok()) << s1.status();
  ExpectServing(**s1);
  // The client side refuses to send what rank 0 would refuse.
  auto big = (*s1)->Set("k", std::string((1 << 20) + 1, 'x'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument) << big;
}

TEST(StoreHostileTest, UnterminatedRequestIsDroppedAfterTheStallTimeout) {
  auto s0 = TcpStore::Create(Opts(0, 0, 2));
  ASSERT_TRUE(s0.ok());
  Raw bad((*s0)->port());
  bad.Hello(1, 2, "tok");
  std::string req =
      store_wire::EncodeRequest(store_wire::kSet, "k", std::string(1000, 'v'), 0);
  bad.Send(req.substr(0, 500));  // and never the rest
  const absl::Time t0 = absl::Now();
  EXPECT_TRUE(bad.ClosedWithin(absl::Seconds(3)));
  EXPECT_GE(absl::Now() - t0, absl::Milliseconds(400));
}

TEST(StoreHostileTest, RequestBeforeHelloAndWrongTokenAreRefused) {
  auto s0 = TcpStore::Create(Opts(0, 0, 2));
  ASSERT_TRUE(s0.ok());
  {
    Raw bad((*s0)->port());
    bad.Send(store_wire::EncodeRequest(store_wire::kSet, "k", "v", 0));
    std::string got;
    EXPECT_TRUE(bad.ClosedWithin(absl::Seconds(2), &got));
    EXPECT_NE(got.find("before the hello"), std::string::npos) << got;
  }
  {
    Raw bad((*s0)->port());
    bad.Send(std::string("GET / HTTP/1.0\r\n\r\n"));
    EXPECT_TRUE(bad.ClosedWithin(absl::Seconds(2)));
  }
  TcpStoreOptions o = Opts((*s0)->port(), 1, 2);
  o.token = "other";
  auto s1 = TcpStore::Create(o);
  ASSERT_FALSE(s1.ok());
  EXPECT_EQ(s1.status().code(), absl::StatusCode::kPermissionDenied)
      << s1.status();
  EXPECT_NE(s1.status().message().find("BATON_STORE_TOKEN"), std::string::npos);
  // The right token still gets in.
  o.token = "tok";
  EXPECT_TRUE(TcpStore::Create(o).ok());
}

TEST(StoreHostileTest, ShutdownWaitsAtMostTheLingerAndSaysForWhom) {
  auto s0 = TcpStore::Create(Opts(0, 0, 3));
  ASSERT_TRUE(s0.ok());
  auto s2 = TcpStore::Create(Opts((*s0)->port(), 2, 3));
  ASSERT_TRUE(s2.ok());
  ::testing::internal::CaptureStderr();
  const absl::Time t0 = absl::Now();
  s0->reset();  // rank 2 stays connected
  const absl::Duration took = absl::Now() - t0;
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_GE(took, absl::Milliseconds(450));
  EXPECT_LT(took, absl::Seconds(2));
  EXPECT_NE(err.find("rank(s) 2 to disconnect"), std::string::npos) << err;
  auto v = (*s2)->Get("x", absl::Seconds(1));
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
}

TEST(StoreHostileTest, ClientThatVanishesWithParkedGets) {
  auto s0 = TcpStore::Create(Opts(0, 0, 3));
  ASSERT_TRUE(s0.ok());
  for (int round = 0; round < 20; ++round) {
    auto bad = std::make_unique<Raw>((*s0)->port());
    bad->Hello(2, 3, "tok");
    std::string gets;
    for (int i = 0; i < 10; ++i) {
      gets += store_wire::EncodeRequest(store_wire::kGet, "x" + std::to_string(round),
                                        "", 5000);
      gets += store_wire::EncodeRequest(store_wire::kGet, "y", "", i * 10);
    }
    bad->Send(gets);
    absl::SleepFor(absl::Milliseconds(5));
    bad.reset();  // gone while its Gets wait: answering them must not trip
    ASSERT_TRUE((*s0)->Set("x" + std::to_string(round), "v").ok());
  }
  ASSERT_TRUE((*s0)->Set("y", "v").ok());
  ExpectServing(**s0);
}

// Waits (polling, at most `within`) until `done` holds.
template <typename F>
bool Eventually(absl::Duration within, F done) {
  const absl::Time until = absl::Now() + within;
  while (!done()) {
    if (absl::Now() > until) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

// Issue 29: 64 silent connections used to make rank 0's store close every
// new connection, so a job could not start while anyone (a scanner, a
// health check) held them. Now a flood of silent and garbage connections,
// more than every cap, goes on while a job of 4 ranks starts: every rank
// gets in, the job runs a barrier, and the flood is closed (the oldest
// first, the rest at the hello deadline).
TEST(StoreHostileTest, AFloodOfSilentConnectionsCannotKeepAJobFromStarting) {
  TcpStoreOptions o0 = Opts(0, 0, 4);
  o0.hello_timeout = absl::Seconds(1);
  o0.connect_timeout = absl::Seconds(20);
  auto s0 = TcpStore::Create(o0);
  ASSERT_TRUE(s0.ok()) << s0.status();
  const int port = (*s0)->port();
  std::vector<std::unique_ptr<Raw>> flood;
  std::atomic<bool> started{false}, stop{false};
  std::thread flooder([&] {
    for (int i = 0; !stop.load() && i < 600; ++i) {
      flood.push_back(std::make_unique<Raw>(port));
      if (i % 50 == 7) flood.back()->Send("GET / HTTP/1.0\r\n\r\n");  // garbage
      if (i % 50 == 9) flood.back()->Send(std::string("\x01\x00", 2));  // a partial request
      if (i == 150) started.store(true);
      if (i >= 150) absl::SleepFor(absl::Microseconds(500));
    }
    started.store(true);
  });
  while (!started.load()) absl::SleepFor(absl::Milliseconds(1));
  std::vector<std::unique_ptr<TcpStore>> ranks(4);
  std::vector<Status> status(4);
  std::vector<std::thread> threads;
  for (int r = 1; r < 4; ++r) {
    threads.emplace_back([&, r] {
      TcpStoreOptions o = Opts(port, r, 4);
      o.connect_timeout = absl::Seconds(20);
      auto s = TcpStore::Create(o);
      status[r] = s.status();
      if (s.ok()) ranks[r] = *std::move(s);
    });
  }
  for (auto& t : threads) t.join();
  bool all_in = true;
  for (int r = 1; r < 4; ++r) {
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    all_in = all_in && status[r].ok();
  }
  if (!all_in) {
    stop.store(true);
    flooder.join();
    return;
  }
  threads.clear();
  ranks[0] = *std::move(s0);
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back(
        [&, r] { status[r] = ranks[r]->Barrier("started", absl::Seconds(10)); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 4; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  stop.store(true);
  flooder.join();
  ASSERT_GT(flood.size(), 150u);
  // Every flood connection is closed: evicted, refused, or at the deadline.
  int open = 0;
  EXPECT_TRUE(Eventually(absl::Seconds(5), [&] {
    open = 0;
    for (auto& c : flood) open += !c->Closed();
    return open == 0;
  })) << open << " of " << flood.size() << " still open; dropped "
      << ranks[0]->dropped_clients();
  EXPECT_GE(ranks[0]->dropped_clients(), static_cast<int64_t>(flood.size()));
  ExpectServing(*ranks[1]);
}

// The caps are per address too: a flood from one address closes its own
// oldest connections, not another address's (below the global cap).
TEST(StoreHostileTest, OneAddressFloodingClosesItsOwnOldestConnections) {
  TcpStoreOptions o = Opts(0, 0, 2);
  o.hello_timeout = absl::Seconds(30);
  auto s0 = TcpStore::Create(o);
  ASSERT_TRUE(s0.ok());
  const int port = (*s0)->port();
  std::vector<std::unique_ptr<Raw>> other, flood;
  for (int i = 0; i < 5; ++i) other.push_back(std::make_unique<Raw>(port, "127.0.0.3"));
  ASSERT_TRUE(Eventually(absl::Seconds(5), [&] { return (*s0)->dropped_clients() == 0; }));
  for (int i = 0; i < 100; ++i) flood.push_back(std::make_unique<Raw>(port, "127.0.0.2"));
  // 16 of the flood stay (the newest), 84 are closed.
  ASSERT_TRUE(Eventually(absl::Seconds(5), [&] { return (*s0)->dropped_clients() == 84; }))
      << (*s0)->dropped_clients();
  int closed = 0;
  EXPECT_TRUE(Eventually(absl::Seconds(5), [&] {
    closed = 0;
    for (auto& c : flood) closed += c->Closed();
    return closed == 84;
  })) << closed;
  for (int i = 0; i < 84; ++i) EXPECT_TRUE(flood[i]->Closed()) << "flood connection " << i;
  for (int i = 84; i < 100; ++i) EXPECT_FALSE(flood[i]->Closed()) << "flood connection " << i;
  for (auto& c : other) EXPECT_FALSE(c->Closed());
  // A rank still gets in (from the flooded address, too).
  auto s1 = TcpStore::Create(Opts(port, 1, 2));
  ASSERT_TRUE(s1.ok()) << s1.status();
  ExpectServing(**s1);
}

// A listening socket on a free loopback port, for a hand-played rank 0.
int Listen(int* port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 8) != 0) {
    return -1;
  }
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

// A rank whose connection is closed before its hello is answered (rank 0
// closed it to make room) connects again and gets in.
TEST(StoreHostileTest, AConnectionClosedBeforeTheHelloIsAnsweredIsTriedAgain) {
  int port = 0;
  const int listen_fd = Listen(&port);
  ASSERT_GE(listen_fd, 0);
  std::string second_hello;
  std::thread rank0([&] {
    ::close(::accept(listen_fd, nullptr, nullptr));  // the first: closed unanswered
    const int c = ::accept(listen_fd, nullptr, nullptr);
    char buf[4096];
    const ssize_t n = ::recv(c, buf, sizeof(buf), 0);
    if (n > 0) second_hello.assign(buf, static_cast<size_t>(n));
    const std::string ok = store_wire::EncodeResponse(store_wire::kOk, "");
    (void)!::send(c, ok.data(), ok.size(), MSG_NOSIGNAL);
    char eof;
    (void)!::recv(c, &eof, 1, 0);  // until the client closes
    ::close(c);
    ::close(listen_fd);
  });
  auto s1 = TcpStore::Create(Opts(port, 1, 2));
  EXPECT_TRUE(s1.ok()) << s1.status();
  if (s1.ok()) s1->reset();          // closes: rank0 sees the end
  if (!s1.ok()) ::shutdown(listen_fd, SHUT_RDWR);  // unblocks its accept
  rank0.join();
  EXPECT_EQ(second_hello, store_wire::EncodeRequest(store_wire::kHello, store_wire::kProtocol,
                                                    "tok", (int64_t{1} << 32) | 2));
}

// When rank 0 closes the connection and no longer listens at all, it
// really exited, and the error still says so (at once, not at the
// deadline).
TEST(StoreHostileTest, ARankStillHearsWhenRankZeroReallyExited) {
  int port = 0;
  const int listen_fd = Listen(&port);
  ASSERT_GE(listen_fd, 0);
  // A rank 0 that takes the connection, then exits without answering.
  std::thread rank0([listen_fd] {
    const int c = ::accept(listen_fd, nullptr, nullptr);
    ::close(listen_fd);
    if (c >= 0) ::close(c);
  });
  TcpStoreOptions o = Opts(port, 1, 2);
  o.connect_timeout = absl::Seconds(10);
  const absl::Time t0 = absl::Now();
  auto s1 = TcpStore::Create(o);
  rank0.join();
  ASSERT_FALSE(s1.ok());
  EXPECT_EQ(s1.status().code(), absl::StatusCode::kUnavailable) << s1.status();
  EXPECT_EQ(s1.status().message(),
            absl::StrCat("store: rank 0 closed the connection before answering the hello and "
                         "no longer accepts connections at 127.0.0.1:", port,
                         " (did rank 0 exit?)"));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));  // at once, not at the deadline
}

TEST(StoreHostileTest, LimitsOnContentAndTimeouts) {
  TcpStoreOptions o = Opts(0, 0, 1);
  o.max_store_bytes = 4096;
  auto s0 = TcpStore::Create(o);
  ASSERT_TRUE(s0.ok());
  ASSERT_TRUE((*s0)->Set("a", std::string(3000, 'x')).ok());
  Status full = (*s0)->Set("b", std::string(3000, 'x'));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  // Overwriting within the budget is fine.
  EXPECT_TRUE((*s0)->Set("a", std::string(3500, 'y')).ok());
  auto add = (*s0)->Add("a", 1);
  EXPECT_EQ(add.status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE((*s0)->Add("n", INT64_MAX).ok());
  EXPECT_EQ((*s0)->Add("n", 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*s0)->Get("a", absl::InfiniteDuration()).status().code(),
            absl::StatusCode::kInvalidArgument);
  // After these refusals the connection still works.
  EXPECT_TRUE((*s0)->Get("a", absl::Seconds(1)).ok());
}

}  // namespace
}  // namespace baton
