// ./bazelw run //examples:simulate -- --model=llama3-70b --cluster=h100
//     --gpus=128 --seq=8192 --global-batch=256
//
// Simulates one training step of a model on a cluster for one or more
// schedule policies, on the same StepGraph and memory plan the executor
// runs (see sim/simulator.h for the model). Prints one table; --json adds a
// last line with one JSON object; --trace / --svg write pictures of the
// first policy's step. --policy-file runs a policy file
// (scheduler/policy_file.h); --tune searches the knobs (sim/tune.h) and
// --policy-out writes the best as a policy file. Bad input: one line on
// stderr and exit code 2. The work is RunSimulate (examples/simulate_run.h),
// which the Python module calls too.
#include <cstdio>
#include <string>
#include <vector>

#include "baton/cli/flags.h"
#include "baton/examples/simulate_run.h"
#include "baton/runtime/output_file.h"

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit("simulate");
  auto run = baton::RunSimulate(std::vector<std::string>(argv + 1, argv + argc));
  if (!run.ok()) baton::cli::FailUsage("simulate", std::string(run.status().message()));
  std::fputs(run->text.c_str(), stdout);
  return 0;
}
