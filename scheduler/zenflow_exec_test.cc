// ZenFlow in the executor (host runtime, inproc ranks) against the plain
// reference of its algorithm (ops::ZenFlowReference), step by step: the
// weights every forward sees equal the reference's, bit for bit.
//
// The gradients are synthetic (the backward writes a fixed function of the
// step and the element, independent of the weights): k/1024 with |k| <= 64,
// the same on every rank. Their sums over ranks, the 1/ranks scaling
// (ranks a power of two) and the column sums of squares are then exact in
// any order, so the executor's per-shard partial norms, all-reduced over
// the shard group, equal the reference's row-order sums bit for bit and the
// selection is the same; with general gradients they could differ in the
// last place, and the selection only between columns whose norms tie to
// rounding.
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "baton/ops/host_adamw.h"
#include "baton/ops/zenflow_reference.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/testing.h"

namespace baton::scheduler {
namespace {

using testing::CreateInprocGroup;
using testing::RunRanks;

float Grad(int64_t step, const ParamSlot& p, int64_t i) {
  uint64_t h = static_cast<uint64_t>(step) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(i) * 0xBF58476D1CE4E5B9ull ^
               std::hash<std::string>{}(p.name);
  h ^= h >> 29;
  h *= 0x94D049BB133111EBull;
  h ^= h >> 32;
  return static_cast<float>(static_cast<int>(h % 129) - 64) / 1024.0f;
}

// Every forward's view of every parameter, per rank: seen[rank][step][name].
using Seen = std::vector<std::map<int64_t, std::map<std::string, std::vector<float>>>>;

StatusOr<Seen> RunExecutor(const Policy& policy, int ranks, int steps,
                           const ops::AdamWConfig& adamw) {
  BATON_ASSIGN_OR_RETURN(testing::InprocGroup group, CreateInprocGroup(ranks));
  std::vector<Status> errors(ranks);
  Seen seen(ranks);
  RunRanks(ranks, [&](int r) {
    errors[r] = [&]() -> Status {
      BATON_ASSIGN_OR_RETURN(StepGraph graph,
                             BuildStepGraph(*ModelPreset("micro"), policy, ranks));
      BATON_RETURN_IF_ERROR(VerifyStepGraph(graph));
      ExecutorOptions o;
      o.adamw = adamw;
      o.max_delay_us = 20;  // reorders the streams' work where edges allow
      o.poison = true;
      BATON_ASSIGN_OR_RETURN(auto exec, Executor::Create(std::move(graph),
                                                         *group.device,
                                                         *group.comms[r], o));
      BATON_RETURN_IF_ERROR(exec->InitParameters([](const ParamSlot& p, float* out) {
        for (int64_t i = 0; i < p.numel; ++i) out[i] = testing::InitialValue(p, i);
      }));
      auto* mine = &seen[r];
      StepCallbacks cb;
      cb.compute = [mine](const ComputeContext& ctx) -> Status {
        if (ctx.kind == NodeKind::kRecompute) return absl::OkStatus();
        std::vector<TensorView> params = ctx.params, grads = ctx.grads;
        std::vector<bool> acc = ctx.grad_accumulate;
        const int64_t step = ctx.step;
        const bool fwd = ctx.kind == NodeKind::kForward;
        return ctx.stream->Enqueue([=]() {
          for (size_t k = 0; k < params.size(); ++k) {
            const ParamSlot& p = *params[k].param;
            if (fwd) {
              const float* d = static_cast<const float*>(params[k].data);
              (*mine)[step][p.name].assign(d, d + p.numel);
              continue;
            }
            if (acc[k]) continue;  // a second user adds nothing
            float* g = static_cast<float*>(grads[k].data);
            for (int64_t i = 0; i < p.numel; ++i) g[i] = Grad(step, p, i);
          }
          return absl::OkStatus();
        });
      };
      for (int s = 0; s < steps; ++s) BATON_RETURN_IF_ERROR(exec->Step(cb));
      return exec->Synchronize();
    }();
    if (!errors[r].ok()) group.comms[r]->Abort();
  });
  for (const Status& st : errors) BATON_RETURN_IF_ERROR(st);
  return seen;
}

// 1-D parameters take the host path whole (scheduler/zenflow_exec.h).
struct HostOnly {
  std::vector<float> device, master, m1, m2, accum;
  int64_t updates = 0;
};

void Compare(const Policy& policy, int ranks, int steps) {
  ops::AdamWConfig adamw;
  adamw.lr = 0.01f;
  adamw.weight_decay = 0.1f;
  const auto seen = RunExecutor(policy, ranks, steps + 1, adamw);
  ASSERT_TRUE(seen.ok()) << seen.status();
  const ZenFlowIntervals z = ResolveZenFlow(policy);
  auto layout = BuildLayout(*ModelPreset("micro"), LayoutOptionsFor(policy, ranks));
  ASSERT_TRUE(layout.ok());
  int matrices = 0, vectors = 0;
  bool split_columns = false;
  for (const Bucket& bk : layout->buckets) {
    for (const ParamSlot& p : bk.params) {
      std::vector<float> init(p.numel);
      for (int64_t i = 0; i < p.numel; ++i) init[i] = testing::InitialValue(p, i);
      const bool matrix = p.shape.size() == 2;
      // Columns that span several ranks' shards: the rows of p lie in more
      // than one shard.
      if (matrix && ranks > 1 &&
          p.offset / bk.shard_numel != (p.offset + p.numel - 1) / bk.shard_numel) {
        split_columns = true;
      }
      ops::ZenFlowReferenceOptions ro;
      if (matrix) {
        ro.rows = p.shape[0];
        ro.cols = p.shape[1];
      }
      ro.adamw = adamw;
      ro.zenflow.topk_ratio = policy.zenflow_topk_ratio;
      ro.zenflow.select_interval = z.select;
      ro.zenflow.update_interval = z.update;
      auto ref = ops::ZenFlowReference::Create(ro, init);
      HostOnly h{init, init, std::vector<float>(p.numel), std::vector<float>(p.numel),
                 std::vector<float>(p.numel)};
      if (matrix) {
        ASSERT_TRUE(ref.ok()) << ref.status();
        ++matrices;
      } else {
        ++vectors;
      }
      int64_t selects = 0, updates = 0;
      for (int64_t s = 0; s <= steps; ++s) {
        const std::vector<float>& want = matrix ? ref->weights() : h.device;
        for (int r = 0; r < ranks; ++r) {
          const auto at = (*seen)[r].find(s);
          ASSERT_NE(at, (*seen)[r].end()) << "no forward at step " << s;
          const auto it = at->second.find(p.name);
          ASSERT_NE(it, at->second.end()) << p.name;
          ASSERT_EQ(it->second.size(), want.size());
          ASSERT_EQ(std::memcmp(it->second.data(), want.data(), want.size() * 4), 0)
              << p.name << " differs from the reference at step " << s
              << " on rank " << r << " of " << ranks;
        }
        if (s == steps) break;
        std::vector<float> g(p.numel);
        for (int64_t i = 0; i < p.numel; ++i) g[i] = Grad(s, p, i);
        if (matrix) {
          const int64_t before = ref->host_updates();
          ASSERT_TRUE(ref->Step(g).ok());
          updates += ref->host_updates() - before;
          selects += s % z.select == 0;
          continue;
        }
        for (int64_t i = 0; i < p.numel; ++i) h.accum[i] += g[i];
        if ((s + 1) % z.update != 0) continue;
        ops::AdamWArgs a;
        a.n = p.numel;
        a.step = ++h.updates;
        a.grad_scale = 1.0f / static_cast<float>(z.update);
        a.master = h.master.data();
        a.grad = h.accum.data();
        a.moment1 = h.m1.data();
        a.moment2 = h.m2.data();
        ASSERT_TRUE(ops::HostAdamW(adamw, a, nullptr).ok());
        std::fill(h.accum.begin(), h.accum.end(), 0.0f);
        h.device = h.master;
      }
      if (matrix) {
        EXPECT_GE(selects, 2) << p.name;
        EXPECT_GE(updates, 2) << p.name;
        // The device path moved the selected columns away from the start.
        EXPECT_NE(std::memcmp(ref->weights().data(), init.data(), p.numel * 4), 0);
      }
    }
  }
  EXPECT_GT(matrices, 0);
  EXPECT_GT(vectors, 0);
  if (ranks > 1) {
    EXPECT_TRUE(split_columns);
  }
}

Policy ZenFlow(int select, int update, double ratio) {
  Policy p = *PolicyPreset("zenflow");
  p.param_dtype = DataType::kF32;
  p.reduce_dtype = DataType::kF32;
  p.zenflow_topk_ratio = ratio;
  p.zenflow_select_interval = select;
  p.zenflow_update_interval = update;
  return p;
}

TEST(ZenFlowExecTest, OneRankMatchesTheReference) {
  Compare(ZenFlow(4, 2, 0.25), 1, 9);
}

TEST(ZenFlowExecTest, TwoRanksMatchTheReference) {
  Compare(ZenFlow(4, 2, 0.25), 2, 9);
  Compare(ZenFlow(2, 1, 0.1), 2, 8);
}

TEST(ZenFlowExecTest, FourRanksMatchTheReference) {
  Compare(ZenFlow(kAutoInterval, kAutoInterval, 0.05), 4, 9);
}

TEST(ZenFlowExecTest, BadKnobsAreRefused) {
  Policy p = ZenFlow(3, 2, 0.25);  // select not a multiple of update
  Status st = ValidatePolicy(p);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
  EXPECT_NE(st.message().find("zenflow_select_interval"), absl::string_view::npos) << st;
  EXPECT_FALSE(BuildStepGraph(*ModelPreset("micro"), p, 2).ok());
  p = ZenFlow(kAutoInterval, 3, 0.25);  // auto select = update: fine
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p = ZenFlow(4, kAutoInterval, 0.25);  // 4 is a multiple of auto (4)
  EXPECT_TRUE(ValidatePolicy(p).ok());
  p = ZenFlow(6, kAutoInterval, 0.25);
  EXPECT_TRUE(absl::IsInvalidArgument(ValidatePolicy(p)));
}

}  // namespace
}  // namespace baton::scheduler
