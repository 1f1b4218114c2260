#include "baton/scheduler/executor.h"

#include <tuple>

#include "absl/strings/str_cat.h"

#include "gtest/gtest.h"
#include "baton/scheduler/testing.h"

namespace baton::scheduler {
namespace {

using testing::CreateInprocGroup;
using testing::RunRanks;
using testing::ToyModel;

struct RunResult {
  std::string error;  // "" when every rank matched the reference
  std::vector<std::vector<TraceRecord>> traces;  // per rank
  std::vector<std::string> orders;               // per rank: ToText()
};

// Trains the toy model for `steps` steps on `ranks` inproc ranks with
// `policy` and compares every rank's shards with the unsharded reference.
// Cast modes: the executor casts (kExecutor); the optimizer writes the
// shard itself (kOptimizer, StepCallbacks::optimizer_writes_shard); or the
// flag is set but the optimizer does not write it (kNobody: must fail).
enum class CastBy { kExecutor, kOptimizer, kNobody };

// `compare` false: only run (ZenFlow runs its own optimizer, not the toy
// model's; scheduler/zenflow_exec_test.cc compares it with its reference).
RunResult Train(const ModelSpec& spec, const Policy& policy, int ranks, int steps,
              const ExecutorOptions& options = {}, CastBy cast = CastBy::kExecutor,
              bool compare = true) {
  RunResult result;
  auto group = CreateInprocGroup(ranks);
  if (!group.ok()) {
    result.error = group.status().ToString();
    return result;
  }
  ToyModel toy(ranks);
  std::vector<std::string> errors(ranks);
  result.traces.resize(ranks);
  result.orders.resize(ranks);
  auto layout = LayoutFor(spec, policy, *ResolveMesh(policy, ranks));
  if (!layout.ok()) {
    result.error = layout.status().ToString();
    return result;
  }
  ToyModel::Reference ref = ToyModel::InitialReference(*layout);
  for (int s = 0; s < steps; ++s) {
    ToyModel::ReferenceStep(*layout, ranks, policy.micro_steps,
                            policy.param_dtype, ref);
  }
  RunRanks(ranks, [&](int r) {
    // Every rank builds its own graph, as a real job does.
    auto graph = BuildStepGraph(spec, policy, ranks);
    if (!graph.ok()) {
      errors[r] = graph.status().ToString();
      return;
    }
    result.orders[r] = graph->ToText();
    auto exec = Executor::Create(*graph, *group->device, *group->comms[r], options);
    if (!exec.ok()) {
      errors[r] = exec.status().ToString();
      return;
    }
    Status st = (*exec)->InitParameters(
        [](const ParamSlot& p, float* out) {
          for (int64_t i = 0; i < p.numel; ++i) out[i] = testing::InitialValue(p, i);
        });
    StepCallbacks cb = toy.Callbacks(r);
    if (cast != CastBy::kExecutor) {
      cb.optimizer_writes_shard = true;
      auto update = cb.optimizer;
      const bool write = cast == CastBy::kOptimizer;
      cb.optimizer = [update, write](const OptimizerContext& ctx) -> Status {
        if (ctx.shard == nullptr) return absl::InternalError("no shard pointer");
        BATON_RETURN_IF_ERROR(update(ctx));
        if (!write) return absl::OkStatus();
        return ctx.stream->Enqueue([ctx]() {
          NarrowFromF32(ctx.shard, ctx.master, ctx.shard_dtype, ctx.shard_numel);
          return absl::OkStatus();
        });
      };
    }
    for (int s = 0; st.ok() && s < steps; ++s) st = (*exec)->Step(cb);
    if (st.ok()) st = (*exec)->Synchronize();
    if (!st.ok()) {
      errors[r] = st.ToString();
      group->comms[r]->Abort();
      return;
    }
    if (compare) errors[r] = ToyModel::CompareShards(**exec, ref);
    result.traces[r] = (*exec)->TakeTrace();
  });
  for (int r = 0; r < ranks; ++r) {
    if (!errors[r].empty() && result.error.empty()) {
      result.error = "rank " + std::to_string(r) + ": " + errors[r];
    }
  }
  return result;
}

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
  const RunResult r = Train(Micro(), p, ranks, 3);
  EXPECT_EQ(r.error, "");
  for (int k = 1; k < ranks; ++k) EXPECT_EQ(r.orders[k], r.orders[0]);
}

INSTANTIATE_TEST_SUITE_P(
    Presets, DataFlowTest,
    ::testing::Combine(::testing::Values("baton", "yafsdp", "fsdp1", "fsdp2",
                                         "zero3", "ddp"),
                       ::testing::Values(1, 2, 3, 4),
                       ::testing::Values(0, 1, 2)));

TEST(ExecutorTest, TiedEmbeddingsAndBf16ParametersMatchTheReference) {
  for (const char* name : {"baton", "yafsdp", "fsdp2", "ddp"}) {
    Policy p = *PolicyPreset(name);  // bf16 parameters, fp32 reduce
    const RunResult r = Train(Micro(/*tied=*/true), p, 3, 3);
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
      const RunResult fused = Train(Micro(/*tied=*/true), p, 3, 3, {}, CastBy::kOptimizer);
      EXPECT_EQ(fused.error, "") << name << " " << DataTypeName(t);
      const RunResult stale = Train(Micro(/*tied=*/true), p, 3, 3, {}, CastBy::kNobody);
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
    const RunResult r = Train(Micro(), p, 2, 3, o);
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

// The same for the zenflow preset, staleness 0 and auto (3, update 4), with
// one exception: each bucket's CAST (the window's host update and cast)
// runs on the host-update stream, outside the step barrier. It is left out
// of its graph stream's FIFO and of the steps' no-overlap check; instead
// the CASTs run in issue order, every graph edge (OPT -> CAST included)
// holds, and an update's CAST ends before the H2D of step e + 1 + d that
// uploads what it wrote starts.
TEST(ExecutorTest, ZenFlowExecutedOrderRespectsEveryEdge) {
  constexpr int kRanks = 2, kSteps = 12;  // windows end at 3, 7, 11
  for (int staleness : {0, kAutoInterval}) {
    Policy p = *PolicyPreset("zenflow");
    p.param_dtype = DataType::kF32;
    p.micro_steps = 2;
    p.zenflow_staleness = staleness;
    const ZenFlowIntervals z = ResolveZenFlow(p);
    const std::string name = absl::StrCat("zenflow, staleness ", z.staleness);
    ExecutorOptions o;
    o.trace = true;
    o.max_delay_us = 200;
    const RunResult r = Train(Micro(), p, kRanks, kSteps, o, CastBy::kExecutor,
                              /*compare=*/false);
    ASSERT_EQ(r.error, "") << name;
    auto graph = BuildStepGraph(Micro(), p, kRanks);
    ASSERT_TRUE(graph.ok());
    const int nn = static_cast<int>(graph->nodes.size());
    auto is_cast = [&](int i) { return graph->nodes[i].kind == NodeKind::kCast; };
    int uploads_checked = 0;
    for (int rank = 0; rank < kRanks; ++rank) {
      const auto& trace = r.traces[rank];
      ASSERT_EQ(trace.size(), static_cast<size_t>(nn) * kSteps) << name;
      std::vector<std::vector<TraceRecord>> at(kSteps, std::vector<TraceRecord>(nn));
      for (const TraceRecord& t : trace) at[t.step][t.node] = t;
      const TraceRecord* last_cast = nullptr;
      for (int s = 0; s < kSteps; ++s) {
        for (const GraphEdge& e : graph->edges) {
          EXPECT_LT(at[s][e.from].end, at[s][e.to].start)
              << name << " step " << s << ": " << graph->nodes[e.from].name
              << " -> " << graph->nodes[e.to].name;
        }
        std::vector<int> last(graph->num_streams, -1);
        for (int i = 0; i < nn; ++i) {
          const Node& n = graph->nodes[i];
          if (is_cast(i)) {
            // The host-update stream: issue order, across steps too.
            if (last_cast != nullptr) {
              EXPECT_LT(last_cast->end, at[s][i].start) << name << " " << n.name;
            }
            last_cast = &at[s][i];
            // After its OPT (the host stream's node before it).
            ASSERT_GT(i, 0);
            const Node& opt = graph->nodes[i - 1];
            ASSERT_EQ(opt.kind, NodeKind::kOptimizer) << n.name;
            ASSERT_EQ(opt.bucket, n.bucket) << n.name;
            EXPECT_LT(at[s][i - 1].end, at[s][i].start) << name << " step " << s;
            // Before the H2D that uploads the window's update.
            const int64_t u = s + 1 + z.staleness;
            if ((s + 1) % z.update != 0 || u >= kSteps) continue;
            for (int h = 0; h < nn; ++h) {
              const Node& h2d = graph->nodes[h];
              if (h2d.kind != NodeKind::kH2D || h2d.bucket != n.bucket) continue;
              EXPECT_LT(at[s][i].end, at[u][h].start)
                  << name << ": " << n.name << " of step " << s << ", H2D of step " << u;
              ++uploads_checked;
            }
            continue;
          }
          int& l = last[n.stream.index()];
          if (l >= 0) {
            EXPECT_LT(at[s][l].end, at[s][i].start) << name << " " << n.name;
          }
          l = i;
        }
        // Steps do not overlap (the CASTs aside).
        if (s > 0) {
          uint64_t prev_end = 0, start = ~uint64_t{0};
          for (int i = 0; i < nn; ++i) {
            if (is_cast(i)) continue;
            prev_end = std::max(prev_end, at[s - 1][i].end);
            start = std::min(start, at[s][i].start);
          }
          EXPECT_LT(prev_end, start) << name << " step " << s;
        }
      }
    }
    // Two ranks, at least two buckets, windows ending at 3 and 7 (and 11
    // with staleness 0).
    EXPECT_GE(uploads_checked, kRanks * 2 * 2) << name;
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
    // its reference (poisoned, delayed) in scheduler/zenflow_exec_test.cc.
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
      const RunResult r = Train(Micro(depth == 1), p, 2, steps, o);
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
    const RunResult r = Train(Micro(), p, 3, 40, o);
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
  const RunResult r = Train(Micro(/*tied=*/true), p, 8, 2);
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
