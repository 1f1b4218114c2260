// Pictures of a simulated step: a Perfetto / chrome://tracing JSON timeline
// and an SVG of one step.
#ifndef BATON_SIM_REPORT_H_
#define BATON_SIM_REPORT_H_

#include <string>

#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/step_graph.h"
#include "nlohmann/json.hpp"
#include "baton/sim/simulator.h"

namespace baton::sim {

// OK when every figure of `result` is finite and the step time positive;
// InvalidArgument naming the first that is not (a step that rounds to 0 ns
// on an absurdly fast cluster would print "inf% MFU"). Callers that print
// or serialize a result check it first.
Status ValidateResult(const SimResult& result);

// {"traceEvents": [...]}: process 0 is the simulated rank (all ranks are
// the same), one thread (track) per stream with one complete event ("X")
// per node, and a counter track "memory" with the bytes of live arena
// buffers plus persistent state. `result` needs its timeline.
std::string TraceJson(const scheduler::StepGraph& graph, const SimResult& result);

// One step: a lane per stream, compute / all-gather / reduce-scatter in
// distinct colours, the compute stream's idle gaps marked in red, a time
// axis in seconds, and a title with step time, MFU and exposed comm.
std::string StepSvg(const scheduler::StepGraph& graph, const SimResult& result,
                    const std::string& title);

// Parallel results (SimResult::stages): one line for the bubble, then a
// row per pipeline stage (blocks, busy compute, bubble, micro-batches
// held, memory and its parts, fits).
std::string StagesText(const SimResult& result);
// The same as a JSON object: {"bubble", "stages": [{...}]}.
nlohmann::json StagesJson(const SimResult& result);

// One pipeline as a trace: a process per stage ("stage s", its ranks all
// alike), a thread per stream. `result` needs its timeline.
std::string PipelineTraceJson(const scheduler::ParallelStep& step, const SimResult& result);
// One pipeline as an SVG: per stage a compute lane (forward, backward,
// weight passes, its idle gaps in red) and a communication lane (tensor,
// pipeline and data collectives).
std::string PipelineSvg(const scheduler::ParallelStep& step, const SimResult& result,
                        const std::string& title);

}  // namespace baton::sim

#endif  // BATON_SIM_REPORT_H_
