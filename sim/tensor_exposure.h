// The simulator's exposed tensor-parallel communication on given step
// graphs: the stage graphs a run executes (scheduler/parallel_graph.h, one
// per pipeline stage; e.g. train_tiny's with tensor_slices), priced as
// SimulateParallel prices its own (sim/parallel_sim.h) and run together on
// one clock (RunStagesEventLoop), so a measured exposure can be printed
// beside the simulator's for the same graph.
//
// What it assumes, all of it the simulator's existing model:
//   costs      every node by sim/node_cost.h on `cluster`: compute from the
//              kernel table (SimOptions::kernels, else the shipped H100
//              table scaled to the cluster's GPU) at the whole model's
//              shapes split by the graph's tensor / sequence parallelism
//              (ComputeModel ShardShape), collectives by
//              sim/collective_cost.h over the tensor group's placement
//              (SimOptions::calibration's busbw tables where given). These
//              are a GPU cluster's costs, not the host runtime's: the
//              simulator has no cost model of in-process ranks on CPU
//              cores (docs/training.md).
//   nodes      the compute stream's idle time charged to the tensor
//              stream's nodes (AR-TP, or with sequence parallelism AG-TP /
//              RS-TP), as SimResult::exposed_tp_s counts it;
//   inside     what the collectives run inside compute nodes add to them
//              (Node::fused: the backward's input-gradient all-reduces /
//              reduce-scatters beside its GEMMs, chunks 0 = side by side;
//              under tp_comm_overlap every block part's collectives in
//              tensor_parallel chunks pipelined with its GEMMs; and the
//              vocabulary-parallel embedding's and head's collectives):
//              each compute node's cost less its cost with free
//              communication. So decomposition (tp_comm_overlap) is
//              modelled as the simulator's tp_overlap is, by the chunked
//              pipeline formula of sim/node_cost.h, not by separate nodes.
// Every other node is priced too (data-parallel collectives, optimizer,
// pipeline sends), and the host issues one node every
// ClusterSpec::host_issue_us, as in SimulateParallel; their waits are not
// counted here.
//
// Plain function; thread-safe.
#ifndef BATON_SIM_TENSOR_EXPOSURE_H_
#define BATON_SIM_TENSOR_EXPOSURE_H_

#include <cstdint>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/step_graph.h"
#include "baton/sim/cluster.h"
#include "baton/sim/simulator.h"

namespace baton::sim {

// One stage graph's step, seconds.
struct TensorExposure {
  double nodes_s = 0;   // compute waiting on the tensor stream's nodes
  double inside_s = 0;  // tensor collectives inside compute nodes
  double step_s = 0;    // the stage's simulated step (its last node's end)
  double total_s() const { return nodes_s + inside_s; }
};

// The exposed tensor communication of each stage graph in `stages`
// (BuildParallelStep's for one run, in stage order, with tensor_parallel
// >= 2; not owned) for the whole model `model` on `seq` x `micro_batch`
// tokens per micro-batch. InvalidArgument naming the problem for no
// graphs, a null graph, a graph that is not a parallel one, tensor
// parallelism below 2 or differing between the stages, context
// parallelism (its ring would be counted as tensor communication), a
// model whose heads, KV heads or FFN width the tensor group does not
// divide, seq or micro_batch below 1, or a cluster that fails
// ValidateCluster; the event loop's InvalidArgument for costs it refuses.
StatusOr<std::vector<TensorExposure>> SimulateTensorExposure(
    const std::vector<const scheduler::StepGraph*>& stages, const scheduler::ModelSpec& model,
    const ClusterSpec& cluster, int64_t seq, int64_t micro_batch,
    const SimOptions& options = {});

}  // namespace baton::sim

#endif  // BATON_SIM_TENSOR_EXPOSURE_H_
