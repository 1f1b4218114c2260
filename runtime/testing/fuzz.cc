#include "baton/runtime/testing/fuzz.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace baton::testing {
namespace {

// Tokens that reach the corners of a JSON or text parser.
constexpr const char* kTokens[] = {
    "[", "]", "{", "}", "\"", ",", ":", "null", "true", "-", "0", "-1",
    "1e308", "1e-300", "-1e308", "nan", "inf", "NaN", "Infinity",
    "4294967304", "9223372036854775807", "18446744073709551616",
    "99999999999999999999999", "0.5", "\"x\"", "[[[[[[[[", "]]]]]]]]",
    "{\"a\":{\"a\":{\"a\":", "\\u0000", "\\ud800", "\xff", "\n", " ",
    "\"size\"", "\"out_of_place\"", "\"busbw_gbps\"", "\"results\"",
    "\"hidden_size\"", "\"num_attention_heads\"", "\"gpus_per_node\"",
    "\"nic_gbps\"", "# Collective test starting: all_gather_perf\n",
};

}  // namespace

uint64_t TestSeed() {
  uint64_t seed = 20261124;
  if (const char* env = std::getenv("BATON_TEST_SEED"); env != nullptr) {
    if (!absl::SimpleAtoi(env, &seed)) {
      ADD_FAILURE() << "BATON_TEST_SEED=\"" << env << "\" is not a decimal number";
    }
  }
  std::printf("fuzz seed %llu (set BATON_TEST_SEED to replay)\n",
              static_cast<unsigned long long>(seed));
  return seed;
}

std::string Mutator::Mutate(const std::string& input, const std::string& other) {
  std::string s = input;
  const int edits = 1 + static_cast<int>(Below(8));
  for (int e = 0; e < edits; ++e) {
    const size_t at = Below(s.size() + 1);
    switch (Below(6)) {
      case 0:  // flip a byte
        if (!s.empty()) s[Below(s.size())] ^= static_cast<char>(1u << Below(8));
        break;
      case 1:  // delete a span
        if (!s.empty()) s.erase(Below(s.size()), 1 + Below(16));
        break;
      case 2: {  // duplicate a span
        if (s.empty()) break;
        const size_t from = Below(s.size());
        s.insert(at, s.substr(from, 1 + Below(32)));
        break;
      }
      case 3: {  // splice in part of another input
        if (other.empty()) break;
        const size_t from = Below(other.size());
        s.insert(at, other.substr(from, 1 + Below(64)));
        break;
      }
      case 4: {  // replace a run of digits (a number) with a token
        const size_t d = s.find_first_of("0123456789", Below(s.size() + 1));
        if (d == std::string::npos) break;
        const size_t end = s.find_first_not_of("0123456789.eE+-", d);
        s.replace(d, (end == std::string::npos ? s.size() : end) - d,
                  kTokens[Below(sizeof kTokens / sizeof kTokens[0])]);
        break;
      }
      default:  // insert a token
        s.insert(at, kTokens[Below(sizeof kTokens / sizeof kTokens[0])]);
    }
  }
  return s;
}

FuzzStats FuzzFor(const std::vector<std::string>& corpus, absl::Duration budget,
                  const std::function<Status(const std::string&)>& target,
                  int64_t min_runs) {
  const uint64_t seed = TestSeed();
  Mutator m(seed);
  FuzzStats stats;
  auto run = [&](const std::string& input, int64_t iteration) {
    const Status s = target(input);
    ++stats.runs;
    if (s.ok()) {
      ++stats.ok;
    } else if (s.code() == absl::StatusCode::kInvalidArgument) {
      ++stats.refused;
    } else {
      ADD_FAILURE() << "seed " << seed << " iteration " << iteration
                    << ": unexpected status " << s << " for input:\n"
                    << input.substr(0, 2000);
    }
  };
  for (const std::string& c : corpus) run(c, -1);
  const absl::Time end = absl::Now() + budget;
  for (int64_t i = 0; i < min_runs || absl::Now() < end; ++i) {
    const std::string& base = corpus[m.Below(corpus.size())];
    const std::string& other = corpus[m.Below(corpus.size())];
    // Half the time mutate a mutant: errors several edits deep.
    std::string input = m.Mutate(base, other);
    if (i % 2 == 1) input = m.Mutate(input, other);
    run(input, i);
    if (::testing::Test::HasFailure()) break;
  }
  std::printf("fuzz: %lld runs, %lld ok, %lld refused\n",
              static_cast<long long>(stats.runs), static_cast<long long>(stats.ok),
              static_cast<long long>(stats.refused));
  return stats;
}

}  // namespace baton::testing
