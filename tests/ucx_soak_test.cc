// Soak (issue 16): 200 steps of train_tiny with the ucx backend over 4
// processes, on the smallest test model. Every step's loss must be finite,
// the run must learn, and it must end on its own (bounded by --timeout per
// collective and the test's size limit). Prints its wall time.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace {

TEST(UcxSoakTest, TwoHundredStepsOfTrainTinyOverFourProcesses) {
  const std::string cmd =
      "examples/train_tiny --model=micro --seq=32 --batch=1 --steps=200 "
      "--backend=ucx --nranks=4 --timeout=60 --json 2>&1";
  const absl::Time t0 = absl::Now();
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  const absl::Duration took = absl::Now() - t0;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  std::vector<std::string> lines = absl::StrSplit(out, '\n', absl::SkipEmpty());
  ASSERT_FALSE(lines.empty());
  const nlohmann::json j =
      nlohmann::json::parse(lines.back(), nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["nranks"], 4);
  EXPECT_EQ(j["backend"], "ucx");
  const auto losses = j["losses"].get<std::vector<double>>();
  ASSERT_EQ(losses.size(), 200u);
  for (size_t i = 0; i < losses.size(); ++i) {
    ASSERT_TRUE(std::isfinite(losses[i])) << "step " << i + 1;
  }
  EXPECT_LT(losses.back(), 0.7 * losses.front());
  std::printf("ucx soak: 200 steps x 4 processes in %s (%.2f ms/step)\n",
              absl::FormatDuration(took).c_str(),
              j["ms_per_step"].get<double>());
}

}  // namespace
