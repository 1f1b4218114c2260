#include "baton/scheduler/limits.h"

#include <string>

#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

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
