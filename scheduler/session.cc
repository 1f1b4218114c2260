#include "baton/scheduler/session.h"

#include "absl/strings/str_cat.h"
#include "baton/scheduler/policy_file.h"

namespace baton::scheduler {

StatusOr<std::unique_ptr<Session>> Session::Create(
    std::shared_ptr<const StepGraph> graph, Device& device, Communicator& comm,
    const ExecutorOptions& options) {
  BATON_ASSIGN_OR_RETURN(
      auto executor, Executor::Create(std::move(graph), device, comm, options));
  return std::unique_ptr<Session>(new Session(std::move(executor)));
}

StatusOr<std::unique_ptr<Session>> Session::Create(
    StepGraph graph, Device& device, Communicator& comm,
    const ExecutorOptions& options) {
  return Create(std::make_shared<const StepGraph>(std::move(graph)), device,
                comm, options);
}

StatusOr<std::unique_ptr<Session>> Session::Create(
    const ModelSpec& spec, const Policy& policy, Device& device,
    Communicator& comm, const ExecutorOptions& options) {
  BATON_ASSIGN_OR_RETURN(StepGraph graph,
                         BuildStepGraph(spec, policy, comm.size()));
  return Create(std::move(graph), device, comm, options);
}

StatusOr<std::unique_ptr<Session>> Session::CreateFromPolicyFile(
    const ModelSpec& spec, const std::string& policy_path, Device& device,
    Communicator& comm, const ExecutorOptions& options) {
  BATON_ASSIGN_OR_RETURN(const Policy policy, ReadPolicyFile(policy_path));
  return Create(spec, policy, device, comm, options);
}

int Session::NextCompute() const {
  const auto& nodes = graph().nodes;
  int i = cursor_;
  while (i < static_cast<int>(nodes.size()) && !IsCompute(nodes[i].kind)) ++i;
  return i;
}

std::string Session::Describe(int node) const {
  const auto& nodes = graph().nodes;
  if (node >= static_cast<int>(nodes.size())) return "FinishStep()";
  const Node& n = nodes[node];
  const bool weight = n.kind == NodeKind::kBackwardWeight;
  const char* hook = n.kind == NodeKind::kForward ? "forward"
                     : weight                     ? "weight gradient"
                                                  : "backward";
  const bool post = node == open_;
  return absl::StrCat(post ? "Post" : "Pre",
                      n.kind == NodeKind::kForward ? "Forward"
                      : weight                     ? "BackwardWeight"
                                                   : "Backward",
                      "(", graph().layout.units[n.unit].name, ") [", hook,
                      " of micro-step ", n.micro_step, "]");
}

Status Session::Expect(NodeKind kind, int unit, bool pre, const char* call) {
  if (!in_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat(call, ": no step open; call BeginStep() first"));
  }
  const auto& nodes = graph().nodes;
  const auto& units = graph().layout.units;
  if (unit < 0 || unit >= static_cast<int>(units.size())) {
    return absl::InvalidArgumentError(
        absl::StrCat(call, ": unit ", unit, " out of range [0, ",
                     units.size(), ")"));
  }
  const int expected = pre ? NextCompute() : open_;
  auto matches = [&](int i) {
    if (i < 0 || i >= static_cast<int>(nodes.size())) return false;
    const Node& n = nodes[i];
    const NodeKind k = n.kind == NodeKind::kRecompute ? NodeKind::kBackward : n.kind;
    return k == kind && n.unit == unit;
  };
  if ((pre && open_ >= 0) || !matches(expected)) {
    const int want = open_ >= 0 ? open_ : expected;
    return absl::FailedPreconditionError(absl::StrCat(
        call, "(", units[unit].name, ") is out of plan order: expected ",
        Describe(want)));
  }
  return absl::OkStatus();
}

Status Session::IssueTo(int node) {
  for (; cursor_ < node; ++cursor_) {
    BATON_RETURN_IF_ERROR(executor_->IssueNode(cursor_, callbacks_));
  }
  return absl::OkStatus();
}

UnitViews Session::Views(int node, bool recompute, Recompute part) {
  ComputeContext ctx = executor_->MakeComputeContext(node);
  UnitViews v;
  v.stream = ctx.stream;
  v.micro_step = ctx.micro_step;
  v.recompute = recompute;
  v.recompute_part = part;
  v.params = std::move(ctx.params);
  v.grads = std::move(ctx.grads);
  v.grad_accumulate = std::move(ctx.grad_accumulate);
  v.pipeline = ctx.pipeline;
  v.weight_deferred = ctx.weight_deferred;
  v.tensor = ctx.tensor;
  return v;
}

Status Session::BeginStep() {
  if (in_step_) {
    return absl::FailedPreconditionError(
        absl::StrCat("BeginStep: the step is still open; expected ",
                     Describe(open_ >= 0 ? open_ : NextCompute())));
  }
  BATON_RETURN_IF_ERROR(executor_->BeginStep());
  in_step_ = true;
  cursor_ = 0;
  open_ = -1;
  return absl::OkStatus();
}

StatusOr<UnitViews> Session::PreForward(int unit) {
  BATON_RETURN_IF_ERROR(Expect(NodeKind::kForward, unit, true, "PreForward"));
  const int node = NextCompute();
  BATON_RETURN_IF_ERROR(IssueTo(node));
  BATON_RETURN_IF_ERROR(executor_->PreNode(node));
  open_ = node;
  return Views(node, false, Recompute::kFull);
}

Status Session::PostForward(int unit) {
  BATON_RETURN_IF_ERROR(Expect(NodeKind::kForward, unit, false, "PostForward"));
  BATON_RETURN_IF_ERROR(executor_->PostNode(open_));
  cursor_ = open_ + 1;
  open_ = -1;
  return absl::OkStatus();
}

StatusOr<UnitViews> Session::PreBackward(int unit) {
  BATON_RETURN_IF_ERROR(Expect(NodeKind::kBackward, unit, true, "PreBackward"));
  int node = NextCompute();
  BATON_RETURN_IF_ERROR(IssueTo(node));
  bool recompute = false;
  Recompute part = Recompute::kFull;
  if (graph().nodes[node].kind == NodeKind::kRecompute) {
    part = graph().nodes[node].recompute;
    // The recompute node reads what the backward reads and writes nothing;
    // the trainer runs it inside this hook, before the backward.
    BATON_RETURN_IF_ERROR(executor_->PreNode(node));
    BATON_RETURN_IF_ERROR(executor_->PostNode(node));
    cursor_ = ++node;
    BATON_RETURN_IF_ERROR(IssueTo(NextCompute()));
    node = cursor_;
    recompute = true;
  }
  BATON_RETURN_IF_ERROR(executor_->PreNode(node));
  open_ = node;
  return Views(node, recompute, part);
}

Status Session::PostBackward(int unit) {
  BATON_RETURN_IF_ERROR(
      Expect(NodeKind::kBackward, unit, false, "PostBackward"));
  BATON_RETURN_IF_ERROR(executor_->PostNode(open_));
  cursor_ = open_ + 1;
  open_ = -1;
  return absl::OkStatus();
}

StatusOr<UnitViews> Session::PreBackwardWeight(int unit) {
  BATON_RETURN_IF_ERROR(Expect(NodeKind::kBackwardWeight, unit, true, "PreBackwardWeight"));
  const int node = NextCompute();
  BATON_RETURN_IF_ERROR(IssueTo(node));
  BATON_RETURN_IF_ERROR(executor_->PreNode(node));
  open_ = node;
  return Views(node, false, Recompute::kFull);
}

Status Session::PostBackwardWeight(int unit) {
  BATON_RETURN_IF_ERROR(
      Expect(NodeKind::kBackwardWeight, unit, false, "PostBackwardWeight"));
  BATON_RETURN_IF_ERROR(executor_->PostNode(open_));
  cursor_ = open_ + 1;
  open_ = -1;
  return absl::OkStatus();
}

Status Session::FinishStep(
    const std::function<Status(const OptimizerContext&)>& optimizer) {
  if (!in_step_) {
    return absl::FailedPreconditionError(
        "FinishStep: no step open; call BeginStep() first");
  }
  const int next = open_ >= 0 ? open_ : NextCompute();
  if (next < static_cast<int>(graph().nodes.size())) {
    return absl::FailedPreconditionError(
        absl::StrCat("FinishStep: the plan still expects ", Describe(next)));
  }
  StepCallbacks cb = callbacks_;
  cb.optimizer = optimizer;
  for (; cursor_ < static_cast<int>(graph().nodes.size()); ++cursor_) {
    BATON_RETURN_IF_ERROR(executor_->IssueNode(cursor_, cb));
  }
  in_step_ = false;
  return executor_->EndStep();
}

Status Session::Save(const SaveOptions& options) {
  if (in_step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Save: a step is open; the plan expects ", Describe(open_ >= 0 ? open_ : NextCompute())));
  }
  return executor_->Save(options);
}

Status Session::WaitForSave(SaveStats* stats) { return executor_->WaitForSave(stats); }

StatusOr<CheckpointInfo> Session::Load(const std::string& path, const LoadOptions& options) {
  if (in_step_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Load: a step is open; the plan expects ", Describe(open_ >= 0 ? open_ : NextCompute())));
  }
  return executor_->Load(path, options);
}

}  // namespace baton::scheduler
