#include "baton/sim/event_loop.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <utility>
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

// One or more stages' graphs on one clock. Nodes, streams and per-stage
// state are flattened: stage s's node i is node off_[s] + i, its stream j
// stream soff_[s] + j. With one stage every step is the single-graph loop.
class EventLoop {
 public:
  EventLoop(const std::vector<const StepGraph*>& graphs,
            const std::vector<std::vector<NodeCost>>& costs)
      : graphs_(graphs), costs_(costs), np_(static_cast<int>(graphs.size())) {}

  Status Init(double host_issue_us);
  StatusOr<std::vector<EventLoopResult>> Run();

 private:
  struct Active {
    int node;              // global
    int64_t latency_left;  // ns
    int64_t work_left;     // 1/units_ ns at full bandwidth
  };

  const Node& node(int v) const { return graphs_[stage_of_[v]]->nodes[v - off_[stage_of_[v]]]; }
  const NodeCost& cost(int v) const { return costs_[stage_of_[v]][v - off_[stage_of_[v]]]; }
  void AdvanceHost(int p, int64_t t);
  void StartReady(int64_t t);
  void BlameGap(int v, int64_t t);
  StatusOr<int64_t> NextEvent(int64_t t, const std::vector<int64_t>& per_ns) const;
  void Complete(int64_t t);
  Status PastRange(int64_t t, int node) const;
  Status LinkMessages();

  const std::vector<const StepGraph*>& graphs_;
  const std::vector<std::vector<NodeCost>>& costs_;
  const int np_;
  int nn_ = 0, ns_ = 0;
  std::vector<int> off_, soff_;            // per stage: first node, first stream
  std::vector<int> stage_of_;              // per node
  std::vector<int> stream_of_;             // per node, global stream
  std::vector<int> stream_stage_;          // per global stream
  std::vector<bool> stream_compute_;       // per global stream
  std::vector<std::vector<int>> waits_;    // per node, global ids
  int64_t units_ = 1;  // lcm(1..number of comm streams of a stage)
  int64_t issue_ns_ = 0;
  std::vector<int64_t> latency_ns_, work_units_;
  std::vector<std::vector<int>> queue_;  // per stream, issue order
  std::vector<size_t> head_;
  std::vector<int64_t> issue_;
  std::vector<int> issued_;        // per stage, local index
  std::vector<int64_t> host_t_;    // per stage
  std::vector<int> running_;            // per stream, -1: idle
  std::vector<int64_t> compute_end_;    // per stream, non-comm nodes
  // Running non-comm nodes by end time, (end, stream); an entry is stale
  // once its stream's compute_end_ differs.
  std::priority_queue<std::pair<int64_t, int>, std::vector<std::pair<int64_t, int>>,
                      std::greater<>> ends_;
  // Streams whose head may start: idle, and their head issued later or its
  // waits just finished. Only these are looked at (many stages have many
  // streams, most of them blocked at any time).
  std::vector<char> dirty_;
  std::vector<int> dirty_list_;
  std::vector<std::vector<int>> waiters_;  // per node: nodes that wait for it
  // Node v has finished: its stream is free, its waiters may be ready.
  void Finished(int v) {
    MarkDirty(stream_of_[v]);
    for (int w : waiters_[v]) MarkDirty(stream_of_[w]);
  }
  void MarkDirty(int s) {
    if (!dirty_[s]) {
      dirty_[s] = 1;
      dirty_list_.push_back(s);
    }
  }
  std::vector<std::vector<Active>> comm_;  // per stage
  int done_ = 0;
  std::vector<int64_t> start_ns_, finish_ns_;
  std::vector<EventLoopResult> r_;
};

// Each receive also waits for its peer stage's send of the same tag.
Status EventLoop::LinkMessages() {
  std::vector<std::vector<std::pair<int64_t, int>>> sends(np_);  // per stage: (tag, node)
  for (int v = 0; v < nn_; ++v) {
    if (node(v).kind == NodeKind::kSend) sends[stage_of_[v]].push_back({node(v).tag, v});
  }
  for (auto& list : sends) std::sort(list.begin(), list.end());
  for (int v = 0; v < nn_; ++v) {
    const Node& n = node(v);
    if (n.kind != NodeKind::kRecv) continue;
    const int peer = n.peer;
    int found = -1;
    if (peer >= 0 && peer < np_) {
      auto it = std::lower_bound(sends[peer].begin(), sends[peer].end(),
                                 std::make_pair(n.tag, -1));
      if (it != sends[peer].end() && it->first == n.tag) found = it->second;
    }
    if (found < 0) {
      return absl::InternalError(absl::StrCat(
          "simulator: ", n.name, " on stage ", stage_of_[v], " has no matching send on stage ",
          peer));
    }
    waits_[v].push_back(found);
  }
  return absl::OkStatus();
}

Status EventLoop::Init(double host_issue_us) {
  off_.assign(np_ + 1, 0);
  soff_.assign(np_ + 1, 0);
  int comm_streams = 0;
  for (int p = 0; p < np_; ++p) {
    const StepGraph& g = *graphs_[p];
    off_[p + 1] = off_[p] + static_cast<int>(g.nodes.size());
    soff_[p + 1] = soff_[p] + g.num_streams;
    std::vector<bool> comm_stream(g.num_streams, false);
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      if (costs_[p][i].comm) comm_stream[g.nodes[i].stream.index()] = true;
    }
    comm_streams = std::max(
        comm_streams, static_cast<int>(std::count(comm_stream.begin(), comm_stream.end(), true)));
  }
  nn_ = off_[np_];
  ns_ = soff_[np_];
  for (int k = 2; k <= comm_streams; ++k) units_ = std::lcm(units_, static_cast<int64_t>(k));
  if (units_ > kNever / kMaxStepNs) {
    return absl::InternalError(absl::StrCat(
        "simulator: too many communication streams to share links exactly (", ns_,
        " streams)"));
  }
  stage_of_.resize(nn_);
  stream_of_.resize(nn_);
  waits_.resize(nn_);
  stream_stage_.resize(ns_);
  stream_compute_.resize(ns_);
  for (int p = 0; p < np_; ++p) {
    for (int j = 0; j < graphs_[p]->num_streams; ++j) {
      stream_stage_[soff_[p] + j] = p;
      stream_compute_[soff_[p] + j] = StreamId(j).is_compute();
    }
    for (int i = off_[p]; i < off_[p + 1]; ++i) {
      stage_of_[i] = p;
      const Node& n = graphs_[p]->nodes[i - off_[p]];
      stream_of_[i] = soff_[p] + n.stream.index();
      for (int w : n.waits) waits_[i].push_back(off_[p] + w);
    }
  }
  BATON_RETURN_IF_ERROR(LinkMessages());
  latency_ns_.resize(nn_);
  work_units_.resize(nn_);
  for (int i = 0; i < nn_; ++i) {
    BATON_ASSIGN_OR_RETURN(latency_ns_[i], ToNs(cost(i).latency_s, node(i).name));
    BATON_ASSIGN_OR_RETURN(const int64_t work, ToNs(cost(i).work_s, node(i).name));
    work_units_[i] = work * units_;
  }
  BATON_ASSIGN_OR_RETURN(issue_ns_, ToNs(host_issue_us * 1e-6, "issuing a node"));
  queue_.resize(ns_);
  for (int i = 0; i < nn_; ++i) queue_[stream_of_[i]].push_back(i);
  head_.assign(ns_, 0);
  start_ns_.assign(nn_, kNever);
  finish_ns_.assign(nn_, kNever);
  issue_.assign(nn_, kNever);
  issued_.assign(np_, 0);
  host_t_.assign(np_, 0);
  running_.assign(ns_, -1);
  compute_end_.assign(ns_, kNever);
  dirty_.assign(ns_, 0);
  for (int st = 0; st < ns_; ++st) MarkDirty(st);
  waiters_.assign(nn_, {});
  for (int v = 0; v < nn_; ++v) {
    for (int w : waits_[v]) waiters_[w].push_back(v);
  }
  comm_.resize(np_);
  r_.resize(np_);
  return absl::OkStatus();
}

// Issues stage p's nodes whose host wait has finished (by time `t`). Issue
// times saturate just past the range, which NextEvent then refuses.
void EventLoop::AdvanceHost(int p, int64_t t) {
  const int n = off_[p + 1] - off_[p];
  while (issued_[p] < n) {
    const int v = off_[p] + issued_[p];
    const int hw = node(v).host_wait;
    int64_t at = host_t_[p];
    if (hw >= 0) {
      const int w = off_[p] + hw;
      if (finish_ns_[w] > t) break;
      at = std::max(at, finish_ns_[w]);
    }
    issue_[v] = at;
    host_t_[p] = std::min(at + issue_ns_, kMaxStepNs + 1);
    ++issued_[p];
    MarkDirty(stream_of_[v]);
  }
}

// Starts, on every idle stream, its next node if it is issued and ready.
void EventLoop::StartReady(int64_t t) {
  std::sort(dirty_list_.begin(), dirty_list_.end());
  std::vector<int> keep;
  for (int s : dirty_list_) {
    dirty_[s] = 0;
    if (running_[s] >= 0 || head_[s] >= queue_[s].size()) continue;
    const int v = queue_[s][head_[s]];
    if (issue_[v] > t) {
      // Looked at again until its issue time has come (not yet issued: its
      // issuing marks it).
      if (issue_[v] < kNever) keep.push_back(s);
      continue;
    }
    bool ready = true;
    for (int w : waits_[v]) ready &= finish_ns_[w] <= t;
    if (!ready) continue;  // a finishing wait marks it again
    running_[s] = v;
    start_ns_[v] = t;
    ++head_[s];
    if (cost(v).comm) {
      comm_[stage_of_[v]].push_back({v, latency_ns_[v], work_units_[v]});
    } else {
      compute_end_[s] = t + latency_ns_[v];
      ends_.push({compute_end_[s], s});
    }
    if (stream_compute_[s]) BlameGap(v, t);
  }
  dirty_list_.clear();
  for (int s : keep) MarkDirty(s);
}

// Charges the compute stream's idle gap before node v (starting at t) to
// what v waited for last.
void EventLoop::BlameGap(int v, int64_t t) {
  EventLoopResult& r = r_[stage_of_[v]];
  const int64_t gap = t - r.last_compute_end_ns;
  if (gap <= 0) return;
  int blame = -1;
  int64_t latest = -1;
  for (int w : waits_[v]) {
    if (finish_ns_[w] > latest) {
      latest = finish_ns_[w];
      blame = w;
    }
  }
  if (issue_[v] >= latest || blame < 0) {
    r.exposed_host_ns += gap;
    return;
  }
  const Node& b = node(blame);
  const StepGraph& g = *graphs_[stage_of_[blame]];
  if (g.parallel() && b.kind == NodeKind::kRecv) {
    r.exposed_pp_ns += gap;
  } else if (b.kind == NodeKind::kDispatch || b.kind == NodeKind::kCombine) {
    r.exposed_ep_ns += gap;
  } else if (g.parallel() && b.stream == g.stream_for(StreamClass::kTensor)) {
    r.exposed_tp_ns += gap;
  } else if (b.stream == g.stream_for(StreamClass::kAllGather) &&
      b.kind != NodeKind::kReduceScatter && b.kind != NodeKind::kAllReduce &&
      b.kind != NodeKind::kAccumulate) {
    r.exposed_ag_ns += gap;
  } else {
    r.exposed_rs_ns += gap;
  }
}

Status EventLoop::PastRange(int64_t t, int node_id) const {
  return absl::InvalidArgumentError(absl::StrCat(
      "simulator: the step passes ", kMaxStepNs / 1e9, " s of simulated time",
      node_id >= 0 ? " at " : "", node_id >= 0 ? node(node_id).name : "",
      " (check the cluster's rates and the workload)"));
}

// The next time something completes, starts or is issued. Every candidate
// is > t unless something completes at t, so each pass of Run completes a
// node or advances time.
StatusOr<int64_t> EventLoop::NextEvent(int64_t t, const std::vector<int64_t>& per_ns) const {
  int64_t next = kNever;
  if (!ends_.empty()) next = ends_.top().first;  // stale entries are never early
  for (int p = 0; p < np_; ++p) {
    for (const Active& a : comm_[p]) {
      next = std::min(next, a.latency_left > 0
                                ? t + a.latency_left
                                : t + (a.work_left + per_ns[p] - 1) / per_ns[p]);
    }
  }
  for (int p = 0; p < np_; ++p) {
    if (issued_[p] < off_[p + 1] - off_[p]) {
      const int hw = node(off_[p] + issued_[p]).host_wait;
      if (hw < 0 || finish_ns_[off_[p] + hw] <= t) next = std::min(next, std::max(t, host_t_[p]));
    }
  }
  int pending = -1;  // a node waiting for its issue time, for messages
  for (int s : dirty_list_) {
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
        " nodes left (policy ", graphs_[0]->policy.name, ")"));
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
  while (!ends_.empty() && ends_.top().first <= t) {
    const auto [end, s] = ends_.top();
    ends_.pop();
    if (compute_end_[s] != end || running_[s] < 0) continue;  // stale
    const int v = running_[s];
    finish_ns_[v] = compute_end_[s];
    if (stream_compute_[s]) {
      EventLoopResult& r = r_[stream_stage_[s]];
      r.compute_busy_ns += finish_ns_[v] - start_ns_[v];
      r.last_compute_end_ns = finish_ns_[v];
    }
    compute_end_[s] = kNever;
    running_[s] = -1;
    ++done_;
    Finished(v);
  }
  for (int p = 0; p < np_; ++p) {
    std::vector<Active>& comm = comm_[p];
    for (size_t k = 0; k < comm.size();) {
      Active& a = comm[k];
      if (a.latency_left == 0 && a.work_left == 0) {
        finish_ns_[a.node] = t;
        running_[stream_of_[a.node]] = -1;
        ++done_;
        Finished(a.node);
        comm[k] = comm.back();
        comm.pop_back();
      } else {
        ++k;
      }
    }
  }
}

StatusOr<std::vector<EventLoopResult>> EventLoop::Run() {
  int64_t t = 0;
  std::vector<int64_t> per_ns(np_, units_);
  while (done_ < nn_) {
    for (int p = 0; p < np_; ++p) AdvanceHost(p, t);
    StartReady(t);
    for (int p = 0; p < np_; ++p) {
      int64_t sharing = 0;
      for (const Active& a : comm_[p]) sharing += a.latency_left == 0 && a.work_left > 0;
      per_ns[p] = sharing > 0 ? units_ / sharing : units_;  // exact
    }
    BATON_ASSIGN_OR_RETURN(const int64_t next, NextEvent(t, per_ns));
    const int64_t dt = next - t;
    for (int p = 0; p < np_; ++p) {
      for (Active& a : comm_[p]) {
        if (a.latency_left > 0) {
          a.latency_left = std::max<int64_t>(0, a.latency_left - dt);
        } else {
          a.work_left = std::max<int64_t>(0, a.work_left - dt * per_ns[p]);
        }
      }
    }
    t = next;
    Complete(t);
  }
  for (int p = 0; p < np_; ++p) {
    r_[p].start_ns.assign(start_ns_.begin() + off_[p], start_ns_.begin() + off_[p + 1]);
    r_[p].finish_ns.assign(finish_ns_.begin() + off_[p], finish_ns_.begin() + off_[p + 1]);
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
  const std::vector<const StepGraph*> graphs = {&graph};
  const std::vector<std::vector<NodeCost>> all = {costs};
  EventLoop loop(graphs, all);
  BATON_RETURN_IF_ERROR(loop.Init(host_issue_us));
  BATON_ASSIGN_OR_RETURN(std::vector<EventLoopResult> r, loop.Run());
  return std::move(r[0]);
}

StatusOr<std::vector<EventLoopResult>> RunStagesEventLoop(
    const std::vector<const StepGraph*>& graphs,
    const std::vector<std::vector<NodeCost>>& costs, double host_issue_us) {
  if (graphs.empty() || costs.size() != graphs.size()) {
    return absl::InternalError("simulator: one cost list per stage is needed");
  }
  for (size_t p = 0; p < graphs.size(); ++p) {
    if (costs[p].size() != graphs[p]->nodes.size()) {
      return absl::InternalError("simulator: one cost per node is needed");
    }
  }
  EventLoop loop(graphs, costs);
  BATON_RETURN_IF_ERROR(loop.Init(host_issue_us));
  return loop.Run();
}

}  // namespace baton::sim
