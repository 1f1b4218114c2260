// AdamW through the optimizer hook (optim/adamw_hook.h) on inproc ranks:
// under offload the host step gives the device step's bits.
#include "baton/optim/adamw_hook.h"

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "baton/scheduler/testing/toy_model.h"
#include "gtest/gtest.h"

namespace baton::optim {
namespace {

using namespace ::baton::scheduler;  // the executor's types, throughout
namespace testing = ::baton::scheduler::testing;
using testing::CreateInprocGroup;
using testing::RunRanks;
using testing::ToyModel;

ModelSpec Micro() { return *ModelPreset("micro"); }

// Trains the toy model with the AdamW hook (fused with the cast, as
// examples/llama_trainer.cc does) and returns every rank's master shards.
StatusOr<std::vector<std::vector<std::vector<float>>>> TrainAdamW(
    const Policy& policy, int ranks, int steps, const ExecutorOptions& o,
    const ModelSpec& spec = Micro()) {
  BATON_ASSIGN_OR_RETURN(testing::InprocGroup group, CreateInprocGroup(ranks));
  ToyModel toy(ranks);
  std::vector<Status> errors(ranks);
  std::vector<std::vector<std::vector<float>>> masters(ranks);
  RunRanks(ranks, [&](int r) {
    errors[r] = [&]() -> Status {
      BATON_ASSIGN_OR_RETURN(StepGraph graph, BuildStepGraph(spec, policy, ranks));
      BATON_RETURN_IF_ERROR(VerifyStepGraph(graph));
      BATON_ASSIGN_OR_RETURN(
          auto exec, Executor::Create(std::move(graph), *group.device,
                                      *group.comms[r], o));
      BATON_RETURN_IF_ERROR(exec->InitParameters([](const ParamSlot& p, float* out) {
        for (int64_t i = 0; i < p.numel; ++i) out[i] = testing::InitialValue(p, i);
      }));
      StepCallbacks cb = toy.Callbacks(r);
      const bool offload = policy.offload != Offload::kNone;
      ops::AdamWConfig c;
      c.lr = 0.01f;
      c.weight_decay = 0.1f;
      cb.optimizer = [offload, hook = AdamWHook(c)](const OptimizerContext& ctx) -> Status {
        if (ctx.on_host != offload) return absl::InternalError("on_host is wrong");
        return hook(ctx);
      };
      cb.optimizer_writes_shard = true;
      for (int s = 0; s < steps; ++s) BATON_RETURN_IF_ERROR(exec->Step(cb));
      BATON_RETURN_IF_ERROR(exec->Synchronize());
      for (int b = 0; b < static_cast<int>(exec->graph().layout.buckets.size()); ++b) {
        BATON_ASSIGN_OR_RETURN(std::vector<float> m, exec->ReadMaster(b));
        masters[r].push_back(std::move(m));
      }
      return absl::OkStatus();
    }();
    if (!errors[r].ok()) group.comms[r]->Abort();
  });
  for (const Status& st : errors) BATON_RETURN_IF_ERROR(st);
  return masters;
}

// zero_offload's step is the device step moved: the hook's host AdamW
// (threads, AVX2) on the host stream gives bit for bit the master shards
// of its AdamW on the device after several steps, with random delays on
// every stream and the arena poisoned, for fp32 and bf16 parameters and
// accumulation.
TEST(AdamWHookTest, ZeroOffloadIsBitIdenticalToTheDeviceStep) {
  for (DataType t : {DataType::kF32, DataType::kBF16}) {
    for (int micro : {1, 2}) {
      Policy off = *PolicyPreset("zero_offload");
      off.param_dtype = t;
      off.micro_steps = micro;
      off.reduce_every_micro_step = micro == 2;
      Policy dev = off;
      dev.offload = Offload::kNone;
      ExecutorOptions o;
      o.poison = true;
      o.max_delay_us = 30;
      const auto a = TrainAdamW(off, 2, 6, o);
      const auto b = TrainAdamW(dev, 2, 6, o);
      ASSERT_TRUE(a.ok()) << a.status();
      ASSERT_TRUE(b.ok()) << b.status();
      ASSERT_EQ(a->size(), b->size());
      bool moved = false;
      for (size_t r = 0; r < a->size(); ++r) {
        ASSERT_EQ((*a)[r].size(), (*b)[r].size());
        for (size_t k = 0; k < (*a)[r].size(); ++k) {
          const std::vector<float>& x = (*a)[r][k];
          const std::vector<float>& y = (*b)[r][k];
          ASSERT_EQ(x.size(), y.size());
          EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * 4), 0)
              << DataTypeName(t) << " micro " << micro << " rank " << r
              << " bucket " << k;
          moved |= !x.empty() && x[0] != 0;
        }
      }
      EXPECT_TRUE(moved);
    }
  }
}

// Every parameter's full fp32 master by name, from the ranks' shards
// (TrainAdamW's result) of `policy`'s layout.
std::map<std::string, std::vector<float>> FullMasters(
    const ModelSpec& spec, const Policy& policy, int ranks,
    const std::vector<std::vector<std::vector<float>>>& shards) {
  const DeviceMesh mesh = *ResolveMesh(policy, ranks);
  const ModelLayout layout = *LayoutFor(spec, policy, mesh);
  std::map<std::string, std::vector<float>> out;
  for (size_t b = 0; b < layout.buckets.size(); ++b) {
    const Bucket& bk = layout.buckets[b];
    std::vector<float> flat;
    if (!layout.sharding.shard) {
      flat = shards[0][b];
    } else {
      // Ranks 0 .. S-1 hold positions 0 .. S-1 of the first shard group
      // (policy.h ResolveMesh).
      for (int pos = 0; pos < layout.sharding.ranks; ++pos) {
        const std::vector<float>& s = shards[pos][b];
        flat.insert(flat.end(), s.begin(), s.end());
      }
    }
    for (const ParamSlot& p : bk.params) {
      out[p.name].assign(flat.begin() + p.offset, flat.begin() + p.offset + p.numel);
    }
  }
  return out;
}

// adamw8bit's state is defined on each parameter's blocks, not on the
// sharding: the same gradients (the toy model's are exact integers, so
// every reduction order gives the same sums) through the 8-bit hook give
// bit for bit the same masters unsharded (ddp: every rank steps whole
// buckets), sharded per unit over 4 ranks (baton), over merged buckets with
// small parameters resident (zero3), in groups of 2 (hsdp), and with the
// state on the host (zero_offload), with bf16 and fp32 parameters.
TEST(AdamWHookTest, EightBitStateDoesNotDependOnTheSharding) {
  ModelSpec spec = Micro();  // 2 blocks; widened so that parameters span
  spec.hidden = 64;          // several 2048-element blocks and shards
  spec.intermediate = 192;   // split parameters
  spec.head_dim = 16;
  spec.vocab = 96;
  for (DataType t : {DataType::kF32, DataType::kBF16}) {
    std::map<std::string, std::vector<float>> want;
    for (const char* name : {"ddp", "baton", "zero3", "hsdp", "zero_offload"}) {
      SCOPED_TRACE(::testing::Message() << name << " " << DataTypeName(t));
      Policy p = *PolicyPreset(name);
      p.param_dtype = t;
      p.optimizer = OptimizerKind::kAdamW8bit;
      if (p.shard_group > 0) p.shard_group = 2;
      if (p.layout.bucket_policy == BucketPolicy::kMerge) {
        p.layout.merge_target_bytes = 40000;  // a few blocks per bucket
      }
      ExecutorOptions o;
      o.poison = t == DataType::kBF16;
      const auto shards = TrainAdamW(p, 4, 3, o, spec);
      ASSERT_TRUE(shards.ok()) << shards.status();
      const auto got = FullMasters(spec, p, 4, *shards);
      if (want.empty()) {
        want = got;
        continue;
      }
      ASSERT_EQ(got.size(), want.size());
      for (const auto& [param, values] : want) {
        ASSERT_EQ(got.at(param).size(), values.size()) << param;
        EXPECT_EQ(std::memcmp(got.at(param).data(), values.data(), values.size() * 4), 0)
            << param;
      }
    }
    // The quantized state is what moved them: not as fp32 AdamW did.
    Policy fp32 = *PolicyPreset("ddp");
    fp32.param_dtype = t;
    const auto plain = TrainAdamW(fp32, 4, 3, ExecutorOptions{}, spec);
    ASSERT_TRUE(plain.ok()) << plain.status();
    const auto ref = FullMasters(spec, fp32, 4, *plain);
    double diff = 0;
    for (const auto& [param, values] : want) {
      for (size_t i = 0; i < values.size(); ++i) diff += std::abs(values[i] - ref.at(param)[i]);
    }
    EXPECT_GT(diff, 0);
  }
}

}  // namespace
}  // namespace baton::optim
