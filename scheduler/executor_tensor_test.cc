// The executor on tensor-parallel graphs (BuildParallelStep with
// tensor_slices): what it refuses, and a 2 tensor x 2 data rank run on
// inproc ranks whose compute callbacks check that each block part's partial
// output comes back to the next part summed over the tensor group by the
// graph's all-reduce nodes (on the tensor stream, in the trace), that the
// parameters are the tensor slices, and that the backward gets the tensor
// group's communicator for its fused all-reduces.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/step_trace.h"
#include "baton/scheduler/testing/toy_model.h"

namespace baton::scheduler {
namespace {

using testing::CreateInprocGroup;
using testing::RunRanks;

constexpr int64_t kSeq = 4, kBatch = 1;

Policy TensorPolicy(int tp, int micro_steps) {
  Policy p = *PolicyPreset("fsdp2");
  p.param_dtype = DataType::kF32;
  p.reduce_dtype = DataType::kF32;
  p.tensor_parallel = tp;
  p.micro_steps = micro_steps;
  return p;
}

StatusOr<ParallelStep> Build(const Policy& p, int world, bool slices = true) {
  return BuildParallelStep(*ModelPreset("micro"), p, world, kSeq, kBatch, {}, {},
                           /*plan_memory=*/true, slices);
}

TEST(ExecutorTensorTest, RefusesWhatDoesNotRunYet) {
  auto group = CreateInprocGroup(4);
  ASSERT_TRUE(group.ok()) << group.status();
  // The simulator's whole-model layout.
  auto whole = Build(TensorPolicy(2, 1), 4, /*slices=*/false);
  ASSERT_TRUE(whole.ok()) << whole.status();
  auto e = Executor::Create(whole->stages[0], *group->device, *group->comms[0]);
  EXPECT_EQ(e.status().code(), absl::StatusCode::kInvalidArgument) << e.status();
  EXPECT_NE(e.status().message().find("tensor slices"), std::string::npos) << e.status();
  Policy w8 = TensorPolicy(2, 1);  // its graphs keep fp32 moments
  w8.optimizer = OptimizerKind::kAdamW8bit;
  for (const Policy& p : {w8}) {
    auto step = Build(p, 4);
    ASSERT_TRUE(step.ok()) << step.status();
    auto exec = Executor::Create(step->stages[0], *group->device, *group->comms[0]);
    EXPECT_EQ(exec.status().code(), absl::StatusCode::kUnimplemented) << exec.status();
  }
}

// What tensor rank t writes as the partial output of block part (unit u,
// half h: 0 attention, 1 MLP) of micro-batch m in step s; the sum over
// the two tensor ranks is 3 V.
float V(int64_t s, int m, int u, int h) { return static_cast<float>(1000 * s + 100 * m + 10 * u + h + 1); }

TEST(ExecutorTensorTest, BlockPartsMeetTheirAllReducesOnTheTensorStream) {
  constexpr int kRanks = 4, kTp = 2, kMicro = 2, kSteps = 2;
  auto step = Build(TensorPolicy(kTp, kMicro), kRanks);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->stages.size(), 1u);
  const StepGraph& g = step->stages[0];
  EXPECT_TRUE(g.tensor_slices);
  const ModelSpec micro = *ModelPreset("micro");
  const int64_t act = kSeq * kBatch * micro.hidden;
  auto group = CreateInprocGroup(kRanks);
  ASSERT_TRUE(group.ok()) << group.status();
  StepTrace trace;
  std::vector<NodeObserver*> observers;
  for (int r = 0; r < kRanks; ++r) observers.push_back(trace.ForRank(r, g));
  std::atomic<int> outputs{0}, inputs{0}, backward_comms{0}, bad{0};
  std::vector<Status> status(kRanks);
  std::vector<double> scale(kRanks, 0);
  const int last_block = static_cast<int>(micro.layers);  // unit index
  RunRanks(kRanks, [&](int r) {
    const int t = step->mesh.coord(r, MeshDim::kTensor);
    ExecutorOptions o;
    o.observer = observers[r];
    auto exec = Executor::Create(g, *group->device, *group->comms[r], o);
    if (!exec.ok()) {
      status[r] = exec.status();
      return;
    }
    StepCallbacks cb;
    cb.compute = [&, t](const ComputeContext& ctx) -> Status {
      const ComputeContext::Tensor tc = ctx.tensor;
      if (tc.comm == nullptr || tc.size != kTp || tc.rank != t) ++bad;
      for (const TensorView& p : ctx.params) {
        const std::string& n = p.param->name;
        if (n.size() > 3 && n.compare(n.size() - 3, 3, ".wq") == 0 &&
            p.param->numel != micro.heads / kTp * micro.head_dim * micro.hidden) {
          ++bad;
        }
      }
      if (ctx.kind == NodeKind::kBackward) {
        if (ctx.spec->kind == UnitKind::kBlock && tc.segments != 0) ++backward_comms;
        return absl::OkStatus();
      }
      if (ctx.kind != NodeKind::kForward) return absl::OkStatus();
      const bool mlp = tc.segments & SegmentBit(BlockSegment::kMlp);
      const int u = ctx.unit, m = ctx.micro_step;
      const int64_t s = ctx.step;
      // The producer of this node's input: the block's attention part, the
      // previous block's MLP part, or (final norm) the last block's.
      float want = 0;
      if (ctx.spec->kind == UnitKind::kBlock && mlp) want = 3 * V(s, m, u, 0);
      if (ctx.spec->kind == UnitKind::kBlock && !mlp && ctx.spec->block > 0) {
        want = 3 * V(s, m, u - 1, 1);
      }
      if (ctx.spec->kind == UnitKind::kFinalNorm) want = 3 * V(s, m, last_block, 1);
      if ((want != 0) != (tc.input != nullptr)) ++bad;
      if (ctx.spec->kind == UnitKind::kBlock && (tc.segments == 0 || tc.output == nullptr)) ++bad;
      const void* in = tc.input;
      void* out = ctx.spec->kind == UnitKind::kBlock ? tc.output : nullptr;
      const float fill = (t + 1) * V(s, m, u, mlp ? 1 : 0);
      return ctx.stream->Enqueue([=, &inputs, &outputs, &bad] {
        if (in != nullptr) {
          ++inputs;
          const float* f = static_cast<const float*>(in);
          for (int64_t i = 0; i < act; ++i) {
            if (f[i] != want) {
              ++bad;
              break;
            }
          }
        }
        if (out != nullptr) {
          ++outputs;
          float* f = static_cast<float*>(out);
          for (int64_t i = 0; i < act; ++i) f[i] = fill;
        }
        return absl::OkStatus();
      });
    };
    cb.optimizer = [&scale, r](const OptimizerContext& ctx) {
      scale[r] = ctx.grad_scale;
      return absl::OkStatus();
    };
    Status st = (*exec)->InitParameters([](const ParamSlot& slot, float* v) {
      for (int64_t i = 0; i < slot.numel; ++i) v[i] = 0.5f;
    });
    for (int k = 0; k < kSteps && st.ok(); ++k) st = (*exec)->Step(cb);
    if (st.ok()) st = (*exec)->Synchronize();
    status[r] = st;
  });
  for (int r = 0; r < kRanks; ++r) {
    ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    // Gradients summed over the 2 data ranks only.
    EXPECT_DOUBLE_EQ(scale[r], 1.0 / (2 * kMicro)) << "rank " << r;
  }
  // Per rank, step and micro-batch: two parts per block write, each part
  // after the first and the final norm read.
  const int per = kRanks * kSteps * kMicro;
  EXPECT_EQ(outputs.load(), per * 2 * static_cast<int>(micro.layers));
  EXPECT_EQ(inputs.load(), per * 2 * static_cast<int>(micro.layers));
  EXPECT_EQ(backward_comms.load(), per * 2 * static_cast<int>(micro.layers));
  EXPECT_EQ(bad.load(), 0);
  const std::string json = trace.Json();
  EXPECT_NE(json.find("\"tensor"), std::string::npos);
  EXPECT_NE(json.find("AR-TP block0.attn m0"), std::string::npos);
}

TEST(ExecutorTensorTest, TheTraceMeasuresTheExposedTensorWaits) {
  // 2 tensor ranks; tensor rank 1's attention parts take 20 ms, the rest
  // is instant: rank 0's MLP parts wait on their all-reduce (which waits
  // for rank 1) about 20 ms per block, and the trace says so.
  constexpr int kRanks = 2;
  auto step = Build(TensorPolicy(kRanks, 1), kRanks);
  ASSERT_TRUE(step.ok()) << step.status();
  const StepGraph& g = step->stages[0];
  auto group = CreateInprocGroup(kRanks);
  ASSERT_TRUE(group.ok()) << group.status();
  StepTrace trace;
  std::vector<NodeObserver*> observers;
  for (int r = 0; r < kRanks; ++r) observers.push_back(trace.ForRank(r, g));
  std::vector<Status> status(kRanks);
  RunRanks(kRanks, [&](int r) {
    ExecutorOptions o;
    o.observer = observers[r];
    auto exec = Executor::Create(g, *group->device, *group->comms[r], o);
    if (!exec.ok()) {
      status[r] = exec.status();
      return;
    }
    StepCallbacks cb;
    cb.compute = [](const ComputeContext& ctx) -> Status {
      const bool slow = ctx.kind == NodeKind::kForward && ctx.tensor.rank == 1 &&
                        (ctx.tensor.segments & SegmentBit(BlockSegment::kAttention));
      if (!slow) return absl::OkStatus();
      return ctx.stream->Enqueue([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        return absl::OkStatus();
      });
    };
    cb.optimizer = [](const OptimizerContext&) { return absl::OkStatus(); };
    Status st;
    for (int k = 0; k < 2 && st.ok(); ++k) st = (*exec)->Step(cb);
    if (st.ok()) st = (*exec)->Synchronize();
    status[r] = st;
  });
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
  const std::map<int, double> exposed = trace.ExposedWaitMs(1, StreamClass::kTensor);
  ASSERT_EQ(exposed.size(), 2u);
  const double blocks = static_cast<double>(ModelPreset("micro")->layers);
  std::printf("exposed tensor waits: rank 0 %.1f ms, rank 1 %.1f ms\n", exposed.at(0),
              exposed.at(1));
  EXPECT_GE(exposed.at(0), 15 * blocks);
  EXPECT_LT(exposed.at(1), exposed.at(0));
}

TEST(ExecutorTensorTest, OverlapLeavesTheAllReducesToTheBlockParts) {
  // tp_comm_overlap: no AR-TP nodes; every block part gets the tensor
  // stream, the chunk count and the communicator, and no all-reduce buffer.
  constexpr int kRanks = 2;
  Policy p = TensorPolicy(kRanks, 1);
  p.tp_comm_overlap = true;
  auto step = Build(p, kRanks);
  ASSERT_TRUE(step.ok()) << step.status();
  const StepGraph& g = step->stages[0];
  for (const Node& n : g.nodes) EXPECT_NE(n.stream, g.stream_for(StreamClass::kTensor)) << n.name;
  auto group = CreateInprocGroup(kRanks);
  ASSERT_TRUE(group.ok()) << group.status();
  std::atomic<int> parts{0}, bad{0};
  std::vector<Status> status(kRanks);
  RunRanks(kRanks, [&](int r) {
    auto exec = Executor::Create(g, *group->device, *group->comms[r]);
    if (!exec.ok()) {
      status[r] = exec.status();
      return;
    }
    StepCallbacks cb;
    cb.compute = [&](const ComputeContext& ctx) -> Status {
      const ComputeContext::Tensor t = ctx.tensor;
      if (t.segments == 0) return absl::OkStatus();
      ++parts;
      if (t.chunks != kRanks || t.stream == nullptr || t.comm == nullptr || t.input != nullptr ||
          t.output != nullptr || t.stream == ctx.stream) {
        ++bad;
      }
      return absl::OkStatus();
    };
    cb.optimizer = [](const OptimizerContext&) { return absl::OkStatus(); };
    Status st = (*exec)->Step(cb);
    if (st.ok()) st = (*exec)->Synchronize();
    status[r] = st;
  });
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
  EXPECT_EQ(parts.load(), kRanks * 4 * static_cast<int>(ModelPreset("micro")->layers));
  EXPECT_EQ(bad.load(), 0);
}


// Sequence parallelism: each norm node's shard is gathered in tensor-rank
// order into the next attention / MLP node's input, each part's partial
// output is reduce-scattered into the next norm's (or the final norm's)
// shard, and backward each part gets its output gradient gathered from
// the shards the nodes after it wrote.
TEST(ExecutorTensorTest, SequenceParallelNodesGatherAndReduceScatter) {
  constexpr int kTp = 2;
  Policy p = TensorPolicy(kTp, 1);
  p.sequence_parallel = true;
  auto step = Build(p, kTp);
  ASSERT_TRUE(step.ok()) << step.status();
  const StepGraph& g = step->stages[0];
  const int64_t act = kSeq * kBatch * ModelPreset("micro")->hidden;
  const int64_t shard = act / kTp;
  auto group = CreateInprocGroup(kTp);
  ASSERT_TRUE(group.ok()) << group.status();
  std::atomic<int> gathered{0}, scattered{0}, bad{0};
  std::vector<Status> status(kTp);
  RunRanks(kTp, [&](int r) {
    auto exec = Executor::Create(g, *group->device, *group->comms[r]);
    if (!exec.ok()) {
      status[r] = exec.status();
      return;
    }
    StepCallbacks cb;
    cb.compute = [&](const ComputeContext& ctx) -> Status {
      if (ctx.kind == NodeKind::kRecompute) return absl::OkStatus();
      const ComputeContext::Tensor tc = ctx.tensor;
      const uint8_t norms =
          SegmentBit(BlockSegment::kAttnNorm) | SegmentBit(BlockSegment::kMlpNorm);
      const bool block = ctx.spec->kind == UnitKind::kBlock;
      // A node reading a gather: a forward attention / MLP part, or any
      // backward block part. Its input: rank t's shard filled with t + 1.
      const bool reads_gather = block && (ctx.kind == NodeKind::kBackward || !(tc.segments & norms));
      // A node reading a reduce-scatter: a forward norm after a block part.
      const bool reads_sum = ctx.kind == NodeKind::kForward && tc.input != nullptr && !reads_gather;
      const int t = tc.rank;
      const void* in = tc.input;
      void* out = tc.output;
      // Writes: the forward norms' shards and backward shards get t + 1;
      // the forward parts' partial outputs 10 (t + 1) (summed: 30).
      const bool partial = block && ctx.kind == NodeKind::kForward && !(tc.segments & norms);
      const int64_t out_n = partial ? act : shard;
      const float fill = partial ? 10.0f * (t + 1) : static_cast<float>(t + 1);
      if (reads_gather && in == nullptr) ++bad;
      return ctx.stream->Enqueue([=, &gathered, &scattered, &bad] {
        if (reads_gather && in != nullptr) {
          ++gathered;
          const float* f = static_cast<const float*>(in);
          for (int64_t i = 0; i < act; ++i) {
            if (f[i] != static_cast<float>(i / shard + 1)) {
              ++bad;
              break;
            }
          }
        }
        if (reads_sum) {
          ++scattered;
          const float* f = static_cast<const float*>(in);
          for (int64_t i = 0; i < shard; ++i) {
            if (f[i] != 30.0f) {
              ++bad;
              break;
            }
          }
        }
        if (out != nullptr) {
          float* f = static_cast<float*>(out);
          for (int64_t i = 0; i < out_n; ++i) f[i] = fill;
        }
        return absl::OkStatus();
      });
    };
    cb.optimizer = [](const OptimizerContext&) { return absl::OkStatus(); };
    Status st = (*exec)->InitParameters([](const ParamSlot& slot, float* v) {
      for (int64_t i = 0; i < slot.numel; ++i) v[i] = 0.5f;
    });
    if (st.ok()) st = (*exec)->Step(cb);
    if (st.ok()) st = (*exec)->Synchronize();
    status[r] = st;
  });
  for (int r = 0; r < kTp; ++r) ASSERT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  const int layers = static_cast<int>(ModelPreset("micro")->layers);
  // Per rank and block: 2 forward gathers, 2 backward; 2 reduce-scatters
  // read (the MLP norm's and the next block's or final norm's).
  EXPECT_EQ(gathered.load(), kTp * layers * 4);
  EXPECT_EQ(scattered.load(), kTp * layers * 2);
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace baton::scheduler
