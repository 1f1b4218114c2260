// Command-line plumbing shared by the example programs: flags are
// --name=value (or a bare --switch), bad input is one line
// "<program>: <what is wrong>" on stderr and exit code 2.
#ifndef BATON_EXAMPLES_CLI_H_
#define BATON_EXAMPLES_CLI_H_

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "baton/runtime/version.h"

namespace baton::examples {

[[noreturn]] inline void FailUsage(const char* program, const std::string& message) {
  std::fprintf(stderr, "%s: %s\n", program, message.c_str());
  std::exit(2);
}

// "--version": prints "<program> (baton <version>)" and exits 0.
inline void VersionFlag(const char* program, const std::string& arg) {
  if (arg != "--version") return;
  std::printf("%s (baton %s)\n", program, BATON_VERSION);
  std::exit(0);
}

inline int64_t PositiveFlag(const char* program, const std::string& flag,
                            const std::string& value) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v <= 0) {
    FailUsage(program, absl::StrCat(flag, " needs a positive integer, got \"", value, "\""));
  }
  return v;
}

// "--name=value" -> {"--name", "value"}; anything else fails naming it.
inline std::pair<std::string, std::string> SplitFlag(const char* program,
                                                     const std::string& arg) {
  const auto eq = arg.find('=');
  if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
    FailUsage(program, absl::StrCat("unknown argument \"", arg,
                                    "\" (flags are --name=value; see --help)"));
  }
  return {arg.substr(0, eq), arg.substr(eq + 1)};
}

}  // namespace baton::examples

#endif  // BATON_EXAMPLES_CLI_H_
