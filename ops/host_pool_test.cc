#include "baton/ops/host_pool.h"

#include <atomic>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace baton::ops {
namespace {

// Every index runs exactly once, for several pool sizes and task counts,
// and the pool is reusable.
TEST(HostPoolTest, RunsEveryTaskOnce) {
  for (int threads : {0, 1, 2, 3, 8}) {
    HostPool pool(threads);
    EXPECT_EQ(pool.threads(), threads < 1 ? 1 : threads);
    for (int64_t tasks : {0, 1, 2, 7, 100}) {
      for (int round = 0; round < 3; ++round) {
        std::vector<std::atomic<int>> hits(tasks);
        pool.ParallelFor(tasks, [&](int64_t i) { hits[i].fetch_add(1); });
        for (int64_t i = 0; i < tasks; ++i) {
          ASSERT_EQ(hits[i].load(), 1) << "threads " << threads << " tasks " << tasks;
        }
      }
    }
  }
}

// With several threads and slow tasks, more than one thread takes part.
TEST(HostPoolTest, SpreadsTasksOverThreads) {
  HostPool pool(4);
  std::atomic<int> running{0}, most{0};
  pool.ParallelFor(16, [&](int64_t) {
    const int now = running.fetch_add(1) + 1;
    int seen = most.load();
    while (now > seen && !most.compare_exchange_weak(seen, now)) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    running.fetch_sub(1);
  });
  EXPECT_GT(most.load(), 1);
}

// Concurrent callers of one pool each get all their tasks run.
TEST(HostPoolTest, ConcurrentCallersAreSerialized) {
  HostPool pool(3);
  std::atomic<int64_t> sum{0};
  std::vector<std::thread> callers;
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int r = 0; r < 20; ++r) {
        pool.ParallelFor(10, [&](int64_t i) { sum.fetch_add(i); });
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(sum.load(), 4 * 20 * 45);
}

}  // namespace
}  // namespace baton::ops
