// bench:scheduler --cuda: one rank's step on one GPU with the nccl backend
// (1 rank), issued eagerly (Executor::Step) and replayed as a captured CUDA
// graph (CaptureStep / ReplayStep). The compute callbacks enqueue nothing,
// so a step is the scheduler's own work: the collectives (NCCL on one
// rank), casts, gradient-gap memsets and the cross-stream waits.
//
// Per model: median host time to issue a step (Step, or ReplayStep) and
// median GPU time per step (CUDA events on the compute stream around the
// step, the other streams joined into it; each step synchronized, so eager
// GPU time includes the gaps the host's issuing leaves).
#ifndef BATON_BENCH_CUDA_GRAPH_STEP_H_
#define BATON_BENCH_CUDA_GRAPH_STEP_H_

#include <string>

#include "nlohmann/json.hpp"
#include "baton/runtime/status.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"

namespace baton::bench {

// {"model", "nodes", "steps", "eager_host_us", "eager_gpu_us",
//  "replay_host_us", "replay_gpu_us"}. Unavailable without a GPU or NCCL
// (builds without CUDA: always).
StatusOr<nlohmann::json> MeasureCudaGraphStep(const std::string& label,
                                              const scheduler::ModelSpec& spec,
                                              const scheduler::Policy& policy, int steps);

}  // namespace baton::bench

#endif  // BATON_BENCH_CUDA_GRAPH_STEP_H_
