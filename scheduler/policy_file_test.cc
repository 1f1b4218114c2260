#include "baton/scheduler/policy_file.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

// A policy with every knob away from its default.
Policy Unusual() {
  Policy p;
  p.name = "tuned \"x\"";
  p.forward_prefetch = 3;
  p.backward_prefetch = 2;
  p.reshard_after_forward = true;
  p.param_dtype = DataType::kF16;
  p.reduce_dtype = DataType::kBF16;
  p.micro_steps = 8;
  p.reduce_every_micro_step = true;
  p.recompute_blocks = -1;
  p.recompute = Recompute::kSelective;
  p.shared_comm_stream = true;
  p.reduce_window = 5;
  p.host_limit = 4;
  p.copy_in_out = true;
  p.all_reduce = false;
  p.reuse_edges = false;
  p.shard_group = 16;
  p.hpz_group = 8;
  p.layout.bucket_policy = BucketPolicy::kMerge;
  p.layout.merge_target_bytes = (int64_t{1} << 40) + 3;
  p.layout.resident_small_params = false;
  p.layout.resident_max_numel = 123457;
  p.offload = Offload::kOptimizer;
  p.zenflow = true;
  p.zenflow_topk_ratio = 0.125;
  p.zenflow_select_interval = 8;
  p.zenflow_update_interval = 2;
  p.zenflow_staleness = 1;
  return p;
}

// The knobs Unusual() cannot hold with zenflow and a half parameter dtype,
// away from their defaults.
Policy UnusualTechniques() {
  Policy p;
  p.name = "techniques";
  p.optimizer = OptimizerKind::kAdamW8bit;
  p.layout.lora_rank = 8;
  p.layout.lora_alpha = 32;
  p.layout.lora_targets = (1u << static_cast<int>(LoraTarget::kQ)) |
                          (1u << static_cast<int>(LoraTarget::kV));
  p.layout.base_dtype = BaseDtype::kNf4;
  return p;
}

// Every tensor / context / pipeline knob away from its default (they
// exclude offload and hpZ, so Unusual() cannot hold them).
Policy UnusualParallel() {
  Policy p;
  p.name = "parallel";
  p.micro_steps = 8;
  p.tensor_parallel = 4;
  p.sequence_parallel = true;
  p.tp_comm_overlap = true;
  p.context_parallel = 2;
  p.pipeline_parallel = 4;
  p.virtual_stages = 3;
  p.pipeline_schedule = PipelineSchedule::kInterleaved;
  p.pipeline_first_layers = 5;
  p.pipeline_last_layers = 6;
  p.gather_per_micro_batch = true;
  p.expert_parallel = 8;
  p.expert_tensor_parallel = 4;
  p.moe_dispatcher = MoeDispatcher::kHierarchical;
  p.moe_a2a_overlap = true;
  p.moe_shared_overlap = true;
  p.moe_capacity_factor = 1.25;
  return p;
}

TEST(PolicyFileTest, RoundTripIsExactForPresetsAndEveryKnob) {
  for (const std::string& name : PolicyPresetNames()) {
    const Policy p = *PolicyPreset(name);
    auto back = PolicyFromJson(PolicyToJson(p));
    ASSERT_TRUE(back.ok()) << name << ": " << back.status();
    EXPECT_TRUE(SamePolicy(p, *back)) << name << "\n" << PolicyToJson(p);
  }
  const Policy up = UnusualParallel();
  ASSERT_TRUE(ValidatePolicy(up).ok()) << ValidatePolicy(up);
  auto upb = PolicyFromJson(PolicyToJson(up));
  ASSERT_TRUE(upb.ok()) << upb.status();
  EXPECT_TRUE(SamePolicy(up, *upb)) << PolicyToJson(up);
  const Policy u = Unusual();
  ASSERT_TRUE(ValidatePolicy(u).ok());
  auto back = PolicyFromJson(PolicyToJson(u));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SamePolicy(u, *back)) << PolicyToJson(u) << "\n" << PolicyToJson(*back);
  EXPECT_EQ(back->layout.merge_target_bytes, (int64_t{1} << 40) + 3);
  EXPECT_EQ(back->name, "tuned \"x\"");
  const Policy t = UnusualTechniques();
  ASSERT_TRUE(ValidatePolicy(t).ok());
  back = PolicyFromJson(PolicyToJson(t));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SamePolicy(t, *back)) << PolicyToJson(t) << "\n" << PolicyToJson(*back);
}

TEST(PolicyFileTest, EveryKnobIsWrittenAndDetectedBySamePolicy) {
  const std::string text = PolicyToJson(Policy{});
  for (const std::string& key : PolicyFileFields()) {
    EXPECT_NE(text.find(absl::StrCat("\"", key, "\":")), std::string::npos) << key;
  }
  EXPECT_EQ(PolicyFileFields().size(), 48u);
  // Each knob of Unusual() differs from the default, and SamePolicy sees
  // each one: set them one at a time through the file.
  const std::string unusual = PolicyToJson(Unusual());
  const std::string parallel = PolicyToJson(UnusualParallel());
  const std::string techniques = PolicyToJson(UnusualTechniques());
  const std::set<std::string> technique_keys = {"optimizer", "lora_rank", "lora_alpha",
                                                "lora_targets", "base_dtype"};
  const std::map<std::string, std::string> needs = {
      {"sequence_parallel", ", \"tensor_parallel\": 2"},
      {"tp_comm_overlap", ", \"tensor_parallel\": 2"},
      {"virtual_stages", ", \"pipeline_parallel\": 2, \"pipeline_schedule\": \"interleaved\""},
      {"pipeline_schedule", ", \"pipeline_parallel\": 2, \"virtual_stages\": 2"},
      {"pipeline_first_layers", ", \"pipeline_parallel\": 2"},
      {"pipeline_last_layers", ", \"pipeline_parallel\": 2"},
      {"gather_per_micro_batch", ", \"pipeline_parallel\": 2"},
      {"expert_tensor_parallel", ", \"tensor_parallel\": 4"},
  };
  for (const std::string& key : PolicyFileFields()) {
    // false / true in both
    if (key == "all_reduce" || key == "reshard_after_forward") continue;
    const bool par = needs.count(key) > 0 || key == "tensor_parallel" ||
                     key == "context_parallel" || key == "pipeline_parallel" ||
                     key.rfind("expert_", 0) == 0 || key.rfind("moe_", 0) == 0;
    const std::string& from = par ? parallel : technique_keys.count(key) ? techniques : unusual;
    const size_t at = from.find(absl::StrCat("\"", key, "\":"));
    std::string field = from.substr(at, from.find('\n', at) - at);
    if (!field.empty() && field.back() == ',') field.pop_back();  // lists hold commas
    const std::string one =
        absl::StrCat("{", field, needs.count(key) ? needs.at(key) : "",
                     key == "host_limit" ? ", \"forward_prefetch\": 3" : "",
                     key == "merge_target_bytes" ? ", \"bucket_policy\": \"merge\"" : "",
                     key == "bucket_policy" ? ", \"merge_target_bytes\": 1" : "",
                     key == "zenflow" ? ", \"offload\": \"optimizer\"" : "",
                     key == "base_dtype" ? ", \"lora_rank\": 4" : "",
                     "}");
    auto p = PolicyFromJson(one);
    ASSERT_TRUE(p.ok()) << one << ": " << p.status();
    EXPECT_FALSE(SamePolicy(*p, Policy{})) << one;
  }
}

TEST(PolicyFileTest, PresetIsTheBaseAndKnobsOverrideIt) {
  auto p = PolicyFromJson(R"({"preset": "zero3", "forward_prefetch": 2,
                              "host_limit": 3})");
  ASSERT_TRUE(p.ok()) << p.status();
  Policy want = *PolicyPreset("zero3");
  want.forward_prefetch = 2;
  want.host_limit = 3;
  EXPECT_TRUE(SamePolicy(*p, want));
  EXPECT_EQ(p->name, "zero3");
  auto named = PolicyFromJson(R"({"preset": "hsdp", "name": "mine"})");
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(named->name, "mine");
  EXPECT_EQ(named->shard_group, 4);
  auto empty = PolicyFromJson("{}");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(SamePolicy(*empty, Policy{}));
}

// Each bad input is InvalidArgument whose message names the field.
TEST(PolicyFileTest, BadFieldsAreRefusedNamingTheField) {
  const struct {
    const char* text;
    const char* names;
  } cases[] = {
      {R"({"forward_prefech": 1})", "unknown field \"forward_prefech\""},
      {R"({"forward_prefetch": "1"})", "\"forward_prefetch\""},
      {R"({"forward_prefetch": 1.5})", "\"forward_prefetch\""},
      {R"({"forward_prefetch": 2.0})", "\"forward_prefetch\""},
      {R"({"backward_prefetch": -1})", "\"backward_prefetch\""},
      {R"({"micro_steps": 0})", "\"micro_steps\""},
      {R"({"shard_group": 99999999999})", "\"shard_group\""},
      {R"({"recompute_blocks": -2})", "\"recompute_blocks\""},
      {R"({"reshard_after_forward": 1})", "\"reshard_after_forward\""},
      {R"({"reuse_edges": "true"})", "\"reuse_edges\""},
      {R"({"reduce_dtype": "int32"})", "\"reduce_dtype\""},
      {R"({"param_dtype": "fp8"})", "\"param_dtype\""},
      {R"({"param_dtype": 1})", "\"param_dtype\""},
      {R"({"bucket_policy": "greedy"})", "\"bucket_policy\""},
      {R"({"bucket_policy": "merge"})", "merge_target_bytes"},
      {R"({"host_limit": 1})", "host_limit"},
      {R"({"preset": "fsdp3"})", "\"preset\""},
      {R"({"preset": 3})", "\"preset\""},
      {R"({"name": ""})", "\"name\""},
      {R"({"hpz_group": null})", "\"hpz_group\""},
      {R"({"offload": "cpu"})", "\"offload\""},
      {R"({"offload": true})", "\"offload\""},
      {R"({"preset": "ddp", "offload": "optimizer"})", "offload"},
      {R"({"zenflow": true})", "zenflow"},
      {R"({"zenflow_topk_ratio": 0})", "zenflow_topk_ratio"},
      {R"({"zenflow_topk_ratio": 1.5})", "zenflow_topk_ratio"},
      {R"({"zenflow_topk_ratio": "0.1"})", "\"zenflow_topk_ratio\""},
      {R"({"zenflow_update_interval": 0})", "\"zenflow_update_interval\""},
      {R"({"zenflow_select_interval": "sometimes"})", "\"zenflow_select_interval\""},
      {R"({"zenflow_select_interval": 2.5})", "\"zenflow_select_interval\""},
      {R"({"zenflow_staleness": -1})", "\"zenflow_staleness\""},
      {R"({"zenflow_staleness": "soon"})", "\"zenflow_staleness\""},
      {R"({"zenflow_staleness": 4})", "zenflow_staleness"},
      {R"({"zenflow_update_interval": 2, "zenflow_staleness": 2})", "zenflow_staleness"},
      {R"({"recompute": "attention"})", "\"recompute\" must be \"full\" or \"selective\""},
      {R"({"lora_rank": -1})", "\"lora_rank\""},
      {R"({"lora_rank": 8, "lora_targets": "q,x"})", "unknown LoRA target \"x\""},
      {R"({"lora_targets": 3})", "\"lora_targets\" must be a list"},
      {R"({"lora_alpha": 0})", "lora_alpha"},
      {R"({"base_dtype": "nf4"})", "base_dtype = nf4 stores the base weights frozen"},
      {R"({"base_dtype": "int4"})", "\"base_dtype\" must be \"param\" or \"nf4\""},
      {R"({"preset": "ddp", "lora_rank": 8, "base_dtype": "nf4"})", "all_reduce"},
      {R"({"preset": "zenflow", "lora_rank": 8})", "does not combine with zenflow"},
      {R"({"optimizer": "adam8"})", "\"optimizer\" must be \"adamw\" or \"adamw8bit\""},
      {R"({"optimizer": "adamw8bit", "param_dtype": "half"})",
       "optimizer = adamw8bit keeps an fp32 master"},
      {R"({"preset": "zenflow", "optimizer": "adamw8bit"})",
       "optimizer = adamw8bit does not combine with zenflow"},
      {R"([1, 2])", "JSON object"},
      {R"({"micro_steps": 1)", "not valid JSON"},
      {R"({"micro_steps": 2, "name": "x", "micro_steps": 4})",
       "my.json: duplicate key \"micro_steps\""},
      {R"({"preset": "baton", "preset": "ddp"})", "my.json: duplicate key \"preset\""},
  };
  for (const auto& c : cases) {
    auto p = PolicyFromJson(c.text, "my.json");
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_EQ(p.status().code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_NE(p.status().message().find(c.names), std::string::npos)
        << c.text << " -> " << p.status().message();
    EXPECT_NE(p.status().message().find("my.json"), std::string::npos)
        << p.status().message();
    EXPECT_EQ(p.status().message().find('\n'), std::string::npos);
  }
}

// Issue 29: a file's knob has the bound the same knob has through every
// other route (scheduler/limits.h): one past it is refused from the file
// naming the field, and through the API (ValidatePolicy) naming the knob.
TEST(PolicyFileTest, AFileGetsNoFurtherThanAnyOtherRoute) {
  const struct {
    const char* key;
    int Policy::*member;
    int64_t lo, hi;
  } knobs[] = {
      {"micro_steps", &Policy::micro_steps, 1, kMaxMicroSteps},
      {"forward_prefetch", &Policy::forward_prefetch, 0, kMaxPrefetchDepth},
      {"backward_prefetch", &Policy::backward_prefetch, 0, kMaxPrefetchDepth},
      {"reduce_window", &Policy::reduce_window, 1, kMaxPrefetchDepth},
      {"recompute_blocks", &Policy::recompute_blocks, -1, kMaxModelLayers},
      {"shard_group", &Policy::shard_group, 0, kMaxWorldSize},
      {"hpz_group", &Policy::hpz_group, 0, kMaxWorldSize},
  };
  for (const auto& k : knobs) {
    const std::string at = absl::StrCat("{\"", k.key, "\": ", k.hi, "}");
    EXPECT_TRUE(PolicyFromJson(at, "f.json").ok()) << at;
    const std::string past = absl::StrCat("{\"", k.key, "\": ", k.hi + 1, "}");
    EXPECT_EQ(PolicyFromJson(past, "f.json").status().message(),
              absl::StrCat("f.json: field \"", k.key, "\" must be an integer in [", k.lo,
                           ", ", k.hi, "], got ", k.hi + 1));
    Policy p;
    p.*k.member = static_cast<int>(k.hi + 1);
    EXPECT_EQ(ValidatePolicy(p).message(),
              absl::StrCat("policy baton: ", k.key, " = ", k.hi + 1, " is outside [", k.lo,
                           ", ", k.hi, "]"));
  }
  Policy p;
  p.layout.merge_target_bytes = kMaxPolicyBytes + 1;
  EXPECT_FALSE(ValidatePolicy(p).ok());
  p = Policy{};
  p.zenflow_update_interval = static_cast<int>(kMaxZenFlowInterval) + 1;
  EXPECT_NE(ValidatePolicy(p).message().find("zenflow_update_interval"), std::string::npos);
}

// "auto" intervals are written and read as "auto" (kAutoInterval).
TEST(PolicyFileTest, ZenFlowIntervalsMayBeAuto) {
  auto p = PolicyFromJson(
      R"({"preset": "zenflow", "zenflow_select_interval": "auto",
          "zenflow_update_interval": 3, "zenflow_topk_ratio": 0.25})");
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->offload, Offload::kOptimizer);
  EXPECT_TRUE(p->zenflow);
  EXPECT_EQ(p->zenflow_select_interval, kAutoInterval);
  EXPECT_EQ(p->zenflow_update_interval, 3);
  EXPECT_EQ(p->zenflow_topk_ratio, 0.25);
  const std::string text = PolicyToJson(*p);
  EXPECT_NE(text.find(R"("zenflow_select_interval": "auto")"), std::string::npos) << text;
  // The preset's staleness is auto: update_interval - 1.
  EXPECT_EQ(p->zenflow_staleness, kAutoInterval);
  EXPECT_NE(text.find(R"("zenflow_staleness": "auto")"), std::string::npos) << text;
  EXPECT_EQ(ResolveZenFlow(*p).staleness, 2);
  auto sync = PolicyFromJson(R"({"preset": "zenflow", "zenflow_staleness": 0})");
  ASSERT_TRUE(sync.ok()) << sync.status();
  EXPECT_EQ(ResolveZenFlow(*sync).staleness, 0);
  EXPECT_EQ(ResolveZenFlow(*sync).update, kAutoUpdateInterval);
  EXPECT_NE(text.find(R"("offload": "optimizer")"), std::string::npos) << text;
}

TEST(PolicyFileTest, WriteThenReadAFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/policy_file_test.json");
  ASSERT_TRUE(WritePolicyFile(path, Unusual()).ok());
  auto back = ReadPolicyFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_TRUE(SamePolicy(*back, Unusual()));

  auto missing = ReadPolicyFile(absl::StrCat(path, ".missing"));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  auto dir = ReadPolicyFile(tmp ? tmp : "/tmp");
  EXPECT_EQ(dir.status().code(), absl::StatusCode::kInvalidArgument);

  Policy bad;
  bad.micro_steps = 0;
  EXPECT_EQ(WritePolicyFile(path, bad).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(WritePolicyFile("/nonexistent-dir/x.json", Policy{}).ok());
  // A full disk: the text stays in the buffer until the close, which fails.
  const Status full = WritePolicyFile("/dev/full", Policy{});
  EXPECT_EQ(full.code(), absl::StatusCode::kUnavailable) << full;
  EXPECT_EQ(full.message(), "cannot write policy file /dev/full: No space left on device");
}

}  // namespace
}  // namespace baton::scheduler
