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
#include "baton/runtime/status.h"
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

// The parsers below come in two forms: Parse* returns InvalidArgument with
// the one-line message (for callers that report errors themselves, e.g. the
// Python module), and *Flag prints "<program>: <message>" and exits 2.

// `value` as an integer in [lo, hi]; the message names the flag and the
// range (so "1e12", "99999999999" for an int-sized flag, or "-1" are
// refused, never wrapped or clamped).
[[nodiscard]] inline StatusOr<int64_t> ParseInt(const std::string& flag,
                                                const std::string& value, int64_t lo,
                                                int64_t hi) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " needs an integer in [", lo, ", ",
                                                   hi, "], got \"", value, "\""));
  }
  return v;
}

// ParseInt in [1, hi]: "needs a positive integer" for zero, negatives and
// non-integers, the range for values past `hi`.
[[nodiscard]] inline StatusOr<int64_t> ParsePositive(const std::string& flag,
                                                     const std::string& value, int64_t hi) {
  int64_t v = 0;
  if (!absl::SimpleAtoi(value, &v) || v <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " needs a positive integer, got \"", value, "\""));
  }
  return ParseInt(flag, value, 1, hi);
}

// `value` as a finite number in [lo, hi] (nan, inf and out-of-range values
// refused, naming the flag).
[[nodiscard]] inline StatusOr<double> ParseNumber(const std::string& flag,
                                                  const std::string& value, double lo,
                                                  double hi) {
  double v = 0;
  if (!absl::SimpleAtod(value, &v) || !std::isfinite(v) || v < lo || v > hi) {
    return absl::InvalidArgumentError(absl::StrCat(flag, " needs a number in [", lo, ", ", hi,
                                                   "], got \"", value, "\""));
  }
  return v;
}

// "a,b,c" -> {"a", "b", "c"}; refuses an empty item ("a,,b", ",", "a,").
[[nodiscard]] inline StatusOr<std::vector<std::string>> ParseList(const std::string& flag,
                                                                  const std::string& value) {
  std::vector<std::string> items = absl::StrSplit(value, ',');
  for (const std::string& item : items) {
    if (item.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          flag, " has an empty item in \"", value, "\" (a comma-separated list)"));
    }
  }
  return items;
}

template <typename T>
T ValueOrFail(const char* program, StatusOr<T> v) {
  if (!v.ok()) FailUsage(program, std::string(v.status().message()));
  return *std::move(v);
}

inline int64_t IntFlag(const char* program, const std::string& flag,
                       const std::string& value, int64_t lo, int64_t hi) {
  return ValueOrFail(program, ParseInt(flag, value, lo, hi));
}

inline int64_t PositiveFlag(const char* program, const std::string& flag,
                            const std::string& value, int64_t hi) {
  return ValueOrFail(program, ParsePositive(flag, value, hi));
}

inline double NumberFlag(const char* program, const std::string& flag,
                         const std::string& value, double lo, double hi) {
  return ValueOrFail(program, ParseNumber(flag, value, lo, hi));
}

inline std::vector<std::string> ListFlag(const char* program, const std::string& flag,
                                         const std::string& value) {
  return ValueOrFail(program, ParseList(flag, value));
}

// Reads argv one argument at a time, remembering which flags it has seen.
// Not thread-safe; one per Parse. `program` must outlive it.
class FlagReader {
 public:
  explicit FlagReader(const char* program) : program_(program) {}

  // "--name=value" -> {"--name", "value"}. Refuses an argument of another
  // form, an empty value, or a flag already given.
  [[nodiscard]] StatusOr<std::pair<std::string, std::string>> TrySplit(const std::string& arg) {
    const auto eq = arg.find('=');
    if (arg.rfind("--", 0) != 0 || eq == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown argument \"", arg, "\" (flags are --name=value; see --help)"));
    }
    std::string key = arg.substr(0, eq), value = arg.substr(eq + 1);
    if (value.empty()) return absl::InvalidArgumentError(absl::StrCat(key, " needs a value"));
    if (Status s = TrySwitch(key); !s.ok()) return s;
    return std::make_pair(std::move(key), std::move(value));
  }

  // Records a bare switch (e.g. "--json"); refuses one already given.
  [[nodiscard]] Status TrySwitch(const std::string& key) {
    if (!seen_.insert(key).second) {
      return absl::InvalidArgumentError(absl::StrCat(key, " is given more than once"));
    }
    return absl::OkStatus();
  }

  // TrySplit / TrySwitch, exiting 2 on a refusal.
  std::pair<std::string, std::string> Split(const std::string& arg) {
    return ValueOrFail(program_, TrySplit(arg));
  }
  void Switch(const std::string& arg) {
    if (Status s = TrySwitch(arg); !s.ok()) FailUsage(program_, std::string(s.message()));
  }

 private:
  const char* program_;
  std::set<std::string> seen_;
};

}  // namespace baton::cli

#endif  // BATON_CLI_FLAGS_H_
