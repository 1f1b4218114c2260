#include "baton/memory/planner.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace baton::memory {
namespace {

constexpr NodeId kNever = std::numeric_limits<NodeId>::max();
// Inputs up to this many buffers try every visit order.
constexpr int kSmallInput = 2000;
// Peak sets up to this size are tried in every arrangement (5! = 120).
constexpr size_t kMaxPeakPermuted = 5;
// Inputs from this many buffers place their orders on two threads.
constexpr int kParallelPlacement = 2000;

// What the planner derives from one buffer.
struct Lifetime {
  NodeId first = 0;  // issue position of the writer
  NodeId last = 0;   // issue position of the last use
  int writer_stream = 0;
  // (dense stream, largest index on it) over the writer and all users.
  std::vector<std::pair<int, int32_t>> last_per_stream;
};

struct Neighbor {
  BufferId id;
  bool soft;  // unordered, but orderable by allowed reuse edges
};

// Conflict lists in one flat array: the neighbors of b are
// items[begin[b] .. begin[b+1]), hard ones first, up to hard_end[b].
struct Conflicts {
  std::vector<size_t> begin;
  std::vector<size_t> hard_end;
  std::vector<Neighbor> items;
  const Neighbor* first(BufferId b) const { return items.data() + begin[b]; }
  // End of b's list; with soft neighbors ignored, end of its hard ones.
  const Neighbor* last(BufferId b, bool hard_only) const {
    return items.data() + (hard_only ? hard_end[b] : begin[b + 1]);
  }
};

size_t AlignUp(size_t x, size_t a) { return (x + a - 1) / a * a; }

Status ValidateBuffers(const PlanInput& input, const HappensBefore& hb,
                       std::vector<Lifetime>& lifetimes) {
  const int n = hb.num_nodes();
  lifetimes.resize(input.buffers.size());
  for (size_t i = 0; i < input.buffers.size(); ++i) {
    const BufferSpec& b = input.buffers[i];
    const std::string who = absl::StrCat("buffer '", b.name, "' (#", i, ")");
    if (b.bytes == 0) {
      return absl::InvalidArgumentError(absl::StrCat(who, " has zero size"));
    }
    if (b.alignment == 0 || (b.alignment & (b.alignment - 1)) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, " has alignment ", b.alignment, ", not a power of two"));
    }
    if (b.writer < 0 || b.writer >= n) {
      return absl::InvalidArgumentError(absl::StrCat(
          who, " names unknown writer node ", b.writer, "; the graph has ", n));
    }
    Lifetime& lt = lifetimes[i];
    lt.first = lt.last = b.writer;
    lt.writer_stream = hb.stream(b.writer);
    lt.last_per_stream.push_back({hb.stream(b.writer),
                                  hb.index_in_stream(b.writer)});
    for (NodeId u : b.users) {
      if (u < 0 || u >= n) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, " names unknown user node ", u, "; the graph has ", n));
      }
      if (u == b.writer) continue;
      if (!hb.Before(b.writer, u)) {
        return absl::InvalidArgumentError(absl::StrCat(
            who, " is used by node '", input.dag.nodes[u].name, "' (#", u,
            ") before its first write at node '",
            input.dag.nodes[b.writer].name, "' (#", b.writer,
            "): no path from the writer"));
      }
      lt.last = std::max(lt.last, u);
      const int s = hb.stream(u);
      const int32_t idx = hb.index_in_stream(u);
      auto it = std::find_if(lt.last_per_stream.begin(),
                             lt.last_per_stream.end(),
                             [s](const auto& p) { return p.first == s; });
      if (it == lt.last_per_stream.end()) {
        lt.last_per_stream.push_back({s, idx});
      } else {
        it->second = std::max(it->second, idx);
      }
    }
    std::sort(lt.last_per_stream.begin(), lt.last_per_stream.end());
  }
  return Status();
}

// Issue position of the first node on stream t that has every use of the
// buffer before it; kNever if there is none.
NodeId ReleasePosition(const HappensBefore& hb, const Lifetime& lt, int t) {
  const std::vector<NodeId>& nodes = hb.stream_nodes(t);
  size_t k = 0;
  for (const auto& [s, idx] : lt.last_per_stream) {
    // The clock along one stream is non-decreasing: binary search.
    size_t lo = k, hi = nodes.size();
    while (lo < hi) {
      const size_t mid = (lo + hi) / 2;
      if (hb.Clock(nodes[mid], s) >= idx) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    k = lo;
    if (k == nodes.size()) return kNever;
  }
  return nodes[k];
}

// Edges that would order every use of `a` before the writer of `b`.
void NeededEdges(const HappensBefore& hb, const Lifetime& a, NodeId b_writer,
                 std::vector<DagEdge>& out) {
  for (const auto& [s, idx] : a.last_per_stream) {
    if (hb.Clock(b_writer, s) < idx) {
      out.push_back({hb.stream_nodes(s)[idx], b_writer});
    }
  }
}

// Conflict lists: for each buffer, the buffers it may not share bytes with
// (hard) or may only with added edges (soft).
Conflicts BuildConflicts(
    const PlanInput& input, const HappensBefore& hb,
    const std::vector<Lifetime>& lts, const PlanOptions& options) {
  const int nb = static_cast<int>(lts.size());
  const int S = hb.num_streams();
  // Buffers by writer stream as (first write, id), sorted.
  std::vector<std::vector<std::pair<NodeId, BufferId>>> by_stream(S);
  for (BufferId b = 0; b < nb; ++b) {
    by_stream[lts[b].writer_stream].push_back({lts[b].first, b});
  }
  for (auto& v : by_stream) std::sort(v.begin(), v.end());
  struct Pair {
    BufferId a, b;
    bool soft;
  };
  std::vector<Pair> pairs;
  pairs.reserve(static_cast<size_t>(nb) * 8);
  std::vector<DagEdge> edges;
  for (BufferId a = 0; a < nb; ++a) {
    const Lifetime& la = lts[a];
    for (int t = 0; t < S; ++t) {
      const auto& cand = by_stream[t];
      if (cand.empty()) continue;
      const NodeId release = ReleasePosition(hb, la, t);
      auto it = std::lower_bound(cand.begin(), cand.end(),
                                 std::pair<NodeId, BufferId>{la.first, a});
      for (; it != cand.end() && it->first < release; ++it) {
        const BufferId b = it->second;
        if (b == a) continue;
        bool soft = false;
        if (it->first > la.last && options.allow_reuse_edges) {
          soft = true;
          if (options.edge_filter) {
            edges.clear();
            NeededEdges(hb, la, input.buffers[b].writer, edges);
            for (const DagEdge& e : edges) {
              if (!options.edge_filter(e.from, e.to)) {
                soft = false;
                break;
              }
            }
          }
        }
        pairs.push_back({a, b, soft});
      }
    }
  }
  Conflicts c;
  c.begin.assign(static_cast<size_t>(nb) + 1, 0);
  for (const Pair& p : pairs) {
    ++c.begin[p.a + 1];
    ++c.begin[p.b + 1];
  }
  for (int b = 0; b < nb; ++b) c.begin[b + 1] += c.begin[b];
  c.items.resize(c.begin[nb]);
  std::vector<size_t> fill(c.begin.begin(), c.begin.end() - 1);
  for (int pass = 0; pass < 2; ++pass) {  // hard ones first
    for (const Pair& p : pairs) {
      if (p.soft != (pass == 1)) continue;
      c.items[fill[p.a]++] = {p.b, p.soft};
      c.items[fill[p.b]++] = {p.a, p.soft};
    }
    if (pass == 0) c.hard_end = fill;
  }
  return c;
}

// Greedy best fit in `order`; returns the arena size.
// Sizes and alignments in flat arrays, for the placement's inner loop.
struct Sizes {
  std::vector<size_t> bytes;
  std::vector<size_t> alignment;
};

size_t Place(const std::vector<BufferId>& order, const Sizes& sizes,
             const Conflicts& adj, bool use_soft,
             std::vector<size_t>& offsets) {
  const size_t nb = sizes.bytes.size();
  offsets.assign(nb, 0);
  std::vector<char> placed(nb, 0);
  std::vector<std::pair<size_t, size_t>> busy;
  size_t arena = 0;
  for (BufferId b : order) {
    const size_t bytes = sizes.bytes[b];
    const size_t align = sizes.alignment[b];
    busy.clear();
    for (const Neighbor* nbr = adj.first(b); nbr != adj.last(b, use_soft);
         ++nbr) {
      if (!placed[nbr->id]) continue;
      busy.push_back(
          {offsets[nbr->id], offsets[nbr->id] + sizes.bytes[nbr->id]});
    }
    std::sort(busy.begin(), busy.end());
    size_t best = std::numeric_limits<size_t>::max();
    size_t best_gap = std::numeric_limits<size_t>::max();
    size_t cursor = 0;
    for (const auto& [begin, end] : busy) {
      const size_t start = AlignUp(cursor, align);
      if (start + bytes <= begin && begin - start < best_gap) {
        best_gap = begin - start;
        best = start;
      }
      cursor = std::max(cursor, end);
    }
    if (best == std::numeric_limits<size_t>::max()) {
      best = AlignUp(cursor, align);
    }
    offsets[b] = best;
    placed[b] = 1;
    arena = std::max(arena, best + bytes);
  }
  return arena;
}

// Bytes live at each issue position (first write <= position <= last use).
std::vector<int64_t> LiveBytes(const std::vector<Lifetime>& lts,
                               const PlanInput& input, int num_nodes) {
  std::vector<int64_t> live(static_cast<size_t>(num_nodes) + 1, 0);
  for (size_t b = 0; b < lts.size(); ++b) {
    live[lts[b].first] += static_cast<int64_t>(input.buffers[b].bytes);
    live[lts[b].last + 1] -= static_cast<int64_t>(input.buffers[b].bytes);
  }
  for (size_t p = 1; p < live.size(); ++p) live[p] += live[p - 1];
  live.pop_back();
  return live;
}


// Drops candidate edges already implied by the DAG, by FIFO order or by the
// candidates kept before them: one vector-clock pass in issue order. At each
// target, candidates are tried latest source first, so one edge from a
// stream's last use covers the earlier uses on that stream.
std::vector<DagEdge> PruneEdges(const StepDag& dag, const HappensBefore& hb,
                                std::vector<DagEdge> edges) {
  const int n = hb.num_nodes();
  const int S = hb.num_streams();
  std::sort(edges.begin(), edges.end(), [](const DagEdge& a, const DagEdge& b) {
    return a.to != b.to ? a.to < b.to : a.from > b.from;
  });
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  std::vector<std::vector<NodeId>> pred(n);
  for (const DagEdge& e : dag.edges) pred[e.to].push_back(e.from);
  std::vector<int32_t> clock(static_cast<size_t>(n) * S, -1);
  auto absorb = [&](int32_t* cv, NodeId p) {
    const int32_t* cp = &clock[static_cast<size_t>(p) * S];
    for (int s = 0; s < S; ++s) cv[s] = std::max(cv[s], cp[s]);
    cv[hb.stream(p)] = std::max(cv[hb.stream(p)], hb.index_in_stream(p));
  };
  std::vector<DagEdge> kept;
  size_t next = 0;
  for (NodeId v = 0; v < n; ++v) {
    int32_t* cv = &clock[static_cast<size_t>(v) * S];
    const int idx = hb.index_in_stream(v);
    if (idx > 0) absorb(cv, hb.stream_nodes(hb.stream(v))[idx - 1]);
    for (NodeId p : pred[v]) absorb(cv, p);
    for (; next < edges.size() && edges[next].to == v; ++next) {
      const NodeId u = edges[next].from;
      if (hb.index_in_stream(u) <= cv[hb.stream(u)]) continue;  // implied
      kept.push_back(edges[next]);
      absorb(cv, u);
    }
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

// Visit orders for the greedy placement. Large inputs get the three that
// matter most; small ones (where placement is cheap) get all of them.
std::vector<std::pair<std::string, std::vector<BufferId>>> Orderings(
    const PlanInput& input, const std::vector<Lifetime>& lts,
    const std::vector<int64_t>& live) {
  const int num_nodes = static_cast<int>(live.size());
  const auto& bufs = input.buffers;
  const int nb = static_cast<int>(bufs.size());
  auto span = [&](BufferId b) -> uint64_t {
    return static_cast<uint64_t>(lts[b].last - lts[b].first + 1);
  };
  std::vector<BufferId> ids(nb);
  std::iota(ids.begin(), ids.end(), 0);
  std::vector<std::pair<std::string, std::vector<BufferId>>> out;
  auto add = [&](const char* name, auto less) {
    std::vector<BufferId> order = ids;
    std::stable_sort(order.begin(), order.end(), less);
    out.push_back({name, std::move(order)});
  };
  add("size", [&](BufferId x, BufferId y) {
    if (bufs[x].bytes != bufs[y].bytes) return bufs[x].bytes > bufs[y].bytes;
    return span(x) > span(y);
  });
  add("area", [&](BufferId x, BufferId y) {
    const long double ax = static_cast<long double>(bufs[x].bytes) * span(x);
    const long double ay = static_cast<long double>(bufs[y].bytes) * span(y);
    if (ax != ay) return ax > ay;
    return bufs[x].bytes > bufs[y].bytes;
  });
  add("first-use", [&](BufferId x, BufferId y) {
    if (lts[x].first != lts[y].first) return lts[x].first < lts[y].first;
    return bufs[x].bytes > bufs[y].bytes;
  });
  if (nb > kSmallInput) return out;
  add("size-early", [&](BufferId x, BufferId y) {
    if (bufs[x].bytes != bufs[y].bytes) return bufs[x].bytes > bufs[y].bytes;
    return lts[x].first < lts[y].first;
  });
  add("size-late", [&](BufferId x, BufferId y) {
    if (bufs[x].bytes != bufs[y].bytes) return bufs[x].bytes > bufs[y].bytes;
    return lts[x].last > lts[y].last;
  });
  add("last-use", [&](BufferId x, BufferId y) {
    if (lts[x].last != lts[y].last) return lts[x].last > lts[y].last;
    return bufs[x].bytes > bufs[y].bytes;
  });
  // Greedy by breadth (Pisarchyk & Lee): positions by live bytes, largest
  // first; at each, its not yet visited buffers by size.
  {
    std::vector<NodeId> positions(num_nodes);
    std::iota(positions.begin(), positions.end(), 0);
    std::stable_sort(positions.begin(), positions.end(),
                     [&](NodeId x, NodeId y) { return live[x] > live[y]; });
    std::vector<BufferId> by_first = ids;
    std::sort(by_first.begin(), by_first.end(), [&](BufferId x, BufferId y) {
      return lts[x].first != lts[y].first ? lts[x].first < lts[y].first
                                          : x < y;
    });
    std::vector<char> seen(nb, 0);
    std::vector<BufferId> order, here;
    for (NodeId p : positions) {
      if (static_cast<int>(order.size()) == nb) break;
      here.clear();
      for (BufferId b : by_first) {
        if (lts[b].first > p) break;
        if (!seen[b] && lts[b].last >= p) here.push_back(b);
      }
      std::stable_sort(here.begin(), here.end(), [&](BufferId x, BufferId y) {
        return bufs[x].bytes > bufs[y].bytes;
      });
      for (BufferId b : here) {
        seen[b] = 1;
        order.push_back(b);
      }
    }
    out.push_back({"breadth", std::move(order)});
    // Peak permutations: in a plan that meets the bound, the buffers live
    // at the peak position tile the arena. Try each arrangement of a small
    // peak set, placed first, then the rest by size.
    const NodeId peak = positions.empty() ? 0 : positions[0];
    std::vector<BufferId> peak_set;
    for (BufferId b = 0; b < nb; ++b) {
      if (lts[b].first <= peak && peak <= lts[b].last) peak_set.push_back(b);
    }
    if (!peak_set.empty() && peak_set.size() <= kMaxPeakPermuted) {
      std::vector<char> in_peak(nb, 0);
      for (BufferId b : peak_set) in_peak[b] = 1;
      std::vector<BufferId> rest;
      for (BufferId b : out[0].second) {
        if (!in_peak[b]) rest.push_back(b);
      }
      int k = 0;
      do {
        std::vector<BufferId> order = peak_set;
        order.insert(order.end(), rest.begin(), rest.end());
        out.push_back({absl::StrCat("peak", k++), std::move(order)});
      } while (std::next_permutation(peak_set.begin(), peak_set.end()));
    }
  }
  return out;
}

}  // namespace

StatusOr<MemoryPlan> PlanMemory(const PlanInput& input,
                                const PlanOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  BATON_ASSIGN_OR_RETURN(HappensBefore hb, HappensBefore::Build(input.dag));
  std::vector<Lifetime> lts;
  BATON_RETURN_IF_ERROR(ValidateBuffers(input, hb, lts));
  const Conflicts adj = BuildConflicts(input, hb, lts, options);
  const int nb = static_cast<int>(lts.size());
  const auto& bufs = input.buffers;

  const std::vector<int64_t> live = LiveBytes(lts, input, hb.num_nodes());
  const std::vector<std::pair<std::string, std::vector<BufferId>>> orders =
      Orderings(input, lts, live);
  bool any_soft = false;
  for (const Neighbor& n : adj.items) any_soft |= n.soft;

  Sizes sizes;
  for (const BufferSpec& b : bufs) {
    sizes.bytes.push_back(b.bytes);
    sizes.alignment.push_back(b.alignment);
  }
  MemoryPlan plan;
  plan.lower_bound_bytes =
      live.empty() ? 0
                   : static_cast<size_t>(
                         *std::max_element(live.begin(), live.end()));
  // With reuse edges allowed, soft conflicts are free; the edges are added
  // only where the chosen placement needs them. The orders are placed on two
  // threads (each order's result is independent of the others); the winner
  // is the smallest arena, ties to the earlier order, so the result does not
  // depend on timing.
  const size_t num_orders = orders.size();
  std::vector<size_t> arenas(num_orders);
  std::vector<std::vector<size_t>> offsets(num_orders);
  auto place_range = [&](size_t first, size_t step) {
    for (size_t i = first; i < num_orders; i += step) {
      arenas[i] = Place(orders[i].second, sizes, adj, any_soft, offsets[i]);
    }
  };
  if (nb >= kParallelPlacement && num_orders > 1) {
    std::thread helper(place_range, 1, 2);
    place_range(0, 2);
    helper.join();
  } else {
    place_range(0, 1);
  }
  size_t winner = 0;
  for (size_t i = 1; i < num_orders; ++i) {
    if (arenas[i] < arenas[winner]) winner = i;
  }
  const size_t best_arena = arenas[winner];
  const std::vector<size_t>& best_offsets = offsets[winner];
  plan.strategy = any_soft ? absl::StrCat(orders[winner].first, "+edges")
                            : orders[winner].first;

  if (any_soft) {
    std::vector<DagEdge> edges;
    for (BufferId a = 0; a < nb; ++a) {
      for (const Neighbor* nbr = adj.first(a); nbr != adj.last(a, false);
           ++nbr) {
        const BufferId b = nbr->id;
        if (!nbr->soft || b < a) continue;
        const bool overlap =
            best_offsets[a] < best_offsets[b] + bufs[b].bytes &&
            best_offsets[b] < best_offsets[a] + bufs[a].bytes;
        if (!overlap) continue;
        const bool a_first = lts[a].first < lts[b].first;
        NeededEdges(hb, lts[a_first ? a : b], bufs[a_first ? b : a].writer,
                    edges);
      }
    }
    plan.added_edges = PruneEdges(input.dag, hb, std::move(edges));
  }

  plan.buffers.resize(nb);
  for (BufferId b = 0; b < nb; ++b) {
    plan.buffers[b] = {bufs[b].name,   bufs[b].bytes, bufs[b].alignment,
                       best_offsets[b], lts[b].first,  lts[b].last};
  }
  plan.arena_bytes = best_arena;
  plan.plan_ms = std::chrono::duration<double, std::milli>(
                     std::chrono::steady_clock::now() - start)
                     .count();
  return plan;
}

}  // namespace baton::memory
