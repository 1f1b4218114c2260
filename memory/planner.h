// The static memory planner: places every buffer of a training step in one
// arena, sharing bytes between buffers whose lifetimes are ordered.
//
// Rule. Two buffers A and B may share bytes only if every use of A happens
// before the first write of B in the step DAG (or the other way round), with
// happens-before as defined in memory/step_dag.h (explicit edges plus FIFO
// order on each stream). Issue order alone proves nothing across streams.
//
// Reuse edges. Where A and B are disjoint in issue order but unordered in the
// DAG (typically: A last read on the compute stream, B written by a later
// all-gather on the comm stream), the planner may ADD the edges that order
// them: from the last use of A on each stream to the first write of B. Only
// when the caller allows it (PlanOptions), only for edges its filter accepts,
// and only if that makes the arena smaller. The added edges are returned in
// MemoryPlan::added_edges: the executor and the simulator must honour them
// exactly, since the plan is only valid with them.
//
// Placement. Greedy best fit (Pisarchyk & Lee 2020): visit buffers in an
// order, put each in the smallest gap between already placed buffers that
// conflict with it, else above them all. Every input tries three orders (by
// size, by size x lifetime, by first use); inputs of up to 2,000 buffers also
// try size with other tie-breaks, last use, greedy by breadth, and every
// arrangement of a peak set of up to 5 buffers placed first. When reuse
// edges are allowed, orderable pairs are placed as if ordered and the edges
// are added afterwards where the chosen placement overlaps them. The smallest
// arena wins, ties to the earlier order; the result is a deterministic
// function of the input (large inputs place on two threads, which does not
// change it).
//
// Lower bound. The maximum over issue positions of the sum of bytes of the
// buffers live there (first write <= position <= last use). Buffers live at
// the same position always conflict, so no valid plan is smaller.
#ifndef BATON_MEMORY_PLANNER_H_
#define BATON_MEMORY_PLANNER_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "baton/memory/step_dag.h"
#include "baton/runtime/status.h"

namespace baton::memory {

using BufferId = int32_t;

struct BufferSpec {
  std::string name;
  size_t bytes = 0;        // > 0
  size_t alignment = 256;  // a power of two
  NodeId writer = 0;       // the node that first writes the buffer
  // Nodes that read or write it after `writer`. Each must happen after
  // `writer` in the DAG. May include `writer` (ignored).
  std::vector<NodeId> users;
};

struct PlanInput {
  StepDag dag;
  std::vector<BufferSpec> buffers;

  BufferId AddBuffer(std::string name, size_t bytes, NodeId writer,
                     std::vector<NodeId> users, size_t alignment = 256) {
    buffers.push_back(
        {std::move(name), bytes, alignment, writer, std::move(users)});
    return static_cast<BufferId>(buffers.size() - 1);
  }
};

struct PlanOptions {
  bool allow_reuse_edges = false;
  // Accepts or rejects one candidate edge (from -> to, from earlier in issue
  // order). Unset: every edge is accepted. The bound a caller sets lives
  // here, e.g. "never delay an all-gather by more than its prefetch depth".
  std::function<bool(NodeId from, NodeId to)> edge_filter;
};

struct PlannedBuffer {
  std::string name;
  size_t bytes = 0;
  size_t alignment = 0;
  size_t offset = 0;
  NodeId first = 0;  // issue position of the first write
  NodeId last = 0;   // issue position of the last use
};

// Plain data; copyable.
struct MemoryPlan {
  std::vector<PlannedBuffer> buffers;  // indexed by BufferId
  size_t arena_bytes = 0;
  size_t lower_bound_bytes = 0;
  std::vector<DagEdge> added_edges;  // sorted, no duplicates
  std::string strategy;              // which candidate won, e.g. "size+edges"
  double plan_ms = 0;                // wall time of PlanMemory

  // arena_bytes / lower_bound_bytes (1 when both are 0).
  double ratio() const;

  // A per-buffer table (offset, bytes, lifetime) headed by a summary line.
  // At most `max_rows` buffer rows (0: all).
  std::string ToTable(size_t max_rows = 0) const;
  // {"arena_bytes":..,"lower_bound_bytes":..,"ratio":..,"strategy":..,
  //  "added_edges":[[from,to],..],"buffers":[{"name","bytes","offset",
  //  "alignment","first","last"},..]}
  std::string ToJson() const;
};

// InvalidArgument naming the buffer or node for: a zero-size buffer, an
// alignment that is not a power of two, an unknown node, a use that does not
// happen after the buffer's first write, a cycle or a backwards edge in the
// DAG. Never crashes on bad input.
StatusOr<MemoryPlan> PlanMemory(const PlanInput& input,
                                const PlanOptions& options = {});

// Checks `plan` against `input` independently of how it was made: every
// buffer placed, aligned, inside the arena; any two buffers that share bytes
// are ordered in the DAG extended by plan.added_edges. FailedPrecondition
// naming the first offending pair. O(buffers^2); for tests and debugging.
Status VerifyPlan(const PlanInput& input, const MemoryPlan& plan);

}  // namespace baton::memory

#endif  // BATON_MEMORY_PLANNER_H_
