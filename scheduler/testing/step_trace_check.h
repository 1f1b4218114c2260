// Test support: the step trace of a toy run (scheduler/step_trace.h)
// checked against its graph.
// Two inproc ranks run two steps of the toy model with a recorder each; the
// trace has every node of every step once, on its stream's track, slices of
// one track never overlap, and a node that waits on another stream starts
// after that node ended.
// Under zero_offload also the host-copy and host streams; under ZenFlow its
// CAST on the host-update track.
#ifndef BATON_SCHEDULER_TESTING_STEP_TRACE_CHECK_H_
#define BATON_SCHEDULER_TESTING_STEP_TRACE_CHECK_H_

#include <string>

#include "baton/scheduler/executor.h"

namespace baton::scheduler::testing {

// Runs preset `preset` (f32 parameters) on the "micro" model, 2 inproc
// ranks, 2 steps, with `base` options and a StepTrace recorder per rank,
// and checks the trace with gtest assertions (fails the current test).
void CheckStepTraceOfToyRun(const std::string& preset, const ExecutorOptions& base);

}  // namespace baton::scheduler::testing

#endif  // BATON_SCHEDULER_TESTING_STEP_TRACE_CHECK_H_
