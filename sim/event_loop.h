// The simulator's clock: a discrete-event run of one rank's step graph over
// its streams, given what each node costs (sim/node_cost.h).
//
//   order      each stream runs its nodes in issue order; a node starts
//              when its stream is free, its Node::waits have finished and
//              the host has issued it;
//   host       issues one node every host_issue_us; a host-blocking limiter
//              (Node::host_wait) stalls it until that node finishes;
//   links      collectives running at the same time share the links
//              equally: each advances its remaining work by dt / k;
//   clock      integer nanoseconds (each node's cost rounded to 1 ns), so
//              time always advances and long steps are as exact as short
//              ones. Remaining work of a collective is counted in
//              1/units ns at full link bandwidth, units = lcm(1..comm
//              streams), so the sharing is exact;
//   blame      every idle gap of the compute stream is charged to what it
//              waited for: an all-gather (exposed_ag), a reduction or an
//              accumulation (exposed_rs), or the host (exposed_host); in
//              parallel graphs a tensor collective (exposed_tp), a
//              pipeline receive (exposed_pp: the bubble) or an expert
//              dispatch / combine (exposed_ep).
// A node cost that is not finite, a step longer than 1e6 s, or a graph that
// cannot finish is refused (InvalidArgument naming the node; Internal for
// a deadlock).
//
// Several graphs run together (RunStagesEventLoop): the stages of a
// pipeline (scheduler/parallel_graph.h), each on its own GPU with its own
// streams, host and links, started together; a kRecv node of one waits,
// besides its own waits, for the kSend of its peer stage with the same tag
// (a receive finishes when its message has arrived). So the pipeline's
// bubble is what the stages' order and costs make of it, not a formula.
//
// Plain function; thread-safe.
#ifndef BATON_SIM_EVENT_LOOP_H_
#define BATON_SIM_EVENT_LOOP_H_

#include <cstdint>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/step_graph.h"
#include "baton/sim/node_cost.h"

namespace baton::sim {

struct EventLoopResult {
  std::vector<int64_t> start_ns, finish_ns;  // per node
  int64_t compute_busy_ns = 0;      // busy time of the compute stream
  int64_t last_compute_end_ns = 0;  // end of its last node
  int64_t exposed_ag_ns = 0;
  int64_t exposed_rs_ns = 0;
  int64_t exposed_host_ns = 0;
  // Parallel graphs: ... on a tensor collective, on a pipeline receive.
  int64_t exposed_tp_ns = 0;
  int64_t exposed_pp_ns = 0;
  // ... on an expert dispatch or combine (MoE graphs).
  int64_t exposed_ep_ns = 0;
};

// The most simulated time of one step.
inline constexpr int64_t kMaxStepNs = 1'000'000'000'000'000;  // 1e6 s

// Runs `graph` with `costs` (one per node) and a host issuing a node every
// `host_issue_us`.
StatusOr<EventLoopResult> RunEventLoop(const scheduler::StepGraph& graph,
                                       const std::vector<NodeCost>& costs,
                                       double host_issue_us);

// Runs `graphs` together (the stages of one pipeline), with costs[i] for
// graphs[i]; one result per graph, on one clock. Internal also for a kRecv
// with no matching kSend on its peer stage.
StatusOr<std::vector<EventLoopResult>> RunStagesEventLoop(
    const std::vector<const scheduler::StepGraph*>& graphs,
    const std::vector<std::vector<NodeCost>>& costs, double host_issue_us);

}  // namespace baton::sim

#endif  // BATON_SIM_EVENT_LOOP_H_
