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
// Mixture of experts (ModelSpec::moe, scheduler/model_moe.cc): blocks from
// moe.first_dense_layers on replace w_gate / w_up / w_down by
//                               router.weight [experts, hidden]
//                               experts.w_gate, experts.w_up
//                                 [experts, expert_intermediate, hidden]
//                               experts.w_down
//                                 [experts, hidden, expert_intermediate]
//                               shared.w_gate, shared.w_up
//                                 [shared_experts x shared_intermediate, hidden]
//                               shared.w_down [hidden, ...]  (with shared experts)
//                               shared_gate.weight [1, hidden] (Qwen2-MoE)
// (the first first_dense_layers blocks keep the dense MLP of width
// `intermediate`). Multi-head latent attention (ModelSpec::mla, DeepSeek-V2
// / V3) replaces wq / wk / wv by wq_a [q_lora_rank, hidden], q_a_norm.weight
// [q_lora_rank], wq_b [heads x head_dim, q_lora_rank] (or wq [heads x
// head_dim, hidden] without q_lora_rank), wkv_a [kv_lora_rank + rope,
// hidden], kv_a_norm.weight [kv_lora_rank], wkv_b [heads x (nope + v),
// kv_lora_rank], and wo is [hidden, heads x v_head_dim]; head_dim is then
// nope + rope (the query / key width). qk_norm (Qwen3) adds q_norm.weight
// and k_norm.weight [head_dim].
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

// How a mixture-of-experts layer picks its experts (MoeSpec::router).
enum class MoeRouter { kSoftmax, kSigmoid };
const char* MoeRouterName(MoeRouter r);  // "softmax", "sigmoid"

// Mixture of experts (experts == 0: a dense model). Each MoE block routes
// every token to top_k of `experts` routed experts (SwiGLU MLPs of width
// expert_intermediate) by a router of kind `router`, plus shared_experts
// always-active experts of width shared_intermediate each. Group-limited
// routing (DeepSeek-V2 / V3): the experts form `groups` groups and a token
// may use experts of at most topk_groups of them (0: no limit); with the
// groups placed on nodes it bounds the nodes a token is sent to.
struct MoeSpec {
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t expert_intermediate = 0;
  int64_t shared_experts = 0;
  int64_t shared_intermediate = 0;
  int64_t first_dense_layers = 0;
  MoeRouter router = MoeRouter::kSoftmax;
  int64_t groups = 0;
  int64_t topk_groups = 0;
  bool shared_gate = false;  // Qwen2-MoE: a sigmoid gate [1, hidden] on the shared expert
  bool enabled() const { return experts > 0; }
};

// Multi-head latent attention (kv_lora_rank == 0: none). q_lora_rank 0:
// the query is projected directly.
struct MlaSpec {
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
  bool enabled() const { return kv_lora_rank > 0; }
};

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
  bool qk_norm = false;  // Qwen3: RMSNorm of each head's q and k
  MoeSpec moe;
  MlaSpec mla;
  // Whether block `b` (0-based) is a mixture-of-experts block.
  bool moe_block(int64_t b) const { return moe.enabled() && b >= moe.first_dense_layers; }
};

// ValidateModelSpec's bounds (kMaxModelDim, kMaxModelLayers,
// kMaxModelParameters) are in scheduler/limits.h with every other limit.

// InvalidArgument naming the field for a size outside [1, kMaxModelDim]
// (layers: [1, kMaxModelLayers]),
// kv_heads not dividing heads, a non-positive or non-finite norm_eps or
// rope_theta, or more than kMaxModelParameters parameters (counted with
// checked arithmetic, so an overflow is refused, never wrapped). With
// experts: top_k in [1, experts], expert_intermediate >= 1, shared
// experts with a width, first_dense_layers in [0, layers), groups dividing
// the experts with topk_groups in [1, groups] and top_k <= topk_groups x
// experts per group; MLA: kv_lora_rank, nope + rope == head_dim and
// v_head_dim >= 1. Every size at most kMaxModelDim.
Status ValidateModelSpec(const ModelSpec& spec);

// llama2-7b, llama2-13b, llama2-34b, llama2-70b, llama3-8b, llama3-70b,
// llama3-405b; the mixtures of experts mixtral-8x7b, mixtral-8x22b,
// qwen3-30b-a3b, qwen3-235b-a22b, deepseek-v3 (their Hugging Face
// config.json values); and the test models tiny (4 blocks, hidden 256, 8 heads,
// 2 KV heads, vocab 512) and micro (2 blocks, hidden 32, 4 heads, 2 KV
// heads, vocab 64). NotFound listing the names for anything else.
StatusOr<ModelSpec> ModelPreset(absl::string_view name);
std::vector<std::string> ModelPresetNames();

// Parses a Hugging Face config.json text. Accepts architectures
// LlamaForCausalLM (or model_type "llama"), and the mixtures of experts
// MixtralForCausalLM ("mixtral": num_local_experts, num_experts_per_tok),
// Qwen2MoeForCausalLM / Qwen3MoeForCausalLM ("qwen2_moe", "qwen3_moe":
// num_experts, num_experts_per_tok, moe_intermediate_size,
// shared_expert_intermediate_size, decoder_sparse_step 1 and no
// mlp_only_layers) and DeepseekV2ForCausalLM / DeepseekV3ForCausalLM
// ("deepseek_v2", "deepseek_v3": n_routed_experts, n_shared_experts,
// num_experts_per_tok, moe_intermediate_size, first_k_dense_replace,
// moe_layer_freq 1, scoring_func, n_group, topk_group, q_lora_rank,
// kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim)
// (scheduler/model_moe.cc). Required: hidden_size,
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
// The parameters one token uses: as ParameterCount, with each MoE block's
// routed experts counted top_k times instead of `experts` times (the
// "active" or "activated" count model cards give); -1 as above.
int64_t ActiveParameterCount(const ModelSpec& spec);
// The parameters of the routed experts (every MoE block's experts.*), the
// part sharded over the expert-parallel group; 0 for a dense model.
int64_t ExpertParameterCount(const ModelSpec& spec);

// Training FLOPs of one sequence of `seq` tokens, forward + backward, by
// NVIDIA's formula s*[12*L*h^2*(1 + G/A + s/h) + 18*L*F*h + 6*V*h] (the
// attention terms scale with A*head_dim, which equals h for the presets).
// With experts or MLA: 3 x s x [sum over blocks of (2 x the block's active
// matrix parameters + 2 s A (qk + v head dims)) + 2 h V]: a MoE block
// counts top_k routed and the shared experts at their widths and its
// router (2 h E), as "MFU on active parameters" (DeepSeek, Megatron) does.
double TrainingFlopsPerSequence(const ModelSpec& spec, int64_t seq);
// Forward-only FLOPs of one block for one sequence (a third of its share
// above): what full activation recompute adds. BlockForwardFlops is block
// 0's (a dense block of a MoE model whose first blocks are dense);
// BlockForwardFlopsAt block `b`'s.
double BlockForwardFlops(const ModelSpec& spec, int64_t seq);
double BlockForwardFlopsAt(const ModelSpec& spec, int64_t seq, int64_t block);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_MODEL_H_
