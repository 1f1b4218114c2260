// The executor on pipeline stage graphs (scheduler/parallel_graph.h): what
// it refuses, 2-stage x 2-data-rank runs (1F1B, interleaved and ZB-H1; 1F1B
// and interleaved also on inproc's event protocol) on inproc ranks whose
// compute callbacks check that every activation and gradient the executor
// hands over is the one the other stage produced for that micro-batch and
// boundary, that each parameter's gradient is written
// once per micro-batch (by ZB-H1's deferred weight pass, never its input
// pass) and reaches the optimizer summed, that each unit's declared saved
// activation buffer holds at its backward (and weight pass) what its
// forward of that micro-batch wrote, the plan's bound, and the measured
// bubble.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "baton/comm/testing/forwarding_comm.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/step_trace.h"
#include "baton/scheduler/testing/toy_model.h"

namespace baton::scheduler {
namespace {

using testing::CreateInprocGroup;
using testing::RunRanks;

constexpr int64_t kSeq = 4, kBatch = 1;

Policy PipelinePolicy(int micro_steps) {
  Policy p = *PolicyPreset("fsdp2");
  p.param_dtype = DataType::kF32;
  p.reduce_dtype = DataType::kF32;
  p.pipeline_parallel = 2;
  p.micro_steps = micro_steps;
  return p;
}

StatusOr<ParallelStep> Build(const Policy& p, int world) {
  return BuildParallelStep(*ModelPreset("micro"), p, world, kSeq, kBatch, {}, {},
                           /*plan_memory=*/true);
}

// (Tensor parallelism's refusals: executor_tensor_test.)
// A communicator that answers caps() without point-to-point (and forwards
// everything else).
class NoP2PComm final : public baton::testing::ForwardingComm {
 public:
  explicit NoP2PComm(Communicator& base) : ForwardingComm(base) {}
  const char* backend() const override { return "nop2p"; }
  CommCaps caps() const override {
    CommCaps c = ForwardingComm::caps();
    c.p2p_host_memory = false;
    c.p2p_device_memory = false;
    return c;
  }
};

TEST(ExecutorPipelineTest, RefusesABackendWithoutPointToPoint) {
  auto group = CreateInprocGroup(2);
  ASSERT_TRUE(group.ok()) << group.status();
  auto step = Build(PipelinePolicy(4), 2);
  ASSERT_TRUE(step.ok()) << step.status();
  NoP2PComm bare(*group->comms[0]);
  auto exec = Executor::Create(step->stages[0], *group->device, bare);
  EXPECT_EQ(exec.status().code(), absl::StatusCode::kUnimplemented) << exec.status();
  EXPECT_NE(exec.status().message().find("nop2p communicator has no point-to-point on host"),
            std::string::npos)
      << exec.status();
  // inproc has it on host memory (and on device memory in CUDA builds).
  EXPECT_TRUE(group->comms[0]->caps().p2p_host_memory);
}

TEST(ExecutorPipelineTest, RefusesWhatDoesNotRunYet) {
  auto group = CreateInprocGroup(2);
  ASSERT_TRUE(group.ok()) << group.status();
  auto step = Build(PipelinePolicy(4), 2);
  ASSERT_TRUE(step.ok()) << step.status();
  // Rank 0 is stage 0: the last stage's graph is not its own.
  auto wrong = Executor::Create(step->stages[1], *group->device, *group->comms[0]);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument) << wrong.status();
  EXPECT_NE(wrong.status().message().find("stage 0"), std::string::npos) << wrong.status();
  ExecutorOptions check;
  check.check_schedule = true;
  auto checked = Executor::Create(step->stages[0], *group->device, *group->comms[0], check);
  EXPECT_EQ(checked.status().code(), absl::StatusCode::kInvalidArgument) << checked.status();
}

// The value every element of micro-batch m's activation arriving at
// virtual stage `vs` (its gradient leaving it: the negative) carries in
// step `step`, from data rank d.
float Mark(int64_t step, int m, int d, int vs) {
  return static_cast<float>(10000 * step + 100 * m + 10 * vs + d + 1);
}

// 2 stages x 2 data ranks, 1F1B (1 chunk per stage), interleaved (2), or
// ZB-H1 (-1: 1 chunk, each backward split into B and the deferred W).
class CrossingTest : public ::testing::TestWithParam<int> {};

// The parameter: 1 (1F1B), 2 (interleaved, 2 virtual stages), -1 (ZB-H1);
// 101, 102: 1F1B and interleaved on inproc's event protocol (the sends and
// receives of device memory, on host streams).
TEST_P(CrossingTest, ActivationsAndGradientsCrossTheStages) {
  const bool events = GetParam() > 100;
  const int param = events ? GetParam() - 100 : GetParam();
  const bool zb = param < 0;
  const int v = zb ? 1 : param;
  constexpr int kRanks = 4, kMicro = 4, kSteps = 2;
  Policy policy = PipelinePolicy(kMicro);
  policy.virtual_stages = v;
  if (v > 1) policy.pipeline_schedule = PipelineSchedule::kInterleaved;
  if (zb) policy.pipeline_schedule = PipelineSchedule::kZbH1;
  ModelSpec spec = *ModelPreset("micro");
  spec.layers = 4;
  // Every unit saves kSaved floats per micro-batch (the planner reuses a
  // buffer only between micro-batches whose lifetimes do not overlap).
  constexpr int64_t kSaved = 64;
  const std::vector<int64_t> saved_bytes(spec.layers + 3, kSaved * 4);
  auto step = BuildParallelStep(spec, policy, kRanks, kSeq, kBatch, {}, {}, true, false,
                                saved_bytes);
  ASSERT_TRUE(step.ok()) << step.status();
  auto group = CreateInprocGroup(kRanks, events);
  ASSERT_TRUE(group.ok()) << group.status();
  const int64_t act = kSeq * kBatch * spec.hidden;
  std::atomic<int> saved_written{0}, saved_read{0}, saved_missing{0};
  std::atomic<int> inputs{0}, outputs{0}, output_grads{0}, input_grads{0}, bad{0};
  // Gradient-writing calls (the backward, or ZB-H1's weight pass), input
  // gradient passes that deferred theirs, misplaced gradient slots or
  // pipeline buffers, and optimizer gradients that are not the sum.
  std::atomic<int> grad_calls{0}, deferred{0}, misplaced{0}, bad_sums{0}, optimized{0};
  std::vector<Status> status(kRanks);
  RunRanks(kRanks, [&](int r) {
    const int stage = step->mesh.coord(r, MeshDim::kPipeline);
    const int d = step->mesh.position(r, kDataShardGroup);
    const StepGraph& g = step->stages[stage];
    // unit -> this rank's virtual stage holding it
    std::map<int, int> vstage;
    for (int c = 0; c < v; ++c) {
      for (int u : g.chunk_units[c]) vstage[u] = c * 2 + stage;
    }
    auto exec = Executor::Create(g, *group->device, *group->comms[r]);
    if (!exec.ok()) {
      status[r] = exec.status();
      return;
    }
    StepCallbacks cb;
    cb.compute = [&, d, vstage](const ComputeContext& ctx) -> Status {
      const ComputeContext::Pipeline p = ctx.pipeline;
      const int m = ctx.micro_step, vs = vstage.at(ctx.unit);
      const int64_t s = ctx.step;
      auto fill = [act](void* buf, float x) {
        float* f = static_cast<float*>(buf);
        for (int64_t i = 0; i < act; ++i) f[i] = x;
      };
      auto check = [act, &bad](const void* buf, float x) {
        const float* f = static_cast<const float*>(buf);
        for (int64_t i = 0; i < act; ++i) {
          if (f[i] != x) {
            ++bad;
            return;
          }
        }
      };
      // Every parameter's gradient gets 1 per micro-batch from the call
      // that writes it; ZB-H1's B writes none and gets no slot.
      const bool weight = ctx.kind == NodeKind::kBackwardWeight;
      const bool backward = ctx.kind == NodeKind::kBackward;
      if (weight && (p.input || p.output || p.output_grad || p.input_grad)) ++misplaced;
      if (weight != (zb && weight) || (backward && ctx.weight_deferred != zb)) ++misplaced;
      if ((backward && zb) != ctx.grads.empty() && (backward || weight)) ++misplaced;
      if (backward && zb) ++deferred;
      std::vector<TensorView> grads = ctx.grads;
      std::vector<bool> acc = ctx.grad_accumulate;
      if (!grads.empty()) ++grad_calls;
      if (p.saved == nullptr) ++saved_missing;
      const float saved_mark = Mark(s, m, d, vs) + 1000000.f * (ctx.unit + 1);
      const bool forward = ctx.kind == NodeKind::kForward;
      return ctx.stream->Enqueue([=, &inputs, &outputs, &output_grads, &input_grads,
                                  &saved_written, &saved_read, &bad] {
        if (p.saved != nullptr) {
          float* f = static_cast<float*>(p.saved);
          if (forward) {
            ++saved_written;
            for (int64_t i = 0; i < kSaved; ++i) f[i] = saved_mark;
          } else {
            ++saved_read;
            for (int64_t i = 0; i < kSaved; ++i) {
              if (f[i] != saved_mark) {
                ++bad;
                break;
              }
            }
          }
        }
        for (size_t i = 0; i < grads.size(); ++i) {
          float* g = static_cast<float*>(grads[i].data);
          if (g == nullptr) continue;  // frozen (none in this model)
          for (int64_t k = 0; k < grads[i].param->numel; ++k) g[k] = (acc[i] ? g[k] : 0.f) + 1.f;
        }
        if (p.output != nullptr) ++outputs, fill(p.output, Mark(s, m, d, vs + 1));
        if (p.input != nullptr) ++inputs, check(p.input, Mark(s, m, d, vs));
        if (p.input_grad != nullptr) ++input_grads, fill(p.input_grad, -Mark(s, m, d, vs));
        if (p.output_grad != nullptr) ++output_grads, check(p.output_grad, -Mark(s, m, d, vs + 1));
        return absl::OkStatus();
      });
    };
    cb.optimizer = [&](const OptimizerContext& o) -> Status {
      ++optimized;
      const float* g = static_cast<const float*>(o.grad);
      const int64_t lo = o.shard_offset, hi = o.shard_offset + o.shard_numel;
      std::vector<std::pair<int64_t, int64_t>> spans;  // the shard's parameter elements
      for (const ParamSlot& slot : o.spec->params) {
        const int64_t a = std::max(slot.offset, lo), b = std::min(slot.offset + slot.numel, hi);
        if (a < b) spans.emplace_back(a - lo, b - lo);
      }
      return o.stream->Enqueue([g, spans, &bad_sums] {
        // Summed over the 2 data ranks' micro-batches.
        for (const auto& [a, b] : spans) {
          for (int64_t k = a; k < b; ++k) {
            if (g[k] != 2.f * kMicro) {
              ++bad_sums;
              return absl::OkStatus();
            }
          }
        }
        return absl::OkStatus();
      });
    };
    Status st = (*exec)->InitParameters([](const ParamSlot& slot, float* x) {
      for (int64_t i = 0; i < slot.numel; ++i) x[i] = 0.5f;
    });
    for (int k = 0; k < kSteps && st.ok(); ++k) st = (*exec)->Step(cb);
    if (st.ok()) st = (*exec)->Synchronize();
    status[r] = st;
  });
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  // Per step, data rank and micro-batch, each of the 2v - 1 boundaries
  // between virtual stages: one output sent and received (the receiving
  // chunk's forward and backward both read it), one gradient sent back and
  // received.
  const int per = kSteps * 2 * kMicro * (2 * v - 1);
  EXPECT_EQ(outputs.load(), per);
  EXPECT_EQ(inputs.load(), 2 * per);
  EXPECT_EQ(input_grads.load(), per);
  EXPECT_EQ(output_grads.load(), per);
  EXPECT_EQ(bad.load(), 0);
  // Per step, rank and micro-batch, one gradient-writing call per unit
  // (the model's units over the 2 stages, each on 2 data ranks).
  const int units = static_cast<int>(step->stages[0].layout.units.size());
  EXPECT_EQ(grad_calls.load(), kSteps * kMicro * 2 * units);
  EXPECT_EQ(deferred.load(), zb ? grad_calls.load() : 0);
  // Every compute call had its unit's saved buffer: one forward writing it
  // and one backward (ZB-H1: and one weight pass) reading it per unit,
  // micro-batch and data rank.
  EXPECT_EQ(saved_missing.load(), 0);
  EXPECT_EQ(saved_written.load(), kSteps * kMicro * 2 * units);
  EXPECT_EQ(saved_read.load(), (zb ? 2 : 1) * kSteps * kMicro * 2 * units);
  EXPECT_EQ(misplaced.load(), 0);
  EXPECT_GT(optimized.load(), 0);
  EXPECT_EQ(bad_sums.load(), 0);
}

INSTANTIATE_TEST_SUITE_P(Schedules, CrossingTest, ::testing::Values(1, 2, -1, 101, 102),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return i.param == 1     ? std::string("OneFOneB")
                                  : i.param == 2   ? std::string("Interleaved")
                                  : i.param == 101 ? std::string("OneFOneBEventProtocol")
                                  : i.param == 102 ? std::string("InterleavedEventProtocol")
                                                   : std::string("ZbH1");
                         });

TEST(ExecutorPipelineTest, AStagePlansItsInFlightInputsNotEveryMicroBatch) {
  // The last stage keeps each received input from its forward to its
  // backward; in 1F1B only a bounded number are live at once (its own
  // micro-batch and the next one being received), so the plan's lower
  // bound does not grow with the micro-batches.
  std::vector<size_t> bound;
  for (int m : {2, 4, 8}) {
    auto step = Build(PipelinePolicy(m), 2);
    ASSERT_TRUE(step.ok()) << step.status();
    const StepGraph& g = step->stages[1];
    int received = 0;
    for (const Node& n : g.nodes) received += n.kind == NodeKind::kRecv;
    EXPECT_EQ(received, m);
    EXPECT_GE(g.plan.arena_bytes, g.plan.lower_bound_bytes);
    bound.push_back(g.plan.lower_bound_bytes);
  }
  EXPECT_EQ(bound[1], bound[0]);
  EXPECT_EQ(bound[2], bound[0]);
}

TEST(ExecutorPipelineTest, TheMeasuredBubbleIsOneFOneBs) {
  // 2 stages x 1 data rank, 4 micro-batches; each stage's one block sleeps
  // 20 ms forward and 40 ms backward (the rest is instant): equal stages, so
  // 1F1B idles each stage (p - 1) / (m + p - 1) = 20% of its span. (Long
  // enough that a loaded machine's late wake-ups, a few ms, stay small
  // against them; the test runs exclusive, see BUILD.)
  constexpr int kRanks = 2, kMicro = 4;
  auto step = Build(PipelinePolicy(kMicro), kRanks);
  ASSERT_TRUE(step.ok()) << step.status();
  auto group = CreateInprocGroup(kRanks);
  ASSERT_TRUE(group.ok()) << group.status();
  StepTrace trace;
  std::vector<NodeObserver*> observers;
  for (int r = 0; r < kRanks; ++r) observers.push_back(trace.ForRank(r, step->stages[r]));
  std::vector<Status> status(kRanks);
  RunRanks(kRanks, [&](int r) {
    ExecutorOptions o;
    o.observer = observers[r];
    auto exec = Executor::Create(step->stages[r], *group->device, *group->comms[r], o);
    if (!exec.ok()) {
      status[r] = exec.status();
      return;
    }
    StepCallbacks cb;
    cb.compute = [](const ComputeContext& ctx) -> Status {
      if (ctx.spec->kind != UnitKind::kBlock) return absl::OkStatus();
      const int ms = ctx.kind == NodeKind::kBackward ? 40 : 20;
      return ctx.stream->Enqueue([ms] {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
        return absl::OkStatus();
      });
    };
    cb.optimizer = [](const OptimizerContext&) { return absl::OkStatus(); };
    // Four steps: the first pays the ranks' first meetings.
    Status st;
    for (int k = 0; k < 4 && st.ok(); ++k) st = (*exec)->Step(cb);
    if (st.ok()) st = (*exec)->Synchronize();
    status[r] = st;
  });
  for (int r = 0; r < kRanks; ++r) ASSERT_TRUE(status[r].ok()) << status[r];
  // A sleep only overshoots, and a late stage makes the other idle: the
  // least of steps 1..3 per stage is the schedule's bubble.
  std::map<int, double> least;
  for (int k = 0; k < 4; ++k) {
    const std::map<int, double> idle = trace.ComputeIdleFraction(k);
    ASSERT_EQ(idle.size(), 2u) << "step " << k;
    for (const auto& [rank, fraction] : idle) {
      std::printf("step %d stage %d: bubble %.3f\n", k, rank, fraction);
      if (k > 0) least[rank] = least.count(rank) ? std::min(least[rank], fraction) : fraction;
    }
  }
  for (const auto& [rank, fraction] : least) {
    EXPECT_NEAR(fraction, 0.2, 0.05) << "stage " << rank;
  }
  EXPECT_TRUE(trace.ComputeIdleFraction(4).empty());  // no such step
}

}  // namespace
}  // namespace baton::scheduler
