#include "baton/scheduler/session.h"

#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/policy_file.h"
#include "gtest/gtest.h"
#include "baton/scheduler/testing/toy_model.h"

namespace baton::scheduler {
namespace {

using testing::CreateInprocGroup;
using testing::RunRanks;
using testing::ToyModel;

// Drives one step through the hooks, calling the toy model's callbacks as a
// trainer with its own loop would.
Status HookStep(Session& s, ToyModel& toy, int rank) {
  const StepCallbacks cb = toy.Callbacks(rank);
  const int units = static_cast<int>(s.graph().layout.units.size());
  BATON_RETURN_IF_ERROR(s.BeginStep());
  for (int m = 0; m < s.graph().policy.micro_steps; ++m) {
    for (int u = 0; u < units; ++u) {
      BATON_ASSIGN_OR_RETURN(UnitViews v, s.PreForward(u));
      ComputeContext ctx;
      ctx.kind = NodeKind::kForward;
      ctx.unit = u;
      ctx.micro_step = v.micro_step;
      ctx.stream = v.stream;
      ctx.params = v.params;
      BATON_RETURN_IF_ERROR(cb.compute(ctx));
      BATON_RETURN_IF_ERROR(s.PostForward(u));
    }
    for (int u = units - 1; u >= 0; --u) {
      BATON_ASSIGN_OR_RETURN(UnitViews v, s.PreBackward(u));
      ComputeContext ctx;
      ctx.unit = u;
      ctx.micro_step = v.micro_step;
      ctx.stream = v.stream;
      ctx.params = v.params;
      if (v.recompute) {
        ctx.kind = NodeKind::kRecompute;
        BATON_RETURN_IF_ERROR(cb.compute(ctx));
      }
      ctx.kind = NodeKind::kBackward;
      ctx.grads = v.grads;
      ctx.grad_accumulate = v.grad_accumulate;
      BATON_RETURN_IF_ERROR(cb.compute(ctx));
      BATON_RETURN_IF_ERROR(s.PostBackward(u));
    }
  }
  return s.FinishStep(cb.optimizer);
}

// Sets the parameters to their initial values, runs `steps` steps through
// the hooks and compares the shards with `ref`: "" when they match, else what
// went wrong (the rank's communicator is aborted on an error, so its peers
// do not wait for it).
std::string TrainAndCompare(Session& s, ToyModel& toy, int rank, int steps,
                            const ToyModel::Reference& ref, Communicator& comm) {
  Status st = s.executor().InitParameters([](const ParamSlot& slot, float* out) {
    for (int64_t i = 0; i < slot.numel; ++i) out[i] = testing::InitialValue(slot, i);
  });
  for (int step = 0; st.ok() && step < steps; ++step) st = HookStep(s, toy, rank);
  if (st.ok()) st = s.executor().Synchronize();
  if (!st.ok()) {
    comm.Abort();
    return st.ToString();
  }
  return ToyModel::CompareShards(s.executor(), ref);
}

TEST(SessionTest, HooksReproduceTheReference) {
  for (const std::string& name : PolicyPresetNames()) {
    // ZenFlow runs its own optimizer, not the toy model's: compared with
    // its reference (poisoned, delayed) in optim/zenflow_exec_test.cc.
    if (name == "zenflow") continue;
    const int ranks = 2;
    Policy p = *PolicyPreset(name);
    p.param_dtype = DataType::kF32;
    p.micro_steps = 2;
    p.recompute_blocks = 1;
    const ModelSpec spec = *ModelPreset("micro");
    auto group = CreateInprocGroup(ranks);
    ASSERT_TRUE(group.ok());
    auto layout = LayoutFor(spec, p, *ResolveMesh(p, ranks));
    ASSERT_TRUE(layout.ok());
    ToyModel::Reference ref = ToyModel::InitialReference(*layout);
    for (int s = 0; s < 3; ++s) {
      ToyModel::ReferenceStep(*layout, ranks, 2, DataType::kF32, ref);
    }
    ToyModel toy(ranks);
    std::vector<std::string> errors(ranks);
    RunRanks(ranks, [&](int r) {
      auto graph = BuildStepGraph(spec, p, ranks);
      auto session = Session::Create(*graph, *group->device, *group->comms[r]);
      if (!session.ok()) {
        errors[r] = session.status().ToString();
        return;
      }
      errors[r] = TrainAndCompare(**session, toy, r, 3, ref, *group->comms[r]);
    });
    for (int r = 0; r < ranks; ++r) EXPECT_EQ(errors[r], "") << name;
  }
}

// PreBackward says which part of a block the trainer must recompute: with
// recompute = selective over the first block, block0's views ask for its
// attention core only, block1's for nothing; with full, the whole forward.
TEST(SessionTest, SaysWhichPartToRecompute) {
  for (Recompute mode : {Recompute::kSelective, Recompute::kFull}) {
    SCOPED_TRACE(RecomputeName(mode));
    const ModelSpec spec = *ModelPreset("micro");
    Policy p = *PolicyPreset("baton");
    p.recompute_blocks = 1;
    p.recompute = mode;
    auto graph = BuildStepGraph(spec, p, 1);
    ASSERT_TRUE(graph.ok()) << graph.status();
    auto group = CreateInprocGroup(1);
    ASSERT_TRUE(group.ok());
    auto session = Session::Create(*graph, *group->device, *group->comms[0]);
    ASSERT_TRUE(session.ok()) << session.status();
    Session& s = **session;
    ASSERT_TRUE(s.BeginStep().ok());
    const int units = static_cast<int>(s.graph().layout.units.size());
    for (int u = 0; u < units; ++u) {
      ASSERT_TRUE(s.PreForward(u).ok());
      ASSERT_TRUE(s.PostForward(u).ok());
    }
    for (int u = units - 1; u >= 0; --u) {
      auto v = s.PreBackward(u);
      ASSERT_TRUE(v.ok()) << v.status();
      const bool block0 = s.graph().layout.units[u].block == 0;
      EXPECT_EQ(v->recompute, block0) << u;
      if (block0) {
        EXPECT_EQ(v->recompute_part, mode);
      }
      ASSERT_TRUE(s.PostBackward(u).ok());
    }
    ASSERT_TRUE(s.FinishStep(nullptr).ok());
    EXPECT_NE(s.graph().ToText().find(mode == Recompute::kSelective ? "R-ATTN block0"
                                                                    : "\tR block0"),
              std::string::npos)
        << s.graph().ToText();
  }
}

TEST(SessionTest, OutOfOrderCallsNameTheExpectedHook) {
  const ModelSpec spec = *ModelPreset("micro");
  Policy p = *PolicyPreset("baton");
  auto graph = BuildStepGraph(spec, p, 1);
  ASSERT_TRUE(graph.ok());
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  auto session = Session::Create(*graph, *group->device, *group->comms[0]);
  ASSERT_TRUE(session.ok());
  Session& s = **session;
  EXPECT_EQ(s.PreForward(0).status().code(),
            absl::StatusCode::kFailedPrecondition);  // no BeginStep
  ASSERT_TRUE(s.BeginStep().ok());
  auto wrong = s.PreForward(2);
  ASSERT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("expected PreForward(embedding)"),
            std::string::npos)
      << wrong.status();
  ASSERT_TRUE(s.PreForward(0).ok());
  auto post = s.PostForward(1);
  ASSERT_EQ(post.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(post.message().find("expected PostForward(embedding)"),
            std::string::npos)
      << post;
  EXPECT_EQ(s.PreBackward(0).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE(s.PostForward(0).ok());
  auto finish = s.FinishStep(nullptr);
  ASSERT_EQ(finish.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(finish.message().find("PreForward(block0)"), std::string::npos)
      << finish;
  EXPECT_EQ(s.PreForward(99).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The session's executor owns its graph: one made from a temporary (the
// graph is gone when Create returns) still runs whole steps, and a shared
// graph outlives the caller's handle on it.
TEST(SessionTest, OwnsItsGraph) {
  const ModelSpec spec = *ModelPreset("micro");
  Policy p = *PolicyPreset("baton");
  p.param_dtype = DataType::kF32;
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  ToyModel toy(1);
  auto from_temporary =
      Session::Create(*BuildStepGraph(spec, p, 1), *group->device,
                      *group->comms[0]);
  ASSERT_TRUE(from_temporary.ok()) << from_temporary.status();
  auto shared = std::make_shared<const StepGraph>(*BuildStepGraph(spec, p, 1));
  const StepGraph* raw = shared.get();
  auto from_shared = Session::Create(shared, *group->device, *group->comms[0]);
  ASSERT_TRUE(from_shared.ok()) << from_shared.status();
  shared.reset();
  EXPECT_EQ(&(*from_shared)->graph(), raw);
  for (Session* s : {from_temporary->get(), from_shared->get()}) {
    ASSERT_TRUE(s->executor().InitParameters([](const ParamSlot& slot, float* v) {
      for (int64_t i = 0; i < slot.numel; ++i) v[i] = testing::InitialValue(slot, i);
    }).ok());
    for (int step = 0; step < 2; ++step) {
      Status st = HookStep(*s, toy, 0);
      ASSERT_TRUE(st.ok()) << st;
    }
    ASSERT_TRUE(s->executor().Synchronize().ok());
  }
  auto null_graph = Session::Create(std::shared_ptr<const StepGraph>(),
                                    *group->device, *group->comms[0]);
  EXPECT_EQ(null_graph.status().code(), absl::StatusCode::kInvalidArgument);
}

// A session made from a policy file runs the file's schedule: HSDP over
// 4 ranks as 2 x 2 with prefetch 2, read from JSON, reproduces the
// reference; a bad file is refused naming the field.
TEST(SessionTest, CreatesFromAPolicyFile) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string path = absl::StrCat(tmp ? tmp : "/tmp", "/session_policy.json");
  Policy p = *PolicyPreset("hsdp");
  p.name = "from_file";
  p.shard_group = 2;
  p.forward_prefetch = 2;
  p.backward_prefetch = 2;
  p.param_dtype = DataType::kF32;
  p.micro_steps = 2;
  ASSERT_TRUE(WritePolicyFile(path, p).ok());
  const int ranks = 4;
  const ModelSpec spec = *ModelPreset("micro");
  auto group = CreateInprocGroup(ranks);
  ASSERT_TRUE(group.ok());
  auto layout = LayoutFor(spec, p, *ResolveMesh(p, ranks));
  ASSERT_TRUE(layout.ok());
  ToyModel::Reference ref = ToyModel::InitialReference(*layout);
  for (int s = 0; s < 2; ++s) {
    ToyModel::ReferenceStep(*layout, ranks, 2, DataType::kF32, ref);
  }
  ToyModel toy(ranks);
  std::vector<std::string> errors(ranks);
  RunRanks(ranks, [&](int r) {
    auto session = Session::CreateFromPolicyFile(spec, path, *group->device,
                                                 *group->comms[r]);
    if (!session.ok()) {
      errors[r] = session.status().ToString();
      return;
    }
    if ((*session)->graph().policy.name != "from_file" ||
        (*session)->graph().mesh.size(kReplicaGroup) != 2) {
      errors[r] = "the session does not run the file's policy";
      return;
    }
    errors[r] = TrainAndCompare(**session, toy, r, 2, ref, *group->comms[r]);
  });
  for (int r = 0; r < ranks; ++r) EXPECT_EQ(errors[r], "") << r;

  // Bad files and groups that do not fit the communicator.
  auto one = CreateInprocGroup(3);
  ASSERT_TRUE(one.ok());
  auto groups = Session::CreateFromPolicyFile(spec, path, *one->device, *one->comms[0]);
  EXPECT_EQ(groups.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(groups.status().message().find("shard_group"), std::string::npos)
      << groups.status();
  auto missing = Session::CreateFromPolicyFile(spec, path + ".missing", *one->device,
                                               *one->comms[0]);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  const std::string bad = absl::StrCat(tmp ? tmp : "/tmp", "/session_bad.json");
  FILE* f = std::fopen(bad.c_str(), "w");
  std::fputs(R"({"micro_step": 2})", f);
  std::fclose(f);
  auto unknown = Session::CreateFromPolicyFile(spec, bad, *one->device, *one->comms[0]);
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("\"micro_step\""), std::string::npos)
      << unknown.status();
}

// 2 stages, 1F1B (or ZB-H1) over 3 micro-batches: each stage's trainer
// calls the hooks in its passes' order; the last stage's first unit gets
// what the first stage's last unit wrote, and the gradient comes back.
// Under ZB-H1 each backward is PreBackward (input gradient, no gradient
// slots) and later PreBackwardWeight (the slots, no pipeline buffers).
void DrivePipeline(bool zb) {
  ModelSpec spec = *ModelPreset("micro");
  Policy p = *PolicyPreset("fsdp2");
  p.param_dtype = DataType::kF32;
  p.reduce_dtype = DataType::kF32;
  p.pipeline_parallel = 2;
  p.micro_steps = 3;
  if (zb) p.pipeline_schedule = PipelineSchedule::kZbH1;
  constexpr int64_t kSeq = 4;
  auto step = BuildParallelStep(spec, p, 2, kSeq, 1, {}, {}, true);
  ASSERT_TRUE(step.ok()) << step.status();
  auto group = CreateInprocGroup(2);
  ASSERT_TRUE(group.ok());
  const int64_t act = kSeq * spec.hidden;
  std::vector<Status> status(2);
  std::vector<int> checked(2, 0), weights(2, 0);
  RunRanks(2, [&](int r) {
    auto session = Session::Create(step->stages[r], *group->device, *group->comms[r]);
    if (!session.ok()) {
      status[r] = session.status();
      return;
    }
    Session& s = **session;
    const std::vector<int>& units = step->stages[r].chunk_units[0];
    auto run = [&]() -> Status {
      BATON_RETURN_IF_ERROR(s.BeginStep());
      for (const PipelinePass& pass : step->order[r]) {
        const bool fwd = pass.kind == PipelinePass::Kind::kForward;
        if (pass.kind == PipelinePass::Kind::kWeight) {
          for (auto it = units.rbegin(); it != units.rend(); ++it) {
            // The input-gradient hook is not the plan's next call.
            if (s.PreBackward(*it).status().message().find("PreBackwardWeight") ==
                std::string::npos) {
              return absl::InternalError("PreBackward in place of the weight pass");
            }
            BATON_ASSIGN_OR_RETURN(UnitViews v, s.PreBackwardWeight(*it));
            const ComputeContext::Pipeline io = v.pipeline;
            if (v.micro_step != pass.micro || v.weight_deferred || v.grads.empty() ||
                v.grads.size() != v.params.size() || io.input || io.output ||
                io.output_grad || io.input_grad) {
              return absl::InternalError("weight pass views");
            }
            ++weights[r];
            BATON_RETURN_IF_ERROR(s.PostBackwardWeight(*it));
          }
          continue;
        }
        for (size_t i = 0; i < units.size(); ++i) {
          const int u = fwd ? units[i] : units[units.size() - 1 - i];
          BATON_ASSIGN_OR_RETURN(UnitViews v, fwd ? s.PreForward(u) : s.PreBackward(u));
          if (v.micro_step != pass.micro) return absl::InternalError("wrong micro-step");
          if (!fwd && (v.weight_deferred != zb || v.grads.empty() != zb)) {
            return absl::InternalError("backward views");
          }
          const ComputeContext::Pipeline io = v.pipeline;
          const float mark = static_cast<float>(pass.micro + 1);
          int* seen = &checked[r];
          BATON_RETURN_IF_ERROR(v.stream->Enqueue([io, mark, act, seen]() -> Status {
            auto fill = [act](void* b, float x) {
              for (int64_t k = 0; k < act; ++k) static_cast<float*>(b)[k] = x;
            };
            auto same = [act](const void* b, float x) {
              for (int64_t k = 0; k < act; ++k) {
                if (static_cast<const float*>(b)[k] != x) return false;
              }
              return true;
            };
            if (io.output) fill(io.output, mark);
            if (io.input_grad) fill(io.input_grad, -mark);
            if (io.input && !same(io.input, mark)) return absl::DataLossError("input");
            if (io.output_grad && !same(io.output_grad, -mark)) {
              return absl::DataLossError("output gradient");
            }
            *seen += (io.input != nullptr) + (io.output_grad != nullptr);
            return absl::OkStatus();
          }));
          BATON_RETURN_IF_ERROR(fwd ? s.PostForward(u) : s.PostBackward(u));
        }
      }
      BATON_RETURN_IF_ERROR(s.FinishStep(nullptr));
      return s.executor().Synchronize();
    };
    status[r] = run();
  });
  for (int r = 0; r < 2; ++r) EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
  // Stage 0 checks 3 gradients; stage 1 checks 3 inputs, in the forward
  // and again in the backward of its first unit.
  EXPECT_EQ(checked[0], 3);
  EXPECT_EQ(checked[1], 6);
  // ZB-H1: a weight pass per unit and micro-batch on each stage.
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(weights[r], zb ? 3 * static_cast<int>(step->stages[r].chunk_units[0].size()) : 0);
  }
}

TEST(SessionTest, DrivesAPipelineStageInScheduleOrder) { DrivePipeline(false); }

TEST(SessionTest, DrivesZbH1WithADeferredWeightHook) { DrivePipeline(true); }


TEST(SessionTest, DrivesTensorParallelBlocksPartByPart) {
  // 2 tensor ranks: a block's hooks are called once per part; each part
  // writes its partial output (rank + 1) and the next part (or the final
  // norm) reads their sum, 3, which the hooks' all-reduce node made.
  ModelSpec spec = *ModelPreset("micro");
  Policy p = *PolicyPreset("fsdp2");
  p.param_dtype = DataType::kF32;
  p.reduce_dtype = DataType::kF32;
  p.tensor_parallel = 2;
  constexpr int64_t kSeq = 4;
  auto step = BuildParallelStep(spec, p, 2, kSeq, 1, {}, {}, true, /*tensor_slices=*/true);
  ASSERT_TRUE(step.ok()) << step.status();
  auto group = CreateInprocGroup(2);
  ASSERT_TRUE(group.ok());
  const int64_t act = kSeq * spec.hidden;
  std::vector<Status> status(2);
  std::vector<int> checked(2, 0), parts(2, 0);
  RunRanks(2, [&](int r) {
    auto session = Session::Create(step->stages[0], *group->device, *group->comms[r]);
    if (!session.ok()) {
      status[r] = session.status();
      return;
    }
    Session& s = **session;
    const int units = static_cast<int>(s.graph().layout.units.size());
    auto calls = [&](int u) { return s.graph().layout.units[u].kind == UnitKind::kBlock ? 2 : 1; };
    auto run = [&]() -> Status {
      BATON_RETURN_IF_ERROR(s.BeginStep());
      for (int u = 0; u < units; ++u) {
        for (int k = 0; k < calls(u); ++k) {
          BATON_ASSIGN_OR_RETURN(UnitViews v, s.PreForward(u));
          const ComputeContext::Tensor t = v.tensor;
          if (t.comm == nullptr || t.size != 2 || t.rank != r) {
            return absl::InternalError("no tensor group in the views");
          }
          parts[r] += t.segments != 0;
          int* seen = &checked[r];
          BATON_RETURN_IF_ERROR(v.stream->Enqueue([t, r, act, seen]() -> Status {
            if (t.input != nullptr) {
              for (int64_t i = 0; i < act; ++i) {
                if (static_cast<const float*>(t.input)[i] != 3) return absl::DataLossError("sum");
              }
              ++*seen;
            }
            if (t.output != nullptr) {
              for (int64_t i = 0; i < act; ++i) static_cast<float*>(t.output)[i] = r + 1;
            }
            return absl::OkStatus();
          }));
          BATON_RETURN_IF_ERROR(s.PostForward(u));
        }
      }
      for (int u = units - 1; u >= 0; --u) {
        for (int k = 0; k < calls(u); ++k) {
          BATON_ASSIGN_OR_RETURN(UnitViews v, s.PreBackward(u));
          parts[r] += v.tensor.segments != 0;
          BATON_RETURN_IF_ERROR(s.PostBackward(u));
        }
      }
      BATON_RETURN_IF_ERROR(s.FinishStep(nullptr));
      return s.executor().Synchronize();
    };
    status[r] = run();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_TRUE(status[r].ok()) << "rank " << r << ": " << status[r];
    // Each block's MLP part, the next block's attention part and the
    // final norm read a sum; every block call is a part.
    EXPECT_EQ(checked[r], 2 * static_cast<int>(spec.layers)) << "rank " << r;
    EXPECT_EQ(parts[r], 4 * static_cast<int>(spec.layers)) << "rank " << r;
  }
}

}  // namespace
}  // namespace baton::scheduler
