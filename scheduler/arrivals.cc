#include "baton/scheduler/arrivals.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/comm/flight_recorder.h"

namespace baton::scheduler {

ArrivalMonitor::ArrivalMonitor(const StepGraph& graph, Communicator& comm,
                               Device& device)
    : graph_(graph),
      comm_(comm),
      device_(device),
      schedule_(CollectiveSchedule(graph)) {}

StatusOr<StepArrivals> ArrivalMonitor::Collect(int64_t step) {
  FlightRecorder* rec = comm_.recorder();
  if (rec == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "arrivals: the ", comm_.backend(),
        " communicator keeps no flight recorder"));
  }
  std::map<int, size_t> index;  // node -> schedule entry
  for (size_t i = 0; i < schedule_.size(); ++i) index[schedule_[i].node] = i;
  std::vector<uint64_t> mine(schedule_.size(), 0);
  for (const CollectiveRecord& r : rec->Records()) {
    if (r.position.step != step) continue;
    auto it = index.find(r.position.node);
    if (it != index.end() && mine[it->second] == 0) {
      mine[it->second] = static_cast<uint64_t>(r.arrival_ns());
    }
  }
  BATON_ASSIGN_OR_RETURN(std::vector<uint64_t> all,
                         AllGatherWords(comm_, device_, kArrivalsTag, mine));
  const int world = comm_.size();
  const size_t n = schedule_.size();
  StepArrivals out;
  out.step = step;
  out.slowest_count.assign(world, 0);
  double skew_sum = 0;
  for (size_t i = 0; i < n; ++i) {
    const ScheduleEntry& e = schedule_[i];
    const MeshGroup group = graph_.nodes[e.node].group;
    // Per instance of its mesh group: first, last and sum of arrivals.
    struct Instance {
      int64_t first = INT64_MAX, last = 0;
      int last_rank = -1;
      std::vector<int64_t> arrivals;
    };
    std::map<int, Instance> groups;
    for (int q = 0; q < world; ++q) {
      const auto a = static_cast<int64_t>(all[q * n + i]);
      if (a == 0) continue;
      Instance& g = groups[graph_.mesh.group_index(q, group)];
      g.first = std::min(g.first, a);
      if (a > g.last) {
        g.last = a;
        g.last_rank = q;
      }
      g.arrivals.push_back(a);
    }
    if (groups.empty()) continue;
    CollectiveArrival c;
    c.entry = e;
    double wait_sum = 0;
    for (const auto& [gi, g] : groups) {
      c.ranks += static_cast<int>(g.arrivals.size());
      const double skew = (g.last - g.first) / 1e6;
      if (c.slowest < 0 || skew > c.skew_ms) {
        c.skew_ms = skew;
        c.slowest = g.last_rank;
      }
      for (int64_t a : g.arrivals) wait_sum += (g.last - a) / 1e6;
    }
    c.wait_ms = wait_sum / c.ranks;
    if (c.ranks > 1) ++out.slowest_count[c.slowest];
    skew_sum += c.skew_ms;
    out.straggler_ms += c.wait_ms;
    if (out.max_skew < 0 || c.skew_ms > out.max_skew_ms) {
      out.max_skew_ms = c.skew_ms;
      out.max_skew = static_cast<int>(out.collectives.size());
    }
    out.collectives.push_back(c);
  }
  if (!out.collectives.empty()) {
    out.mean_skew_ms = skew_sum / out.collectives.size();
    out.slowest_rank = static_cast<int>(
        std::max_element(out.slowest_count.begin(), out.slowest_count.end()) -
        out.slowest_count.begin());
  }
  return out;
}

namespace {
// "reduce_scatter of bucket 3 over dp_shard+hpz".
std::string Short(const ScheduleEntry& e) {
  const std::string d = DescribeEntry(e);
  return d.substr(0, d.find(" ("));
}
}  // namespace

std::string FormatStepArrivals(const StepArrivals& a) {
  if (a.collectives.empty()) {
    return absl::StrCat("step ", a.step, ": no collective arrivals recorded\n");
  }
  const CollectiveArrival& m = a.collectives[a.max_skew];
  std::string out = absl::StrFormat(
      "step %d: arrival skew max %.3f ms at node %d (%s, slowest rank %d), "
      "mean %.3f ms over %d collectives; straggler wait %.3f ms; slowest "
      "most often rank %d (%d of %d)\n",
      a.step, a.max_skew_ms, m.entry.node, Short(m.entry), m.slowest,
      a.mean_skew_ms, a.collectives.size(), a.straggler_ms, a.slowest_rank,
      a.slowest_count[a.slowest_rank], a.collectives.size());
  absl::StrAppend(&out, "  slowest rank per collective (node:rank/skew ms):");
  for (const CollectiveArrival& c : a.collectives) {
    absl::StrAppendFormat(&out, " %d:%d/%.3f", c.entry.node, c.slowest,
                          c.skew_ms);
  }
  absl::StrAppend(&out, "\n");
  return out;
}

}  // namespace baton::scheduler
