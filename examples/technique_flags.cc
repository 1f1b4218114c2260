#include "baton/examples/technique_flags.h"

#include "absl/strings/str_cat.h"
#include "baton/cli/flags.h"

namespace baton::examples {
namespace {

template <class T>
T OrFail(const char* program, const std::string& flag, const StatusOr<T>& v) {
  if (!v.ok()) cli::FailUsage(program, absl::StrCat(flag, ": ", v.status().message()));
  return *v;
}

}  // namespace

bool TechniqueFlags::Parse(const std::string& key, const std::string& v) {
  if (key == "--optimizer") {
    optimizer = OrFail(program_, key, scheduler::ParseOptimizer(v));
  } else if (key == "--recompute") {
    recompute = OrFail(program_, key, scheduler::ParseRecompute(v));
  } else if (!adapters_ && (key == "--lora-rank" || key == "--lora-alpha" ||
                             key == "--lora-targets" || key == "--base-dtype")) {
    cli::FailUsage(program_, absl::StrCat(key, ": this program's model has no LoRA or NF4 "
                                          "kernels (simulate prices them)"));
  } else if (key == "--lora-rank") {
    lora_rank = static_cast<int>(
        cli::PositiveFlag(program_, key, v, scheduler::kMaxLoraRank));
  } else if (key == "--lora-alpha") {
    lora_alpha = cli::NumberFlag(program_, key, v, 1e-6, 1e6);
  } else if (key == "--lora-targets") {
    lora_targets = OrFail(program_, key, scheduler::ParseLoraTargets(v));
  } else if (key == "--base-dtype") {
    base_dtype = OrFail(program_, key, scheduler::ParseBaseDtype(v));
  } else if (key == "--offload") {
    offload = OrFail(program_, key, scheduler::ParseOffload(v));
  } else {
    return false;
  }
  return true;
}

void TechniqueFlags::Check() const {
  if (lora_rank) return;
  if (base_dtype == scheduler::BaseDtype::kNf4) {
    cli::FailUsage(program_, "--base-dtype=nf4 freezes the base weights in 4 bits, so it "
                             "cannot be trained: give --lora-rank=N (the adapters train)");
  }
  if (lora_alpha || lora_targets) {
    cli::FailUsage(program_, "--lora-alpha and --lora-targets need --lora-rank=N");
  }
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
