// The session API, for trainers that keep their own loop (YaFSDP-style
// hooks). The trainer calls, for each micro-step of a step:
//
//   session->BeginStep();
//   for each unit u in forward order:
//     auto views = session->PreForward(u);   // params of u, ready on stream
//     ... enqueue u's forward on views->stream ...
//     session->PostForward(u);
//   for each unit u in reverse order:
//     auto views = session->PreBackward(u);  // params + gradient slots
//     if (views->recompute) ... enqueue u's forward again (all of it, or
//         only the attention core: views->recompute_part) ...
//     ... enqueue u's backward: write views->grads[i] (= or += as
//         views->grad_accumulate[i] says) ...
//     session->PostBackward(u);
//   (repeat both loops for each further micro-step)
//   session->FinishStep(optimizer);          // remaining reduces, optimizer
//
// On a pipeline stage's graph (scheduler/parallel_graph.h) the trainer
// calls the hooks of its stage's units in the schedule's pass order
// (ParallelStep::order: per pass the chunk's units forward or in
// reverse); the views carry the received input and the buffer for the
// output (and their gradients) in UnitViews::pipeline. Under zb-h1 a
// backward is two hooks: PreBackward / PostBackward with
// UnitViews::weight_deferred (the input gradient only, no gradient slots),
// then, where the schedule puts the deferred pass,
// PreBackwardWeight / PostBackwardWeight of the same unit and micro-batch
// (the weight gradients into views->grads, ComputeContext::weight_deferred).
//
// With tensor parallelism (a graph of BuildParallelStep with
// tensor_slices) a block runs in parts split at its tensor collectives:
// the trainer calls a block's PreForward / PostForward (PreBackward /
// PostBackward) once per part, in order, each part's UnitViews::tensor
// naming its segments, the all-reduce buffers and the tensor group's
// communicator (ComputeContext::Tensor); between the parts the hooks issue
// the graph's all-reduce nodes. Without it UnitViews::tensor is empty and
// a unit is one call each way.
//
// Each hook issues, before returning, every collective, copy and wait that
// the plan places before that point (gathers for later units are
// prefetched as the policy says), so the trainer never issues a collective
// itself. Nothing blocks the host (except the peer-emulating host limiter
// of fsdp1 / zero3). A hook called out of plan order returns
// FailedPrecondition naming the call that was expected, and issues nothing.
//
// Views stay valid in stream order until the hook's Post call's successors
// run: use them only in work enqueued on views->stream before the Post call.
// Gradients are summed over ranks and micro-steps; the optimizer gets
// grad_scale (see executor.h).
//
// Thread safety: one thread drives a Session.
#ifndef BATON_SCHEDULER_SESSION_H_
#define BATON_SCHEDULER_SESSION_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "baton/comm/communicator.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler {

struct UnitViews {
  Stream* stream = nullptr;           // the compute stream
  int micro_step = 0;
  bool recompute = false;             // backward: redo the forward first
  // Which part (Policy::recompute): the whole forward (kFull) or only the
  // attention core (kSelective: rebuild its output and softmax statistics
  // from the kept q, k, v; ComputeContext::recompute).
  Recompute recompute_part = Recompute::kFull;
  std::vector<TensorView> params;     // one per layout.unit_params[unit]
  std::vector<TensorView> grads;      // backward only
  std::vector<bool> grad_accumulate;  // backward only
  // zb-h1's input-gradient pass: grads empty, the weight gradients come in
  // PreBackwardWeight's views (ComputeContext::weight_deferred).
  bool weight_deferred = false;
  // A pipeline stage's graph: the activation received from the previous
  // stage, the buffer for the one sent to the next, and their gradients
  // (ComputeContext::Pipeline); all null without a pipeline.
  ComputeContext::Pipeline pipeline;
  // Tensor parallelism: this call's part of the block and its all-reduce
  // buffers (ComputeContext::Tensor); empty without it.
  ComputeContext::Tensor tensor;
};

class Session {
 public:
  // As Executor::Create (which owns the graph); the session owns its
  // executor.
  static StatusOr<std::unique_ptr<Session>> Create(
      std::shared_ptr<const StepGraph> graph, Device& device,
      Communicator& comm, const ExecutorOptions& options = {});
  static StatusOr<std::unique_ptr<Session>> Create(
      StepGraph graph, Device& device, Communicator& comm,
      const ExecutorOptions& options = {});
  // Builds the step graph of `spec` under `policy` for comm.size() ranks
  // (BuildStepGraph), then as above. InvalidArgument naming the knob for a
  // policy that ValidatePolicy or ResolveMesh refuses.
  static StatusOr<std::unique_ptr<Session>> Create(
      const ModelSpec& spec, const Policy& policy, Device& device,
      Communicator& comm, const ExecutorOptions& options = {});
  // The same for the policy in a policy file (scheduler/policy_file.h, e.g.
  // written by `simulate --tune --policy-out`): NotFound for a path that
  // cannot be read, InvalidArgument naming the field for a bad file.
  static StatusOr<std::unique_ptr<Session>> CreateFromPolicyFile(
      const ModelSpec& spec, const std::string& policy_path, Device& device,
      Communicator& comm, const ExecutorOptions& options = {});

  Executor& executor() { return *executor_; }
  const StepGraph& graph() const { return executor_->graph(); }

  // A graph with NF4 buckets (base_dtype nf4): the dequantize the hooks
  // issue before compute (StepCallbacks::dequantize; the caller's kernel,
  // e.g. ops/nf4.h's Nf4Dequantize).
  void set_dequantize(std::function<Status(const DequantizeContext&)> dequantize) {
    callbacks_.dequantize = std::move(dequantize);
  }

  Status BeginStep();
  StatusOr<UnitViews> PreForward(int unit);
  Status PostForward(int unit);
  StatusOr<UnitViews> PreBackward(int unit);
  Status PostBackward(int unit);
  // zb-h1 only: the deferred weight-gradient pass of `unit` (the next
  // kBackwardWeight node of the plan): views with params, grads and
  // grad_accumulate, no pipeline buffers.
  StatusOr<UnitViews> PreBackwardWeight(int unit);
  Status PostBackwardWeight(int unit);
  // Issues the rest of the step (reduces, optimizer with `optimizer`, which
  // may be empty, casts). FailedPrecondition naming the next expected hook
  // if compute remains.
  Status FinishStep(
      const std::function<Status(const OptimizerContext&)>& optimizer);

  // Checkpoints, between steps (Executor::Save / WaitForSave / Load,
  // scheduler/checkpoint.h): FailedPrecondition naming the next expected
  // hook while a step is open.
  Status Save(const SaveOptions& options);
  Status WaitForSave(SaveStats* stats = nullptr);
  StatusOr<CheckpointInfo> Load(const std::string& path, const LoadOptions& options = {});

 private:
  explicit Session(std::unique_ptr<Executor> executor)
      : executor_(std::move(executor)) {}
  // Index of the next compute node at or after cursor_, or nodes.size().
  int NextCompute() const;
  std::string Describe(int node) const;  // "pre_forward(block3) of micro-step 0"
  Status Expect(NodeKind kind, int unit, bool pre, const char* call);
  Status IssueTo(int node);  // issues non-compute nodes [cursor_, node)
  UnitViews Views(int node, bool recompute, Recompute part);

  std::unique_ptr<Executor> executor_;
  StepCallbacks callbacks_;  // what the hooks' own nodes need (dequantize)
  bool in_step_ = false;
  int cursor_ = 0;     // next node to issue
  int open_ = -1;      // open compute node (its Pre done, Post not yet)
};

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_SESSION_H_
