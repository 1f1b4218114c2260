#include <set>

#include "gtest/gtest.h"
#include "baton/scheduler/layout.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"

namespace baton::scheduler {
namespace {

TEST(ModelTest, PresetParameterCountsMatchThePublishedOnes) {
  const std::pair<const char*, int64_t> published[] = {
      {"llama2-7b", 6'738'415'616},     {"llama2-13b", 13'015'864'320},
      {"llama2-34b", 33'743'970'304},   {"llama2-70b", 68'976'648'192},
      {"llama3-8b", 8'030'261'248},     {"llama3-70b", 70'553'706'496},
      {"llama3-405b", 405'853'388'800},
  };
  for (const auto& [name, count] : published) {
    auto spec = ModelPreset(name);
    ASSERT_TRUE(spec.ok()) << spec.status();
    EXPECT_EQ(ParameterCount(*spec), count) << name;
  }
}

TEST(ModelTest, UnknownPresetListsTheNames) {
  auto spec = ModelPreset("llama9-1t");
  ASSERT_EQ(spec.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(spec.status().message().find("llama3-70b"), std::string::npos);
}

TEST(ModelTest, FlopsFormulaMatchesTheReferenceFigure) {
  // REFERENCE.md: Llama 3 70B at s = 8192 is 3.94e15 FLOPs per sequence.
  const ModelSpec spec = *ModelPreset("llama3-70b");
  EXPECT_NEAR(TrainingFlopsPerSequence(spec, 8192) / 1e15, 3.94, 0.01);
  EXPECT_GT(BlockForwardFlops(spec, 8192), 0);
}

TEST(ModelTest, HfConfigIsParsed) {
  const char* json = R"({"architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
    "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
    "tie_word_embeddings": false})";
  auto spec = ModelFromHfConfig(json, "llama3-8b-hf");
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(ParameterCount(*spec), 8'030'261'248);
  EXPECT_EQ(spec->head_dim, 128);
  EXPECT_EQ(spec->rope_theta, 500000.0);
}

TEST(ModelTest, HfConfigTiedEmbeddingsCountOnce) {
  const char* json = R"({"model_type": "llama", "hidden_size": 2048,
    "intermediate_size": 8192, "num_hidden_layers": 16,
    "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 64,
    "vocab_size": 128256, "tie_word_embeddings": true})";
  auto spec = ModelFromHfConfig(json);
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_TRUE(spec->tie_embeddings);
  // Llama 3.2 1B: 1.24B parameters.
  EXPECT_EQ(ParameterCount(*spec), 1'235'814'400);
}

TEST(ModelTest, HfConfigErrorsNameTheProblem) {
  auto missing = ModelFromHfConfig(
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})");
  ASSERT_EQ(missing.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(missing.status().message().find("intermediate_size"),
            std::string::npos);
  auto arch = ModelFromHfConfig(R"({"architectures": ["GPT2LMHeadModel"]})");
  ASSERT_EQ(arch.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(arch.status().message().find("GPT2LMHeadModel"), std::string::npos);
  auto notjson = ModelFromHfConfig("{not json");
  EXPECT_EQ(notjson.status().code(), absl::StatusCode::kInvalidArgument);
  auto twice = ModelFromHfConfig(R"({"model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2, "num_hidden_layers": 32,
    "num_attention_heads": 4, "vocab_size": 10})");
  EXPECT_EQ(twice.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(twice.status().message(), "config.json: duplicate key \"num_hidden_layers\"");
  auto kv = ModelFromHfConfig(R"({"model_type": "llama", "hidden_size": 64,
    "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 3, "vocab_size": 10})");
  ASSERT_EQ(kv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(kv.status().message().find("kv_heads"), std::string::npos);
  auto negative = ModelFromHfConfig(R"({"model_type": "llama",
    "hidden_size": -64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 10})");
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ModelFromHfConfigFile("/nonexistent/config.json").status().code(),
            absl::StatusCode::kNotFound);
}

// Issue 16: sizes within the per-field bound whose product overflowed
// int64 ("-8594556771.09B parameters") are refused, as are wrapped, typed
// wrongly and non-finite fields, each naming the field; deep nesting is
// refused before anything walks it recursively.
TEST(ModelTest, HostileConfigsAreRefusedNamingTheField) {
  const std::string base = R"("model_type": "llama", "num_attention_heads": 4,
    "num_hidden_layers": 2, "vocab_size": 10, )";
  auto overflow = ModelFromHfConfig(R"({"model_type": "llama",
    "hidden_size": 16777216, "intermediate_size": 16777216,
    "vocab_size": 16777216, "num_attention_heads": 4096,
    "num_hidden_layers": 5000})");
  ASSERT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overflow.status().message().find("parameters"), std::string::npos)
      << overflow.status();
  ModelSpec big = *ModelPreset("tiny");
  big.heads = big.kv_heads = kMaxModelDim;
  big.head_dim = kMaxModelDim;  // heads * head_dim = 2^48 per projection
  EXPECT_FALSE(ValidateModelSpec(big).ok());
  big = *ModelPreset("llama3-405b");
  big.layers = kMaxModelDim;
  EXPECT_FALSE(ValidateModelSpec(big).ok());
  EXPECT_TRUE(ValidateModelSpec(*ModelPreset("llama3-405b")).ok());
  const std::pair<std::string, std::string> cases[] = {
      {R"("hidden_size": 4294967360, "intermediate_size": 8)", "hidden_size"},
      {R"("hidden_size": 64.0, "intermediate_size": 8)", "hidden_size"},
      {R"("hidden_size": "64", "intermediate_size": 8)", "hidden_size"},
      {R"("hidden_size": 64, "intermediate_size": [8])", "intermediate_size"},
      {R"("hidden_size": 64, "intermediate_size": 8, "rms_norm_eps": "x")",
       "rms_norm_eps"},
      {R"("hidden_size": 64, "intermediate_size": 8, "rope_theta": 1e300)",
       "rope_theta"},
      {R"("hidden_size": 64, "intermediate_size": 8, "head_dim": 1e3)",
       "head_dim"},
  };
  for (const auto& [fields, want] : cases) {
    auto r = ModelFromHfConfig("{" + base + fields + "}");
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << fields;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status();
  }
  const std::string deep = "{" + base + R"("hidden_size": )" +
                           std::string(60000, '[') + std::string(60000, ']') + "}";
  auto nested = ModelFromHfConfig(deep);
  ASSERT_EQ(nested.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(nested.status().message().find("nested deeper"), std::string::npos);
  // 30 levels parse; the message describes the array, it does not dump it.
  const std::string shallow = "{" + base + R"("hidden_size": )" +
                              std::string(30, '[') + std::string(30, ']') +
                              R"(, "intermediate_size": 8})";
  auto typed = ModelFromHfConfig(shallow);
  ASSERT_EQ(typed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(typed.status().message().find("got an array"), std::string::npos)
      << typed.status();
}

// Every parameter appears exactly once, shards are equal, 16-byte aligned
// and cover the padded buffer; parameters do not overlap.
void CheckLayout(const ModelLayout& l, int64_t granule_bytes) {
  std::set<std::string> seen;
  for (const Bucket& b : l.buckets) {
    const int shards = l.sharding.shard ? l.sharding.ranks : 1;
    EXPECT_EQ(b.shard_numel * shards, b.padded_numel) << b.name;
    EXPECT_EQ(b.shard_numel * static_cast<int64_t>(DataTypeSize(l.sharding.dtype)) %
                  granule_bytes,
              0)
        << b.name;
    EXPECT_GE(b.padded_numel, b.numel);
    int64_t end = 0;
    for (const ParamSlot& p : b.params) {
      EXPECT_TRUE(seen.insert(p.name).second) << p.name;
      EXPECT_GE(p.offset, end) << p.name;
      EXPECT_EQ(p.offset * static_cast<int64_t>(DataTypeSize(l.sharding.dtype)) %
                    16,
                0)
          << p.name;
      end = p.offset + p.numel;
    }
    EXPECT_LE(end, b.numel);
  }
  EXPECT_EQ(l.total_params(), ParameterCount(l.spec));
}

TEST(LayoutTest, PerUnitWithResidentNorms) {
  LayoutOptions o;
  auto l = BuildLayout(*ModelPreset("tiny"), o, Sharding{3});
  ASSERT_TRUE(l.ok()) << l.status();
  CheckLayout(*l, 16);
  // embedding, 4 blocks, lm_head, resident (final_norm has no bucket).
  ASSERT_EQ(l->buckets.size(), 7u);
  EXPECT_TRUE(l->buckets.back().resident);
  EXPECT_EQ(l->buckets.back().params.size(), 9u);  // 2 per block + final
  EXPECT_EQ(l->unit_bucket[5], -1);                // final_norm
  EXPECT_EQ(l->unit_params[1].size(), 9u);         // block0 reads 9 params
}

TEST(LayoutTest, MergeRespectsTheTarget) {
  LayoutOptions o;
  o.bucket_policy = BucketPolicy::kMerge;
  o.resident_small_params = false;
  const ModelSpec spec = *ModelPreset("tiny");
  const int64_t block_bytes = BuildUnits(spec)[1].numel() * 2;
  o.merge_target_bytes = 2 * block_bytes + 100;
  auto l = BuildLayout(spec, o, Sharding{8});
  ASSERT_TRUE(l.ok()) << l.status();
  CheckLayout(*l, 16);
  int merged = 0;
  for (const Bucket& b : l->buckets) {
    if (b.units.size() > 1) {
      ++merged;
      EXPECT_LE(b.numel * 2, o.merge_target_bytes);
    }
  }
  EXPECT_GE(merged, 2);
  // Greedy: no two neighbouring buckets would have fitted together.
  for (size_t i = 1; i < l->buckets.size(); ++i) {
    EXPECT_GT((l->buckets[i - 1].numel + l->buckets[i].numel) * 2,
              o.merge_target_bytes - 64)
        << l->buckets[i - 1].name << " + " << l->buckets[i].name;
  }
}

TEST(LayoutTest, TiedEmbeddingIsResidentAndReadByTheHead) {
  ModelSpec spec = *ModelPreset("micro");
  spec.tie_embeddings = true;
  LayoutOptions o;
  o.resident_small_params = false;
  auto l = BuildLayout(spec, o, Sharding{2});
  ASSERT_TRUE(l.ok()) << l.status();
  CheckLayout(*l, 16);
  const int head = static_cast<int>(l->units.size()) - 1;
  ASSERT_EQ(l->unit_params[head].size(), 1u);
  EXPECT_EQ(l->unit_params[head][0].bucket, l->resident_bucket);
  EXPECT_EQ(l->unit_params[0][0].bucket, l->resident_bucket);
}

TEST(LayoutTest, DdpDoesNotShard) {
  auto p = *PolicyPreset("ddp");
  auto l = LayoutFor(*ModelPreset("tiny"), p, *ResolveMesh(p, 4));
  ASSERT_TRUE(l.ok()) << l.status();
  for (const Bucket& b : l->buckets) EXPECT_EQ(b.shard_numel, b.padded_numel);
}

// adamw8bit's policy shards in whole 2048-element blocks with every
// parameter on a block boundary, so each block belongs to one parameter
// and its position in that parameter is the same for every sharding.
TEST(LayoutTest, EightBitOptimizerAlignsParametersAndShardsToBlocks) {
  Policy p = *PolicyPreset("baton");
  p.optimizer = OptimizerKind::kAdamW8bit;
  p.param_dtype = DataType::kF32;
  for (int ranks : {1, 3, 4}) {
    auto mesh = ResolveMesh(p, ranks);
    ASSERT_TRUE(mesh.ok());
    EXPECT_EQ(ShardingFor(p, *mesh).block, 2048);
    auto l = LayoutFor(*ModelPreset("tiny"), p, *mesh);
    ASSERT_TRUE(l.ok()) << l.status();
    for (const Bucket& b : l->buckets) {
      EXPECT_EQ(b.shard_numel % 2048, 0) << b.name;
      for (const ParamSlot& s : b.params) EXPECT_EQ(s.offset % 2048, 0) << s.name;
    }
  }
  Sharding huge{2};
  huge.block = kMaxShardingBlock + 1;
  EXPECT_EQ(BuildLayout(*ModelPreset("tiny"), LayoutOptions{}, huge).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// LoRA: every targeted matrix of each block gets its two adapters, in a
// companion bucket right after its (frozen) bucket; the base is frozen,
// the adapters are not, and nothing else changes place.
TEST(LayoutTest, LoraAdaptersLiveInCompanionBuckets) {
  LayoutOptions o;
  o.lora_rank = 4;
  o.lora_targets = *ParseLoraTargets("q,v,down");
  const ModelSpec spec = *ModelPreset("tiny");
  auto l = BuildLayout(spec, o, Sharding{2});
  ASSERT_TRUE(l.ok()) << l.status();
  int adapter_buckets = 0;
  int64_t adapter_numel = 0;
  for (const Bucket& b : l->buckets) {
    if (b.adapters >= 0) {
      ASSERT_EQ(b.adapters, b.id + 1) << b.name;
      const Bucket& a = l->buckets[b.adapters];
      EXPECT_FALSE(a.frozen);
      EXPECT_EQ(a.units, b.units);
      EXPECT_EQ(a.params.size(), 6u);  // 3 targets x (A, B)
      ++adapter_buckets;
    }
    for (const ParamSlot& p : b.params) {
      const bool adapter = p.name.find(".lora_") != std::string::npos;
      EXPECT_EQ(p.frozen, !adapter) << p.name;
      EXPECT_EQ(b.frozen, !adapter) << b.name;
      if (adapter) adapter_numel += p.numel;
    }
  }
  EXPECT_EQ(adapter_buckets, spec.layers);
  // q [256, 256], v [64, 256], down [256, F] at rank 4.
  const int64_t per_block =
      4 * (256 + 256) + 4 * (64 + 256) + 4 * (256 + spec.intermediate);
  EXPECT_EQ(adapter_numel, spec.layers * per_block);
  EXPECT_EQ(l->trainable_params(), adapter_numel);
  EXPECT_EQ(l->total_params(), ParameterCount(spec) + adapter_numel);
  // The blocks read their adapters.
  EXPECT_EQ(l->unit_params[1].size(), 9u + 6u);
  // Bad LoRA options name the problem.
  o.lora_rank = 65;  // wk of tiny is [64, 256]
  o.lora_targets = *ParseLoraTargets("k");
  auto big = BuildLayout(spec, o, Sharding{2});
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("lora_rank = 65 is larger than the matrix block0.wk"),
            std::string::npos)
      << big.status();
  EXPECT_NE(ParseLoraTargets("q,qq").status().message().find("unknown LoRA target \"qq\""),
            std::string::npos);
  o.lora_rank = 0;
  o.base_dtype = BaseDtype::kNf4;
  EXPECT_NE(BuildLayout(spec, o, Sharding{2}).status().message().find("base_dtype = nf4"),
            std::string::npos);
  // Every preset's layout takes adapters (merged buckets, resident or not).
  for (const std::string& name : PolicyPresetNames()) {
    if (name == "zenflow") continue;
    Policy p = *PolicyPreset(name);
    p.layout.lora_rank = 2;
    p.layout.lora_targets = 0x55;
    auto pl = LayoutFor(*ModelPreset("micro"), p, *ResolveMesh(p, 4));
    EXPECT_TRUE(pl.ok()) << name << ": " << pl.status();
  }
}

TEST(LayoutTest, BadOptionsAreRefused) {
  LayoutOptions o;
  EXPECT_EQ(BuildLayout(*ModelPreset("tiny"), o, Sharding{0}).status().code(),
            absl::StatusCode::kInvalidArgument);
  Sharding ints{2};
  ints.dtype = DataType::kI32;
  EXPECT_EQ(BuildLayout(*ModelPreset("tiny"), o, ints).status().code(),
            absl::StatusCode::kInvalidArgument);
  o.bucket_policy = BucketPolicy::kMerge;
  EXPECT_EQ(BuildLayout(*ModelPreset("tiny"), o, Sharding{2}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PolicyTest, PresetsAreValidAndUnknownNamesRefused) {
  for (const std::string& name : PolicyPresetNames()) {
    auto p = PolicyPreset(name);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_TRUE(ValidatePolicy(*p).ok()) << name;
  }
  EXPECT_EQ(PolicyPreset("megatron").status().code(),
            absl::StatusCode::kNotFound);
  Policy bad;
  bad.forward_prefetch = -1;
  EXPECT_EQ(ValidatePolicy(bad).code(), absl::StatusCode::kInvalidArgument);
  bad = Policy{};
  bad.host_limit = 1;  // <= prefetch depth: the host would deadlock
  EXPECT_EQ(ValidatePolicy(bad).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace baton::scheduler
