#include "baton/examples/llama_trainer.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "baton/comm/factory.h"
#include "gtest/gtest.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/tensor_parallel.h"

namespace baton::examples {
namespace {

// One rank, the micro model, fp32: the loss of one step and the gradient
// the executor hands to the optimizer (before any update).
struct Probe {
  double loss = 0;
  std::map<std::string, std::vector<float>> grads;  // by parameter name
};

scheduler::ModelSpec Micro(bool tied) {
  scheduler::ModelSpec s = *scheduler::ModelPreset("micro");
  s.tie_embeddings = tied;
  return s;
}

// LoRA's adapters in RunOnce: none (rank 0), or rank `rank` on every
// target, the base in the parameter dtype or NF4.
struct Adapters {
  int rank = 0;
  bool nf4 = false;
};

bool EndsWith(const std::string& s, const char* tail) {
  const size_t n = std::strlen(tail);
  return s.size() >= n && s.compare(s.size() - n, n, tail) == 0;
}

StatusOr<Probe> RunOnce(const scheduler::ModelSpec& spec, const std::string& perturb,
                        int64_t index, double delta, const std::string& policy_name,
                        Adapters adapters = {}) {
  auto policy = *scheduler::PolicyPreset(policy_name);
  policy.param_dtype = DataType::kF32;
  policy.layout.lora_rank = adapters.rank;
  policy.layout.lora_alpha = 3.0;
  if (adapters.nf4) policy.layout.base_dtype = scheduler::BaseDtype::kNf4;
  BATON_ASSIGN_OR_RETURN(auto graph, scheduler::BuildStepGraph(spec, policy, 1));
  BATON_ASSIGN_OR_RETURN(auto device, CreateHostDevice());
  CommConfig cfg;
  cfg.device = device.get();
  cfg.group = "llama_trainer_test";
  BATON_ASSIGN_OR_RETURN(auto comm, CreateCommunicator(cfg));
  BATON_ASSIGN_OR_RETURN(auto corpus, Corpus::Synthetic(spec.vocab, 3));
  TrainConfig config;
  config.seq = 6;
  config.batch = 2;
  BATON_ASSIGN_OR_RETURN(auto model, LlamaRank::Create(graph, config, corpus, *device, 1, 0));
  BATON_ASSIGN_OR_RETURN(auto exec, scheduler::Executor::Create(graph, *device, *comm));
  BATON_RETURN_IF_ERROR(exec->InitParameters([&](const scheduler::ParamSlot& slot, float* v) {
    for (int64_t i = 0; i < slot.numel; ++i) {
      v[i] = InitialParameter(slot.name, i, 1) * 4;  // larger weights: a sharper test
      // LoRA's b starts at 0 in training; nonzero here, so that a's
      // gradient is not 0 too.
      if (EndsWith(slot.name, ".lora_b")) v[i] = InitialParameter(slot.name + "~", i, 1) * 4;
      if (slot.name == perturb && i == index) v[i] += static_cast<float>(delta);
    }
  }, Nf4Packer()));
  Probe probe;
  scheduler::StepCallbacks cb = model->Callbacks();
  cb.optimizer_writes_shard = false;  // the probe below updates nothing
  cb.optimizer = [&](const scheduler::OptimizerContext& ctx) {
    return ctx.stream->Enqueue([&probe, ctx]() {
      for (const auto& slot : ctx.spec->params) {
        auto& g = probe.grads[slot.name];
        g.resize(slot.numel);
        const float* grad = static_cast<const float*>(ctx.grad);
        for (int64_t i = 0; i < slot.numel; ++i) {
          g[i] = static_cast<float>(grad[slot.offset + i] * ctx.grad_scale);
        }
      }
      return absl::OkStatus();
    });
  };
  BATON_RETURN_IF_ERROR(model->LoadBatch(exec->compute_stream(), 0));
  BATON_RETURN_IF_ERROR(exec->Step(cb));
  BATON_RETURN_IF_ERROR(exec->Synchronize());
  BATON_ASSIGN_OR_RETURN(double sum, model->LossSum(exec->compute_stream()));
  probe.loss = sum / model->tokens_per_step();
  return probe;
}

// The whole model's backward (every op, the residual bookkeeping, the
// executor's gradient slots, = and +=) against central differences of the
// loss, for a few elements of every parameter.
class LlamaGradientTest : public ::testing::TestWithParam<bool> {};

TEST_P(LlamaGradientTest, GradientsMatchFiniteDifferencesOfTheLoss) {
  const auto spec = Micro(GetParam());
  auto base = RunOnce(spec, "", 0, 0, "baton");
  ASSERT_TRUE(base.ok()) << base.status();
  ASSERT_FALSE(base->grads.empty());
  // Fourth-order central differences: large enough steps for the fp32
  // loss, small enough truncation error for the model's curvature.
  const double h = 5e-3;
  for (const auto& [name, g] : base->grads) {
    for (int64_t i : {int64_t{0}, static_cast<int64_t>(g.size() / 2),
                      static_cast<int64_t>(g.size() - 1)}) {
      double f[4];
      const double steps[4] = {h, -h, 2 * h, -2 * h};
      for (int k = 0; k < 4; ++k) {
        auto r = RunOnce(spec, name, i, steps[k], "baton");
        ASSERT_TRUE(r.ok()) << r.status();
        f[k] = r->loss;
      }
      const double fd = (8 * (f[0] - f[1]) - (f[2] - f[3])) / (12 * h);
      EXPECT_NEAR(g[i], fd, 3e-3 * (1 + std::abs(fd)) + 3e-4) << name << "[" << i << "]";
    }
  }
}

// LoRA on every target (rank 2, alpha 3): the executor hands the optimizer
// the adapters' gradients only (the base is frozen), and each matches
// central differences of the loss; over an NF4 base too (the dequantized
// weights are constants of the loss).
TEST(LlamaLoraTest, AdapterGradientsMatchFiniteDifferencesOfTheLoss) {
  const auto spec = Micro(false);
  for (bool nf4 : {false, true}) {
    SCOPED_TRACE(nf4 ? "nf4 base" : "f32 base");
    const Adapters adapters{2, nf4};
    auto base = RunOnce(spec, "", 0, 0, "baton", adapters);
    ASSERT_TRUE(base.ok()) << base.status();
    ASSERT_EQ(base->grads.size(), 2u * 7 * spec.layers);
    const double h = 5e-3;
    for (const auto& [name, g] : base->grads) {
      ASSERT_TRUE(EndsWith(name, ".lora_a") || EndsWith(name, ".lora_b")) << name;
      for (int64_t i : {int64_t{0}, static_cast<int64_t>(g.size() - 1)}) {
        double f[4];
        const double steps[4] = {h, -h, 2 * h, -2 * h};
        for (int k = 0; k < 4; ++k) {
          auto r = RunOnce(spec, name, i, steps[k], "baton", adapters);
          ASSERT_TRUE(r.ok()) << r.status();
          f[k] = r->loss;
        }
        const double fd = (8 * (f[0] - f[1]) - (f[2] - f[3])) / (12 * h);
        EXPECT_NEAR(g[i], fd, 3e-3 * (1 + std::abs(fd)) + 3e-4) << name << "[" << i << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tied, LlamaGradientTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "tied" : "untied"; });

// A pipeline stage graph planning the blocks' saved activations: the rank
// takes it when each buffer holds what a block saves, and refuses a
// smaller declaration in one line.
TEST(LlamaSavedActivationsTest, PlannedBuffersMustHoldABlock) {
  const scheduler::ModelSpec spec = Micro(false);
  auto policy = *scheduler::PolicyPreset("baton");
  policy.param_dtype = DataType::kF32;
  policy.pipeline_parallel = 2;
  policy.micro_steps = 2;
  TrainConfig config;
  config.seq = 6;
  config.batch = 1;
  std::vector<int64_t> saved = SavedActivationBytes(spec, config, DataType::kF32);
  ASSERT_EQ(saved.size(), static_cast<size_t>(spec.layers + 3));
  EXPECT_EQ(saved.front(), 0);
  EXPECT_GT(saved[1], 0);
  auto device = CreateHostDevice();
  ASSERT_TRUE(device.ok()) << device.status();
  auto corpus = Corpus::Synthetic(spec.vocab, 3);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  for (int64_t shrink : {0, 256}) {
    std::vector<int64_t> declared = saved;
    for (int64_t b = 1; b <= spec.layers; ++b) declared[b] -= shrink;
    auto step = scheduler::BuildParallelStep(spec, policy, 2, config.seq, config.batch, {}, {},
                                             true, false, declared);
    ASSERT_TRUE(step.ok()) << step.status();
    auto rank = LlamaRank::Create(step->stages[0], config, *corpus, **device, 1, 0);
    if (shrink == 0) {
      EXPECT_TRUE(rank.ok()) << rank.status();
    } else {
      EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument) << rank.status();
      EXPECT_NE(rank.status().message().find("saved activation buffer saved.block0"),
                std::string::npos) << rank.status();
    }
  }
}

// Tensor parallelism: a stage plans the blocks of this rank's slice, and
// under sequence parallelism x1 and the norms' statistics of its sequence
// shard. The rank takes what SavedActivationBytes gives for its slice and
// shards, and refuses the shard's sizes where the blocks keep whole
// sequences (no sequence parallelism).
TEST(LlamaSavedActivationsTest, TensorParallelSliceAndSequenceShards) {
  const scheduler::ModelSpec spec = Micro(false);
  auto slice = scheduler::TensorParallelSlice(spec, 2);
  ASSERT_TRUE(slice.ok()) << slice.status();
  TrainConfig config;
  config.seq = 8;
  config.batch = 1;
  const std::vector<int64_t> model = SavedActivationBytes(spec, config, DataType::kF32);
  const std::vector<int64_t> whole = SavedActivationBytes(*slice, config, DataType::kF32);
  const std::vector<int64_t> shard = SavedActivationBytes(*slice, config, DataType::kF32, 2);
  // The slice's q and o (heads 2 of 4) are 512 bytes each instead of 1024,
  // k and v (1 of 2 KV heads) 256 instead of 512, g, u and s (FFN 32 of 64)
  // 1024 instead of 2048, lse 256 (aligned) as before; the shard's x1 is 4
  // of 8 rows (the statistics stay one aligned 256 bytes).
  EXPECT_EQ(model[1] - whole[1], 2 * 512 + 2 * 256 + 3 * 1024);
  EXPECT_EQ(whole[1] - shard[1], 512);
  auto device = CreateHostDevice();
  ASSERT_TRUE(device.ok()) << device.status();
  auto corpus = Corpus::Synthetic(spec.vocab, 3);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  for (bool sp : {false, true}) {
    for (bool sharded : {false, true}) {
      auto policy = *scheduler::PolicyPreset("baton");
      policy.param_dtype = DataType::kF32;
      policy.tensor_parallel = 2;
      policy.sequence_parallel = sp;
      policy.pipeline_parallel = 2;
      policy.micro_steps = 2;
      auto step = scheduler::BuildParallelStep(spec, policy, 4, config.seq, config.batch, {}, {},
                                               true, true, sharded ? shard : whole);
      ASSERT_TRUE(step.ok()) << step.status();
      auto rank = LlamaRank::Create(step->stages[0], config, *corpus, **device, 1, 0, 0);
      if (sp || !sharded) {
        EXPECT_TRUE(rank.ok()) << "sp " << sp << ": " << rank.status();
      } else {
        EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument) << rank.status();
      }
    }
  }
}

TEST(CorpusTest, SequencesAreDeterministicAndInRange) {
  auto c = *Corpus::Synthetic(50, 7);
  std::vector<int32_t> a(17), b(17);
  ASSERT_TRUE(c.Sequence(12, 16, a.data()).ok());
  ASSERT_TRUE(c.Sequence(12, 16, b.data()).ok());
  EXPECT_EQ(a, b);
  for (int32_t t : a) EXPECT_TRUE(t >= 0 && t < 50);
  EXPECT_EQ(Corpus::FromFile("/nonexistent/file", 512, 1).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(Corpus::FromFile("/dev/null", 100, 1).status().code(),
            absl::StatusCode::kInvalidArgument);
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(tmp != nullptr ? tmp : "/tmp") + "/empty.txt";
  std::fclose(std::fopen(path.c_str(), "w"));
  auto empty = Corpus::FromFile(path, 512, 1);
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->Sequence(0, 4, a.data()).code(), absl::StatusCode::kInvalidArgument);
  // A directory or a device is refused naming it (was an uncaught
  // std::ios_failure for a directory).
  for (const char* bad : {"/tmp", "/dev/null"}) {
    auto r = Corpus::FromFile(bad, 512, 1);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos) << r.status();
  }
}

}  // namespace
}  // namespace baton::examples
