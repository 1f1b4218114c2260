// Every bound baton puts on what a user may ask of it, stated once, whatever
// route a value takes: a command-line flag (simulate, train_tiny,
// bench/collectives), a policy file (scheduler/policy_file.h), a model's
// config.json (scheduler/model.h), or a call of the C++ API (Session,
// BuildStepGraph, sim::Simulate; the Python module when it comes). Each
// route takes its bounds from here, and the step every route goes through
// checks them again (ValidatePolicy, CheckPolicyForModel and BuildStepGraph
// for policies, ValidateModelSpec for models, sim::ValidateWorkload for a
// simulated job), so choosing another route never gets past a limit.
//
// Why bounds at all: past them no real training job exists, and the value
// would only burn time and memory (a step graph, an event loop or a staging
// buffer grows with it) until the machine or the kernel gives up.
//
// Not here: bounds of one tool's own flags that no other route reaches
// (bench/collectives' sizes and iteration counts, train_tiny's --seq,
// --batch, --steps, --lr and --timeout) are stated in that tool's --help.
//
// Constants and pure functions; thread-safe.
#ifndef BATON_SCHEDULER_LIMITS_H_
#define BATON_SCHEDULER_LIMITS_H_

#include <cstdint>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"

namespace baton::scheduler {

// ---- A job ----------------------------------------------------------------

// Ranks of one job (simulate --gpus; a policy's shard_group and hpz_group).
inline constexpr int64_t kMaxWorldSize = int64_t{1} << 20;
// A simulated job's sequence length and global batch (simulate --seq,
// --global-batch, --micro-batch).
inline constexpr int64_t kMaxSeq = int64_t{1} << 24;
inline constexpr int64_t kMaxGlobalBatch = int64_t{1} << 30;
// Micro-steps of one step: a policy's micro_steps (policy file, API),
// train_tiny --micro-steps, and simulate's global batch / GPUs /
// micro-batch. The step graph, the trainer's staging and the simulator's
// event loop grow with it.
inline constexpr int64_t kMaxMicroSteps = 4096;
// Micro-steps x units (the model's layers + 3: embedding, final norm, head)
// of one step graph: llama3-405b at 256 micro-steps is ~33k and takes
// seconds per simulated policy.
inline constexpr int64_t kMaxStepUnits = int64_t{1} << 15;

// ---- Ranks on this host ---------------------------------------------------
// A tool that runs the ranks itself, as threads (the inproc backend) or as
// processes it launches here, runs at most MaxLocalRanks() of them. Every
// in-process rank is 4 threads (its own and its compute, all-gather and
// reduce-scatter streams' workers) and computes its own micro-batches, so
// past a few ranks per CPU a step only gets longer and the host stops
// answering: train_tiny --nranks=4096 on 2 CPUs was ~20,500 threads, a load
// average over 1,000 and 6 minutes per step. 16 per CPU is at most 64
// threads per CPU (2 CPUs: 32 ranks, 129 threads; the one-block tiny model
// took 8.4 s per step on a shared, loaded 2-CPU host) and reaches the
// absolute bound of 4096 at 256 CPUs. Ranks a launcher started (RANK and
// WORLD_SIZE set) are not counted: each of those processes is one rank.
inline constexpr int64_t kMaxLocalRanks = 4096;
inline constexpr int64_t kLocalRanksPerCpu = 16;
// min(kMaxLocalRanks, kLocalRanksPerCpu x the CPUs this process may run on
// (its affinity mask)).
int64_t MaxLocalRanks();
// InvalidArgument "<what> asks for <ranks> ranks on this host; it runs at
// most N at once (16 per CPU, C CPUs; scheduler/limits.h)" past
// MaxLocalRanks().
[[nodiscard]] Status CheckLocalRanks(int64_t ranks, absl::string_view what);

// ---- A policy (scheduler/policy.h) ----------------------------------------

// forward_prefetch, backward_prefetch, reduce_window, host_limit.
inline constexpr int64_t kMaxPrefetchDepth = int64_t{1} << 16;
// zenflow_select_interval, zenflow_update_interval, zenflow_staleness.
inline constexpr int64_t kMaxZenFlowInterval = int64_t{1} << 20;
// merge_target_bytes, resident_max_numel.
inline constexpr int64_t kMaxPolicyBytes = int64_t{1} << 50;
// recompute_blocks: -1 (every block) up to the model's layers
// (CheckRecomputeBlocks); without a model, up to kMaxModelLayers.
// micro_steps: [1, kMaxMicroSteps]; shard_group, hpz_group: [0,
// kMaxWorldSize] and dividing the world size (ResolveMesh).
// tensor_parallel, context_parallel, pipeline_parallel: [1, kMaxWorldSize]
// and dividing the world size; virtual_stages, pipeline_first_layers,
// pipeline_last_layers: up to kMaxModelLayers and the model's layers
// (scheduler/parallel_graph.h).
// lora_rank (simulate --lora-rank): [0, kMaxLoraRank], and at most each
// targeted matrix's smaller side (the layout, which knows the model).
inline constexpr int kMaxLoraRank = 1 << 16;

// ---- A model (scheduler/model.h) ------------------------------------------
// So that every size product and the parameter count fit in int64 with
// room to spare.

// Any one size (hidden, intermediate, heads, KV heads, head dim, vocab).
inline constexpr int64_t kMaxModelDim = int64_t{1} << 24;
// Blocks (num_hidden_layers, train_tiny --layers): 130x llama3-405b.
inline constexpr int64_t kMaxModelLayers = int64_t{1} << 14;
// Parameters (counted with checked arithmetic): ~1.1e15.
inline constexpr int64_t kMaxModelParameters = int64_t{1} << 50;

// ---- Checks shared by the routes ------------------------------------------

// InvalidArgument "<what> = <v> is outside [lo, hi]" when it is.
[[nodiscard]] Status CheckRange(int64_t v, int64_t lo, int64_t hi,
                                absl::string_view what);

// InvalidArgument "<what> = <blocks> is more than the model's <layers>
// blocks" for blocks > layers, "<what> = <blocks> is out of range" below -1.
[[nodiscard]] Status CheckRecomputeBlocks(int64_t blocks, int64_t layers,
                                          absl::string_view what);

// micro_steps x (layers + 3), saturating (never overflows).
int64_t StepUnits(int64_t micro_steps, int64_t layers);
// InvalidArgument "the step would run M micro-steps of U units (P); the
// limit is kMaxStepUnits unit-micro-steps" past kMaxStepUnits.
[[nodiscard]] Status CheckStepUnits(int64_t micro_steps, int64_t layers);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_LIMITS_H_
