#include "baton/scheduler/executor.h"

#include <tuple>

#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"
#include "baton/scheduler/testing/toy_model.h"

namespace baton::scheduler {
namespace {

using testing::CreateInprocGroup;
using testing::RunRanks;
using testing::CastBy;
using testing::ToyModel;
using testing::ToyRun;
using testing::TrainToy;

ModelSpec Micro(bool tied = false) {
  ModelSpec s = *ModelPreset("micro");
  s.tie_embeddings = tied;
  return s;
}

// (policy, ranks, micro-step mode: 0 one, 1 reduce every, 2 accumulate)
using DataFlowCase = std::tuple<std::string, int, int>;
class DataFlowTest : public ::testing::TestWithParam<DataFlowCase> {};

TEST_P(DataFlowTest, ShardedStepsMatchTheUnshardedReferenceBitForBit) {
  const auto [name, ranks, mode] = GetParam();
  Policy p = *PolicyPreset(name);
  p.param_dtype = DataType::kF32;
  p.micro_steps = mode == 0 ? 1 : 2;
  p.reduce_every_micro_step = mode == 1;
  p.recompute_blocks = 1;
  const ToyRun r = TrainToy(Micro(), p, ranks, 3);
  EXPECT_EQ(r.error, "");
  for (int k = 1; k < ranks; ++k) EXPECT_EQ(r.orders[k], r.orders[0]);
}

INSTANTIATE_TEST_SUITE_P(
    Presets, DataFlowTest,
    ::testing::Combine(::testing::Values("baton", "yafsdp", "fsdp1", "fsdp2",
                                         "zero3", "ddp"),
                       ::testing::Values(1, 2, 3, 4),
                       ::testing::Values(0, 1, 2)));

// LoRA: the frozen base is gathered for every compute and never reduced;
// the adapters (in their companion buckets, gathered with the frozen ones)
// match the unsharded reference bit for bit over the presets, with
// micro-steps accumulated or reduced each time, full recompute, offload
// of the adapters' optimizer, and of the frozen shards (copied to the
// device for each gather).
TEST(ExecutorTest, LoraAdaptersTrainAndTheFrozenBaseIsNeverReduced) {
  for (const char* name : {"baton", "yafsdp", "fsdp1", "fsdp2", "zero3", "ddp", "hsdp",
                           "zeropp", "zero_offload", "params_offload"}) {
    for (int mode : {0, 1, 2}) {
      SCOPED_TRACE(::testing::Message() << name << " mode " << mode);
      const bool params = std::string(name) == "params_offload";
      Policy p = *PolicyPreset(params ? "zero_offload" : name);
      if (params) p.offload = Offload::kParams;  // the frozen shards on the host too
      p.param_dtype = DataType::kF32;
      p.layout.lora_rank = 2;
      p.layout.lora_targets = 0x55;  // q, v, gate, down
      p.micro_steps = mode == 0 ? 1 : 2;
      p.reduce_every_micro_step = mode == 1;
      p.recompute_blocks = 1;
      if (p.shard_group > 0) p.shard_group = 2;
      if (p.hpz_group > 0) p.hpz_group = 2;
      auto graph = BuildStepGraph(Micro(), p, 4);
      ASSERT_TRUE(graph.ok()) << graph.status();
      ASSERT_TRUE(VerifyStepGraph(*graph).ok()) << VerifyStepGraph(*graph);
      int frozen = 0, adapters = 0;
      for (const Bucket& b : graph->layout.buckets) {
        frozen += b.frozen;
        adapters += !b.frozen;
        for (const ParamSlot& s : b.params) {
          EXPECT_EQ(s.frozen, s.name.find(".lora_") == std::string::npos) << s.name;
        }
      }
      EXPECT_GT(frozen, 0);
      EXPECT_GT(adapters, 0);
      for (const Node& n : graph->nodes) {
        if (n.kind == NodeKind::kReduceScatter || n.kind == NodeKind::kOptimizer ||
            (n.kind == NodeKind::kAllReduce && n.bucket >= 0)) {
          EXPECT_FALSE(graph->layout.buckets[n.bucket].frozen) << n.name;
        }
      }
      const ToyRun r = TrainToy(Micro(), p, 4, 3);
      EXPECT_EQ(r.error, "");
    }
  }
}

TEST(ExecutorTest, TiedEmbeddingsAndBf16ParametersMatchTheReference) {
  for (const char* name : {"baton", "yafsdp", "fsdp2", "ddp"}) {
    Policy p = *PolicyPreset(name);  // bf16 parameters, fp32 reduce
    const ToyRun r = TrainToy(Micro(/*tied=*/true), p, 3, 3);
    EXPECT_EQ(r.error, "") << name;
  }
}

// The optimizer may write the gather input itself (ops/adamw.h fuses the
// update and the cast): the executor then skips its own cast, and the
// results stay bit-identical. When it does not write it, the stale shard is
// caught (the cast really is skipped).
TEST(ExecutorTest, OptimizerMayWriteTheShardItself) {
  for (const char* name : {"baton", "yafsdp", "fsdp1", "fsdp2", "zero3", "ddp"}) {
    for (DataType t : {DataType::kF32, DataType::kBF16}) {
      Policy p = *PolicyPreset(name);
      p.param_dtype = t;
      p.micro_steps = 2;
      const ToyRun fused = TrainToy(Micro(/*tied=*/true), p, 3, 3, {}, CastBy::kOptimizer);
      EXPECT_EQ(fused.error, "") << name << " " << DataTypeName(t);
      const ToyRun stale = TrainToy(Micro(/*tied=*/true), p, 3, 3, {}, CastBy::kNobody);
      EXPECT_NE(stale.error, "") << name << " " << DataTypeName(t);
    }
  }
}

// Every edge of the graph and the FIFO order of each stream hold in the
// order the host streams actually ran the nodes, with random delays.
TEST(ExecutorTest, ExecutedOrderRespectsEveryEdge) {
  for (const char* name : {"baton", "yafsdp", "fsdp1", "fsdp2", "zero3", "ddp"}) {
    Policy p = *PolicyPreset(name);
    p.param_dtype = DataType::kF32;
    p.micro_steps = 2;
    ExecutorOptions o;
    o.trace = true;
    o.max_delay_us = 200;
    const ToyRun r = TrainToy(Micro(), p, 2, 3, o);
    ASSERT_EQ(r.error, "") << name;
    auto graph = BuildStepGraph(Micro(), p, 2);
    ASSERT_TRUE(graph.ok());
    for (int rank = 0; rank < 2; ++rank) {
      const auto& trace = r.traces[rank];
      ASSERT_EQ(trace.size(), graph->nodes.size() * 3) << name;
      // [step][node] -> record
      std::vector<std::vector<TraceRecord>> at(
          3, std::vector<TraceRecord>(graph->nodes.size()));
      for (const TraceRecord& t : trace) at[t.step][t.node] = t;
      for (int s = 0; s < 3; ++s) {
        for (const GraphEdge& e : graph->edges) {
          EXPECT_LT(at[s][e.from].end, at[s][e.to].start)
              << name << " step " << s << ": " << graph->nodes[e.from].name
              << " -> " << graph->nodes[e.to].name;
        }
        std::vector<int> last(graph->num_streams, -1);
        for (int i = 0; i < static_cast<int>(graph->nodes.size()); ++i) {
          int& l = last[graph->nodes[i].stream.index()];
          if (l >= 0) {
            EXPECT_LT(at[s][l].end, at[s][i].start);
          }
          l = i;
        }
        // Steps do not overlap.
        if (s > 0) {
          uint64_t prev_end = 0, start = ~uint64_t{0};
          for (const TraceRecord& t : at[s - 1]) prev_end = std::max(prev_end, t.end);
          for (const TraceRecord& t : at[s]) start = std::min(start, t.start);
          EXPECT_LT(prev_end, start) << name;
        }
      }
    }
  }
}

// Random delays on every stream, the arena in poison mode, 1,000 steps over
// every preset and prefetch depth: no read ever sees bytes another buffer
// wrote (the arena fails the stream with DataLoss), and the result still
// matches the reference.
TEST(ExecutorTest, PoisonStressOverEveryPresetAndDepth) {
  int steps_run = 0;
  for (const std::string& name : PolicyPresetNames()) {
    // ZenFlow runs its own optimizer, not the toy model's: compared with
    // its reference (poisoned, delayed) in optim/zenflow_exec_test.cc.
    if (name == "zenflow") continue;
    for (int depth = 0; depth <= 3; ++depth) {
      Policy p = *PolicyPreset(name);
      p.param_dtype = DataType::kF32;
      p.forward_prefetch = depth;
      p.backward_prefetch = depth;
      if (p.host_limit > 0) p.host_limit = std::max(p.host_limit, depth + 1);
      p.micro_steps = 1 + depth % 2;
      p.reduce_every_micro_step = depth == 3;
      p.recompute_blocks = depth % 2 == 0 ? -1 : 0;
      ExecutorOptions o;
      o.poison = true;
      o.max_delay_us = 40;
      o.seed = 17 + depth;
      const int steps = name == "ddp" && depth > 0 ? 30 : 40;
      const ToyRun r = TrainToy(Micro(depth == 1), p, 2, steps, o);
      EXPECT_EQ(r.error, "") << name << " depth " << depth;
      steps_run += steps;
    }
  }
  EXPECT_GE(steps_run, 930);
  // Same with 3 ranks for the presets whose memory differs most.
  for (const char* name : {"baton", "yafsdp"}) {
    Policy p = *PolicyPreset(name);
    p.param_dtype = DataType::kF32;
    ExecutorOptions o;
    o.poison = true;
    o.max_delay_us = 40;
    const ToyRun r = TrainToy(Micro(), p, 3, 40, o);
    EXPECT_EQ(r.error, "") << name;
    steps_run += 40;
  }
  EXPECT_GE(steps_run, 1000);
}

// The poison check is not vacuous: a plan that lets two live buffers share
// bytes is caught.
TEST(ExecutorTest, PoisonCatchesABrokenPlan) {
  Policy p = *PolicyPreset("baton");
  p.param_dtype = DataType::kF32;
  auto graph = BuildStepGraph(Micro(), p, 1);
  ASSERT_TRUE(graph.ok());
  StepGraph broken = *graph;
  for (auto& b : broken.plan.buffers) b.offset = 0;  // everything overlaps
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  ExecutorOptions o;
  o.poison = true;
  auto exec = Executor::Create(broken, *group->device, *group->comms[0], o);
  ASSERT_TRUE(exec.ok()) << exec.status();
  ToyModel toy(1);
  Status st = (*exec)->Step(toy.Callbacks(0));
  if (st.ok()) st = (*exec)->Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
}

TEST(ExecutorTest, WrongWorldSizeIsRefused) {
  auto graph = BuildStepGraph(Micro(), *PolicyPreset("baton"), 4);
  ASSERT_TRUE(graph.ok());
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  auto exec = Executor::Create(*graph, *group->device, *group->comms[0]);
  EXPECT_EQ(exec.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ExecutorTest, ACallbackErrorReachesSynchronize) {
  auto graph = BuildStepGraph(Micro(), *PolicyPreset("baton"), 1);
  ASSERT_TRUE(graph.ok());
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  auto exec = Executor::Create(*graph, *group->device, *group->comms[0]);
  ASSERT_TRUE(exec.ok());
  StepCallbacks cb;
  cb.compute = [](const ComputeContext& ctx) {
    return ctx.stream->Enqueue(
        [] { return absl::InternalError("kernel exploded"); });
  };
  ASSERT_TRUE((*exec)->Step(cb).ok());
  const Status st = (*exec)->Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_EQ((*exec)->CaptureStep(cb).code(),
            absl::StatusCode::kUnimplemented);
}

// Hierarchical sharding on 8 ranks against the unsharded reference:
// (groups, micro-step mode, reduce dtype); groups are (shard_group,
// hpz_group): 4 is 2 x 4 (two shard groups of four ranks), 2 is 4 x 2; hpZ
// with full sharding (ZeRO++) and inside HSDP.
constexpr int kGroupLayouts[][2] = {{4, 0}, {2, 0}, {8, 4}, {4, 2}};
using GroupCase = std::tuple<int, int, DataType>;
class GroupDataFlowTest : public ::testing::TestWithParam<GroupCase> {};

TEST_P(GroupDataFlowTest, ShardsMatchTheUnshardedReferenceBitForBit) {
  const auto [layout, mode, reduce] = GetParam();
  const int shard = kGroupLayouts[layout][0];
  const int hpz = kGroupLayouts[layout][1];
  Policy p = *PolicyPreset("baton");
  p.shard_group = shard;
  p.hpz_group = hpz;
  p.param_dtype = DataType::kF32;
  p.reduce_dtype = reduce;
  p.micro_steps = mode == 0 ? 1 : 2;
  p.reduce_every_micro_step = mode == 1;
  p.recompute_blocks = 1;
  const ToyRun r = TrainToy(Micro(/*tied=*/true), p, 8, 2);
  EXPECT_EQ(r.error, "");
  for (int k = 1; k < 8; ++k) EXPECT_EQ(r.orders[k], r.orders[0]);
  // The graph really is hierarchical.
  EXPECT_NE(r.orders[0].find(shard < 8 ? "AR-R" : "AG-HPZ"), std::string::npos);
  if (hpz > 0) {
    EXPECT_NE(r.orders[0].find("HPZ-COPY"), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Groups, GroupDataFlowTest,
    ::testing::Combine(::testing::Values(0, 1, 2, 3), ::testing::Values(0, 1, 2),
                       ::testing::Values(DataType::kF32, DataType::kBF16)),
    [](const ::testing::TestParamInfo<GroupCase>& i) {
      const int l = std::get<0>(i.param);
      return absl::StrCat("shard", kGroupLayouts[l][0], "_hpz",
                          kGroupLayouts[l][1], "_mode", std::get<1>(i.param),
                          "_", DataTypeName(std::get<2>(i.param)));
    });

// The caller may hand in the groups' communicators (made with Split);
// ones of the wrong shape are refused naming them.
TEST(ExecutorTest, GroupCommunicatorsMayBeHandedIn) {
  Policy p = *PolicyPreset("hsdp");  // shard_group 4: 2 x 4
  p.param_dtype = DataType::kF32;
  auto group = CreateInprocGroup(8);
  ASSERT_TRUE(group.ok()) << group.status();
  auto layout = LayoutFor(Micro(), p, *ResolveMesh(p, 8));
  ASSERT_TRUE(layout.ok());
  ToyModel::Reference ref = ToyModel::InitialReference(*layout);
  ToyModel::ReferenceStep(*layout, 8, 1, p.param_dtype, ref);
  ToyModel toy(8);
  std::vector<std::string> errors(8);
  RunRanks(8, [&](int r) {
    Communicator& world = *group->comms[r];
    auto shard = world.Split(r / 4, r);
    auto replica = world.Split(r % 4, r);
    if (!shard.ok() || !replica.ok()) {
      errors[r] = "split failed";
      return;
    }
    auto graph = BuildStepGraph(Micro(), p, 8);
    if (!graph.ok()) {
      errors[r] = graph.status().ToString();
      return;
    }
    // Swapped: the replica communicator where the shard one belongs.
    ExecutorOptions bad;
    bad.group_comms = {{kDataShardGroup, replica->get()},
                       {kReplicaGroup, replica->get()}};
    auto refused = Executor::Create(*graph, *group->device, world, bad);
    if (refused.ok() ||
        refused.status().code() != absl::StatusCode::kInvalidArgument ||
        refused.status().message().find("group dp_shard+hpz") == std::string::npos) {
      errors[r] = absl::StrCat("swapped communicators: ",
                               refused.status().ToString());
      return;
    }
    ExecutorOptions o;
    o.group_comms = {{kDataShardGroup, shard->get()}, {kReplicaGroup, replica->get()}};
    auto exec = Executor::Create(*graph, *group->device, world, o);
    if (!exec.ok()) {
      errors[r] = exec.status().ToString();
      return;
    }
    Status st = (*exec)->InitParameters([](const ParamSlot& ps, float* out) {
      for (int64_t i = 0; i < ps.numel; ++i) out[i] = testing::InitialValue(ps, i);
    });
    if (st.ok()) st = (*exec)->Step(toy.Callbacks(r));
    if (st.ok()) st = (*exec)->Synchronize();
    errors[r] = st.ok() ? ToyModel::CompareShards(**exec, ref) : st.ToString();
    if ((*exec)->shard_rank() != r % 4) errors[r] = "shard rank";
  });
  for (int r = 0; r < 8; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace baton::scheduler
