// The simulate program as a function: the command-line flags of
// `simulate` (see SimulateUsage) in, the report it prints and its JSON out.
// Both the program (examples/simulate.cc) and the Python module
// (python/module.cc, baton.simulate and baton.tune) call it, so the two give
// the same numbers and refuse the same inputs with the same messages.
//
// Failure: InvalidArgument (or the reader's NotFound / Unavailable for a file)
// whose message is the one line the program prints after "simulate: ".
// Nothing exits the process. Thread-safety: independent calls may run
// concurrently (no shared state besides the files named by the flags).
#ifndef BATON_EXAMPLES_SIMULATE_RUN_H_
#define BATON_EXAMPLES_SIMULATE_RUN_H_

#include <string>
#include <vector>

#include "baton/runtime/status.h"

namespace baton {

// The --help text.
[[nodiscard]] std::string SimulateUsage();

struct SimulateRun {
  // What the program prints on stdout (the table, or --help / --version;
  // with --json the JSON object is its last line).
  std::string text;
  // The JSON object of the run (what --json prints), whether or not --json
  // was given; empty for --help and --version.
  std::string json;
};

// `args`: the program's arguments without argv[0], e.g. {"--gpus=64"}.
// Writes the files named by --trace, --svg and --policy-out.
[[nodiscard]] StatusOr<SimulateRun> RunSimulate(const std::vector<std::string>& args);

}  // namespace baton

#endif  // BATON_EXAMPLES_SIMULATE_RUN_H_
