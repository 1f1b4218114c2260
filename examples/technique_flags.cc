#include "baton/examples/technique_flags.h"

#include "absl/strings/str_cat.h"
#include "baton/cli/flags.h"
#include "baton/scheduler/limits.h"

namespace baton::examples {
namespace {

// `v`, or its refusal prefixed with the flag's name.
template <class T>
StatusOr<T> Named(const std::string& flag, StatusOr<T> v) {
  if (!v.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(flag, ": ", v.status().message()));
  }
  return v;
}

}  // namespace

StatusOr<bool> TechniqueFlags::TryParse(const std::string& key, const std::string& v) {
  if (key == "--optimizer") {
    BATON_ASSIGN_OR_RETURN(optimizer, Named(key, scheduler::ParseOptimizer(v)));
  } else if (key == "--recompute") {
    BATON_ASSIGN_OR_RETURN(recompute, Named(key, scheduler::ParseRecompute(v)));
  } else if (!adapters_ && (key == "--lora-rank" || key == "--lora-alpha" ||
                             key == "--lora-targets" || key == "--base-dtype")) {
    return absl::InvalidArgumentError(absl::StrCat(
        key, ": this program's model has no LoRA or NF4 kernels (simulate prices them)"));
  } else if (key == "--lora-rank") {
    BATON_ASSIGN_OR_RETURN(const int64_t rank,
                           cli::ParsePositive(key, v, scheduler::kMaxLoraRank));
    lora_rank = static_cast<int>(rank);
  } else if (key == "--lora-alpha") {
    BATON_ASSIGN_OR_RETURN(lora_alpha, cli::ParseNumber(key, v, 1e-6, 1e6));
  } else if (key == "--lora-targets") {
    BATON_ASSIGN_OR_RETURN(lora_targets, Named(key, scheduler::ParseLoraTargets(v)));
  } else if (key == "--base-dtype") {
    BATON_ASSIGN_OR_RETURN(base_dtype, Named(key, scheduler::ParseBaseDtype(v)));
  } else if (key == "--offload") {
    BATON_ASSIGN_OR_RETURN(offload, Named(key, scheduler::ParseOffload(v)));
  } else {
    return false;
  }
  return true;
}

Status TechniqueFlags::TryCheck() const {
  if (lora_rank) return absl::OkStatus();
  if (base_dtype == scheduler::BaseDtype::kNf4) {
    return absl::InvalidArgumentError(
        "--base-dtype=nf4 freezes the base weights in 4 bits, so it cannot be trained: "
        "give --lora-rank=N (the adapters train)");
  }
  if (lora_alpha || lora_targets) {
    return absl::InvalidArgumentError("--lora-alpha and --lora-targets need --lora-rank=N");
  }
  return absl::OkStatus();
}

bool TechniqueFlags::Parse(const std::string& key, const std::string& value) {
  return cli::ValueOrFail(program_, TryParse(key, value));
}

void TechniqueFlags::Check() const {
  if (Status s = TryCheck(); !s.ok()) cli::FailUsage(program_, std::string(s.message()));
}

bool TechniqueFlags::any() const {
  return optimizer || recompute || lora_rank || lora_alpha || lora_targets || base_dtype ||
         offload;
}

void TechniqueFlags::Apply(scheduler::Policy& p) const {
  if (optimizer) p.optimizer = *optimizer;
  if (recompute) p.recompute = *recompute;
  if (lora_rank) p.layout.lora_rank = *lora_rank;
  if (lora_alpha) p.layout.lora_alpha = *lora_alpha;
  if (lora_targets) p.layout.lora_targets = *lora_targets;
  if (base_dtype) p.layout.base_dtype = *base_dtype;
  if (offload) p.offload = *offload;
}
const char* TechniqueFlags::Usage() const {
  if (!adapters_) {
    return "  [--optimizer=adamw|adamw8bit] (adamw8bit: both Adam moments in 8 bits,\n"
           "   block-wise)  [--recompute=full|selective] (what a recomputed block\n"
           "   runs again: all of it, or its attention core)\n"
           "  [--offload=none|optimizer|params] (master and moments on the host)\n";
  }
  return "  [--optimizer=adamw|adamw8bit] (adamw8bit: both Adam moments in 8 bits,\n"
         "   block-wise)  [--recompute=full|selective] (what a recomputed block\n"
         "   runs again: all of it, or its attention core)\n"
         "  [--lora-rank=N [--lora-alpha=16] [--lora-targets=q,k,v,o,gate,up,down]]\n"
         "   (LoRA adapters, the base frozen)  [--base-dtype=param|nf4] (frozen base\n"
         "   weights in 4-bit NF4, gathered packed; needs --lora-rank)\n"
         "  [--offload=none|optimizer|params] (master and moments on the host;\n"
         "   params: frozen base weights too, copied in per gather)\n";
}

}  // namespace baton::examples
