// The memory-saving techniques as command-line flags, shared by simulate
// and train_tiny: each applies to the policy the program runs (preset or
// policy file), on top of its knobs.
//
//   --optimizer=adamw|adamw8bit        Policy::optimizer
//   --recompute=full|selective          Policy::recompute
//   --lora-rank=N                       LoRA adapters of rank N >= 1 (the
//                                       base frozen); omit for none
//   --lora-alpha=A                      (> 0; default 16)
//   --lora-targets=q,k,v,o,gate,up,down (default all)
//   --base-dtype=param|nf4              frozen base weights as NF4
//   --offload=none|optimizer|params     Policy::offload
//
// Bad values are refused naming the flag: an unknown name, a rank of 0, an
// unknown target, NF4 or alpha / targets without --lora-rank. TryParse /
// TryCheck return the one-line message as InvalidArgument (simulate's
// RunSimulate, which exits nowhere); Parse / Check print it after
// "<program>: " and exit 2, as the programs' other flags do (train_tiny). A program whose model has no
// adapter or NF4 kernels constructs it with adapters = false (simulate and
// train_tiny both have them): the LoRA and --base-dtype flags are then
// refused with that reason, and Usage leaves them out.
#ifndef BATON_EXAMPLES_TECHNIQUE_FLAGS_H_
#define BATON_EXAMPLES_TECHNIQUE_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "baton/runtime/status.h"
#include "baton/scheduler/policy.h"

namespace baton::examples {

class TechniqueFlags {
 public:
  TechniqueFlags(const char* program, bool adapters)
      : program_(program), adapters_(adapters) {}

  // Consumes --key=value if it is one of the flags above: true, or the
  // refusal of a bad value; false for any other key.
  [[nodiscard]] StatusOr<bool> TryParse(const std::string& key, const std::string& value);
  // After parsing: refuses flags that need another (NF4, alpha or targets
  // without a rank).
  [[nodiscard]] Status TryCheck() const;
  // TryParse / TryCheck, exiting 2 on a refusal.
  bool Parse(const std::string& key, const std::string& value);
  void Check() const;
  // Whether any of them was given.
  bool any() const;
  // The flags given, applied to `policy`.
  void Apply(scheduler::Policy& policy) const;
  // The usage lines of the flags this program accepts.
  const char* Usage() const;

  std::optional<scheduler::OptimizerKind> optimizer;
  std::optional<scheduler::Recompute> recompute;
  std::optional<int> lora_rank;
  std::optional<double> lora_alpha;
  std::optional<uint32_t> lora_targets;
  std::optional<scheduler::BaseDtype> base_dtype;
  std::optional<scheduler::Offload> offload;

 private:
  const char* program_;
  bool adapters_;
};

}  // namespace baton::examples

#endif  // BATON_EXAMPLES_TECHNIQUE_FLAGS_H_
