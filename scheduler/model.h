// What is being trained: a Llama-style decoder described by a ModelSpec, and
// its units (the pieces the scheduler gathers, runs and reduces as one).
//
// A ModelSpec comes from a named preset (ModelPreset) or from a Hugging Face
// config.json (ModelFromHfConfig). Units, in forward order:
//   0            embedding      tok_embeddings.weight [vocab, hidden]
//   1 .. L       block i-1      attn_norm.weight [hidden]
//                               wq [heads*head_dim, hidden]
//                               wk, wv [kv_heads*head_dim, hidden]
//                               wo [hidden, heads*head_dim]
//                               mlp_norm.weight [hidden]
//                               w_gate, w_up [intermediate, hidden]
//                               w_down [hidden, intermediate]
//   L + 1        final_norm     norm.weight [hidden]
//   L + 2        lm_head        output.weight [vocab, hidden]  (absent when
//                               tie_word_embeddings: the head reads the
//                               embedding's weight)
// Parameter names are "<unit>.<param>", e.g. "block3.wq".
//
// Plain data; copyable; no globals beyond the constant preset table.
#ifndef BATON_SCHEDULER_MODEL_H_
#define BATON_SCHEDULER_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/limits.h"

namespace baton::scheduler {

struct ModelSpec {
  std::string name;
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t layers = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab = 0;
  bool tie_embeddings = false;
  double norm_eps = 1e-5;
  double rope_theta = 10000.0;
};

// ValidateModelSpec's bounds (kMaxModelDim, kMaxModelLayers,
// kMaxModelParameters) are in scheduler/limits.h with every other limit.

// InvalidArgument naming the field for a size outside [1, kMaxModelDim]
// (layers: [1, kMaxModelLayers]),
// kv_heads not dividing heads, a non-positive or non-finite norm_eps or
// rope_theta, or more than kMaxModelParameters parameters (counted with
// checked arithmetic, so an overflow is refused, never wrapped).
Status ValidateModelSpec(const ModelSpec& spec);

// llama2-7b, llama2-13b, llama2-34b, llama2-70b, llama3-8b, llama3-70b,
// llama3-405b, and the test models tiny (4 blocks, hidden 256, 8 heads,
// 2 KV heads, vocab 512) and micro (2 blocks, hidden 32, 4 heads, 2 KV
// heads, vocab 64). NotFound listing the names for anything else.
StatusOr<ModelSpec> ModelPreset(absl::string_view name);
std::vector<std::string> ModelPresetNames();

// Parses a Hugging Face config.json text. Accepts architectures
// LlamaForCausalLM (or model_type "llama"). Required: hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads, vocab_size.
// Optional: num_key_value_heads (= heads), head_dim (= hidden / heads),
// tie_word_embeddings (false), rms_norm_eps (in [1e-12, 1]), rope_theta (in
// [1, 1e12]). Sizes must be integers in [1, kMaxModelDim] (layers in
// [1, kMaxModelLayers]); the text is
// parsed with runtime/json_input.h's bounds (size, nesting depth).
// InvalidArgument naming the field or the architecture otherwise; `name`
// labels the model. Never throws.
StatusOr<ModelSpec> ModelFromHfConfig(absl::string_view json_text,
                                      absl::string_view name = "hf");
// Reads the file, then as above; NotFound naming an unreadable path,
// InvalidArgument for a directory or other non-regular file.
StatusOr<ModelSpec> ModelFromHfConfigFile(const std::string& path);

enum class UnitKind { kEmbedding, kBlock, kFinalNorm, kLmHead };
const char* UnitKindName(UnitKind kind);

struct ParamSpec {
  std::string name;            // "<unit>.<param>"
  std::vector<int64_t> shape;  // row-major
  int64_t numel = 0;
  bool small = false;  // a 1-D parameter (norm weight): resident candidate
};

struct UnitSpec {
  std::string name;  // "embedding", "block0", ..., "final_norm", "lm_head"
  UnitKind kind = UnitKind::kBlock;
  int block = -1;  // block index for kBlock, else -1
  std::vector<ParamSpec> params;
  int64_t numel() const;
};

// The units of a (valid) spec in forward order, as in the table above.
std::vector<UnitSpec> BuildUnits(const ModelSpec& spec);

// Total parameter count (tied embeddings counted once) of a spec that
// passes ValidateModelSpec, computed without building the units; -1 for a
// spec whose count would pass kMaxModelParameters.
int64_t ParameterCount(const ModelSpec& spec);

// Training FLOPs of one sequence of `seq` tokens, forward + backward, by
// NVIDIA's formula s*[12*L*h^2*(1 + G/A + s/h) + 18*L*F*h + 6*V*h] (the
// attention terms scale with A*head_dim, which equals h for the presets).
double TrainingFlopsPerSequence(const ModelSpec& spec, int64_t seq);
// Forward-only FLOPs of one block for one sequence (a third of its share
// above): what full activation recompute adds.
double BlockForwardFlops(const ModelSpec& spec, int64_t seq);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_MODEL_H_
