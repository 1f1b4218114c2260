// Timelines of executed steps, per rank and stream, written as a trace that
// Perfetto (ui.perfetto.dev) and chrome://tracing open: the JSON
// trace-event format, one process per rank, one track (thread) per stream
// (compute, all-gather, reduce-scatter, or one comm stream; under offload
// host-copy and host; under ZenFlow also host-update, where its CAST runs,
// optim/zenflow_state.h), with slices
//   wait     a stream blocked on another stream's event before a node
//   compute  forward / recompute / backward / optimizer / cast / accumulate
//   copy     the collectives, device copies and host-link copies (D2H,
//            H2D) (bytes moved between ranks, buffers or memories: on
//            inproc, copies through shared memory)
// named after the node (StepGraph Node::name) with its step in args; and
// the spans compute nodes record of their own work (WorkSpanSink,
// ComputeContext::spans: e.g. under tp_comm_overlap each chunk transfer
// of a decomposed tensor collective on the tensor track, category "copy",
// and each chunk GEMM on the compute track, "compute"; named "<what>
// <chunk>", with step and chunk in args).
//
// How: the executor calls a recorder (ExecutorOptions::observer) around
// every node; the recorder enqueues a host function on the node's stream
// that reads the host's steady clock when the stream reaches it. On a host
// stream that is when the stream's thread gets there; on a CUDA stream it is
// when the preceding GPU work finished and the driver ran the callback (a
// host callback per point: it adds its latency to each node, so a CUDA trace
// shows the split of a step, not its exact speed).
//
// Thread safety: each rank's recorder is driven by that rank's issuing
// thread; the streams write timestamps concurrently. Json / Write after
// every traced stream has been synchronized.
#ifndef BATON_SCHEDULER_STEP_TRACE_H_
#define BATON_SCHEDULER_STEP_TRACE_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "baton/runtime/status.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/step_graph.h"

namespace baton {
class TraceJsonWriter;
}  // namespace baton

namespace baton::scheduler {

class StepTrace {
 public:
  StepTrace();
  ~StepTrace();

  // The observer for rank `rank`'s executor running `graph` (which must
  // outlive this StepTrace). Owned by the StepTrace. Call once per rank,
  // before the ranks run (not thread-safe against itself).
  NodeObserver* ForRank(int rank, const StepGraph& graph);

  // The trace as one JSON object {"traceEvents": [...], ...}.
  std::string Json() const;
  // Json() into `path` (runtime/output_file.h); Unavailable naming the path
  // if it cannot be written.
  Status Write(const std::string& path) const;

  // The pipeline bubble of step `step` on each traced rank that ran
  // compute in it, as the simulator measures it (sim/parallel_sim.h): the
  // compute stream's idle time in the pipeline's span, from the first
  // forward of any traced rank to the last backward (or weight pass) of
  // any, as a fraction of that span (the optimizer and casts after it are
  // outside). One clock: the ranks of one StepTrace (inproc); with one
  // rank traced the span is its own. Call after the streams were
  // synchronized. Ranks with no compute in that step are left out.
  std::map<int, double> ComputeIdleFraction(int64_t step) const;

  // The communication of stream class `source` (e.g. kTensor: the tensor-
  // parallel all-reduce nodes) exposed on the compute stream in step
  // `step`, per traced rank, in ms: the time the compute stream waited, before
  // its nodes, on events of that stream's nodes (a wait on several streams
  // is counted when one of them is `source`). Communication run inside
  // compute nodes (a graph's fused collectives) is part of the node, not
  // counted here. Ranks with no compute in that step are left out. Call
  // after the streams were synchronized.
  std::map<int, double> ExposedWaitMs(int64_t step, StreamClass source) const;

 private:
  void AppendTo(TraceJsonWriter& trace) const;  // every rank's recorder
  class Recorder;
  const std::chrono::steady_clock::time_point origin_;
  std::map<int, std::unique_ptr<Recorder>> ranks_;
};

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_STEP_TRACE_H_
