#include "baton/memory/step_dag.h"

#include <algorithm>
#include <deque>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace baton::memory {
namespace {

std::string NodeName(const StepDag& dag, NodeId v) {
  return absl::StrCat("'", dag.nodes[v].name, "' (#", v, ")");
}

// Kahn's algorithm on the explicit edges; on a cycle, names one node on it.
Status CheckAcyclic(const StepDag& dag,
                    const std::vector<std::vector<NodeId>>& succ) {
  const int n = static_cast<int>(dag.nodes.size());
  std::vector<int> indegree(n, 0);
  for (const DagEdge& e : dag.edges) ++indegree[e.to];
  std::deque<NodeId> ready;
  for (int v = 0; v < n; ++v) {
    if (indegree[v] == 0) ready.push_back(v);
  }
  int visited = 0;
  while (!ready.empty()) {
    NodeId v = ready.front();
    ready.pop_front();
    ++visited;
    for (NodeId w : succ[v]) {
      if (--indegree[w] == 0) ready.push_back(w);
    }
  }
  if (visited == n) return Status();
  // Some node with remaining indegree lies on or behind a cycle; walk
  // predecessors with remaining indegree until one repeats.
  std::vector<std::vector<NodeId>> pred(n);
  for (const DagEdge& e : dag.edges) pred[e.to].push_back(e.from);
  NodeId v = 0;
  while (indegree[v] == 0) ++v;
  std::vector<bool> seen(n, false);
  while (!seen[v]) {
    seen[v] = true;
    for (NodeId p : pred[v]) {
      if (indegree[p] > 0) {
        v = p;
        break;
      }
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("the graph has a cycle through node ", NodeName(dag, v)));
}

}  // namespace

StatusOr<HappensBefore> HappensBefore::Build(const StepDag& dag) {
  const int n = static_cast<int>(dag.nodes.size());
  std::vector<std::vector<NodeId>> succ(n);
  std::vector<std::vector<NodeId>> pred(n);
  for (size_t i = 0; i < dag.edges.size(); ++i) {
    const DagEdge& e = dag.edges[i];
    if (e.from < 0 || e.from >= n || e.to < 0 || e.to >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("edge #", i, " (", e.from, " -> ", e.to,
                       ") names an unknown node; the graph has ", n));
    }
    succ[e.from].push_back(e.to);
    pred[e.to].push_back(e.from);
  }
  BATON_RETURN_IF_ERROR(CheckAcyclic(dag, succ));
  for (const DagEdge& e : dag.edges) {
    if (e.to < e.from) {
      return absl::InvalidArgumentError(absl::StrCat(
          "edge ", NodeName(dag, e.from), " -> ", NodeName(dag, e.to),
          " goes backwards in the issue order"));
    }
  }

  HappensBefore hb;
  absl::flat_hash_map<int, int> dense;
  hb.stream_of_.resize(n);
  hb.index_in_stream_.resize(n);
  for (int v = 0; v < n; ++v) {
    auto [it, inserted] =
        dense.try_emplace(dag.nodes[v].stream, static_cast<int>(dense.size()));
    if (inserted) hb.stream_nodes_.emplace_back();
    const int s = it->second;
    hb.stream_of_[v] = s;
    hb.index_in_stream_[v] = static_cast<int32_t>(hb.stream_nodes_[s].size());
    hb.stream_nodes_[s].push_back(v);
  }
  const int S = static_cast<int>(hb.stream_nodes_.size());
  hb.streams_ = S;
  hb.clock_.assign(static_cast<size_t>(n) * S, -1);
  // Issue order is a topological order of explicit + FIFO edges.
  for (int v = 0; v < n; ++v) {
    int32_t* cv = &hb.clock_[static_cast<size_t>(v) * S];
    auto absorb = [&](NodeId p) {
      const int32_t* cp = &hb.clock_[static_cast<size_t>(p) * S];
      for (int s = 0; s < S; ++s) cv[s] = std::max(cv[s], cp[s]);
      const int ps = hb.stream_of_[p];
      cv[ps] = std::max(cv[ps], hb.index_in_stream_[p]);
    };
    const int idx = hb.index_in_stream_[v];
    if (idx > 0) absorb(hb.stream_nodes_[hb.stream_of_[v]][idx - 1]);
    for (NodeId p : pred[v]) absorb(p);
  }
  return hb;
}

}  // namespace baton::memory
