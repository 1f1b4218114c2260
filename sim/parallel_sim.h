// The simulator for tensor, context and pipeline parallelism: runs every
// pipeline stage's graph (scheduler/parallel_graph.h) together on one
// clock (sim/event_loop.h RunStagesEventLoop) with each node priced by
// sim/node_cost.h on a rank's shard of the kernels (sim/compute_model.h
// ShardShape), and counts each stage's memory as Megatron does.
//
// Placement (scheduler/mesh.h): ranks fill nodes in mesh order, tp
// innermost, so a tensor group of at most a node's GPUs is inside one node
// (NVLink), context and data groups span nodes as their strides say, and
// pipeline neighbours sit stride tp x cp x dp apart (usually on other
// nodes: their sends cross the network). A tensor group larger than a node
// is refused unless Workload::tp_across_nodes says so; then its
// collectives are priced on both link levels like any group.
//
// Step time: the last stage's end (all stages start together; the step
// ends when every stage has finished its reductions and optimizer), plus
// stragglers as for data parallelism, on the busiest stage's compute.
// Bubble: per stage, the idle time of its compute stream between the
// pipeline's first forward and last backward (weight pass), less the time
// it waited on tensor collectives, as a fraction of that span (so it holds
// the schedule's bubble, the stages' imbalance and the pipeline's
// transfers); SimResult::bubble is the mean over stages.
//
// Memory per stage (SimResult::Stage::memory), as Megatron counts it
// (Korthikanti et al. 2022, REFERENCE section 12; megatron/training/
// theoretical_memory_usage.py):
//   states       the stage's parameters on this rank (its tensor slice):
//                the gathered parameters in the parameter dtype and the
//                gradient buffer in the reduce dtype, whole (Megatron's
//                distributed optimizer keeps both), and the fp32 master
//                and two moments over the data group (x cp): 2 + 4 + 12 / d
//                bytes per parameter; under all_reduce 2 + 4 + 12;
//   activations  per block and micro-batch of t = s b / cp tokens on this
//                rank: 34 t h bytes (no tensor parallelism), t h (10 +
//                24 / tp) (tensor parallel, no SP), 34 t h / tp (SP); with
//                flash attention there is no s^2 term. A recomputed block
//                keeps its input, 2 t h (/ tp with SP), and its backward
//                rebuilds one block's full activations. The micro-batches
//                held at once come from the stage's schedule: a forward of
//                chunk c adds its blocks', a backward (under zb-h1 the
//                weight pass: its inputs and output gradients are about the
//                block's activations for gated MLPs) frees them; the peak
//                over the order, e.g. min(m, p - s) micro-batches on 1F1B
//                stage s;
//   logits       the last stage: one micro-batch's t x V / tp logits in
//                bf16 and fp32 (6 bytes each);
//   reserved     ClusterSpec::reserved_gib.
// SimResult::memory is the stage with the largest peak; fits means every
// stage fits.
//
// Thread-compatible: plain functions.
#ifndef BATON_SIM_PARALLEL_SIM_H_
#define BATON_SIM_PARALLEL_SIM_H_

#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/sim/simulator.h"

namespace baton::sim {

// Simulates `policy` (IsParallel) on `workload`. recompute_blocks: N (the
// first N blocks of each virtual stage), -1 all, or kAutoRecompute: the
// fewest with which every stage fits (all if none does). `step`, when
// given, receives the stages' graphs; `graph`, when given, stage 0's.
// InvalidArgument for a combination the mesh or the model refuses
// (scheduler/parallel_graph.h), or a tensor group larger than a node
// without Workload::tp_across_nodes.
StatusOr<SimResult> SimulateParallel(const scheduler::ModelSpec& model,
                                     const ClusterSpec& cluster, const Workload& workload,
                                     scheduler::Policy policy, int recompute_blocks,
                                     const SimOptions& options,
                                     scheduler::ParallelStep* step = nullptr,
                                     scheduler::StepGraph* graph = nullptr);

// Each stage's memory for `policy` (its recompute_blocks as set) on the
// built stages: states, activations at the schedule's peak, logits,
// reserve.
std::vector<MemoryBreakdown> StageMemory(const scheduler::ParallelStep& step,
                                         const ClusterSpec& cluster,
                                         const Workload& workload);

// The schedule's own bubble on a pipeline's stage graphs (one per stage,
// as BuildParallelStep made them, e.g. the ones an executor runs): each
// block's compute node priced by `pass` (forward and recompute f, a
// zb-h1 input-gradient pass b, its weight pass w, an unsplit backward
// b + w), every other node free, the stages run together on one clock
// (RunStagesEventLoop). Per stage, its compute stream's idle fraction of
// the pipeline's span, as SimulateParallel measures it. InvalidArgument
// for fewer than 2 stages or a cost not positive and finite.
StatusOr<std::vector<double>> ScheduleBubble(
    const std::vector<const scheduler::StepGraph*>& stages, const scheduler::PassCosts& pass);

}  // namespace baton::sim

#endif  // BATON_SIM_PARALLEL_SIM_H_
