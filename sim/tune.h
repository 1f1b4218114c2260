// The schedule tuner behind `simulate --tune`: searches the policy's knobs
// for the fastest simulated step that fits in device memory.
//
// Knobs searched (values for a model, cluster and workload):
//   micro_batch        every divisor of the local batch (global / gpus)
//                      within scheduler::kMaxMicroSteps and TuneOptions::max_step_units
//   reduce_dtype       float, bfloat16
//   shard_group        0 (all ranks) and gpus_per_node x 2^k dividing the world
//   hpz_group          0, gpus_per_node and 2 x gpus_per_node, where they
//                      divide the shard group and are smaller than it
//   buckets            per unit, or merged to 2, 4 or 8 blocks' bytes
//   forward_prefetch, backward_prefetch   0 .. TuneOptions::max_prefetch
//   offload            none, optimizer (ZeRO-Offload: master and moments
//                      on the host); slower for the same recompute, it wins
//                      where nothing else fits or where the memory it frees
//                      saves recompute. ZenFlow is not searched: it
//                      changes the update itself (two optimizers over the
//                      columns, bounded staleness), and the tuner only
//                      chooses among schedules of the same arithmetic.
//   tp, pp, cp, schedule (TuneOptions::search_mesh) the mesh: tensor
//                      parallelism with sequence parallelism over 1, 2, 4
//                      ... up to the GPUs per node (dividing heads and KV
//                      heads), pipeline stages 1, 2, 4 ... up to 64 and the
//                      blocks, context parallelism 1, 2, 4, 8 while seq /
//                      cp >= 4096, the schedule 1f1b, zb-h1 or interleaved
//                      with 2 or 4 virtual stages; the data ranks are what
//                      remains, and the micro-batch is per data rank (also
//                      1, 2, 4, 8 of the global batch). The data-parallel
//                      knobs other than reduce_dtype do not apply to a
//                      parallel mesh (its optimizer shards over every data
//                      rank, sim/parallel_sim.h).
//   ep, etp, a2a       (a mixture of experts; with the mesh) expert
//                      parallelism over powers of two dividing the experts
//                      (up to 64 nodes' GPUs), etp 1 or tp, and the
//                      all-to-all overlap across micro-batches off or on;
//                      ResolveMesh refuses an ep x etp that does not divide
//                      a stage's ranks. Every candidate of a MoE model is a
//                      parallel graph (its data-parallel-only knobs fixed);
//                      the workload's dispatcher, shared-expert overlap and
//                      capacity apply to all. Starts: ep over a node's GPUs
//                      (over tp) with tp 1 and with the largest tp.
//   optimizer          adamw, and adamw8bit when allowed (TuneTechniques)
//   adapters           none, LoRA (lora_rank, 16 when not given) when
//                      allowed, LoRA over an NF4 base when allowed: these
//                      change the training (what is trained, or the
//                      update's arithmetic), so the tuner tries them only
//                      when the user allows them (simulate --allow=adamw8bit,
//                      lora,nf4); techniques the user gives (--optimizer,
//                      --lora-rank, --base-dtype, --recompute) apply to
//                      every candidate. With any of them the mesh is not
//                      searched (the parallel simulation does not price
//                      them) and the lower bound counts 6 bytes of state
//                      a parameter under adamw8bit and none under LoRA.
//   recompute_blocks   not searched: for the other knobs fixed, more
//                      recompute only adds compute, so each candidate gets
//                      the fewest recomputed blocks with which it fits
//                      (Simulate's kAutoRecompute).
// Search: the baton, hsdp (one node's GPUs) and zeropp presets and, with
// the mesh, baton with offload and the largest tensor group with the
// fewest pipeline stages whose lower bound fits; then coordinate descent
// from the fastest: each knob in turn tries all of its
// values with the others fixed and keeps the best, until a pass changes
// nothing (at most TuneOptions::max_passes). Each configuration is
// simulated once (a cache). Before building a graph, a memory lower bound
// (12 bytes per parameter of fp32 master and moments over the shard group;
// a MoE model's routed experts / (ep x etp) with theirs over the
// expert-data group,
// the cluster's reserve, and activations and logits with every block
// recomputed; for a mesh the first stage's parameters at 6 + 12 / data
// bytes each, its in-flight block inputs and one block) skips
// configurations that cannot fit.
// Order: fitting before not fitting (those by peak memory: the closest to
// fitting first), then step time, then peak memory, then the knob values
// (so ties are broken the same way every time): the same input gives the
// same answer.
//
// Stateless; thread-compatible (SimOptions' tables are read only).
#ifndef BATON_SIM_TUNE_H_
#define BATON_SIM_TUNE_H_

#include <string>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/sim/cluster.h"
#include "baton/sim/simulator.h"

namespace baton::sim {

// The memory techniques of a search (scheduler/policy.h): the given ones
// apply to every candidate; the allowed ones are searched.
struct TuneTechniques {
  scheduler::OptimizerKind optimizer = scheduler::OptimizerKind::kAdamW;
  scheduler::Recompute recompute = scheduler::Recompute::kFull;
  int lora_rank = 0;  // > 0: every candidate has these adapters
  double lora_alpha = 16;
  uint32_t lora_targets = scheduler::kAllLoraTargets;
  scheduler::BaseDtype base_dtype = scheduler::BaseDtype::kParam;
  bool allow_adamw8bit = false;
  bool allow_lora = false;  // adapters of lora_rank (16 when it is 0)
  bool allow_nf4 = false;   // needs LoRA given or allowed
  // Whether any differs from plain training (the mesh is then not searched).
  bool any() const;
};

struct TuneOptions {
  int keep = 5;            // candidates returned
  int max_prefetch = 3;    // deepest prefetch tried, each way
  int max_passes = 4;      // coordinate-descent passes
  bool search_mesh = true; // tensor, context, pipeline sizes and schedule
  // Micro-steps x (layers + 3) of one step at most (simulate's limit).
  int64_t max_step_units = scheduler::kMaxStepUnits;
  SimOptions sim;          // calibration and kernel tables
  TuneTechniques techniques;
};

struct TuneCandidate {
  // Complete: simulate it with SimulatePolicy(model, cluster, workload,
  // policy, policy.recompute_blocks) for `result` again.
  scheduler::Policy policy;
  Workload workload;  // micro_batch is a knob; shard / hpz groups in policy
  SimResult result;
};

struct TuneReport {
  std::vector<TuneCandidate> best;  // at most keep, best first
  int simulated = 0;  // configurations simulated
  int pruned = 0;     // skipped by the memory lower bound
  int refused = 0;    // refused by the graph builder (invalid combinations)
};

// InvalidArgument for a workload ValidateWorkload refuses (with the mesh
// searched: only its sizes, each mesh's batch split is its own), a model or
// cluster that fails validation, a head dim options.sim.attention cannot
// run (compute_model.h KernelHeadDim), or options out of range (keep < 1,
// max_prefetch < 0, max_passes < 1), allow_nf4 without LoRA given or
// allowed, techniques ValidatePolicy refuses (an out-of-range LoRA rank or
// alpha, no targets, adamw8bit with an f16 parameter dtype), and when no configuration could be
// simulated (every one cannot fit by the lower bound, or was refused).
// Candidates that were simulated but do not fit even with every block
// recomputed come after all that fit (result.fits says).
StatusOr<TuneReport> Tune(const scheduler::ModelSpec& model,
                          const ClusterSpec& cluster, const Workload& workload,
                          const TuneOptions& options = {});

// One line of knob values: "mb=1 reduce=bfloat16 shard=8 hpz=0
// buckets=per_unit prefetch=1/2 offload=none recompute=12" (recompute=all for every
// block), then the techniques that differ from plain training:
// " optimizer=adamw8bit", " lora=16" (the rank), " base=nf4",
// " recompute_kind=selective".
std::string DescribeKnobs(const TuneCandidate& c);

}  // namespace baton::sim

#endif  // BATON_SIM_TUNE_H_
