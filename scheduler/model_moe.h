// The mixture-of-experts and multi-head-latent-attention parts of
// scheduler/model.h, for model.cc: the presets, the Hugging Face families,
// the blocks' parameters and their counts. Not a public header: callers use
// scheduler/model.h.
//
// Plain functions; thread-safe.
#ifndef BATON_SCHEDULER_MODEL_MOE_H_
#define BATON_SCHEDULER_MODEL_MOE_H_

#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/model.h"
#include "nlohmann/json.hpp"

namespace baton::scheduler::internal {

// Whether the spec needs the general block (experts, MLA or qk_norm)
// rather than the Llama block.
inline bool GeneralBlock(const ModelSpec& s) {
  return s.moe.enabled() || s.mla.enabled() || s.qk_norm;
}

// The MoE and MLA fields' checks of ValidateModelSpec (sizes already in
// range); InvalidArgument naming the field.
Status ValidateMoeAndMla(const ModelSpec& spec);

// The MoE presets (model.h); nullopt for another name.
std::optional<ModelSpec> MoePreset(absl::string_view name);
std::vector<std::string> MoePresetNames();

// Whether `arch` (an architectures entry) or `model_type` names a family
// MoeFromHfConfig reads.
bool IsMoeArchitecture(absl::string_view arch);
bool IsMoeModelType(absl::string_view model_type);

// Reads the MoE / MLA fields of the family named by `family` (an
// architecture or model_type that IsMoe* accepted) into `spec`, whose Llama
// fields are already read; InvalidArgument naming a field.
Status ReadMoeHfFields(const nlohmann::json& j, absl::string_view family, ModelSpec& spec);

// Block `b`'s parameters in the order of model.h (general block).
void AddGeneralBlockParams(const ModelSpec& spec, int64_t b, UnitSpec& unit);

// Block `b`'s parameter count (active: routed experts counted top_k times;
// experts_only: the routed experts alone), in 128-bit arithmetic (every
// size is at most 2^24, so no product overflows).
__int128 BlockParams(const ModelSpec& spec, int64_t b, bool active, bool experts_only = false);

// Block `b`'s forward FLOPs per token at sequence `seq` (general block).
double GeneralBlockForwardFlopsPerToken(const ModelSpec& spec, int64_t seq, int64_t b);

}  // namespace baton::scheduler::internal

#endif  // BATON_SCHEDULER_MODEL_MOE_H_
