// Mixtures of experts and multi-head latent attention in the model spec
// (scheduler/model.h, scheduler/model_moe.h).
#include "baton/scheduler/model_moe.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "baton/runtime/json_input.h"
#include "baton/scheduler/limits.h"

namespace baton::scheduler::internal {
namespace {

struct MoePresetRow {
  const char* name;
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab;
  double norm_eps, rope_theta;
  bool qk_norm;
  MoeSpec moe;
  MlaSpec mla;
};

// The published config.json of each model (Hugging Face model cards:
// mistralai/Mixtral-8x7B-v0.1, mistralai/Mixtral-8x22B-v0.1,
// Qwen/Qwen3-30B-A3B, Qwen/Qwen3-235B-A22B, deepseek-ai/DeepSeek-V3; the
// last also in deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json).
// MoeSpec: experts, top_k, expert width, shared experts, their width, first
// dense blocks, router, groups, groups per token, shared gate.
const MoePresetRow kMoePresets[] = {
    {"mixtral-8x7b", 4096, 14336, 32, 32, 8, 128, 32000, 1e-5, 1e6, false,
     {8, 2, 14336, 0, 0, 0, MoeRouter::kSoftmax, 0, 0, false}, {}},
    {"mixtral-8x22b", 6144, 16384, 56, 48, 8, 128, 32000, 1e-5, 1e6, false,
     {8, 2, 16384, 0, 0, 0, MoeRouter::kSoftmax, 0, 0, false}, {}},
    {"qwen3-30b-a3b", 2048, 6144, 48, 32, 4, 128, 151936, 1e-6, 1e6, true,
     {128, 8, 768, 0, 0, 0, MoeRouter::kSoftmax, 0, 0, false}, {}},
    {"qwen3-235b-a22b", 4096, 12288, 94, 64, 4, 128, 151936, 1e-6, 1e6, true,
     {128, 8, 1536, 0, 0, 0, MoeRouter::kSoftmax, 0, 0, false}, {}},
    {"deepseek-v3", 7168, 18432, 61, 128, 128, 192, 129280, 1e-6, 10000, false,
     {256, 8, 2048, 1, 2048, 3, MoeRouter::kSigmoid, 8, 4, false},
     {1536, 512, 128, 64, 128}},
};

// An optional integer field in [lo, hi]; absent or null keeps `value`.
Status OptInt(const nlohmann::json& j, const char* field, int64_t lo, int64_t hi,
              int64_t& value) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  BATON_ASSIGN_OR_RETURN(value,
                         JsonInt(*it, absl::StrCat("config.json: field \"", field, "\""), lo, hi));
  return absl::OkStatus();
}

Status ReqInt(const nlohmann::json& j, const char* field, int64_t lo, int64_t hi,
              int64_t& value) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    return absl::InvalidArgumentError(
        absl::StrCat("config.json: missing required field \"", field, "\""));
  }
  return OptInt(j, field, lo, hi, value);
}

// Qwen's decoder_sparse_step / mlp_only_layers and DeepSeek's
// moe_layer_freq: only every block (from the first MoE one) being MoE is
// modelled.
Status EveryBlockMoe(const nlohmann::json& j, const char* step_field) {
  int64_t step = 1;
  BATON_RETURN_IF_ERROR(OptInt(j, step_field, 1, kMaxModelLayers, step));
  if (step != 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: field \"", step_field, "\" = ", step,
        ": only every block being a mixture of experts (1) is modelled"));
  }
  if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
    if (!it->is_array() || !it->empty()) {
      return absl::InvalidArgumentError(
          "config.json: field \"mlp_only_layers\" must be empty: dense blocks among the "
          "MoE blocks are not modelled");
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::optional<ModelSpec> MoePreset(absl::string_view name) {
  for (const MoePresetRow& p : kMoePresets) {
    if (name != p.name) continue;
    ModelSpec s;
    s.name = p.name;
    s.hidden = p.hidden;
    s.intermediate = p.intermediate;
    s.layers = p.layers;
    s.heads = p.heads;
    s.kv_heads = p.kv_heads;
    s.head_dim = p.head_dim;
    s.vocab = p.vocab;
    s.norm_eps = p.norm_eps;
    s.rope_theta = p.rope_theta;
    s.qk_norm = p.qk_norm;
    s.moe = p.moe;
    s.mla = p.mla;
    return s;
  }
  return std::nullopt;
}

std::vector<std::string> MoePresetNames() {
  std::vector<std::string> names;
  for (const MoePresetRow& p : kMoePresets) names.emplace_back(p.name);
  return names;
}

Status ValidateMoeAndMla(const ModelSpec& s) {
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("model ", s.name, ": ", parts...));
  };
  const MoeSpec& m = s.moe;
  const std::pair<const char*, int64_t> sizes[] = {
      {"experts", m.experts},
      {"top_k", m.top_k},
      {"expert_intermediate", m.expert_intermediate},
      {"shared_experts", m.shared_experts},
      {"shared_intermediate", m.shared_intermediate},
      {"first_dense_layers", m.first_dense_layers},
      {"groups", m.groups},
      {"topk_groups", m.topk_groups},
      {"q_lora_rank", s.mla.q_lora_rank},
      {"kv_lora_rank", s.mla.kv_lora_rank},
      {"qk_nope_head_dim", s.mla.qk_nope_head_dim},
      {"qk_rope_head_dim", s.mla.qk_rope_head_dim},
      {"v_head_dim", s.mla.v_head_dim}};
  for (const auto& [field, v] : sizes) {
    if (v < 0 || v > kMaxModelDim) {
      return bad(field, " = ", v, " must be in [0, ", kMaxModelDim, "]");
    }
  }
  if (!m.enabled()) {
    if (m.top_k != 0 || m.shared_experts != 0 || m.first_dense_layers != 0) {
      return bad("top_k, shared experts and first dense layers need routed experts (experts = 0)");
    }
  } else {
    if (m.top_k < 1 || m.top_k > m.experts) {
      return bad("moe top_k = ", m.top_k, " must be in [1, ", m.experts,
                 "] (the routed experts)");
    }
    if (m.expert_intermediate < 1) return bad("expert_intermediate must be positive");
    if ((m.shared_experts > 0) != (m.shared_intermediate > 0)) {
      return bad("shared_experts = ", m.shared_experts, " with shared_intermediate = ",
                 m.shared_intermediate, ": give both or neither");
    }
    if (m.shared_gate && m.shared_experts == 0) return bad("a shared gate needs a shared expert");
    if (m.first_dense_layers >= s.layers) {
      return bad("first_dense_layers = ", m.first_dense_layers,
                 " leaves no mixture-of-experts block of ", s.layers);
    }
    if (m.groups > 0 || m.topk_groups > 0) {
      if (m.groups < 1 || m.experts % m.groups != 0) {
        return bad("expert groups = ", m.groups, " must divide the ", m.experts, " experts");
      }
      if (m.topk_groups < 1 || m.topk_groups > m.groups) {
        return bad("topk_groups = ", m.topk_groups, " must be in [1, ", m.groups, "]");
      }
      if (m.top_k > m.topk_groups * (m.experts / m.groups)) {
        return bad("moe top_k = ", m.top_k, " is more than the ",
                   m.topk_groups * (m.experts / m.groups), " experts of ", m.topk_groups,
                   " groups");
      }
    }
  }
  const MlaSpec& a = s.mla;
  if (a.enabled()) {
    if (a.qk_nope_head_dim + a.qk_rope_head_dim != s.head_dim) {
      return bad("MLA: qk_nope_head_dim + qk_rope_head_dim = ",
                 a.qk_nope_head_dim + a.qk_rope_head_dim, " must equal head_dim = ", s.head_dim);
    }
    if (a.v_head_dim < 1) return bad("MLA: v_head_dim must be positive");
  } else if (a.q_lora_rank != 0 || a.v_head_dim != 0) {
    return bad("q_lora_rank and v_head_dim need kv_lora_rank (multi-head latent attention)");
  }
  return absl::OkStatus();
}

bool IsMoeArchitecture(absl::string_view a) {
  return a == "MixtralForCausalLM" || a == "Qwen2MoeForCausalLM" || a == "Qwen3MoeForCausalLM" ||
         a == "DeepseekV2ForCausalLM" || a == "DeepseekV3ForCausalLM";
}

bool IsMoeModelType(absl::string_view t) {
  return t == "mixtral" || t == "qwen2_moe" || t == "qwen3_moe" || t == "deepseek_v2" ||
         t == "deepseek_v3";
}

Status ReadMoeHfFields(const nlohmann::json& j, absl::string_view family, ModelSpec& s) {
  MoeSpec& m = s.moe;
  const int64_t dim = kMaxModelDim;
  if (family == "MixtralForCausalLM" || family == "mixtral") {
    BATON_RETURN_IF_ERROR(ReqInt(j, "num_local_experts", 1, dim, m.experts));
    BATON_RETURN_IF_ERROR(ReqInt(j, "num_experts_per_tok", 1, dim, m.top_k));
    m.expert_intermediate = s.intermediate;
    return absl::OkStatus();
  }
  if (family == "Qwen2MoeForCausalLM" || family == "Qwen3MoeForCausalLM" ||
      family == "qwen2_moe" || family == "qwen3_moe") {
    BATON_RETURN_IF_ERROR(ReqInt(j, "num_experts", 1, dim, m.experts));
    BATON_RETURN_IF_ERROR(ReqInt(j, "num_experts_per_tok", 1, dim, m.top_k));
    BATON_RETURN_IF_ERROR(ReqInt(j, "moe_intermediate_size", 1, dim, m.expert_intermediate));
    BATON_RETURN_IF_ERROR(EveryBlockMoe(j, "decoder_sparse_step"));
    int64_t shared = 0;
    BATON_RETURN_IF_ERROR(OptInt(j, "shared_expert_intermediate_size", 0, dim, shared));
    if (shared > 0) {  // Qwen2-MoE: one shared expert behind a sigmoid gate
      m.shared_experts = 1;
      m.shared_intermediate = shared;
      m.shared_gate = true;
    }
    s.qk_norm = family == "Qwen3MoeForCausalLM" || family == "qwen3_moe";
    return absl::OkStatus();
  }
  // DeepSeek-V2 / V3.
  const bool v3 = family == "DeepseekV3ForCausalLM" || family == "deepseek_v3";
  BATON_RETURN_IF_ERROR(ReqInt(j, "n_routed_experts", 1, dim, m.experts));
  BATON_RETURN_IF_ERROR(ReqInt(j, "num_experts_per_tok", 1, dim, m.top_k));
  BATON_RETURN_IF_ERROR(ReqInt(j, "moe_intermediate_size", 1, dim, m.expert_intermediate));
  BATON_RETURN_IF_ERROR(OptInt(j, "n_shared_experts", 0, dim, m.shared_experts));
  if (m.shared_experts > 0) m.shared_intermediate = m.expert_intermediate;
  BATON_RETURN_IF_ERROR(OptInt(j, "first_k_dense_replace", 0, kMaxModelLayers,
                               m.first_dense_layers));
  BATON_RETURN_IF_ERROR(EveryBlockMoe(j, "moe_layer_freq"));
  std::string scoring = v3 ? "sigmoid" : "softmax";
  if (auto it = j.find("scoring_func"); it != j.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "softmax" && *it != "sigmoid")) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config.json: field \"scoring_func\" must be \"softmax\" or \"sigmoid\", got ",
          JsonBrief(*it)));
    }
    scoring = it->get<std::string>();
  }
  m.router = scoring == "sigmoid" ? MoeRouter::kSigmoid : MoeRouter::kSoftmax;
  // Group-limited routing: topk_method "group_limited_greedy" (V2) or
  // "noaux_tc" (V3) with n_group / topk_group; "greedy" (V2-Lite) has none.
  std::string method;
  if (auto it = j.find("topk_method"); it != j.end() && it->is_string()) method = *it;
  if (method != "greedy") {
    BATON_RETURN_IF_ERROR(OptInt(j, "n_group", 1, dim, m.groups));
    BATON_RETURN_IF_ERROR(OptInt(j, "topk_group", 1, dim, m.topk_groups));
    if (m.groups <= 1) m.groups = m.topk_groups = 0;  // one group: no limit
  }
  MlaSpec& a = s.mla;
  BATON_RETURN_IF_ERROR(OptInt(j, "q_lora_rank", 1, dim, a.q_lora_rank));
  BATON_RETURN_IF_ERROR(ReqInt(j, "kv_lora_rank", 1, dim, a.kv_lora_rank));
  BATON_RETURN_IF_ERROR(ReqInt(j, "qk_nope_head_dim", 1, dim, a.qk_nope_head_dim));
  BATON_RETURN_IF_ERROR(ReqInt(j, "qk_rope_head_dim", 1, dim, a.qk_rope_head_dim));
  BATON_RETURN_IF_ERROR(ReqInt(j, "v_head_dim", 1, dim, a.v_head_dim));
  s.head_dim = a.qk_nope_head_dim + a.qk_rope_head_dim;
  return absl::OkStatus();
}

namespace {

ParamSpec Param(const std::string& unit, const char* name, std::vector<int64_t> shape) {
  ParamSpec p;
  p.name = absl::StrCat(unit, ".", name);
  p.numel = 1;
  for (int64_t d : shape) p.numel *= d;
  p.small = shape.size() == 1;
  p.shape = std::move(shape);
  return p;
}

}  // namespace

void AddGeneralBlockParams(const ModelSpec& s, int64_t b, UnitSpec& u) {
  const int64_t h = s.hidden, d = s.head_dim, H = s.heads;
  auto add = [&](const char* name, std::vector<int64_t> shape) {
    u.params.push_back(Param(u.name, name, std::move(shape)));
  };
  add("attn_norm.weight", {h});
  if (s.mla.enabled()) {
    const MlaSpec& a = s.mla;
    if (a.q_lora_rank > 0) {
      add("wq_a", {a.q_lora_rank, h});
      add("q_a_norm.weight", {a.q_lora_rank});
      add("wq_b", {H * d, a.q_lora_rank});
    } else {
      add("wq", {H * d, h});
    }
    add("wkv_a", {a.kv_lora_rank + a.qk_rope_head_dim, h});
    add("kv_a_norm.weight", {a.kv_lora_rank});
    add("wkv_b", {H * (a.qk_nope_head_dim + a.v_head_dim), a.kv_lora_rank});
    add("wo", {h, H * a.v_head_dim});
  } else {
    add("wq", {H * d, h});
    add("wk", {s.kv_heads * d, h});
    add("wv", {s.kv_heads * d, h});
    add("wo", {h, H * d});
    if (s.qk_norm) {
      add("q_norm.weight", {d});
      add("k_norm.weight", {d});
    }
  }
  add("mlp_norm.weight", {h});
  if (!s.moe_block(b)) {
    add("w_gate", {s.intermediate, h});
    add("w_up", {s.intermediate, h});
    add("w_down", {h, s.intermediate});
    return;
  }
  const MoeSpec& m = s.moe;
  add("router.weight", {m.experts, h});
  add("experts.w_gate", {m.experts, m.expert_intermediate, h});
  add("experts.w_up", {m.experts, m.expert_intermediate, h});
  add("experts.w_down", {m.experts, h, m.expert_intermediate});
  if (m.shared_experts > 0) {
    const int64_t fs = m.shared_experts * m.shared_intermediate;
    add("shared.w_gate", {fs, h});
    add("shared.w_up", {fs, h});
    add("shared.w_down", {h, fs});
    if (m.shared_gate) add("shared_gate.weight", {1, h});
  }
}

namespace {

// Matrix parameters of the block's attention (active = all).
__int128 AttentionMatrices(const ModelSpec& s) {
  using I = __int128;
  const I h = s.hidden, d = s.head_dim, H = s.heads;
  if (!s.mla.enabled()) return 2 * H * d * h + 2 * I{s.kv_heads} * d * h;
  const MlaSpec& a = s.mla;
  I q = a.q_lora_rank > 0 ? I{a.q_lora_rank} * h + H * d * a.q_lora_rank : H * d * h;
  return q + I{a.kv_lora_rank + a.qk_rope_head_dim} * h +
         H * (a.qk_nope_head_dim + a.v_head_dim) * a.kv_lora_rank + h * H * a.v_head_dim;
}

// The block's matrix parameters one token uses (active) or all of them.
__int128 MlpMatrices(const ModelSpec& s, int64_t b, bool active) {
  using I = __int128;
  const I h = s.hidden;
  if (!s.moe_block(b)) return 3 * I{s.intermediate} * h;
  const MoeSpec& m = s.moe;
  const I routed = active ? m.top_k : m.experts;
  I n = I{m.experts} * h + routed * 3 * m.expert_intermediate * h;
  n += 3 * I{m.shared_experts} * m.shared_intermediate * h + (m.shared_gate ? h : 0);
  return n;
}

}  // namespace

__int128 BlockParams(const ModelSpec& s, int64_t b, bool active, bool experts_only) {
  using I = __int128;
  if (experts_only) {
    return s.moe_block(b) ? I{s.moe.experts} * 3 * s.moe.expert_intermediate * s.hidden : 0;
  }
  I norms = 2 * I{s.hidden};
  if (s.mla.enabled()) {
    norms += s.mla.kv_lora_rank + s.mla.q_lora_rank;  // q_a_norm only with q_lora_rank
  } else if (s.qk_norm) {
    norms += 2 * I{s.head_dim};
  }
  return norms + AttentionMatrices(s) + MlpMatrices(s, b, active);
}

double GeneralBlockForwardFlopsPerToken(const ModelSpec& s, int64_t seq, int64_t b) {
  const double v = s.mla.enabled() ? static_cast<double>(s.mla.v_head_dim)
                                   : static_cast<double>(s.head_dim);
  const double matrices = static_cast<double>(AttentionMatrices(s) + MlpMatrices(s, b, true));
  // Each multiply-add twice; QK^T and AV over the whole sequence (no causal
  // halving, as NVIDIA's formula).
  return 2 * matrices + 2.0 * static_cast<double>(seq) * s.heads * (s.head_dim + v);
}

}  // namespace baton::scheduler::internal
