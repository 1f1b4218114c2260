// Command-line plumbing shared by the programs (examples/ and bench/): flags are
// --name=value (or a bare --switch), bad input is one line
// "<program>: <what is wrong>" on stderr and exit code 2.
//
// Rules every program gets from FlagReader: a flag given twice is an error
// naming it (never "the last one wins"); --name= with an empty value is an
// error; integers are parsed as int64 and checked against the flag's
// documented range before any narrowing; numbers must be finite and in
// range; a comma list may not hold empty items.
#ifndef BATON_CLI_FLAGS_H_
#define BATON_CLI_FLAGS_H_

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/runtime/version.h"

namespace baton::cli {

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

// `value` as an integer in [lo, hi]; fails naming the flag and the range
// (so "1e12", "99999999999" for an int-sized flag, or "-1" are refused,
// never wrapped or clamped).
inline int64_t IntFlag(const char* program, const std::string& flag,
                       const std::string& value, int64_t lo, int64_t hi) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < lo || v > hi) {
    FailUsage(program, absl::StrCat(flag, " needs an integer in [", lo, ", ", hi,
                                    "], got \"", value, "\""));
  }
  return v;
}

// IntFlag in [1, hi]: "needs a positive integer" for zero, negatives and
// non-integers, the range for values past `hi`.
inline int64_t PositiveFlag(const char* program, const std::string& flag,
                            const std::string& value, int64_t hi) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v <= 0) {
    FailUsage(program, absl::StrCat(flag, " needs a positive integer, got \"", value, "\""));
  }
  return IntFlag(program, flag, value, 1, hi);
}

// `value` as a finite number in [lo, hi]; fails naming the flag otherwise
// (nan, inf and out-of-range values included).
inline double NumberFlag(const char* program, const std::string& flag,
                         const std::string& value, double lo, double hi) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < lo || v > hi) {
    FailUsage(program, absl::StrCat(flag, " needs a number in [", lo, ", ", hi,
                                    "], got \"", value, "\""));
  }
  return v;
}

// "a,b,c" -> {"a", "b", "c"}; fails naming the flag for an empty item
// ("a,,b", ",", "a,").
inline std::vector<std::string> ListFlag(const char* program, const std::string& flag,
                                         const std::string& value) {
  std::vector<std::string> items = absl::StrSplit(value, ',');
  for (const std::string& item : items) {
    if (item.empty()) {
      FailUsage(program, absl::StrCat(flag, " has an empty item in \"", value,
                                      "\" (a comma-separated list)"));
    }
  }
  return items;
}

// Reads argv one argument at a time, remembering which flags it has seen.
// Not thread-safe; one per Parse.
class FlagReader {
 public:
  explicit FlagReader(const char* program) : program_(program) {}

  // "--name=value" -> {"--name", "value"}. Fails for an argument of another
  // form, an empty value, or a flag already given.
  std::pair<std::string, std::string> Split(const std::string& arg) {
    const auto eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      FailUsage(program_, absl::StrCat("unknown argument \"", arg,
                                       "\" (flags are --name=value; see --help)"));
    }
    std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (value.empty()) FailUsage(program_, absl::StrCat(key, " needs a value"));
    Once(key);
    return {std::move(key), std::move(value)};
  }

  // Records a bare switch (e.g. "--json"); fails if already given.
  void Switch(const std::string& arg) { Once(arg); }

 private:
  void Once(const std::string& key) {
    if (!seen_.insert(key).second) {
      FailUsage(program_, absl::StrCat(key, " is given more than once"));
    }
  }

  const char* program_;
  std::set<std::string> seen_;
};

}  // namespace baton::cli

#endif  // BATON_CLI_FLAGS_H_
