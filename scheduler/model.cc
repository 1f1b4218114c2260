#include "baton/scheduler/model.h"

#include <cmath>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "baton/runtime/input_file.h"
#include "baton/runtime/json_input.h"
#include "baton/scheduler/model_moe.h"
#include "nlohmann/json.hpp"

namespace baton::scheduler {
namespace {

struct Preset {
  const char* name;
  int64_t hidden, intermediate, layers, heads, kv_heads, vocab;
  double norm_eps, rope_theta;
};

// Published configurations (Meta's params.json / Hugging Face config.json).
constexpr Preset kPresets[] = {
    {"llama2-7b", 4096, 11008, 32, 32, 32, 32000, 1e-5, 10000.0},
    {"llama2-13b", 5120, 13824, 40, 40, 40, 32000, 1e-5, 10000.0},
    {"llama2-34b", 8192, 22016, 48, 64, 8, 32000, 1e-5, 1000000.0},
    {"llama2-70b", 8192, 28672, 80, 64, 8, 32000, 1e-5, 10000.0},
    {"llama3-8b", 4096, 14336, 32, 32, 8, 128256, 1e-5, 500000.0},
    {"llama3-70b", 8192, 28672, 80, 64, 8, 128256, 1e-5, 500000.0},
    {"llama3-405b", 16384, 53248, 126, 128, 8, 128256, 1e-5, 500000.0},
    {"tiny", 256, 768, 4, 8, 2, 512, 1e-5, 10000.0},
    {"micro", 32, 64, 2, 4, 2, 64, 1e-5, 10000.0},
};

ParamSpec Param(const std::string& unit, const char* name,
                std::vector<int64_t> shape) {
  ParamSpec p;
  p.name = absl::StrCat(unit, ".", name);
  p.numel = 1;
  for (int64_t d : shape) p.numel *= d;
  p.small = shape.size() == 1;
  p.shape = std::move(shape);
  return p;
}

StatusOr<int64_t> GetInt(const nlohmann::json& j, const char* field,
                         bool required, int64_t fallback) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) {
    if (required) {
      return absl::InvalidArgumentError(
          absl::StrCat("config.json: missing required field \"", field, "\""));
    }
    return fallback;
  }
  return JsonInt(*it, absl::StrCat("config.json: field \"", field, "\""), 1,
                 std::string(field) == "num_hidden_layers" ? kMaxModelLayers
                                                           : kMaxModelDim);
}

// An optional finite number in [lo, hi]; absent or null keeps `value`.
Status GetNumber(const nlohmann::json& j, const char* field, double lo,
                 double hi, double& value) {
  auto it = j.find(field);
  if (it == j.end() || it->is_null()) return absl::OkStatus();
  BATON_ASSIGN_OR_RETURN(
      value, JsonNumber(*it, absl::StrCat("config.json: field \"", field, "\""),
                        lo, hi));
  return absl::OkStatus();
}

// a * b + c, or nullopt when it leaves [0, kMaxModelParameters].
std::optional<int64_t> MulAdd(int64_t a, int64_t b, int64_t c) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r) ||
      r < 0 || r > kMaxModelParameters) {
    return std::nullopt;
  }
  return r;
}

// The parameter count of a spec whose sizes are positive, computed with
// every step checked; nullopt past kMaxModelParameters.
std::optional<int64_t> GeneralParameterCount(const ModelSpec& s, bool active,
                                             bool experts_only = false) {
  __int128 total = experts_only ? 0 : __int128{s.hidden} * (s.tie_embeddings ? 1 : 2) * s.vocab +
                                          s.hidden;
  for (int64_t b = 0; b < s.layers; ++b) {
    total += internal::BlockParams(s, b, active, experts_only);
    if (total > kMaxModelParameters) return std::nullopt;
  }
  return static_cast<int64_t>(total);
}

std::optional<int64_t> CheckedParameterCount(const ModelSpec& s) {
  if (internal::GeneralBlock(s)) return GeneralParameterCount(s, false);
  const int64_t h = s.hidden, f = s.intermediate;
  std::optional<int64_t> q = MulAdd(s.heads, s.head_dim, 0);
  std::optional<int64_t> kv = MulAdd(s.kv_heads, s.head_dim, 0);
  if (!q || !kv) return std::nullopt;
  // A block: two norms, wq + wo (q x h each), wk + wv (kv x h each), three
  // MLP matrices (f x h each).
  std::optional<int64_t> block = MulAdd(2, h, 0);
  if (block) block = MulAdd(2 * *q, h, *block);      // 2q <= 2^49: no wrap
  if (block) block = MulAdd(2 * *kv, h, *block);
  if (block) block = MulAdd(3 * f, h, *block);       // f <= 2^24
  if (!block) return std::nullopt;
  std::optional<int64_t> total = MulAdd(s.layers, *block, h);  // + final norm
  const int64_t embeddings = s.tie_embeddings ? 1 : 2;
  if (total) total = MulAdd(embeddings * s.vocab, h, *total);
  return total;
}

}  // namespace

Status ValidateModelSpec(const ModelSpec& s) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"hidden", s.hidden},         {"intermediate", s.intermediate},
      {"layers", s.layers},         {"heads", s.heads},
      {"kv_heads", s.kv_heads},     {"head_dim", s.head_dim},
      {"vocab", s.vocab}};
  if (s.layers > kMaxModelLayers) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", s.name, ": layers = ", s.layers,
                     " is over the limit of ", kMaxModelLayers));
  }
  for (const auto& [field, value] : sizes) {
    if (value <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model ", s.name, ": ", field, " must be positive, got ", value));
    }
    if (value > kMaxModelDim) {
      return absl::InvalidArgumentError(
          absl::StrCat("model ", s.name, ": ", field, " = ", value,
                       " is over the limit of ", kMaxModelDim));
    }
  }
  if (s.heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", s.name, ": kv_heads (", s.kv_heads,
                     ") must divide heads (", s.heads, ")"));
  }
  if (!(s.norm_eps > 0) || !std::isfinite(s.norm_eps)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", s.name, ": norm_eps must be positive"));
  }
  if (!(s.rope_theta > 0) || !std::isfinite(s.rope_theta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("model ", s.name, ": rope_theta must be positive"));
  }
  BATON_RETURN_IF_ERROR(internal::ValidateMoeAndMla(s));
  // Every size is in [1, 2^24], so each product below fits; the sums are
  // checked as they go.
  if (!CheckedParameterCount(s).has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model ", s.name, ": more than ", kMaxModelParameters,
        " parameters (layers ", s.layers, ", hidden ", s.hidden,
        ", intermediate ", s.intermediate, ", vocab ", s.vocab, ")"));
  }
  return absl::OkStatus();
}

StatusOr<ModelSpec> ModelPreset(absl::string_view name) {
  for (const Preset& p : kPresets) {
    if (name == p.name) {
      ModelSpec s;
      s.name = p.name;
      s.hidden = p.hidden;
      s.intermediate = p.intermediate;
      s.layers = p.layers;
      s.heads = p.heads;
      s.kv_heads = p.kv_heads;
      s.head_dim = p.hidden / p.heads;
      s.vocab = p.vocab;
      s.norm_eps = p.norm_eps;
      s.rope_theta = p.rope_theta;
      return s;
    }
  }
  if (std::optional<ModelSpec> moe = internal::MoePreset(name)) return *moe;
  return absl::NotFoundError(absl::StrCat("unknown model \"", name,
                                          "\"; presets: ",
                                          absl::StrJoin(ModelPresetNames(), ", ")));
}

std::vector<std::string> ModelPresetNames() {
  std::vector<std::string> names;
  for (const Preset& p : kPresets) names.emplace_back(p.name);
  for (std::string& n : internal::MoePresetNames()) names.push_back(std::move(n));
  return names;
}

StatusOr<ModelSpec> ModelFromHfConfig(absl::string_view json_text,
                                      absl::string_view name) {
  BATON_ASSIGN_OR_RETURN(const nlohmann::json j,
                         ParseJsonInput(json_text, "config.json"));
  if (!j.is_object()) {
    return absl::InvalidArgumentError("config.json: not a JSON object");
  }
  bool llama = false;
  std::string moe_family;  // an architecture or model_type of model_moe.h
  std::string arch_seen = "(none)";
  if (auto it = j.find("architectures"); it != j.end() && it->is_array()) {
    std::vector<std::string> seen;
    for (const auto& a : *it) {
      if (seen.size() < 4) seen.push_back(JsonBrief(a));
      if (!a.is_string()) continue;
      const std::string arch = a.get<std::string>();
      if (arch == "LlamaForCausalLM") llama = true;
      if (internal::IsMoeArchitecture(arch)) moe_family = arch;
    }
    if (it->size() > seen.size()) seen.push_back("...");
    arch_seen = absl::StrCat("[", absl::StrJoin(seen, ", "), "]");
  } else if (auto mt = j.find("model_type"); mt != j.end() && mt->is_string()) {
    arch_seen = absl::StrCat("model_type ", JsonBrief(*mt));
    const std::string type = mt->get<std::string>();
    llama = type == "llama";
    if (internal::IsMoeModelType(type)) moe_family = type;
  }
  if (!llama && moe_family.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "config.json: unsupported architecture ", arch_seen,
        "; baton supports LlamaForCausalLM (model_type \"llama\"), MixtralForCausalLM, "
        "Qwen2MoeForCausalLM, Qwen3MoeForCausalLM, DeepseekV2ForCausalLM and "
        "DeepseekV3ForCausalLM"));
  }
  ModelSpec s;
  s.name = std::string(name);
  BATON_ASSIGN_OR_RETURN(s.hidden, GetInt(j, "hidden_size", true, 0));
  BATON_ASSIGN_OR_RETURN(s.intermediate,
                         GetInt(j, "intermediate_size", true, 0));
  BATON_ASSIGN_OR_RETURN(s.layers, GetInt(j, "num_hidden_layers", true, 0));
  BATON_ASSIGN_OR_RETURN(s.heads, GetInt(j, "num_attention_heads", true, 0));
  BATON_ASSIGN_OR_RETURN(s.vocab, GetInt(j, "vocab_size", true, 0));
  BATON_ASSIGN_OR_RETURN(s.kv_heads,
                         GetInt(j, "num_key_value_heads", false, s.heads));
  BATON_ASSIGN_OR_RETURN(s.head_dim,
                         GetInt(j, "head_dim", false, s.hidden / s.heads));
  if (auto it = j.find("tie_word_embeddings"); it != j.end()) {
    if (!it->is_boolean()) {
      return absl::InvalidArgumentError(
          "config.json: field \"tie_word_embeddings\" must be a boolean");
    }
    s.tie_embeddings = it->get<bool>();
  }
  BATON_RETURN_IF_ERROR(GetNumber(j, "rms_norm_eps", 1e-12, 1, s.norm_eps));
  BATON_RETURN_IF_ERROR(GetNumber(j, "rope_theta", 1, 1e12, s.rope_theta));
  if (!moe_family.empty()) {
    BATON_RETURN_IF_ERROR(internal::ReadMoeHfFields(j, moe_family, s));
  }
  BATON_RETURN_IF_ERROR(ValidateModelSpec(s));
  return s;
}

StatusOr<ModelSpec> ModelFromHfConfigFile(const std::string& path) {
  BATON_ASSIGN_OR_RETURN(const std::string text,
                         ReadInputFile(path, "config file", kMaxJsonInputBytes));
  std::string name = path;
  if (auto slash = name.find_last_of('/'); slash != std::string::npos) {
    name = name.substr(0, slash);
    if (auto s2 = name.find_last_of('/'); s2 != std::string::npos) {
      name = name.substr(s2 + 1);
    }
  }
  if (name.empty() || name == path) name = "hf";
  return ModelFromHfConfig(text, name);
}

const char* UnitKindName(UnitKind kind) {
  switch (kind) {
    case UnitKind::kEmbedding: return "embedding";
    case UnitKind::kBlock: return "block";
    case UnitKind::kFinalNorm: return "final_norm";
    case UnitKind::kLmHead: return "lm_head";
  }
  return "?";
}

int64_t UnitSpec::numel() const {
  int64_t n = 0;
  for (const ParamSpec& p : params) n += p.numel;
  return n;
}

std::vector<UnitSpec> BuildUnits(const ModelSpec& s) {
  std::vector<UnitSpec> units;
  const int64_t h = s.hidden, q = s.heads * s.head_dim,
                kv = s.kv_heads * s.head_dim, f = s.intermediate;
  UnitSpec emb{"embedding", UnitKind::kEmbedding, -1, {}};
  emb.params.push_back(Param(emb.name, "tok_embeddings.weight", {s.vocab, h}));
  units.push_back(std::move(emb));
  for (int64_t i = 0; i < s.layers; ++i) {
    UnitSpec b{absl::StrCat("block", i), UnitKind::kBlock,
               static_cast<int>(i), {}};
    if (internal::GeneralBlock(s)) {
      internal::AddGeneralBlockParams(s, i, b);
      units.push_back(std::move(b));
      continue;
    }
    b.params.push_back(Param(b.name, "attn_norm.weight", {h}));
    b.params.push_back(Param(b.name, "wq", {q, h}));
    b.params.push_back(Param(b.name, "wk", {kv, h}));
    b.params.push_back(Param(b.name, "wv", {kv, h}));
    b.params.push_back(Param(b.name, "wo", {h, q}));
    b.params.push_back(Param(b.name, "mlp_norm.weight", {h}));
    b.params.push_back(Param(b.name, "w_gate", {f, h}));
    b.params.push_back(Param(b.name, "w_up", {f, h}));
    b.params.push_back(Param(b.name, "w_down", {h, f}));
    units.push_back(std::move(b));
  }
  UnitSpec norm{"final_norm", UnitKind::kFinalNorm, -1, {}};
  norm.params.push_back(Param(norm.name, "norm.weight", {h}));
  units.push_back(std::move(norm));
  UnitSpec head{"lm_head", UnitKind::kLmHead, -1, {}};
  if (!s.tie_embeddings) {
    head.params.push_back(Param(head.name, "output.weight", {s.vocab, h}));
  }
  units.push_back(std::move(head));
  return units;
}

int64_t ParameterCount(const ModelSpec& spec) {
  return CheckedParameterCount(spec).value_or(-1);
}

int64_t ActiveParameterCount(const ModelSpec& spec) {
  if (!internal::GeneralBlock(spec)) return ParameterCount(spec);
  return GeneralParameterCount(spec, true).value_or(-1);
}

int64_t ExpertParameterCount(const ModelSpec& spec) {
  if (!spec.moe.enabled()) return 0;
  return GeneralParameterCount(spec, false, true).value_or(-1);
}

const char* MoeRouterName(MoeRouter r) {
  return r == MoeRouter::kSigmoid ? "sigmoid" : "softmax";
}

double TrainingFlopsPerSequence(const ModelSpec& m, int64_t seq) {
  const double s = static_cast<double>(seq);
  if (internal::GeneralBlock(m)) {
    double per_token = 2.0 * m.hidden * m.vocab;
    for (int64_t b = 0; b < m.layers; ++b) {
      per_token += internal::GeneralBlockForwardFlopsPerToken(m, seq, b);
    }
    return 3.0 * s * per_token;
  }
  const double h = m.hidden, q = m.heads * m.head_dim,
               kv = m.kv_heads * m.head_dim, f = m.intermediate, v = m.vocab;
  // Per token, forward: projections 2*h*(2q + 2kv), attention 4*s*q (no
  // causal halving, as in the formula), MLP 6*h*f; logits 2*h*v.
  const double per_layer = 2 * h * (2 * q + 2 * kv) + 4 * s * q + 6 * h * f;
  return 3.0 * s * (static_cast<double>(m.layers) * per_layer + 2 * h * v);
}

double BlockForwardFlopsAt(const ModelSpec& m, int64_t seq, int64_t block) {
  if (internal::GeneralBlock(m)) {
    return static_cast<double>(seq) * internal::GeneralBlockForwardFlopsPerToken(m, seq, block);
  }
  return BlockForwardFlops(m, seq);
}

double BlockForwardFlops(const ModelSpec& m, int64_t seq) {
  if (internal::GeneralBlock(m)) return BlockForwardFlopsAt(m, seq, 0);
  const double s = static_cast<double>(seq);
  const double h = m.hidden, q = m.heads * m.head_dim,
               kv = m.kv_heads * m.head_dim, f = m.intermediate;
  return s * (2 * h * (2 * q + 2 * kv) + 4 * s * q + 6 * h * f);
}

}  // namespace baton::scheduler
