#include "baton/sim/tensor_exposure.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "baton/sim/compute_model.h"
#include "baton/sim/event_loop.h"
#include "baton/sim/node_cost.h"

namespace baton::sim {

StatusOr<std::vector<TensorExposure>> SimulateTensorExposure(
    const std::vector<const scheduler::StepGraph*>& stages, const scheduler::ModelSpec& model,
    const ClusterSpec& cluster, int64_t seq, int64_t micro_batch, const SimOptions& options) {
  if (stages.empty()) {
    return absl::InvalidArgumentError("tensor exposure: no stage graphs");
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    if (stages[s] == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("tensor exposure: stage graph ", s,
                                                     " is null"));
    }
    const scheduler::Policy& p = stages[s]->policy;
    if (!stages[s]->parallel()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor exposure: stage graph ", s, " is not a parallel graph (BuildParallelStep's)"));
    }
    if (p.tensor_parallel < 2 || p.tensor_parallel != stages[0]->policy.tensor_parallel) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor exposure: stage graph ", s, " has tensor parallelism ", p.tensor_parallel,
          "; want 2 or more, the same on every stage"));
    }
    if (p.context_parallel > 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor exposure: stage graph ", s, " has context parallelism ", p.context_parallel,
          " (its ring would be counted as tensor communication)"));
    }
  }
  const int tp = stages[0]->policy.tensor_parallel;
  if (model.heads % tp != 0 || model.kv_heads % tp != 0 || model.intermediate % tp != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor exposure: tensor parallelism ", tp, " does not divide the model's ",
        model.heads, " heads, ", model.kv_heads, " KV heads and FFN width ", model.intermediate));
  }
  if (seq < 1 || micro_batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor exposure: seq ", seq, " and micro-batch ", micro_batch, " must be 1 or more"));
  }
  BATON_RETURN_IF_ERROR(ValidateCluster(cluster));
  BATON_ASSIGN_OR_RETURN(const KernelTable* table, KernelTableOrH100(options.kernels));
  ShardShape shard;
  shard.tp = tp;
  shard.sp = stages[0]->policy.sequence_parallel;
  BATON_ASSIGN_OR_RETURN(
      const ComputeModel kernels,
      ComputeModel::Create(*table, cluster, model, seq * micro_batch, micro_batch, seq,
                           options.attention, options.stack, shard));
  SimOptions free = options;
  free.free_comm = true;
  std::vector<std::vector<NodeCost>> costs;
  std::vector<TensorExposure> out(stages.size());
  for (size_t s = 0; s < stages.size(); ++s) {
    const scheduler::StepGraph& g = *stages[s];
    const NodeCoster coster(g, cluster, options, kernels);
    const NodeCoster free_coster(g, cluster, free, kernels);
    std::vector<NodeCost> c;
    c.reserve(g.nodes.size());
    for (const scheduler::Node& n : g.nodes) {
      c.push_back(coster.Cost(n));
      if (scheduler::IsCompute(n.kind)) {
        out[s].inside_s += std::max(0.0, c.back().latency_s - free_coster.Cost(n).latency_s);
      }
    }
    costs.push_back(std::move(c));
  }
  BATON_ASSIGN_OR_RETURN(const std::vector<EventLoopResult> runs,
                         RunStagesEventLoop(stages, costs, cluster.host_issue_us));
  for (size_t s = 0; s < stages.size(); ++s) {
    out[s].nodes_s = runs[s].exposed_tp_ns * 1e-9;
    int64_t end = 0;
    for (int64_t f : runs[s].finish_ns) end = std::max(end, f);
    out[s].step_s = end * 1e-9;
  }
  return out;
}

}  // namespace baton::sim
