#include "baton/python/pipeline.h"

#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/limits.h"

namespace baton::python {

int StageGraphs::StageOf(int rank) const {
  return mesh.coord(rank, scheduler::MeshDim::kPipeline);
}

StageInfo StageGraphs::Info(int rank, const scheduler::Policy& policy) const {
  StageInfo info;
  info.stage = StageOf(rank);
  info.stages = static_cast<int>(graphs.size());
  info.schedule = scheduler::PipelineScheduleName(policy.pipeline_schedule);
  info.passes = order[info.stage];
  info.activation_shape = activation_shape;
  info.activation_dtype = activation_dtype;
  return info;
}

StatusOr<std::optional<StageGraphs>> BuildStageGraphs(const scheduler::ModelSpec& spec,
                                                      const scheduler::Policy& policy, int world,
                                                      int64_t seq, int64_t micro_batch) {
  if (policy.tensor_parallel > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor parallelism (tensor_parallel = ", policy.tensor_parallel,
        ") is not run from Python yet (a block is several hook calls); pipeline stages "
        "(pipeline_parallel > 1) are"));
  }
  if (policy.context_parallel > 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "context parallelism (context_parallel = ", policy.context_parallel,
        ") is not run from Python yet; pipeline stages (pipeline_parallel > 1) are"));
  }
  if (seq < 0 || micro_batch < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq and micro_batch must be >= 1, got seq=", seq, ", micro_batch=", micro_batch));
  }
  if (!scheduler::IsParallel(policy)) {
    if (seq != 0 || micro_batch != 0) {
      return absl::InvalidArgumentError(
          "seq and micro_batch size the activations pipeline stages exchange; this policy has "
          "no pipeline (pipeline_parallel = 1)");
    }
    return std::optional<StageGraphs>();
  }
  if (seq == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a pipeline policy (pipeline_parallel = ", policy.pipeline_parallel,
        ") needs seq= (tokens per sequence; micro_batch= sequences per micro-batch, default "
        "1): they size the activations the stages exchange"));
  }
  if (micro_batch == 0) micro_batch = 1;
  if (seq > scheduler::kMaxSeq || micro_batch > scheduler::kMaxGlobalBatch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq must be <= ", scheduler::kMaxSeq, " and micro_batch <= ",
        scheduler::kMaxGlobalBatch, ", got seq=", seq, ", micro_batch=", micro_batch));
  }
  // Bytes of one activation (at most 8 per element): within int64.
  if (seq * micro_batch > std::numeric_limits<int64_t>::max() / 8 / spec.hidden) {
    return absl::InvalidArgumentError(absl::StrCat(
        "activations of seq x micro_batch x hidden = ", seq, " x ", micro_batch, " x ",
        spec.hidden, " elements are too large"));
  }
  BATON_ASSIGN_OR_RETURN(scheduler::ParallelStep step,
                         scheduler::BuildParallelStep(spec, policy, world, seq, micro_batch, {},
                                                      {}, /*plan_memory=*/true,
                                                      /*tensor_slices=*/false));
  StageGraphs out;
  out.mesh = step.mesh;
  out.order = std::move(step.order);
  for (scheduler::StepGraph& g : step.stages) {
    out.graphs.push_back(std::make_shared<const scheduler::StepGraph>(std::move(g)));
  }
  out.activation_shape = {micro_batch, seq, spec.hidden};
  out.activation_dtype = policy.param_dtype;
  return std::optional<StageGraphs>(std::move(out));
}

std::vector<HookCall> HookOrder(const scheduler::StepGraph& graph) {
  using scheduler::NodeKind;
  std::vector<HookCall> calls;
  for (const scheduler::Node& n : graph.nodes) {
    // A recompute is issued inside its backward's hook.
    if (!scheduler::IsCompute(n.kind) || n.kind == NodeKind::kRecompute) continue;
    const char* kind = n.kind == NodeKind::kForward          ? "forward"
                       : n.kind == NodeKind::kBackwardWeight ? "weight"
                                                             : "backward";
    calls.push_back({kind, n.unit, n.micro_step});
  }
  return calls;
}

}  // namespace baton::python
