// VerifyPlan: an independent check of a plan, by explicit reachability
// bitsets rather than the planner's vector clocks.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/memory/planner.h"

namespace baton::memory {

Status VerifyPlan(const PlanInput& input, const MemoryPlan& plan) {
  const size_t n = input.dag.nodes.size();
  const size_t nb = input.buffers.size();
  if (n > 40000) {
    return absl::UnimplementedError(
        absl::StrCat("VerifyPlan: ", n, " nodes is too many to verify"));
  }
  if (plan.buffers.size() != nb) {
    return absl::FailedPreconditionError(absl::StrCat(
        "plan has ", plan.buffers.size(), " buffers, input has ", nb));
  }
  // Successors: explicit edges, added edges, and FIFO order per stream.
  std::vector<std::vector<NodeId>> succ(n);
  for (const DagEdge& e : input.dag.edges) succ[e.from].push_back(e.to);
  for (const DagEdge& e : plan.added_edges) {
    if (e.from < 0 || e.to < 0 || size_t(e.from) >= n || size_t(e.to) >= n ||
        e.to <= e.from) {
      return absl::FailedPreconditionError(absl::StrCat(
          "added edge ", e.from, " -> ", e.to, " is not a forward edge"));
    }
    succ[e.from].push_back(e.to);
  }
  {
    std::vector<std::pair<int, NodeId>> last;  // (stream, last node)
    for (size_t v = 0; v < n; ++v) {
      const int s = input.dag.nodes[v].stream;
      bool found = false;
      for (auto& [stream, node] : last) {
        if (stream == s) {
          succ[node].push_back(static_cast<NodeId>(v));
          node = static_cast<NodeId>(v);
          found = true;
        }
      }
      if (!found) last.push_back({s, static_cast<NodeId>(v)});
    }
  }
  // desc[v]: bitset of nodes reachable from v (excluding v). Every edge goes
  // forward in issue order, so a reverse sweep computes it.
  const size_t words = (n + 63) / 64;
  std::vector<uint64_t> desc(n * words, 0);
  for (size_t v = n; v-- > 0;) {
    uint64_t* dv = &desc[v * words];
    for (NodeId w : succ[v]) {
      if (size_t(w) <= v) {
        return absl::FailedPreconditionError("graph edge goes backwards");
      }
      const uint64_t* dw = &desc[size_t(w) * words];
      for (size_t k = 0; k < words; ++k) dv[k] |= dw[k];
      dv[w / 64] |= uint64_t{1} << (w % 64);
    }
  }
  auto reaches = [&](NodeId a, NodeId b) {
    return (desc[size_t(a) * words + b / 64] >> (b % 64)) & 1;
  };
  // All uses of x strictly before the first write of y.
  auto ordered = [&](size_t x, size_t y) {
    const BufferSpec& bx = input.buffers[x];
    const NodeId wy = input.buffers[y].writer;
    if (!reaches(bx.writer, wy)) return false;
    for (NodeId u : bx.users) {
      if (!reaches(u, wy)) return false;
    }
    return true;
  };
  for (size_t i = 0; i < nb; ++i) {
    const PlannedBuffer& p = plan.buffers[i];
    if (p.bytes != input.buffers[i].bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("buffer '", p.name, "' has the wrong size"));
    }
    if (p.offset % input.buffers[i].alignment != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("buffer '", p.name, "' is misaligned"));
    }
    if (p.offset + p.bytes > plan.arena_bytes) {
      return absl::FailedPreconditionError(
          absl::StrCat("buffer '", p.name, "' ends outside the arena"));
    }
  }
  for (size_t i = 0; i < nb; ++i) {
    for (size_t j = i + 1; j < nb; ++j) {
      const PlannedBuffer& a = plan.buffers[i];
      const PlannedBuffer& b = plan.buffers[j];
      const bool overlap =
          a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
      if (overlap && !ordered(i, j) && !ordered(j, i)) {
        return absl::FailedPreconditionError(absl::StrCat(
            "buffers '", a.name, "' and '", b.name,
            "' share bytes but are not ordered in the DAG"));
      }
    }
  }
  return Status();
}

}  // namespace baton::memory
