// Fuzz (seeded random mutation, fixed time budget): PolicyFromJson on
// mutated policy files returns OK or InvalidArgument, never crashes, throws
// or hangs; an accepted policy passes ValidatePolicy and survives a write
// and a read unchanged.
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "baton/runtime/testing/fuzz.h"
#include "baton/scheduler/policy_file.h"
#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

TEST(PolicyFileFuzzTest, MutatedFilesAreAcceptedOrRefused) {
  Policy merged = *PolicyPreset("zero3");
  merged.name = "tuned";
  merged.shard_group = 8;
  merged.micro_steps = 4;
  merged.reduce_dtype = DataType::kBF16;
  const std::vector<std::string> corpus = {
      PolicyToJson(*PolicyPreset("baton")),
      PolicyToJson(merged),
      R"({"preset": "hsdp", "shard_group": 8, "forward_prefetch": 2})",
      R"({"preset": "zeropp", "name": "x", "param_dtype": "half",
          "bucket_policy": "per_unit", "recompute_blocks": -1})",
      R"({})",
  };
  const auto stats = baton::testing::FuzzFor(
      corpus, absl::Seconds(3), [](const std::string& text) -> Status {
        auto p = PolicyFromJson(text);
        if (!p.ok()) return p.status();
        EXPECT_TRUE(ValidatePolicy(*p).ok()) << text;
        auto back = PolicyFromJson(PolicyToJson(*p));
        EXPECT_TRUE(back.ok() && SamePolicy(*p, *back)) << text;
        return absl::OkStatus();
      });
  EXPECT_GT(stats.ok, 0);
  EXPECT_GT(stats.refused, 0);
}

}  // namespace
}  // namespace baton::scheduler
