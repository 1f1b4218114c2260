// Fuzz (seeded random mutation, fixed time budget): ModelFromHfConfig on
// mutated config.json texts returns OK or InvalidArgument, never crashes,
// throws or hangs; an accepted spec has a positive, exact parameter count.
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "baton/runtime/testing/fuzz.h"
#include "baton/scheduler/model.h"
#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

TEST(ModelFuzzTest, MutatedConfigsAreAcceptedOrRefused) {
  const std::vector<std::string> corpus = {
      R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
          "intermediate_size": 14336, "num_hidden_layers": 32,
          "num_attention_heads": 32, "num_key_value_heads": 8,
          "vocab_size": 128256, "rms_norm_eps": 1e-05, "rope_theta": 500000.0,
          "tie_word_embeddings": false, "torch_dtype": "bfloat16",
          "rope_scaling": {"factor": 8.0, "rope_type": "llama3"}})",
      R"({"model_type": "llama", "hidden_size": 2048, "intermediate_size": 8192,
          "num_hidden_layers": 16, "num_attention_heads": 32,
          "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
          "tie_word_embeddings": true})",
      R"({"model_type": "llama", "hidden_size": 32, "intermediate_size": 64,
          "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 64})",
  };
  const auto stats = baton::testing::FuzzFor(
      corpus, absl::Seconds(3), [](const std::string& text) -> Status {
        auto spec = ModelFromHfConfig(text);
        if (!spec.ok()) return spec.status();
        EXPECT_GT(ParameterCount(*spec), 0);
        EXPECT_LE(ParameterCount(*spec), kMaxModelParameters);
        return absl::OkStatus();
      });
  EXPECT_GT(stats.ok, 0);       // the mutations keep some inputs valid
  EXPECT_GT(stats.refused, 0);  // and break others
}

}  // namespace
}  // namespace baton::scheduler
