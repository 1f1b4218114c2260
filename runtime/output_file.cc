#include "baton/runtime/output_file.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>

#include "absl/strings/str_cat.h"

namespace baton {
namespace {

std::string Reason(int err) {
  return err != 0 ? std::strerror(err) : "a write failed";
}

const char* g_program = nullptr;  // set once by CheckStdoutAtExit

void StdoutAtExit() {
  const Status s = CloseStdout();
  if (s.ok()) return;
  std::fprintf(stderr, "%s: %s\n", g_program, std::string(s.message()).c_str());
  std::fflush(stderr);
  ::_exit(kOutputErrorExitCode);
}

}  // namespace

Status WriteOutputFile(const std::string& path, absl::string_view text,
                       absl::string_view what) {
  auto fail = [&](int err) {
    return absl::UnavailableError(
        absl::StrCat("cannot write ", what, " ", path, ": ", Reason(err)));
  };
  std::FILE* f = std::fopen(path.c_str(), "we");
  if (f == nullptr) return fail(errno);
  int err = 0;
  if (std::fwrite(text.data(), 1, text.size(), f) != text.size()) err = errno;
  if (err == 0 && std::fflush(f) != 0) err = errno;
  const bool bad = std::ferror(f) != 0;
  if (std::fclose(f) != 0 && err == 0) err = errno;
  if (err != 0 || bad) return fail(err);
  return absl::OkStatus();
}

Status CloseStdout() {
  // stdout first: with iostreams synced to stdio (the default) std::cout's
  // flush is stdout's, and a second flush after a failed one has nothing
  // left to report.
  int err = 0;
  if (std::fflush(stdout) != 0) err = errno;
  std::cout.flush();
  const bool bad = std::ferror(stdout) != 0 || std::cout.fail();
  // A closed descriptor with nothing left to write is no failure (the
  // program printed nothing: `prog >&-`).
  if (std::fclose(stdout) != 0 && err == 0 && errno != EBADF) err = errno;
  if (err != 0 || bad) {
    return absl::UnavailableError(absl::StrCat(
        "cannot write standard output: ",
        err != 0 ? std::strerror(err) : "an earlier write failed"));
  }
  return absl::OkStatus();
}

void CheckStdoutAtExit(const char* program) {
  static std::atomic<bool> registered{false};
  if (registered.exchange(true)) return;
  g_program = program;
  std::atexit(StdoutAtExit);
}

}  // namespace baton
