#include "baton/scheduler/step_trace.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/runtime/trace_json.h"

namespace baton::scheduler {
namespace {

// One node of one step: three stream timestamps, ns since the origin
// (-1: not reached).
struct Entry {
  int node = 0;
  int64_t step = 0;
  std::atomic<int64_t> t[3] = {-1, -1, -1};  // before waits, before work, after work
};

// A span a compute node recorded of its own work (WorkSpanSink).
struct SpanEntry {
  int track = 0;
  const char* what = "";
  int chunk = 0;
  int64_t step = 0;
  std::atomic<int64_t> t[2] = {-1, -1};  // the stream reached its work, finished it
};

int64_t NowNs(std::chrono::steady_clock::time_point origin) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() -
                                                              origin)
      .count();
}

const char* Category(NodeKind kind) {
  switch (kind) {
    case NodeKind::kAllGather:
    case NodeKind::kReduceScatter:
    case NodeKind::kAllReduce:
    case NodeKind::kCopy:
    case NodeKind::kD2H:
    case NodeKind::kH2D:
    case NodeKind::kDispatch:
    case NodeKind::kCombine:
      return "copy";
    default:
      return "compute";
  }
}

// The tracks of a rank: the graph's streams, then (ZenFlow) the
// executor's host-update stream, where CAST runs (optim/zenflow_state.h).
std::vector<std::string> TrackNames(const StepGraph& g) {
  std::vector<std::string> names = g.stream_names();
  for (std::string& n : names) {
    if (n == "allgather") n = "all-gather";
    if (n == "reducescatter") n = "reduce-scatter";
    if (n == "hostcopy") n = "host-copy";
  }
  if (g.policy.zenflow) names.push_back("host-update");
  return names;
}

int Track(const StepGraph& g, const Node& n) {
  if (g.policy.zenflow && n.kind == NodeKind::kCast) return g.num_streams;
  return n.stream.index();
}

}  // namespace

class StepTrace::Recorder : public NodeObserver, public WorkSpanSink {
 public:
  WorkSpanSink* spans() override { return this; }

  Status Span(Stream& stream, StreamClass track, const char* what, int chunk, int64_t step,
              const std::function<Status()>& issue) override {
    SpanEntry* e;
    {
      std::lock_guard<std::mutex> lock(mu_);
      spans_.emplace_back();
      e = &spans_.back();
      e->track = graph_.stream_for(track).index();
      e->what = what;
      e->chunk = chunk;
      e->step = step;
    }
    const auto origin = origin_;
    auto stamp = [e, origin](int slot) {
      return [e, origin, slot]() {
        e->t[slot].store(NowNs(origin), std::memory_order_relaxed);
        return absl::OkStatus();
      };
    };
    BATON_RETURN_IF_ERROR(stream.Enqueue(stamp(0)));
    BATON_RETURN_IF_ERROR(issue());
    return stream.Enqueue(stamp(1));
  }

  Recorder(int rank, const StepGraph& graph, std::chrono::steady_clock::time_point origin)
      : rank_(rank), graph_(graph), origin_(origin) {}

  Status Observe(int node, int64_t step, Point point, Stream& stream) override {
    Entry* e;
    {
      // A node's points come in order from its rank's issuing thread.
      std::lock_guard<std::mutex> lock(mu_);
      const auto key = std::make_pair(node, step);
      auto it = open_.find(key);
      if (it == open_.end()) {
        entries_.emplace_back();
        entries_.back().node = node;
        entries_.back().step = step;
        it = open_.emplace(key, &entries_.back()).first;
      }
      e = it->second;
      if (point == Point::kAfterWork) open_.erase(it);
    }
    const int slot = static_cast<int>(point);
    const auto origin = origin_;
    return stream.Enqueue([e, slot, origin]() {
      e->t[slot].store(NowNs(origin), std::memory_order_relaxed);
      return absl::OkStatus();
    });
  }

  void AppendTo(TraceJsonWriter& trace) const {
    std::lock_guard<std::mutex> lock(mu_);
    trace.ProcessName(rank_, absl::StrCat("rank ", rank_));
    trace.ProcessSortIndex(rank_, rank_);
    const std::vector<std::string> tracks = TrackNames(graph_);
    for (int s = 0; s < static_cast<int>(tracks.size()); ++s) {
      trace.ThreadName(rank_, s, tracks[s]);
      trace.ThreadSortIndex(rank_, s, s);
    }
    auto us = [](int64_t ns) { return static_cast<double>(ns) / 1e3; };
    for (const Entry& e : entries_) {
      const Node& n = graph_.nodes[e.node];
      const int64_t t0 = e.t[0].load(), t1 = e.t[1].load(), t2 = e.t[2].load();
      const int tid = Track(graph_, n);
      if (!n.waits.empty() && t0 >= 0 && t1 > t0) {  // blocked on another stream
        trace.Complete(rank_, tid, "wait", "wait", us(t0), us(t1 - t0),
                       {{"step", e.step}, {"before", n.name}});
      }
      if (t1 >= 0 && t2 >= t1) {
        trace.Complete(rank_, tid, n.name, Category(n.kind), us(t1), us(t2 - t1),
                       {{"step", e.step}, {"kind", std::string(NodeKindName(n.kind))}});
      }
    }
    const int compute = graph_.stream_for(StreamClass::kCompute).index();
    for (const SpanEntry& e : spans_) {
      const int64_t t0 = e.t[0].load(), t1 = e.t[1].load();
      if (t0 < 0 || t1 < t0) continue;
      trace.Complete(rank_, e.track, absl::StrCat(e.what, " ", e.chunk),
                     e.track == compute ? "compute" : "copy", us(t0), us(t1 - t0),
                     {{"step", e.step}, {"chunk", int64_t{e.chunk}}});
    }
  }

  // The compute stream's waits before its nodes of step `step` on events of
  // stream `source`'s nodes (ns); -1 without any compute in the step.
  int64_t ComputeWaitsOn(int64_t step, StreamId source) const {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t waited = -1;
    for (const Entry& e : entries_) {
      const Node& n = graph_.nodes[e.node];
      if (e.step != step || !n.stream.is_compute()) continue;
      waited = std::max<int64_t>(waited, 0);
      const bool on_source = std::any_of(n.waits.begin(), n.waits.end(), [&](int w) {
        return graph_.nodes[w].stream == source;
      });
      const int64_t t0 = e.t[0].load(), t1 = e.t[1].load();
      if (on_source && t0 >= 0 && t1 > t0) waited += t1 - t0;
    }
    return waited;
  }

  const StepGraph& graph() const { return graph_; }

  // This rank's compute in step `step`: its first start, last end and busy
  // time (ns); first = -1 without any.
  struct Busy {
    int64_t first = -1, last = -1, busy = 0;
  };
  Busy ComputeBusy(int64_t step) const {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t first = -1, last = -1, busy = 0;
    for (const Entry& e : entries_) {
      const Node& n = graph_.nodes[e.node];
      if (e.step != step || !IsCompute(n.kind) || !n.stream.is_compute()) continue;
      const int64_t t1 = e.t[1].load(), t2 = e.t[2].load();
      if (t1 < 0 || t2 < t1) continue;
      if (first < 0 || t1 < first) first = t1;
      last = std::max(last, t2);
      busy += t2 - t1;  // one stream: the nodes do not overlap
    }
    return Busy{first, last, busy};
  }

 private:
  const int rank_;
  const StepGraph& graph_;
  const std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mu_;
  std::deque<Entry> entries_;  // stable addresses for the streams' writes
  std::map<std::pair<int, int64_t>, Entry*> open_;
  std::deque<SpanEntry> spans_;  // stable addresses, as entries_
};

StepTrace::StepTrace() : origin_(std::chrono::steady_clock::now()) {}
StepTrace::~StepTrace() = default;

NodeObserver* StepTrace::ForRank(int rank, const StepGraph& graph) {
  auto& r = ranks_[rank];
  r = std::make_unique<Recorder>(rank, graph, origin_);
  return r.get();
}

void StepTrace::AppendTo(TraceJsonWriter& trace) const {
  for (const auto& [rank, recorder] : ranks_) recorder->AppendTo(trace);
}

std::map<int, double> StepTrace::ComputeIdleFraction(int64_t step) const {
  std::map<int, Recorder::Busy> busy;
  int64_t first = -1, last = -1;
  for (const auto& [rank, recorder] : ranks_) {
    const Recorder::Busy b = recorder->ComputeBusy(step);
    if (b.first < 0) continue;
    busy[rank] = b;
    first = first < 0 ? b.first : std::min(first, b.first);
    last = std::max(last, b.last);
  }
  std::map<int, double> out;
  if (last <= first) return out;
  for (const auto& [rank, b] : busy) {
    out[rank] = std::max(0.0, 1.0 - static_cast<double>(b.busy) / (last - first));
  }
  return out;
}

std::map<int, double> StepTrace::ExposedWaitMs(int64_t step, StreamClass source) const {
  std::map<int, double> out;
  for (const auto& [rank, recorder] : ranks_) {
    const int64_t ns = recorder->ComputeWaitsOn(step, recorder->graph().stream_for(source));
    if (ns >= 0) out[rank] = static_cast<double>(ns) / 1e6;
  }
  return out;
}

std::string StepTrace::Json() const {
  TraceJsonWriter trace;
  AppendTo(trace);
  return trace.Json();
}

Status StepTrace::Write(const std::string& path) const {
  TraceJsonWriter trace;
  AppendTo(trace);
  return trace.Write(path);
}

}  // namespace baton::scheduler
