// The main() of every baton gtest binary: gtest's, plus a per-test-case
// deadline so that no test (a GPU one above all, run without Bazel's
// timeouts by the GPU bundle) can hang a suite.
//
// A watchdog thread follows the running test case; when one runs past the
// deadline it prints
//   [ DEADLINE ] Suite.Case ran past N s (BATON_TEST_DEADLINE_S); aborting
// on stderr and aborts the process, which fails the test binary naming the
// test. N is BATON_TEST_DEADLINE_S (whole seconds, > 0; default 300); an
// unparsable value is reported and the default is used.
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"

namespace {

constexpr long kDefaultDeadlineS = 300;

long DeadlineSeconds() {
  const char* env = std::getenv("BATON_TEST_DEADLINE_S");
  if (env == nullptr || *env == '\0') return kDefaultDeadlineS;
  char* end = nullptr;
  const long v = std::strtol(env, &end, 10);
  if (end == env || *end != '\0' || v <= 0) {
    std::fprintf(stderr,
                 "BATON_TEST_DEADLINE_S=%s is not a positive whole number of "
                 "seconds; using %ld\n",
                 env, kDefaultDeadlineS);
    return kDefaultDeadlineS;
  }
  return v;
}

// Process-lifetime state (never destroyed: the watchdog thread may outlive
// main's locals and gtest's listeners).
struct WatchState {
  std::mutex mu;
  std::condition_variable cv;
  std::string test;  // empty: between test cases
  std::chrono::steady_clock::time_point start;
  uint64_t generation = 0;
};

WatchState& State() {
  static WatchState* s = new WatchState;
  return *s;
}

class DeadlineListener : public ::testing::EmptyTestEventListener {
 public:
  void OnTestStart(const ::testing::TestInfo& info) override {
    WatchState& s = State();
    std::lock_guard<std::mutex> lock(s.mu);
    s.test = std::string(info.test_suite_name()) + "." + info.name();
    s.start = std::chrono::steady_clock::now();
    ++s.generation;
    s.cv.notify_all();
  }
  void OnTestEnd(const ::testing::TestInfo&) override {
    WatchState& s = State();
    std::lock_guard<std::mutex> lock(s.mu);
    s.test.clear();
    ++s.generation;
  }
};

void Watch(long deadline_s) {
  WatchState& s = State();
  const auto deadline = std::chrono::seconds(deadline_s);
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    if (s.test.empty()) {
      s.cv.wait(lock, [&] { return !s.test.empty(); });
      continue;
    }
    const uint64_t gen = s.generation;
    const auto due = s.start + deadline;
    s.cv.wait_until(lock, due, [&] { return s.generation != gen; });
    if (s.generation == gen && std::chrono::steady_clock::now() >= due) {
      std::fprintf(stderr,
                   "\n[ DEADLINE ] %s ran past %ld s "
                   "(BATON_TEST_DEADLINE_S); aborting\n",
                   s.test.c_str(), deadline_s);
      std::fflush(stderr);
      std::abort();
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const long deadline_s = DeadlineSeconds();
  ::testing::UnitTest::GetInstance()->listeners().Append(new DeadlineListener);
  std::thread(Watch, deadline_s).detach();
  return RUN_ALL_TESTS();
}
