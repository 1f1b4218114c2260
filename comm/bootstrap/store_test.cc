#include "baton/comm/bootstrap/store.h"

#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

TcpStoreOptions Opts(int port, int rank, int world) {
  TcpStoreOptions o;
  o.port = port;
  o.rank = rank;
  o.world_size = world;
  o.connect_timeout = absl::Seconds(2);
  o.linger = absl::Milliseconds(200);
  return o;
}

TEST(StoreTest, SetGetAddAndBlockingGet) {
  auto s0 = TcpStore::Create(Opts(0, 0, 2));
  ASSERT_TRUE(s0.ok()) << s0.status();
  const int port = (*s0)->port();
  auto s1 = TcpStore::Create(Opts(port, 1, 2));
  ASSERT_TRUE(s1.ok()) << s1.status();
  ASSERT_TRUE((*s0)->Set("k", std::string("v\0x", 3)).ok());
  auto v = (*s1)->Get("k", absl::Seconds(1));
  ASSERT_TRUE(v.ok()) << v.status();
  EXPECT_EQ(*v, std::string("v\0x", 3));
  EXPECT_EQ(*(*s0)->Add("c", 2), 2);
  EXPECT_EQ(*(*s1)->Add("c", 3), 5);
  // A Get that waits for a later Set.
  std::thread setter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    ASSERT_TRUE((*s0)->Set("late", "yes").ok());
  });
  auto late = (*s1)->Get("late", absl::Seconds(5));
  setter.join();
  ASSERT_TRUE(late.ok()) << late.status();
  EXPECT_EQ(*late, "yes");
}

TEST(StoreTest, MissingKeyTimesOutNamingTheKey) {
  auto s0 = TcpStore::Create(Opts(0, 0, 1));
  ASSERT_TRUE(s0.ok());
  const absl::Time t0 = absl::Now();
  auto v = (*s0)->Get("never/set", absl::Milliseconds(300));
  const absl::Duration took = absl::Now() - t0;
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(v.status().message().find("never/set"), std::string::npos);
  EXPECT_GE(took, absl::Milliseconds(250));
  EXPECT_LT(took, absl::Seconds(2));
}

TEST(StoreTest, BarrierOfFourThreadsAndReuse) {
  auto s0 = TcpStore::Create(Opts(0, 0, 4));
  ASSERT_TRUE(s0.ok());
  const int port = (*s0)->port();
  std::vector<std::unique_ptr<TcpStore>> stores;
  stores.push_back(std::move(*s0));
  for (int r = 1; r < 4; ++r) {
    auto s = TcpStore::Create(Opts(port, r, 4));
    ASSERT_TRUE(s.ok()) << s.status();
    stores.push_back(std::move(*s));
  }
  std::vector<std::thread> threads;
  std::vector<Status> results(4);
  for (int round = 0; round < 3; ++round) {
    threads.clear();
    for (int r = 0; r < 4; ++r) {
      threads.emplace_back([&, r] {
        results[r] = stores[r]->Barrier("b", absl::Seconds(5));
      });
    }
    for (auto& t : threads) t.join();
    for (const Status& s : results) EXPECT_TRUE(s.ok()) << s;
  }
  // A barrier that one rank never joins times out, saying how many came.
  auto s = stores[1]->Barrier("lonely", absl::Milliseconds(200));
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(s.message().find("1 of 4"), std::string::npos) << s;
}

TEST(StoreTest, WorldSizeMismatchIsRefused) {
  auto s0 = TcpStore::Create(Opts(0, 0, 2));
  ASSERT_TRUE(s0.ok());
  auto s1 = TcpStore::Create(Opts((*s0)->port(), 1, 3));
  ASSERT_FALSE(s1.ok());
  EXPECT_EQ(s1.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s1.status().message().find("world size"), std::string::npos)
      << s1.status();
}

TEST(StoreTest, DuplicateRankIsRefused) {
  auto s0 = TcpStore::Create(Opts(0, 0, 3));
  ASSERT_TRUE(s0.ok());
  auto a = TcpStore::Create(Opts((*s0)->port(), 1, 3));
  ASSERT_TRUE(a.ok());
  auto b = TcpStore::Create(Opts((*s0)->port(), 1, 3));
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), absl::StatusCode::kAlreadyExists);
}

TEST(StoreTest, PortInUseIsUnavailable) {
  auto s0 = TcpStore::Create(Opts(0, 0, 1));
  ASSERT_TRUE(s0.ok());
  auto again = TcpStore::Create(Opts((*s0)->port(), 0, 1));
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(again.status().message().find("BATON_STORE_PORT"), std::string::npos);
}

TEST(StoreTest, NoServerGivesDeadlineExceededNotAHang) {
  auto port = PickFreePort();
  ASSERT_TRUE(port.ok());
  TcpStoreOptions o = Opts(*port, 1, 2);
  o.connect_timeout = absl::Milliseconds(300);
  const absl::Time t0 = absl::Now();
  auto s = TcpStore::Create(o);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(2));
}

TEST(StoreTest, ServerGoneIsUnavailable) {
  auto s0 = TcpStore::Create(Opts(0, 0, 2));
  ASSERT_TRUE(s0.ok());
  auto s1 = TcpStore::Create(Opts((*s0)->port(), 1, 2));
  ASSERT_TRUE(s1.ok());
  s0->reset();
  auto v = (*s1)->Get("x", absl::Seconds(1));
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kUnavailable) << v.status();
}

TEST(StoreTest, BadOptions) {
  EXPECT_FALSE(TcpStore::Create(Opts(0, 2, 2)).ok());
  EXPECT_FALSE(TcpStore::Create(Opts(0, 1, 2)).ok());  // port 0 off rank 0
  EXPECT_FALSE(TcpStore::Create(Opts(70000, 0, 1)).ok());
}

}  // namespace
}  // namespace baton
