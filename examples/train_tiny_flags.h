// train_tiny's command line: its flags, their bounds and the refusals of
// what does not run together, one line each (cli/flags.h: usage errors
// print "train_tiny: <message>" and exit 2). examples/train_tiny.cc runs
// what they describe.
#ifndef BATON_EXAMPLES_TRAIN_TINY_FLAGS_H_
#define BATON_EXAMPLES_TRAIN_TINY_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "baton/examples/technique_flags.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"

namespace baton::train_tiny {

struct Flags {
  std::string model = "tiny", hf_config;
  bool model_given = false;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0;
  int64_t seq = 128, batch = 2, micro_steps = 0, steps = 20;
  double lr = 1e-3;
  uint64_t seed = 1;
  std::string policy = "baton", backend = "inproc", device = "cpu", dtype = "f32";
  int nranks = 0;  // 0: 1 for inproc, WORLD_SIZE under a launcher
  std::string data;
  bool check_reference = false, json = false;
  int64_t timeout_s = 300;
  // --policy-file (scheduler/policy_file.h), read by Parse.
  std::string policy_file;
  std::optional<scheduler::Policy> file_policy;
  bool policy_given = false, dtype_given = false;
  std::string trace;  // --trace=PATH
  examples::TechniqueFlags tech{"train_tiny", /*adapters=*/true};  // --optimizer, ...
  int64_t recompute_layers = -2;  // --recompute-layers: -1 all, -2 the policy's
  bool check_schedule = false;  // --check-schedule
  bool arrivals = false;        // --arrivals (or --arrivals-out)
  std::string arrivals_out;     // --arrivals-out=PATH
  // Checkpoints: --save-dir, --save-every, --resume.
  std::string save_dir, resume;
  int64_t save_every = 0;
  int pp = 1;  // --pp: pipeline stages
  int vpp = 1;  // --vpp: model chunks per stage (interleaved)
  int tp = 1;  // --tp: tensor ranks
  bool sp = false;  // --sp: sequence parallelism
  bool tp_overlap = false;  // --tp-overlap: the forward's all-reduces decomposed
  std::string pp_layers = "even";  // --pp-layers: even, flops or N,N,...
  scheduler::PipelineSchedule pp_schedule = scheduler::PipelineSchedule::k1F1B;
  bool pp_gather_micro = false;  // --pp-gather=micro: Policy::gather_per_micro_batch
  // --sim-calibration: files pricing the simulator's tensor exposure
  // (simulate --calibration's: busbw tables, a kernel table).
  std::vector<std::string> sim_calibration;
};

// Prints "train_tiny: <message>" on stderr and exits 2.
[[noreturn]] void Fail(const std::string& message);

// The command line, checked: each bad value or refused combination is
// one line through Fail; --help prints the usage and exits 0.
Flags Parse(int argc, char** argv);

// The model of --model / --hf-config with the size flags applied,
// validated (ValidateModelSpec, an even head_dim, at most 2^31
// parameters).
scheduler::ModelSpec ModelFromFlags(const Flags& f);

// The policy of --policy / --policy-file with --dtype, --micro-steps, the
// techniques' flags and the parallel dimensions applied, validated.
scheduler::Policy PolicyFromFlags(const Flags& f);

}  // namespace baton::train_tiny

#endif  // BATON_EXAMPLES_TRAIN_TINY_FLAGS_H_
