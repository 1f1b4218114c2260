#include "baton/scheduler/step_trace.h"

#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace baton::scheduler {
namespace {

// One node of one step: three stream timestamps, ns since the origin
// (-1: not reached).
struct Entry {
  int node = 0;
  int64_t step = 0;
  std::atomic<int64_t> t[3] = {-1, -1, -1};  // before waits, before work, after work
};

const char* Category(NodeKind kind) {
  switch (kind) {
    case NodeKind::kAllGather:
    case NodeKind::kReduceScatter:
    case NodeKind::kAllReduce:
    case NodeKind::kCopy:
      return "copy";
    default:
      return "compute";
  }
}

std::string StreamName(const StepGraph& g, int s) {
  if (s == kComputeStream.index()) return "compute";
  if (g.num_streams == 2) return "comm";
  return s == StreamFor(StreamClass::kAllGather, false).index() ? "all-gather"
                                                                 : "reduce-scatter";
}

}  // namespace

class StepTrace::Recorder : public NodeObserver {
 public:
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
      e->t[slot].store(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now() - origin).count(),
                       std::memory_order_relaxed);
      return absl::OkStatus();
    });
  }

  void AppendJson(nlohmann::json& events) const {
    std::lock_guard<std::mutex> lock(mu_);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", rank_},
                      {"args", {{"name", absl::StrCat("rank ", rank_)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", rank_},
                      {"args", {{"sort_index", rank_}}}});
    for (int s = 0; s < graph_.num_streams; ++s) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", rank_}, {"tid", s},
                        {"args", {{"name", StreamName(graph_, s)}}}});
      events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", rank_},
                        {"tid", s}, {"args", {{"sort_index", s}}}});
    }
    auto us = [](int64_t ns) { return static_cast<double>(ns) / 1e3; };
    for (const Entry& e : entries_) {
      const Node& n = graph_.nodes[e.node];
      const int64_t t0 = e.t[0].load(), t1 = e.t[1].load(), t2 = e.t[2].load();
      const int tid = n.stream.index();
      if (!n.waits.empty() && t0 >= 0 && t1 > t0) {  // blocked on another stream
        events.push_back({{"ph", "X"}, {"cat", "wait"}, {"name", "wait"}, {"pid", rank_},
                          {"tid", tid}, {"ts", us(t0)}, {"dur", us(t1 - t0)},
                          {"args", {{"step", e.step}, {"before", n.name}}}});
      }
      if (t1 >= 0 && t2 >= t1) {
        events.push_back({{"ph", "X"}, {"cat", Category(n.kind)}, {"name", n.name},
                          {"pid", rank_}, {"tid", tid}, {"ts", us(t1)}, {"dur", us(t2 - t1)},
                          {"args", {{"step", e.step}, {"kind", NodeKindName(n.kind)}}}});
      }
    }
  }

 private:
  const int rank_;
  const StepGraph& graph_;
  const std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mu_;
  std::deque<Entry> entries_;  // stable addresses for the streams' writes
  std::map<std::pair<int, int64_t>, Entry*> open_;
};

StepTrace::StepTrace() : origin_(std::chrono::steady_clock::now()) {}
StepTrace::~StepTrace() = default;

NodeObserver* StepTrace::ForRank(int rank, const StepGraph& graph) {
  auto& r = ranks_[rank];
  r = std::make_unique<Recorder>(rank, graph, origin_);
  return r.get();
}

std::string StepTrace::Json() const {
  nlohmann::json events = nlohmann::json::array();
  for (const auto& [rank, recorder] : ranks_) recorder->AppendJson(events);
  nlohmann::json j;
  j["traceEvents"] = std::move(events);
  j["displayTimeUnit"] = "ms";
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Status StepTrace::Write(const std::string& path) const {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write the trace to ", path));
  out << Json() << "\n";
  out.close();
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot write the trace to ", path));
  return absl::OkStatus();
}

}  // namespace baton::scheduler
