// Pipeline stages for baton.Session (python/session.cc): the stage graphs
// a policy with pipeline_parallel > 1 runs (BuildParallelStep with a
// memory plan, as the executor needs), which stage a rank runs, and the
// order of a graph's hooks.
//
// Supported from Python: pipeline stages (schedules 1f1b, interleaved,
// zb-h1) over data parallelism. Tensor and context parallelism are refused
// (InvalidArgument naming the knob): a tensor-parallel block is several
// hook calls with tensor collectives the trainer runs, not bound yet.
//
// Pure functions of their arguments; thread-safe.
#ifndef BATON_PYTHON_PIPELINE_H_
#define BATON_PYTHON_PIPELINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/mesh.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/step_graph.h"

namespace baton::python {

// What one rank's pipeline stage runs.
struct StageInfo {
  int stage = 0;
  int stages = 1;
  std::string schedule;                         // "1f1b", "interleaved", "zb-h1"
  std::vector<scheduler::PipelinePass> passes;  // ParallelStep::order[stage]
  // The activations stages exchange: [micro_batch, seq, hidden] in `dtype`
  // (the policy's parameter dtype).
  std::vector<int64_t> activation_shape;
  DataType activation_dtype = DataType::kF32;
};

// Every stage's graph of a pipeline policy for `world` ranks.
struct StageGraphs {
  scheduler::DeviceMesh mesh;
  std::vector<std::shared_ptr<const scheduler::StepGraph>> graphs;  // per stage
  std::vector<std::vector<scheduler::PipelinePass>> order;          // per stage
  std::vector<int64_t> activation_shape;
  DataType activation_dtype = DataType::kF32;

  // Rank `rank`'s stage (mesh coordinate along the pipeline).
  int StageOf(int rank) const;
  StageInfo Info(int rank, const scheduler::Policy& policy) const;
};

// nullopt for a data-parallel policy (Session::Create builds its graph),
// which takes no `seq` / `micro_batch` (0: not given). For a policy with
// pipeline_parallel > 1: the stage graphs for micro-batches of
// `micro_batch` (0: 1) sequences of `seq` tokens (required). InvalidArgument
// naming the problem for tensor or context parallelism, a missing or
// out-of-range seq / micro_batch, or what BuildParallelStep refuses.
StatusOr<std::optional<StageGraphs>> BuildStageGraphs(const scheduler::ModelSpec& spec,
                                                      const scheduler::Policy& policy, int world,
                                                      int64_t seq, int64_t micro_batch);

// One hook call of a step: kind "forward", "backward" (a recompute and its
// backward are one call) or "weight" (zb-h1's deferred weight gradients).
struct HookCall {
  std::string kind;
  int unit = 0;
  int micro_step = 0;
};

// The hook calls of one step of `graph`, in the order its session expects
// them (the graph's compute nodes in issue order).
std::vector<HookCall> HookOrder(const scheduler::StepGraph& graph);

}  // namespace baton::python

#endif  // BATON_PYTHON_PIPELINE_H_
