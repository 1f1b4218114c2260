#include "baton/sim/event_loop.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "absl/strings/str_cat.h"

namespace baton::sim {
namespace {

using scheduler::Node;
using scheduler::NodeKind;
using scheduler::StepGraph;
using scheduler::StreamClass;
using scheduler::StreamId;

constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

// `seconds` as whole nanoseconds; InvalidArgument naming `node` when it is
// not finite, negative, or beyond kMaxStepNs.
StatusOr<int64_t> ToNs(double seconds, const std::string& node) {
  if (!(seconds >= 0) || !(seconds * 1e9 <= static_cast<double>(kMaxStepNs))) {
    return absl::InvalidArgumentError(absl::StrCat(
        "simulator: ", node, " would take ", seconds,
        " s, outside the simulated range 0..", kMaxStepNs / 1e9,
        " s per step (check the cluster's rates and the workload)"));
  }
  return static_cast<int64_t>(std::llround(seconds * 1e9));
}

class EventLoop {
 public:
  EventLoop(const StepGraph& g, const std::vector<NodeCost>& costs)
      : g_(g), costs_(costs), nn_(static_cast<int>(g.nodes.size())),
        ns_(g.num_streams) {}

  Status Init(double host_issue_us);
  StatusOr<EventLoopResult> Run();

 private:
  struct Active {
    int node;
    int64_t latency_left;  // ns
    int64_t work_left;     // 1/units_ ns at full bandwidth
  };

  void AdvanceHost(int64_t t);
  void StartReady(int64_t t);
  void BlameGap(int v, int64_t t);
  StatusOr<int64_t> NextEvent(int64_t t, int64_t per_ns) const;
  void Complete(int64_t t);
  Status PastRange(int64_t t, int node) const;

  const StepGraph& g_;
  const std::vector<NodeCost>& costs_;
  const int nn_, ns_;
  int64_t units_ = 1;  // lcm(1..number of comm streams)
  int64_t issue_ns_ = 0;
  std::vector<int64_t> latency_ns_, work_units_;
  std::vector<std::vector<int>> queue_;  // per stream, issue order
  std::vector<size_t> head_;
  std::vector<int64_t> issue_;
  int issued_ = 0;
  int64_t host_t_ = 0;
  std::vector<int> running_;            // per stream, -1: idle
  std::vector<int64_t> compute_end_;    // per stream, non-comm nodes
  std::vector<Active> comm_;
  int done_ = 0;
  EventLoopResult r_;
};

Status EventLoop::Init(double host_issue_us) {
  std::vector<bool> comm_stream(ns_, false);
  for (int i = 0; i < nn_; ++i) {
    if (costs_[i].comm) comm_stream[g_.nodes[i].stream.index()] = true;
  }
  for (int k = 2, n = static_cast<int>(std::count(comm_stream.begin(),
                                                   comm_stream.end(), true));
       k <= n; ++k) {
    units_ = std::lcm(units_, static_cast<int64_t>(k));
  }
  if (units_ > kNever / kMaxStepNs) {
    return absl::InternalError(absl::StrCat(
        "simulator: too many communication streams to share links exactly (", ns_,
        " streams)"));
  }
  latency_ns_.resize(nn_);
  work_units_.resize(nn_);
  for (int i = 0; i < nn_; ++i) {
    BATON_ASSIGN_OR_RETURN(latency_ns_[i], ToNs(costs_[i].latency_s, g_.nodes[i].name));
    BATON_ASSIGN_OR_RETURN(const int64_t work, ToNs(costs_[i].work_s, g_.nodes[i].name));
    work_units_[i] = work * units_;
  }
  BATON_ASSIGN_OR_RETURN(issue_ns_, ToNs(host_issue_us * 1e-6, "issuing a node"));
  queue_.resize(ns_);
  for (int i = 0; i < nn_; ++i) queue_[g_.nodes[i].stream.index()].push_back(i);
  head_.assign(ns_, 0);
  r_.start_ns.assign(nn_, kNever);
  r_.finish_ns.assign(nn_, kNever);
  issue_.assign(nn_, kNever);
  running_.assign(ns_, -1);
  compute_end_.assign(ns_, kNever);
  return absl::OkStatus();
}

// Issues nodes whose host wait has finished (by time `t`). Issue times
// saturate just past the range, which NextEvent then refuses.
void EventLoop::AdvanceHost(int64_t t) {
  while (issued_ < nn_) {
    const int hw = g_.nodes[issued_].host_wait;
    int64_t at = host_t_;
    if (hw >= 0) {
      if (r_.finish_ns[hw] > t) break;
      at = std::max(at, r_.finish_ns[hw]);
    }
    issue_[issued_] = at;
    host_t_ = std::min(at + issue_ns_, kMaxStepNs + 1);
    ++issued_;
  }
}

// Starts, on every idle stream, its next node if it is issued and ready.
void EventLoop::StartReady(int64_t t) {
  for (int s = 0; s < ns_; ++s) {
    if (running_[s] >= 0 || head_[s] >= queue_[s].size()) continue;
    const int v = queue_[s][head_[s]];
    if (issue_[v] > t) continue;
    bool ready = true;
    for (int w : g_.nodes[v].waits) ready &= r_.finish_ns[w] <= t;
    if (!ready) continue;
    running_[s] = v;
    r_.start_ns[v] = t;
    ++head_[s];
    if (costs_[v].comm) {
      comm_.push_back({v, latency_ns_[v], work_units_[v]});
    } else {
      compute_end_[s] = t + latency_ns_[v];
    }
    if (StreamId(s).is_compute()) BlameGap(v, t);
  }
}

// Charges the compute stream's idle gap before node v (starting at t) to
// what v waited for last.
void EventLoop::BlameGap(int v, int64_t t) {
  const int64_t gap = t - r_.last_compute_end_ns;
  if (gap <= 0) return;
  int blame = -1;
  int64_t latest = -1;
  for (int w : g_.nodes[v].waits) {
    if (r_.finish_ns[w] > latest) {
      latest = r_.finish_ns[w];
      blame = w;
    }
  }
  if (issue_[v] >= latest || blame < 0) {
    r_.exposed_host_ns += gap;
    return;
  }
  const Node& b = g_.nodes[blame];
  if (b.stream == g_.stream_for(StreamClass::kAllGather) &&
      b.kind != NodeKind::kReduceScatter && b.kind != NodeKind::kAllReduce &&
      b.kind != NodeKind::kAccumulate) {
    r_.exposed_ag_ns += gap;
  } else {
    r_.exposed_rs_ns += gap;
  }
}

Status EventLoop::PastRange(int64_t t, int node) const {
  return absl::InvalidArgumentError(absl::StrCat(
      "simulator: the step passes ", kMaxStepNs / 1e9, " s of simulated time",
      node >= 0 ? " at " : "", node >= 0 ? g_.nodes[node].name : "",
      " (check the cluster's rates and the workload)"));
}

// The next time something completes, starts or is issued. Every candidate
// is > t unless something completes at t, so each pass of Run completes a
// node or advances time.
StatusOr<int64_t> EventLoop::NextEvent(int64_t t, int64_t per_ns) const {
  int64_t next = kNever;
  for (int s = 0; s < ns_; ++s) next = std::min(next, compute_end_[s]);
  for (const Active& a : comm_) {
    next = std::min(next, a.latency_left > 0 ? t + a.latency_left
                                             : t + (a.work_left + per_ns - 1) / per_ns);
  }
  if (issued_ < nn_) {
    const int hw = g_.nodes[issued_].host_wait;
    if (hw < 0 || r_.finish_ns[hw] <= t) next = std::min(next, std::max(t, host_t_));
  }
  int pending = -1;  // a node waiting for its issue time, for messages
  for (int s = 0; s < ns_; ++s) {
    if (running_[s] < 0 && head_[s] < queue_[s].size()) {
      const int v = queue_[s][head_[s]];
      if (issue_[v] > t && issue_[v] < kNever && issue_[v] < next) {
        next = issue_[v];
        pending = v;
      }
    }
  }
  if (next == kNever) {
    return absl::InternalError(absl::StrCat(
        "simulator: deadlock at t=", t * 1e-9, " s with ", nn_ - done_,
        " nodes left (policy ", g_.policy.name, ")"));
  }
  if (next > kMaxStepNs) {
    int at = pending;
    for (int s = 0; s < ns_ && at < 0; ++s) at = running_[s];
    return PastRange(next, at);
  }
  return next;
}

// Completes every node that ends at t.
void EventLoop::Complete(int64_t t) {
  for (int s = 0; s < ns_; ++s) {
    if (compute_end_[s] > t) continue;
    const int v = running_[s];
    r_.finish_ns[v] = compute_end_[s];
    if (StreamId(s).is_compute()) {
      r_.compute_busy_ns += r_.finish_ns[v] - r_.start_ns[v];
      r_.last_compute_end_ns = r_.finish_ns[v];
    }
    compute_end_[s] = kNever;
    running_[s] = -1;
    ++done_;
  }
  for (size_t k = 0; k < comm_.size();) {
    Active& a = comm_[k];
    if (a.latency_left == 0 && a.work_left == 0) {
      r_.finish_ns[a.node] = t;
      running_[g_.nodes[a.node].stream.index()] = -1;
      ++done_;
      comm_[k] = comm_.back();
      comm_.pop_back();
    } else {
      ++k;
    }
  }
}

StatusOr<EventLoopResult> EventLoop::Run() {
  int64_t t = 0;
  while (done_ < nn_) {
    AdvanceHost(t);
    StartReady(t);
    int64_t sharing = 0;
    for (const Active& a : comm_) sharing += a.latency_left == 0 && a.work_left > 0;
    const int64_t per_ns = sharing > 0 ? units_ / sharing : units_;  // exact
    BATON_ASSIGN_OR_RETURN(const int64_t next, NextEvent(t, per_ns));
    const int64_t dt = next - t;
    for (Active& a : comm_) {
      if (a.latency_left > 0) {
        a.latency_left = std::max<int64_t>(0, a.latency_left - dt);
      } else {
        a.work_left = std::max<int64_t>(0, a.work_left - dt * per_ns);
      }
    }
    t = next;
    Complete(t);
  }
  return std::move(r_);
}

}  // namespace

StatusOr<EventLoopResult> RunEventLoop(const StepGraph& graph,
                                       const std::vector<NodeCost>& costs,
                                       double host_issue_us) {
  if (costs.size() != graph.nodes.size()) {
    return absl::InternalError("simulator: one cost per node is needed");
  }
  EventLoop loop(graph, costs);
  BATON_RETURN_IF_ERROR(loop.Init(host_issue_us));
  return loop.Run();
}

}  // namespace baton::sim
