#include "baton/scheduler/limits.h"

#include <sched.h>

#include <string>

#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

int Cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  return CPU_COUNT(&set);
}

TEST(LimitsTest, LocalRanksFollowTheCpusThisProcessMayUse) {
  const int64_t want = std::min<int64_t>(kMaxLocalRanks, kLocalRanksPerCpu * Cpus());
  EXPECT_EQ(MaxLocalRanks(), want);
  EXPECT_TRUE(CheckLocalRanks(1, "--nranks").ok());
  EXPECT_TRUE(CheckLocalRanks(want, "--nranks").ok());
  const Status over = CheckLocalRanks(want + 1, "--nranks");
  EXPECT_EQ(over.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(over.message().rfind("--nranks asks for " + std::to_string(want + 1) +
                                     " ranks on this host; it runs at most " +
                                     std::to_string(want) + " at once (16 per CPU, ",
                                 0),
            0u)
      << over;
  EXPECT_FALSE(CheckLocalRanks(kMaxLocalRanks + 1, "x").ok());

  // One CPU allowed: 16 ranks.
  cpu_set_t saved, one;
  ASSERT_EQ(::sched_getaffinity(0, sizeof(saved), &saved), 0);
  CPU_ZERO(&one);
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &saved)) {
      CPU_SET(c, &one);
      break;
    }
  }
  ASSERT_EQ(::sched_setaffinity(0, sizeof(one), &one), 0);
  EXPECT_EQ(MaxLocalRanks(), kLocalRanksPerCpu);
  EXPECT_NE(CheckLocalRanks(17, "--nranks").message().find("(16 per CPU, 1 CPU;"),
            std::string::npos);
  ASSERT_EQ(::sched_setaffinity(0, sizeof(saved), &saved), 0);
}

TEST(LimitsTest, RecomputeBlocksAreBoundedByTheModel) {
  EXPECT_TRUE(CheckRecomputeBlocks(-1, 2, "x").ok());
  EXPECT_TRUE(CheckRecomputeBlocks(2, 2, "x").ok());
  EXPECT_EQ(CheckRecomputeBlocks(3, 2, "policy file p.json: field \"recompute_blocks\"")
                .message(),
            "policy file p.json: field \"recompute_blocks\" = 3 is more than the model's "
            "2 blocks");
  EXPECT_EQ(CheckRecomputeBlocks(-2, 2, "r").message(), "r = -2 is out of range");
}

TEST(LimitsTest, StepUnitsSaturateAndAreBounded) {
  EXPECT_EQ(StepUnits(4, 1), 16);
  EXPECT_EQ(StepUnits(INT64_MAX / 2, 10), INT64_MAX);
  EXPECT_EQ(StepUnits(1, INT64_MAX), INT64_MAX);
  EXPECT_TRUE(CheckStepUnits(kMaxStepUnits / 4, 1).ok());
  const Status s = CheckStepUnits(kMaxStepUnits / 4 + 1, 1);
  EXPECT_EQ(s.message(),
            "the step would run 8193 micro-steps of 4 units (32772); the limit is 32768 "
            "unit-micro-steps");
}

TEST(LimitsTest, RangeNamesTheValueAndTheBounds) {
  EXPECT_TRUE(CheckRange(4096, 1, kMaxMicroSteps, "m").ok());
  EXPECT_EQ(CheckRange(4097, 1, kMaxMicroSteps, "policy p: micro_steps").message(),
            "policy p: micro_steps = 4097 is outside [1, 4096]");
  EXPECT_FALSE(CheckRange(0, 1, 2, "m").ok());
}

}  // namespace
}  // namespace baton::scheduler
