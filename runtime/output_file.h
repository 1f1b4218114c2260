// Writing a program's outputs so that a failed write is never silent: a
// full disk, a read-only path, /dev/full or a closed descriptor ends in an
// error naming the output, not in an exit code of 0 and an empty file.
//
// WriteOutputFile writes a whole file (created or truncated) and checks
// every step: open, write, flush and close (a full disk often shows only at
// the flush or the close). On failure the file may hold part of `text`.
//
// CloseStdout flushes std::cout and stdout, checks both for an earlier
// write error, and closes stdout (its close reports what the flush could
// not). After it, nothing may be written to stdout.
//
// CheckStdoutAtExit is for a program's main only: it registers (once) an
// atexit handler that runs CloseStdout when the program returns from main
// or calls exit(); on failure it prints one line
//   "<program>: cannot write standard output: <reason>"
// on stderr and ends the process with kOutputErrorExitCode, whatever code
// it was exiting with. Call it first thing in main, before anything is
// printed.
//
// WriteOutputFile and CloseStdout are thread-safe as stdio is; CloseStdout
// must run once, after every thread that prints has finished.
#ifndef BATON_RUNTIME_OUTPUT_FILE_H_
#define BATON_RUNTIME_OUTPUT_FILE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"

namespace baton {

// The exit code of a program whose output could not be written (the same
// as for bad input: the output named is unusable).
inline constexpr int kOutputErrorExitCode = 2;

// Unavailable "cannot write <what> <path>: <reason>" when any step fails.
[[nodiscard]] Status WriteOutputFile(const std::string& path,
                                     absl::string_view text,
                                     absl::string_view what);

// Unavailable "cannot write standard output: <reason>" when a write to
// std::cout or stdout failed, or their flush or close fails.
[[nodiscard]] Status CloseStdout();

// See above. `program` must outlive the process (a string literal).
void CheckStdoutAtExit(const char* program);

}  // namespace baton

#endif  // BATON_RUNTIME_OUTPUT_FILE_H_
