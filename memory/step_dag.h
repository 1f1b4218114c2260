// The step's dependency DAG as the memory planner sees it, and an exact
// happens-before relation on it.
//
// Nodes are given in ISSUE ORDER (node id = position in the order every rank
// issues work). Each node runs on a stream; work on one stream runs in FIFO
// order (runtime/device.h rule 1), so consecutive nodes of one stream are
// ordered without an explicit edge. Explicit edges are the cross-stream
// event edges (and any same-stream ones the caller likes). Every explicit
// edge must go forward in issue order; a cycle is reported as such.
//
// HappensBefore is the transitive closure of (explicit edges + per-stream
// FIFO order), stored as one vector clock per node: clock[v][s] = the largest
// index on stream s of a node that completes before v starts. Building it
// costs O((nodes + edges) x streams); a query costs O(1). At 10^5 nodes and a
// handful of streams that is a few megabytes and milliseconds.
#ifndef BATON_MEMORY_STEP_DAG_H_
#define BATON_MEMORY_STEP_DAG_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "baton/runtime/status.h"

namespace baton::memory {

using NodeId = int32_t;

struct DagNode {
  std::string name;
  int stream = 0;  // any int; nodes with equal values share a FIFO stream
};

struct DagEdge {
  NodeId from = 0;
  NodeId to = 0;
  friend bool operator==(const DagEdge& a, const DagEdge& b) {
    return a.from == b.from && a.to == b.to;
  }
  friend bool operator<(const DagEdge& a, const DagEdge& b) {
    return a.from != b.from ? a.from < b.from : a.to < b.to;
  }
};

struct StepDag {
  std::vector<DagNode> nodes;  // in issue order
  std::vector<DagEdge> edges;  // explicit dependencies

  NodeId AddNode(std::string name, int stream) {
    nodes.push_back({std::move(name), stream});
    return static_cast<NodeId>(nodes.size() - 1);
  }
  void AddEdge(NodeId from, NodeId to) { edges.push_back({from, to}); }
};

// Immutable; safe to share between threads once built.
class HappensBefore {
 public:
  // InvalidArgument naming the edge or node for: an edge to an unknown node,
  // a cycle (self-edge included), an edge that goes backwards in issue order.
  static StatusOr<HappensBefore> Build(const StepDag& dag);

  int num_nodes() const { return static_cast<int>(stream_of_.size()); }
  int num_streams() const { return static_cast<int>(stream_nodes_.size()); }
  // Dense stream index (0..num_streams-1) of a node, and its index there.
  int stream(NodeId v) const { return stream_of_[v]; }
  int index_in_stream(NodeId v) const { return index_in_stream_[v]; }
  // Nodes of dense stream s in issue order.
  const std::vector<NodeId>& stream_nodes(int s) const {
    return stream_nodes_[s];
  }

  // True when `a` completes before `b` starts. False for a == b.
  bool Before(NodeId a, NodeId b) const {
    return a != b &&
           index_in_stream_[a] <= clock_[static_cast<size_t>(b) * streams_ +
                                         stream_of_[a]];
  }

  // Largest index on dense stream s of a node that completes before v
  // starts; -1 if none.
  int32_t Clock(NodeId v, int s) const {
    return clock_[static_cast<size_t>(v) * streams_ + s];
  }

 private:
  int streams_ = 0;
  std::vector<int32_t> stream_of_;
  std::vector<int32_t> index_in_stream_;
  std::vector<std::vector<NodeId>> stream_nodes_;
  std::vector<int32_t> clock_;  // num_nodes x streams_
};

}  // namespace baton::memory

#endif  // BATON_MEMORY_STEP_DAG_H_
