#include "baton/runtime/output_file.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

std::string TempDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d != nullptr ? d : "/tmp";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(OutputFileTest, WritesAndReplacesAFile) {
  const std::string path = TempDir() + "/output_file_test.json";
  ASSERT_TRUE(WriteOutputFile(path, "first, longer text\n", "the trace").ok());
  ASSERT_TRUE(WriteOutputFile(path, "{}\n", "the trace").ok());
  EXPECT_EQ(Slurp(path), "{}\n");
  ASSERT_TRUE(WriteOutputFile(path, "", "the trace").ok());
  EXPECT_EQ(Slurp(path), "");
}

TEST(OutputFileTest, AFullDeviceIsAnErrorNamingTheOutput) {
  // Small and large texts: one stays in the buffer until the flush, the
  // other fails at the write itself.
  for (size_t bytes : {size_t{10}, size_t{1} << 20}) {
    const Status s = WriteOutputFile("/dev/full", std::string(bytes, 'x'),
                                     "policy file");
    EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << bytes;
    EXPECT_EQ(s.message(),
              "cannot write policy file /dev/full: No space left on device")
        << bytes;
  }
}

TEST(OutputFileTest, AnUnopenablePathIsAnError) {
  const Status s =
      WriteOutputFile(TempDir() + "/no/such/dir/x.svg", "<svg/>", "the SVG");
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_NE(s.message().find("cannot write the SVG "), std::string::npos) << s;
  EXPECT_NE(s.message().find("No such file or directory"), std::string::npos) << s;
  const Status dir = WriteOutputFile(TempDir(), "x", "the trace");
  EXPECT_NE(dir.message().find("Is a directory"), std::string::npos) << dir;
}

// The exit code and stderr of `child` (which must end the process) run in
// a forked process. (Not a gtest death test: its stderr must be free of
// anything else, and under the sanitizers a forked child may print their
// notes at exit.)
struct Ended {
  int code = -1;
  std::string err;
};
template <typename F>
Ended RunChild(F child) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return {};
  std::fflush(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pipe_fds[0]);
    ::dup2(pipe_fds[1], 2);
    child();
    ::_exit(99);  // child() must exit
  }
  ::close(pipe_fds[1]);
  Ended e;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pipe_fds[0], buf, sizeof(buf))) > 0) e.err.append(buf, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  e.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return e;
}

// In the child: stdout pointed at `path`, the exit check installed, `text`
// printed through stdio and iostream, then exit(code).
void PrintAndExit(const char* path, const std::string& text, int code) {
  const int fd = ::open(path, O_WRONLY);
  if (fd < 0 || ::dup2(fd, 1) < 0) std::abort();
  CheckStdoutAtExit("tool");
  std::printf("%s", text.c_str());
  std::cout << text;
  std::exit(code);
}

// The lines of `err` that say "cannot write".
std::vector<std::string> Complaints(const std::string& err) {
  std::vector<std::string> out;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.find("cannot write") != std::string::npos) out.push_back(line);
  }
  return out;
}

TEST(OutputFileExitTest, StdoutOnAFullDeviceFailsTheExit) {
  Ended e = RunChild([] { PrintAndExit("/dev/full", "a table\n", 0); });
  EXPECT_EQ(e.code, kOutputErrorExitCode) << e.err;
  EXPECT_EQ(Complaints(e.err),
            std::vector<std::string>{"tool: cannot write standard output: No space left on device"});
  // Past the stdio buffer: the write itself fails before the exit (its
  // errno is gone by then).
  e = RunChild([] { PrintAndExit("/dev/full", std::string(1 << 20, 'x'), 0); });
  EXPECT_EQ(e.code, kOutputErrorExitCode) << e.err;
  EXPECT_EQ(Complaints(e.err),
            std::vector<std::string>{"tool: cannot write standard output: an earlier write failed"});
  // An exit that already failed still says why the output is missing.
  e = RunChild([] { PrintAndExit("/dev/full", "x", 3); });
  EXPECT_EQ(e.code, kOutputErrorExitCode) << e.err;
  EXPECT_EQ(Complaints(e.err).size(), 1u) << e.err;
}

TEST(OutputFileExitTest, AWritableStdoutKeepsTheExitCode) {
  Ended e = RunChild([] { PrintAndExit("/dev/null", std::string(1 << 20, 'x'), 0); });
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(Complaints(e.err).empty()) << e.err;
  e = RunChild([] { PrintAndExit("/dev/null", "x", 3); });
  EXPECT_EQ(e.code, 3) << e.err;
  EXPECT_TRUE(Complaints(e.err).empty()) << e.err;
}

TEST(OutputFileExitTest, AClosedStdoutWithNothingWrittenIsNoError) {
  const Ended e = RunChild([] {
    ::close(1);
    CheckStdoutAtExit("tool");
    std::exit(0);
  });
  EXPECT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(Complaints(e.err).empty()) << e.err;
}

}  // namespace
}  // namespace baton
