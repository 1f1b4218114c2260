// ZenFlow on the executor: the OptimizerDriver (scheduler/optimizer_driver.h)
// that runs ZenFlow's nodes of a step graph (Policy::zenflow; the nodes and
// their hazards: optim/zenflow_state.h) with the state and kernels of
// optim/zenflow_state.h and ops/.
//
// It runs the optimizer itself (its device path on the selected columns,
// its host path on the rest) with the AdamW configuration it is made with;
// StepCallbacks::optimizer is not called. Its window-end updates (CAST
// nodes) run on an update thread of its own, released by a host-update
// stream outside the executor's step barrier (Policy::zenflow_staleness).
// On an update step the observer's "before waits" point sees that stream;
// its "before work" and "after work" points, the trace and the delay
// injection see the update thread's work (DeferredWork). CAST on other
// steps sees the host-update stream at every point. The same calls on
// either kind of device (ops/zenflow_stream.h): CUDA kernels and pinned
// staging on a GPU, host work on the host runtime. A step cannot be
// captured as a CUDA graph (its work differs from step to step).
//
//   ExecutorOptions o;
//   o.optimizer_driver = optim::ZenFlowDriverFactory(adamw);
//   auto executor = Executor::Create(graph, device, comm, o);
//
// Thread safety: as OptimizerDriver (the executor's thread), plus its own
// update thread.
#ifndef BATON_OPTIM_ZENFLOW_DRIVER_H_
#define BATON_OPTIM_ZENFLOW_DRIVER_H_

#include "baton/ops/adamw.h"
#include "baton/scheduler/optimizer_driver.h"

namespace baton::optim {

// A factory for ExecutorOptions::optimizer_driver: each driver it makes
// runs ZenFlow's nodes with AdamW configured as `adamw`. Its Init is
// InvalidArgument unless the graph's policy uses zenflow on a sharded
// layout, FailedPrecondition when the device cannot order work with stream
// values (runtime/device.h rule 8).
scheduler::OptimizerDriverFactory ZenFlowDriverFactory(const ops::AdamWConfig& adamw);

}  // namespace baton::optim

#endif  // BATON_OPTIM_ZENFLOW_DRIVER_H_
