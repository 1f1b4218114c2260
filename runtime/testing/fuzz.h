// A seeded random-mutation fuzz harness for gtest, for parsers of user
// input (config.json, cluster files, calibrations, ...).
//
// FuzzFor mutates the inputs of a seed corpus (byte flips, deletions,
// duplications, splices of two inputs, and insertions of tokens that
// parsers trip over: brackets, quotes, huge or non-finite numbers, nulls)
// and calls `target` on each mutant until `budget` has passed. The target
// returns the parser's Status; anything other than OK or InvalidArgument
// fails the test with the input's seed and iteration, and a crash, an
// escaped exception or a hang fails the test binary itself. The run is
// deterministic for a given seed: TestSeed() reads BATON_TEST_SEED when set
// (decimal), else uses a fixed default, and prints it so a failure can be
// replayed with the same number of iterations.
//
// For tests only; not thread-safe.
#ifndef BATON_RUNTIME_TESTING_FUZZ_H_
#define BATON_RUNTIME_TESTING_FUZZ_H_

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "baton/runtime/status.h"

namespace baton::testing {

// BATON_TEST_SEED when set to a decimal number, else 20261124.
uint64_t TestSeed();

class Mutator {
 public:
  explicit Mutator(uint64_t seed) : rng_(seed) {}
  // One to eight random edits of `input`; `other` is a splice source.
  std::string Mutate(const std::string& input, const std::string& other);
  // Uniform in [0, n); 0 for n == 0.
  size_t Below(size_t n) { return n == 0 ? 0 : rng_() % n; }

 private:
  std::mt19937_64 rng_;
};

struct FuzzStats {
  int64_t runs = 0;
  int64_t ok = 0;        // target returned OK
  int64_t refused = 0;   // target returned InvalidArgument
};

// Runs `target` on the corpus itself, then on mutants until `budget`
// passes (at least `min_runs` mutants). Adds a gtest failure for any other
// status code.
FuzzStats FuzzFor(const std::vector<std::string>& corpus, absl::Duration budget,
                  const std::function<Status(const std::string&)>& target,
                  int64_t min_runs = 200);

}  // namespace baton::testing

#endif  // BATON_RUNTIME_TESTING_FUZZ_H_
