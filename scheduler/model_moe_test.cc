#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "baton/scheduler/layout.h"
#include "baton/scheduler/model.h"

namespace baton::scheduler {
namespace {

// Total and active ("activated") parameters as the model cards give them:
// Mistral AI's Mixtral announcements (8x7B: "46.7B total parameters but
// only uses 12.9B parameters per token"; 8x22B: "39B active parameters out
// of 141B"), the Qwen3 cards on Hugging Face (Qwen/Qwen3-30B-A3B: 30.5B,
// 3.3B activated; Qwen/Qwen3-235B-A22B: 235B, 22B), and DeepSeek-V3
// (arXiv 2412.19437 abstract: 671B total, 37B activated per token; the
// Hugging Face card's 685B adds the 14B multi-token-prediction module,
// which is not part of the model trained here).
TEST(ModelMoeTest, PresetCountsMatchTheModelCards) {
  const struct {
    const char* name;
    double total_b, active_b;
  } cards[] = {{"mixtral-8x7b", 46.7, 12.9},
               {"mixtral-8x22b", 141, 39},
               {"qwen3-30b-a3b", 30.5, 3.3},
               {"qwen3-235b-a22b", 235, 22},
               {"deepseek-v3", 671, 37}};
  for (const auto& c : cards) {
    auto spec = ModelPreset(c.name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    const double total = ParameterCount(*spec) / 1e9;
    const double active = ActiveParameterCount(*spec) / 1e9;
    // The cards round to 2-3 digits: within 2% of the figure.
    EXPECT_NEAR(total / c.total_b, 1.0, 0.02) << c.name << " total " << total;
    EXPECT_NEAR(active / c.active_b, 1.0, 0.02) << c.name << " active " << active;
    EXPECT_LT(ExpertParameterCount(*spec), ParameterCount(*spec)) << c.name;
    EXPECT_GT(ExpertParameterCount(*spec), 0) << c.name;
  }
}

TEST(ModelMoeTest, UnitsHoldTheCountedParameters) {
  for (const char* name : {"mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"}) {
    const ModelSpec spec = *ModelPreset(name);
    int64_t n = 0, experts = 0;
    for (const UnitSpec& u : BuildUnits(spec)) {
      for (const ParamSpec& p : u.params) {
        n += p.numel;
        if (p.name.find(".experts.") != std::string::npos) experts += p.numel;
      }
    }
    EXPECT_EQ(n, ParameterCount(spec)) << name;
    EXPECT_EQ(experts, ExpertParameterCount(spec)) << name;
  }
  // DeepSeek-V3: the first three blocks are dense, MLA everywhere.
  const std::vector<UnitSpec> units = BuildUnits(*ModelPreset("deepseek-v3"));
  auto has = [&](int block, const std::string& param) {
    for (const ParamSpec& p : units[1 + block].params) {
      if (p.name == "block" + std::to_string(block) + "." + param) return true;
    }
    return false;
  };
  EXPECT_TRUE(has(2, "w_gate"));
  EXPECT_FALSE(has(2, "router.weight"));
  EXPECT_TRUE(has(3, "router.weight"));
  EXPECT_TRUE(has(3, "shared.w_down"));
  EXPECT_TRUE(has(3, "wkv_b"));
  EXPECT_FALSE(has(3, "wk"));
}

TEST(ModelMoeTest, ActiveFlopsCountTopKExperts) {
  // Mixtral 8x7B at 4096 tokens: 6 x active matrices + attention, per token.
  const ModelSpec m = *ModelPreset("mixtral-8x7b");
  const double s = 4096, h = 4096, f = 14336;
  const double per_layer = 2 * (h * (4096 + 1024 + 1024 + 4096) + 2 * 3 * h * f + 8 * h) +
                           2 * s * 32 * (128 + 128);
  const double want = 3 * s * (32 * per_layer + 2 * h * 32000);
  EXPECT_NEAR(TrainingFlopsPerSequence(m, 4096) / want, 1.0, 1e-12);
  // A dense Llama keeps NVIDIA's formula.
  EXPECT_NEAR(TrainingFlopsPerSequence(*ModelPreset("llama3-70b"), 8192) / 1e15, 3.94, 0.01);
  // DeepSeek-V3: a dense block's 18432-wide MLP is as wide as a MoE
  // block's 8 + 1 experts of 2048, so the two differ by the router alone.
  const ModelSpec d = *ModelPreset("deepseek-v3");
  EXPECT_NEAR(BlockForwardFlopsAt(d, 4096, 3) - BlockForwardFlopsAt(d, 4096, 0),
              2.0 * 7168 * 256 * 4096, 1e3);
}

TEST(ModelMoeTest, HfConfigsOfTheFamiliesAreRead) {
  const char* mixtral = R"({"architectures": ["MixtralForCausalLM"], "hidden_size": 4096,
    "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "vocab_size": 32000, "num_local_experts": 8,
    "num_experts_per_tok": 2, "rope_theta": 1e6})";
  auto m = ModelFromHfConfig(mixtral, "m");
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(ParameterCount(*m), ParameterCount(*ModelPreset("mixtral-8x7b")));

  const char* qwen3 = R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32,
    "num_key_value_heads": 4, "head_dim": 128, "vocab_size": 151936, "num_experts": 128,
    "num_experts_per_tok": 8, "moe_intermediate_size": 768, "decoder_sparse_step": 1,
    "mlp_only_layers": [], "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "tie_word_embeddings": false})";
  auto q = ModelFromHfConfig(qwen3, "q");
  ASSERT_TRUE(q.ok()) << q.status();
  EXPECT_TRUE(q->qk_norm);
  EXPECT_EQ(ParameterCount(*q), ParameterCount(*ModelPreset("qwen3-30b-a3b")));

  // Qwen1.5-MoE-A2.7B (Qwen2MoeForCausalLM): 14.3B total, 2.7B activated
  // (its card), with a 5632-wide shared expert behind a gate.
  const char* qwen2 = R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_size": 2048,
    "intermediate_size": 5632, "num_hidden_layers": 24, "num_attention_heads": 16,
    "num_key_value_heads": 16, "vocab_size": 151936, "num_experts": 60,
    "num_experts_per_tok": 4, "moe_intermediate_size": 1408,
    "shared_expert_intermediate_size": 5632, "decoder_sparse_step": 1})";
  auto q2 = ModelFromHfConfig(qwen2, "q2");
  ASSERT_TRUE(q2.ok()) << q2.status();
  EXPECT_TRUE(q2->moe.shared_gate);
  EXPECT_NEAR(ParameterCount(*q2) / 14.3e9, 1.0, 0.02);
  EXPECT_NEAR(ActiveParameterCount(*q2) / 2.7e9, 1.0, 0.03);

  const char* v3 = R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168,
    "intermediate_size": 18432, "num_hidden_layers": 61, "num_attention_heads": 128,
    "num_key_value_heads": 128, "vocab_size": 129280, "n_routed_experts": 256,
    "n_shared_experts": 1, "num_experts_per_tok": 8, "moe_intermediate_size": 2048,
    "first_k_dense_replace": 3, "moe_layer_freq": 1, "scoring_func": "sigmoid",
    "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4, "q_lora_rank": 1536,
    "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "v_head_dim": 128, "rms_norm_eps": 1e-06, "rope_theta": 10000})";
  auto d = ModelFromHfConfig(v3, "d");
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->head_dim, 192);
  EXPECT_EQ(d->moe.router, MoeRouter::kSigmoid);
  EXPECT_EQ(d->moe.topk_groups, 4);
  EXPECT_EQ(ParameterCount(*d), ParameterCount(*ModelPreset("deepseek-v3")));

  // DeepSeek-V2-Lite: no query compression, greedy routing; 15.7B total,
  // 2.4B activated (its card, which leaves the input embedding's 0.21B
  // lookup table out of the activated count; ActiveParameterCount keeps it,
  // as the Mixtral, Qwen3 and DeepSeek-V3 figures above do).
  const char* lite = R"({"model_type": "deepseek_v2", "hidden_size": 2048,
    "intermediate_size": 10944, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_key_value_heads": 16, "vocab_size": 102400, "n_routed_experts": 64,
    "n_shared_experts": 2, "num_experts_per_tok": 6, "moe_intermediate_size": 1408,
    "first_k_dense_replace": 1, "topk_method": "greedy", "n_group": 1, "topk_group": 1,
    "q_lora_rank": null, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "v_head_dim": 128})";
  auto l = ModelFromHfConfig(lite, "lite");
  ASSERT_TRUE(l.ok()) << l.status();
  EXPECT_EQ(l->moe.groups, 0);
  EXPECT_NEAR(ParameterCount(*l) / 15.7e9, 1.0, 0.02);
  EXPECT_NEAR((ActiveParameterCount(*l) - 102400.0 * 2048) / 2.4e9, 1.0, 0.03);
}

TEST(ModelMoeTest, BadMoeConfigsAreRefusedNamingTheField) {
  const std::string base = R"("architectures": ["MixtralForCausalLM"], "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 64)";
  auto refused = [&](const std::string& extra, const std::string& words) {
    auto s = ModelFromHfConfig("{" + base + ", " + extra + "}");
    EXPECT_FALSE(s.ok()) << extra;
    EXPECT_NE(s.status().message().find(words), std::string::npos) << s.status();
  };
  refused(R"("num_local_experts": 8, "num_experts_per_tok": 9)", "top_k = 9");
  refused(R"("num_local_experts": 8)", "num_experts_per_tok");
  refused(R"("num_local_experts": 0, "num_experts_per_tok": 1)", "num_local_experts");
  ModelSpec s = *ModelPreset("deepseek-v3");
  s.moe.topk_groups = 1;  // 8 experts of one group of 32: fine
  EXPECT_TRUE(ValidateModelSpec(s).ok());
  s.moe.top_k = 40;
  EXPECT_NE(ValidateModelSpec(s).message().find("more than the 32 experts"), std::string::npos);
  s = *ModelPreset("deepseek-v3");
  s.moe.first_dense_layers = 61;
  EXPECT_NE(ValidateModelSpec(s).message().find("first_dense_layers"), std::string::npos);
  s = *ModelPreset("deepseek-v3");
  s.head_dim = 128;
  EXPECT_NE(ValidateModelSpec(s).message().find("head_dim"), std::string::npos);
}

}  // namespace
}  // namespace baton::scheduler
