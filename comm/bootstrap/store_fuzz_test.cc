// Seeded random-mutation fuzzing of the store protocol, for a fixed budget
// (a few seconds; BATON_TEST_SEED picks the seed, printed on failure):
//   1. the parsers, in process, on mutated encodings: never read out of
//      bounds (the sanitizer build checks), never accept more than the
//      limits, and what they accept re-encodes to the bytes consumed;
//   2. a live rank-0 server, fed mutated request streams from raw
//      connections: after each, a well-behaved rank still gets prompt
//      answers and the server's buffers stay bounded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/bootstrap/store_wire.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

using store_wire::Parse;

uint64_t Seed() {
  const char* s = std::getenv("BATON_TEST_SEED");
  return s != nullptr ? std::strtoull(s, nullptr, 10) : 20260516;
}

std::string ValidRequest(std::mt19937_64& rng) {
  const int op = 1 + static_cast<int>(rng() % 4);
  std::string key(rng() % 40, 'k');
  for (char& c : key) c = static_cast<char>('a' + rng() % 26);
  std::string value;
  if (op == store_wire::kSet || op == store_wire::kHello) {
    value.assign(rng() % 300, 'v');
  }
  if (op == store_wire::kHello) key = std::string(store_wire::kProtocol);
  return store_wire::EncodeRequest(static_cast<store_wire::Op>(op), key, value,
                                   static_cast<int64_t>(rng() % 2000));
}

// Flips, inserts, deletes, truncates, duplicates, or splices in random
// bytes (including huge length fields).
void Mutate(std::mt19937_64& rng, std::string* s) {
  const int n = 1 + static_cast<int>(rng() % 4);
  for (int m = 0; m < n; ++m) {
    const size_t at = s->empty() ? 0 : rng() % s->size();
    switch (rng() % 6) {
      case 0:
        if (!s->empty()) (*s)[at] ^= static_cast<char>(1 << (rng() % 8));
        break;
      case 1:
        s->insert(at, 1, static_cast<char>(rng()));
        break;
      case 2:
        if (!s->empty()) s->erase(at, 1 + rng() % 8);
        break;
      case 3:
        s->resize(at);
        break;
      case 4:
        *s += s->substr(at);
        break;
      case 5: {
        const uint32_t v = static_cast<uint32_t>(rng());
        if (s->size() >= at + 4) std::memcpy(&(*s)[at], &v, 4);
        break;
      }
    }
  }
}

TEST(StoreFuzzTest, ParsersOnMutatedInput) {
  const uint64_t seed = Seed();
  SCOPED_TRACE(::testing::Message() << "BATON_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed);
  store_wire::Limits limits;
  limits.max_key = 64;
  limits.max_value = 256;
  const absl::Time until = absl::Now() + absl::Seconds(2);
  int64_t iters = 0, accepted = 0;
  while (absl::Now() < until) {
    std::string buf;
    for (int k = 0; k < 3; ++k) buf += ValidRequest(rng);
    Mutate(rng, &buf);
    // Parse the stream the way the server does.
    size_t start = 0;
    for (;;) {
      store_wire::Request req;
      size_t used = 0;
      std::string why;
      // A copy of exactly the remaining bytes, so any overread is caught.
      const std::string rest = buf.substr(start);
      const Parse p = store_wire::ParseRequest(rest, limits, &req, &used, &why);
      if (p != Parse::kDone) {
        if (p == Parse::kBad) {
          ASSERT_FALSE(why.empty());
        }
        break;
      }
      ++accepted;
      ASSERT_LE(used, rest.size());
      ASSERT_LE(req.key.size(), limits.max_key);
      ASSERT_LE(req.value.size(), limits.max_value);
      ASSERT_EQ(store_wire::EncodeRequest(req.op, req.key, req.value, req.arg),
                rest.substr(0, used));
      start += used;
    }
    std::string resp = store_wire::EncodeResponse(
        static_cast<store_wire::Code>(rng() % 6), std::string(rng() % 100, 'p'));
    Mutate(rng, &resp);
    store_wire::Code code;
    std::string payload, why;
    size_t used = 0;
    if (store_wire::ParseResponse(resp, 64, &code, &payload, &used, &why) ==
        Parse::kDone) {
      ASSERT_LE(payload.size(), 64u);
      ASSERT_LE(used, resp.size());
    }
    ++iters;
  }
  std::printf("parser fuzz: %lld streams, %lld requests accepted, seed %llu\n",
              static_cast<long long>(iters), static_cast<long long>(accepted),
              static_cast<unsigned long long>(seed));
  EXPECT_GT(iters, 1000);
  EXPECT_GT(accepted, 0);
}

int Connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  timeval tv{0, 200000};
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

TEST(StoreFuzzTest, LiveServerSurvivesMutatedStreams) {
  const uint64_t seed = Seed();
  SCOPED_TRACE(::testing::Message() << "BATON_TEST_SEED=" << seed);
  std::mt19937_64 rng(seed ^ 0x5eed);
  TcpStoreOptions o;
  o.port = 0;
  o.world_size = 4;
  o.token = "fuzz";
  o.linger = absl::Milliseconds(200);
  o.stall_timeout = absl::Milliseconds(300);
  o.limits.max_key = 256;
  o.limits.max_value = 4096;
  o.max_store_bytes = 1 << 20;
  auto s0 = TcpStore::Create(o);
  ASSERT_TRUE(s0.ok()) << s0.status();
  const int port = (*s0)->port();
  const absl::Time until = absl::Now() + absl::Seconds(4);
  int streams = 0;
  std::vector<int> open;  // some connections are left open, half-sent
  while (absl::Now() < until) {
    const int fd = Connect(port);
    ASSERT_GE(fd, 0);
    // Usually a proper hello first, so the mutations reach the requests.
    std::string buf;
    if (rng() % 4 != 0) {
      const int rank = 1 + static_cast<int>(rng() % 3);
      buf = store_wire::EncodeRequest(store_wire::kHello, store_wire::kProtocol,
                                      "fuzz", (int64_t{rank} << 32) | 4);
    }
    std::string tail;
    for (int k = 0; k < 6; ++k) tail += ValidRequest(rng);
    Mutate(rng, &tail);
    buf += tail;
    (void)!::send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
    if (rng() % 2 == 0) {
      char sink[4096];
      (void)!::recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
    }
    if (rng() % 8 == 0 && open.size() < 16) {
      open.push_back(fd);
    } else {
      ::close(fd);
    }
    ++streams;
    if (streams % 25 == 0) {
      // A proper client (its own rank 0 client) still gets answers fast.
      const absl::Time t0 = absl::Now();
      ASSERT_TRUE((*s0)->Set("probe", std::to_string(streams)).ok());
      auto v = (*s0)->Get("probe", absl::Seconds(1));
      ASSERT_TRUE(v.ok()) << v.status();
      EXPECT_EQ(*v, std::to_string(streams));
      EXPECT_LT(absl::Now() - t0, absl::Milliseconds(500));
      EXPECT_LT((*s0)->buffered_bytes(), 8 << 20);
    }
  }
  for (int fd : open) ::close(fd);
  std::printf("server fuzz: %d streams, %lld clients dropped, seed %llu\n",
              streams, static_cast<long long>((*s0)->dropped_clients()),
              static_cast<unsigned long long>(seed));
  EXPECT_GT(streams, 50);
  const absl::Time d0 = absl::Now();
  s0->reset();
  EXPECT_LT(absl::Now() - d0, absl::Seconds(2));
}

}  // namespace
}  // namespace baton
