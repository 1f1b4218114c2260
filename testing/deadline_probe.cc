// Driven by test_main_test.sh: checks that the test main's deadline names
// the test that hangs.
#include <chrono>
#include <thread>

#include "gtest/gtest.h"

TEST(Probe, Passes) { EXPECT_EQ(1 + 1, 2); }

TEST(Probe, SleepsPastTheDeadline) {
  std::this_thread::sleep_for(std::chrono::seconds(5));
}
