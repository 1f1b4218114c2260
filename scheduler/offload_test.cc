// Optimizer offload (Policy::offload, ZeRO-Offload): the policy knobs'
// validation, the graph's host-link copies and host work, and an executed
// step whose host cast is missing (the AdamW step bit-identical to the
// device step: optim/adamw_hook_test.cc).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/testing/toy_model.h"
#include "baton/scheduler/zenflow_buffers.h"

namespace baton::scheduler {
namespace {

using testing::CreateInprocGroup;
using testing::RunRanks;
using testing::ToyModel;

ModelSpec Micro() { return *ModelPreset("micro"); }

void ExpectInvalid(const Policy& p, const char* knob) {
  const Status st = ValidatePolicy(p);
  EXPECT_TRUE(absl::IsInvalidArgument(st)) << knob << ": " << st;
  EXPECT_NE(st.message().find(knob), absl::string_view::npos) << st;
}

TEST(OffloadPolicyTest, BadKnobsAreRefusedNamingTheKnob) {
  const Policy zf = *PolicyPreset("zenflow");
  EXPECT_TRUE(ValidatePolicy(zf).ok());
  for (double r : {0.0, -0.1, 1.5, std::nan("")}) {
    Policy p = zf;
    p.zenflow_topk_ratio = r;
    ExpectInvalid(p, "zenflow_topk_ratio");
  }
  Policy one = zf;
  one.zenflow_topk_ratio = 1.0;
  EXPECT_TRUE(ValidatePolicy(one).ok());
  for (int v : {0, -2}) {
    Policy p = zf;
    p.zenflow_select_interval = v;
    ExpectInvalid(p, "zenflow_select_interval");
    p = zf;
    p.zenflow_update_interval = v;
    ExpectInvalid(p, "zenflow_update_interval");
  }
  Policy ddp = *PolicyPreset("ddp");
  ddp.offload = Offload::kOptimizer;
  ExpectInvalid(ddp, "offload");
  EXPECT_FALSE(BuildStepGraph(Micro(), ddp, 2).ok());
  Policy no_offload = zf;
  no_offload.offload = Offload::kNone;
  ExpectInvalid(no_offload, "zenflow");
  EXPECT_EQ(*ParseOffload("optimizer"), Offload::kOptimizer);
  EXPECT_EQ(*ParseOffload("none"), Offload::kNone);
  EXPECT_TRUE(absl::IsInvalidArgument(ParseOffload("cpu").status()));
}

TEST(OffloadPolicyTest, AutoIntervalsResolve) {
  Policy p = *PolicyPreset("zenflow");
  ZenFlowIntervals z = ResolveZenFlow(p);
  EXPECT_EQ(z.update, kAutoUpdateInterval);
  EXPECT_EQ(z.select, kAutoUpdateInterval);
  p.zenflow_update_interval = 3;
  z = ResolveZenFlow(p);
  EXPECT_EQ(z.update, 3);
  EXPECT_EQ(z.select, 3);
  p.zenflow_select_interval = 1;
  EXPECT_EQ(ResolveZenFlow(p).select, 1);
  // The preset's staleness is auto: update_interval - 1.
  p.zenflow_select_interval = kAutoInterval;
  EXPECT_EQ(p.zenflow_staleness, kAutoInterval);
  EXPECT_EQ(ResolveZenFlow(p).staleness, 2);
  p.zenflow_staleness = 1;
  EXPECT_EQ(ResolveZenFlow(p).staleness, 1);
  p.zenflow_staleness = 3;
  ExpectInvalid(p, "zenflow_staleness");
}

TEST(OffloadGraphTest, CopiesAndHostWorkAreWhereTheyBelong) {
  for (bool shared : {false, true}) {
    Policy p = *PolicyPreset("zero_offload");
    p.shared_comm_stream = shared;
    Policy base = p;
    base.offload = Offload::kNone;
    auto g = BuildStepGraph(Micro(), p, 2);
    auto b = BuildStepGraph(Micro(), base, 2);
    ASSERT_TRUE(g.ok()) << g.status();
    ASSERT_TRUE(b.ok()) << b.status();
    ASSERT_TRUE(VerifyStepGraph(*g).ok()) << VerifyStepGraph(*g);
    EXPECT_EQ(g->num_streams, NumStreams(shared, true));
    EXPECT_EQ(g->stream_names().back(), "host");
    const StreamId host = g->stream_for(StreamClass::kHost);
    const StreamId copy = g->stream_for(StreamClass::kHostCopy);
    int d2h = 0, h2d = 0, opt = 0;
    for (int i = 0; i < static_cast<int>(g->nodes.size()); ++i) {
      const Node& n = g->nodes[i];
      if (n.kind == NodeKind::kD2H) {
        ++d2h;
        EXPECT_EQ(n.stream, copy);
        // Right after the bucket's reduction, which it waits for.
        const Node& prev = g->nodes[i - 1];
        EXPECT_TRUE(prev.kind == NodeKind::kReduceScatter) << prev.name;
        EXPECT_EQ(prev.bucket, n.bucket);
        EXPECT_EQ(n.waits, std::vector<int>{i - 1}) << n.name;
      }
      if (n.kind == NodeKind::kH2D) {
        ++h2d;
        EXPECT_EQ(n.stream, copy);
        EXPECT_TRUE(n.waits.empty()) << n.name;  // free to run ahead
        const Node& next = g->nodes[i + 1];
        EXPECT_EQ(next.kind, NodeKind::kAllGather);
        EXPECT_NE(std::find(next.waits.begin(), next.waits.end(), i),
                  next.waits.end())
            << next.name;
      }
      if (n.kind == NodeKind::kOptimizer || n.kind == NodeKind::kCast) {
        ++opt;
        EXPECT_EQ(n.stream, host) << n.name;
      }
    }
    const int nb = static_cast<int>(g->layout.buckets.size());
    EXPECT_EQ(d2h, nb);
    EXPECT_EQ(h2d, nb);
    EXPECT_EQ(opt, 2 * nb);
    // Master + moments (12 B) and the host gradient (4) and parameter (2)
    // shards move to the host; the device keeps the shard and gradient shard.
    int64_t shard_numel = 0;
    for (const Bucket& bk : g->layout.buckets) shard_numel += bk.shard_numel;
    EXPECT_EQ(g->host_bytes, static_cast<size_t>(shard_numel) * 18);
    EXPECT_EQ(g->persistent_bytes, static_cast<size_t>(shard_numel) * 6);
    EXPECT_EQ(b->persistent_bytes, static_cast<size_t>(shard_numel) * 18);
    EXPECT_EQ(b->host_bytes, 0u);
    // The arena is the same: offload moves persistent state only.
    EXPECT_EQ(g->plan.arena_bytes, b->plan.arena_bytes);
  }
}

// ZenFlow's graph: per bucket NORM (compute) -> AR-NORM (shard group) ->
// TOPK (compute) -> D2H -> host OPT / CAST, with the topk state sized from
// the selection (k columns x the rows a shard touches, per matrix), a
// norms buffer, a host accumulator and an H2D staging buffer.
TEST(OffloadGraphTest, ZenFlowGraphHasTheDeviceTopkPath) {
  Policy p = *PolicyPreset("zenflow");
  p.zenflow_topk_ratio = 0.25;
  auto g = BuildStepGraph(Micro(), p, 2);
  ASSERT_TRUE(g.ok()) << g.status();
  ASSERT_TRUE(VerifyStepGraph(*g).ok()) << VerifyStepGraph(*g);
  const auto off = BuildStepGraph(Micro(), *PolicyPreset("zero_offload"), 2);
  ASSERT_TRUE(off.ok());
  int topk = 0;
  size_t device = 0, host = 0;
  for (int i = 0; i < static_cast<int>(g->nodes.size()); ++i) {
    const Node& n = g->nodes[i];
    if (n.kind != NodeKind::kOptimizer || n.stream != kComputeStream) continue;
    ++topk;
    ASSERT_GE(i, 2);
    EXPECT_EQ(g->nodes[i - 2].name, absl::StrCat("NORM ", g->layout.buckets[n.bucket].name));
    EXPECT_EQ(g->nodes[i - 1].kind, NodeKind::kAllReduce);
    EXPECT_EQ(g->nodes[i - 1].group, kDataShardGroup);
    EXPECT_EQ(g->nodes[i + 1].kind, NodeKind::kD2H);
    EXPECT_EQ(g->buffers[n.reads[0]].role, BufferRole::kGradShard) << n.name;
    EXPECT_EQ(g->buffers[n.reads[1]].role, BufferRole::kColumnNorms) << n.name;
    EXPECT_EQ(g->buffers[n.reads[2]].role, BufferRole::kTopkState) << n.name;
    const Bucket& bk = g->layout.buckets[n.bucket];
    // Bounded by the selection, far below the shard; 3 floats an element.
    const int64_t state = g->buffers[n.reads[2]].numel;
    EXPECT_EQ(state, ZenFlowTopkStateNumel(bk, 2, 0.25));
    EXPECT_EQ(state % 3, 0);
    EXPECT_LE(state / 3, bk.shard_numel / 4 + 64) << bk.name;
    device += g->buffers[n.reads[2]].bytes() + g->buffers[n.reads[1]].bytes() +
              static_cast<size_t>(bk.shard_numel) * DataTypeSize(p.param_dtype);
    host += static_cast<size_t>(bk.shard_numel) * 8;  // two accumulators
  }
  EXPECT_EQ(topk, static_cast<int>(g->layout.buckets.size()));
  EXPECT_EQ(g->persistent_bytes, off->persistent_bytes + device);
  EXPECT_EQ(g->host_bytes, off->host_bytes + host);
  // Its optimizer runs its own nodes: without a driver the executor says
  // which to pass (the host runtime runs it: optim/zenflow_exec_test.cc).
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  auto one = BuildStepGraph(Micro(), p, 1);
  ASSERT_TRUE(one.ok());
  const auto refused = Executor::Create(*one, *group->device, *group->comms[0]);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("optimizer_driver"), std::string::npos)
      << refused.status();
}

TEST(OffloadGraphTest, VerifyCatchesMisplacedOffloadWork) {
  const Policy p = *PolicyPreset("zero_offload");
  const StepGraph g = *BuildStepGraph(Micro(), p, 2);
  ASSERT_TRUE(VerifyStepGraph(g).ok());
  auto first = [&](const StepGraph& graph, NodeKind kind) {
    for (int i = 0; i < static_cast<int>(graph.nodes.size()); ++i) {
      if (graph.nodes[i].kind == kind) return i;
    }
    return -1;
  };
  {  // The optimizer on the device.
    StepGraph bad = g;
    bad.nodes[first(bad, NodeKind::kOptimizer)].stream = kComputeStream;
    EXPECT_TRUE(absl::IsFailedPrecondition(VerifyStepGraph(bad)));
  }
  {  // A master shard in device memory while the host updates it.
    StepGraph bad = g;
    for (GraphBuffer& b : bad.buffers) b.host &= b.role != BufferRole::kMaster;
    const Status st = VerifyStepGraph(bad);
    EXPECT_NE(st.message().find("master"), absl::string_view::npos) << st;
  }
  {  // A gather of a shard no H2D refreshed.
    StepGraph bad = g;
    const int h = first(bad, NodeKind::kH2D);
    bad.nodes[h].writes = {bad.nodes[h].reads[0]};  // copies nowhere
    bad.nodes[h].reads = {};
    EXPECT_FALSE(VerifyStepGraph(bad).ok());
  }
  {  // An optimizer reading a gradient no D2H brought.
    StepGraph bad = g;
    const int d = first(bad, NodeKind::kD2H);
    bad.nodes[d].kind = NodeKind::kCopy;
    EXPECT_FALSE(VerifyStepGraph(bad).ok());
  }
}

// The device shard really comes from the host each step: if the host's
// cast wrote nothing, the gathers would see stale values and the run would
// differ from the device step.
TEST(OffloadExecutorTest, StaleHostShardIsDetected) {
  Policy off = *PolicyPreset("zero_offload");
  off.param_dtype = DataType::kF32;
  Policy dev = off;
  dev.offload = Offload::kNone;
  // The reference of the toy model with plain SGD matches only if every
  // step's gathers see the updated parameters.
  auto layout = LayoutFor(Micro(), off, *ResolveMesh(off, 2));
  ASSERT_TRUE(layout.ok());
  ToyModel::Reference ref = ToyModel::InitialReference(*layout);
  for (int s = 0; s < 3; ++s) {
    ToyModel::ReferenceStep(*layout, 2, 1, DataType::kF32, ref);
  }
  auto group = CreateInprocGroup(2);
  ASSERT_TRUE(group.ok());
  ToyModel toy(2);
  std::vector<std::string> errors(2);
  RunRanks(2, [&](int r) {
    auto exec = Executor::Create(*BuildStepGraph(Micro(), off, 2), *group->device,
                                 *group->comms[r]);
    if (!exec.ok()) {
      errors[r] = exec.status().ToString();
      return;
    }
    Status st = (*exec)->InitParameters([](const ParamSlot& p, float* out) {
      for (int64_t i = 0; i < p.numel; ++i) out[i] = testing::InitialValue(p, i);
    });
    StepCallbacks cb = toy.Callbacks(r);
    cb.optimizer_writes_shard = true;  // ... but the optimizer does not write it
    for (int s = 0; st.ok() && s < 3; ++s) st = (*exec)->Step(cb);
    if (st.ok()) st = (*exec)->Synchronize();
    errors[r] = st.ok() ? ToyModel::CompareShards(**exec, ref) : st.ToString();
  });
  EXPECT_NE(errors[0] + errors[1], "");
}

}  // namespace
}  // namespace baton::scheduler
