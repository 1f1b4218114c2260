#include "baton/examples/final_params.h"

#include <cmath>

#include "gtest/gtest.h"

namespace baton::examples {
namespace {

TEST(FinalParamsTest, PiecesMergeIntoWholeParameters) {
  // Two ranks' shards of "a" (5 elements) and one rank's whole "b".
  const std::vector<std::vector<ParamPiece>> ranks = {
      {{"a", 5, 0, {1, 2, 3}}, {"b", 2, 0, {7, 8}}},
      {{"a", 5, 3, {4, 5}}},
  };
  auto whole = MergeParamPieces(ranks);
  ASSERT_TRUE(whole.ok()) << whole.status();
  EXPECT_EQ(whole->at("a"), (std::vector<float>{1, 2, 3, 4, 5}));
  EXPECT_EQ(whole->at("b"), (std::vector<float>{7, 8}));
  // An element nobody holds is an error naming the parameter.
  auto gap = MergeParamPieces({{{"a", 5, 0, {1, 2, 3}}}});
  EXPECT_EQ(gap.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(gap.status().message().find("all of a"), std::string::npos);
}

TEST(FinalParamsTest, DifferenceIsTheLargestRelativeL2) {
  const WholeParams ref = {{"a", {3, 4}}, {"b", {1, 0}}};
  EXPECT_EQ(*MaxParamDifference(ref, ref), 0);
  // a off by (0.3, 0.4): 0.5 / 5 = 0.1; b off by 0.05: 0.05.
  const WholeParams run = {{"a", {3.3f, 4.4f}}, {"b", {1.05f, 0}}};
  EXPECT_NEAR(*MaxParamDifference(run, ref), 0.1, 1e-6);
  EXPECT_EQ(MaxParamDifference({{"a", {3, 4}}}, ref).status().code(),
            absl::StatusCode::kInternal);
  EXPECT_EQ(MaxParamDifference({{"a", {3}}, {"b", {1, 0}}}, ref).status().code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace baton::examples
