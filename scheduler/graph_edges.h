// The edge and wait derivation every step-graph builder shares
// (scheduler/step_graph.cc, scheduler/parallel_graph.cc): library-internal.
//
// Plain functions on a graph under construction; not thread-safe on it.
#ifndef BATON_SCHEDULER_GRAPH_EDGES_H_
#define BATON_SCHEDULER_GRAPH_EDGES_H_

#include <vector>

#include "baton/memory/step_dag.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler::internal {

// Appends to g.edges the kData edges of the nodes' buffers (a reader after
// the last writer; a writer after the last writer and every reader since)
// and `extra`, then drops same-stream edges (FIFO orders them) and
// duplicates, sorted by (from, to).
void DeriveDataEdges(StepGraph& g, const std::vector<GraphEdge>& extra);

// Sets every node's waits from g.edges: the latest predecessor on each
// other stream, unless the happens-before relation `hb` (of g.edges and
// FIFO) already implies it through the node's stream predecessor.
void DeriveNodeWaits(StepGraph& g, const memory::HappensBefore& hb);

// Builds the happens-before relation of g.edges, then DeriveNodeWaits.
// Internal if the edges do not go forward.
Status DeriveWaits(StepGraph& g);

// Registers every transient buffer of g with g.plan_input (its writer and
// users; first_write, last_use; persistent and host byte totals) and, with
// `plan_memory`, plans them (memory::PlanMemory; `reuse_edges`: the
// planner may add kReuse edges, never delaying compute). Internal for a
// transient buffer nobody writes.
Status PlanBuffers(StepGraph& g, bool plan_memory, bool reuse_edges);

// After PlanBuffers: last_use_is_final of every transient buffer, then the
// waits (DeriveNodeWaits) of g.edges.
Status DeriveFinalUsesAndWaits(StepGraph& g);

}  // namespace baton::scheduler::internal

#endif  // BATON_SCHEDULER_GRAPH_EDGES_H_
