// AdamW through the optimizer hook (optim/adamw_hook.h) on inproc ranks:
// under offload the host step gives the device step's bits.
#include "baton/optim/adamw_hook.h"

#include <cstring>
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
    const Policy& policy, int ranks, int steps, const ExecutorOptions& o) {
  BATON_ASSIGN_OR_RETURN(testing::InprocGroup group, CreateInprocGroup(ranks));
  ToyModel toy(ranks);
  std::vector<Status> errors(ranks);
  std::vector<std::vector<std::vector<float>>> masters(ranks);
  RunRanks(ranks, [&](int r) {
    errors[r] = [&]() -> Status {
      BATON_ASSIGN_OR_RETURN(StepGraph graph, BuildStepGraph(Micro(), policy, ranks));
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

}  // namespace
}  // namespace baton::optim
