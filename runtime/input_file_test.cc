#include "baton/runtime/input_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "gtest/gtest.h"

namespace baton {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

TEST(InputFileTest, ReadsARegularFile) {
  const std::string path = TempDir() + "/input_file_test.txt";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("{\"a\": 1}", f);
  std::fclose(f);
  auto text = ReadInputFile(path, "config", 100);
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(*text, "{\"a\": 1}");
  auto big = ReadInputFile(path, "config", 4);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("over the limit of 4"), std::string::npos);
}

TEST(InputFileTest, DirectoriesFifosAndMissingPathsAreRefused) {
  auto dir = ReadInputFile(TempDir(), "--data", 100);
  ASSERT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos)
      << dir.status();
  const std::string fifo = TempDir() + "/input_file_test.fifo";
  ::unlink(fifo.c_str());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto pipe = ReadInputFile(fifo, "--data", 100);  // must not block
  EXPECT_EQ(pipe.status().code(), absl::StatusCode::kInvalidArgument);
  auto missing = ReadInputFile("/nonexistent/x", "--data", 100);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("cannot read --data /nonexistent/x"),
            std::string::npos);
}

}  // namespace
}  // namespace baton
