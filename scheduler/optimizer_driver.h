// The optimizer hook for optimizers that run graph nodes themselves.
//
// Most trainers give the executor one optimizer callback per bucket
// (StepCallbacks::optimizer). An optimizer that needs more of the step than
// that (ZenFlow: column norms during the backward, a device update of the
// selected columns, a host update that runs steps behind, an upload of the
// rest; optim/zenflow_driver.h) is an OptimizerDriver: it takes over the
// work of the graph's nodes it owns, may issue a node on a stream of its
// own, and may add waits. The scheduler knows optimizers only through this
// hook and the callback; the kernels they run live above it (optim/).
//
// The executor calls a driver on its issuing thread, in issue order, for
// every node i of step `step` (Executor::PreNode / RunWork / PostNode):
//   BeginNode      first; returns where the node's work goes (the observer's
//                  "before work" and "after work" points, the trace, the
//                  delay injection and the work itself): null for the
//                  node's stream (NodeStream).
//   BeforeWaits    on the node's stream, before the graph's waits.
//   AfterWaits     on the node's stream, after them.
//   Run            the node's work; false: not the driver's, the executor
//                  runs its own. Also called, with `init` set, for the cast
//                  nodes of InitParameters (no BeginNode then).
//   AfterNode      on the node's stream, after its event is recorded.
//   EndNode        last, with the status of the node's issue (called even
//                  when an earlier call failed, so work the driver started
//                  can end).
// NodeStream(i, step) is the stream node i is issued on (null: its graph
// stream). Synchronize waits for whatever the driver runs outside the
// executor's streams and returns its first error. CanCapture says whether
// a step can be captured as a CUDA graph (FailedPrecondition naming why
// not). The executor destroys its driver first, after Synchronize.
//
// Thread safety: one thread drives a driver (the executor's).
#ifndef BATON_SCHEDULER_OPTIMIZER_DRIVER_H_
#define BATON_SCHEDULER_OPTIMIZER_DRIVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "baton/comm/communicator.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler {

// What an executor lends its driver; valid while the executor lives.
class ExecutorParts {
 public:
  virtual ~ExecutorParts() = default;
  virtual const StepGraph& graph() const = 0;
  virtual Device& device() = 0;
  // Memory of graph buffer `buffer` (persistent or planned).
  virtual void* BufferData(int buffer) = 0;
  // The graph's buffer of `role` for `bucket`, or -1.
  virtual int BucketBuffer(int bucket, BufferRole role) const = 0;
  virtual Stream& stream(StreamId s) = 0;
  // Every stream of the executor (to fail them all from outside a stream).
  virtual std::vector<Stream*> streams() = 0;
  // The communicator of a mesh group the graph uses.
  virtual Communicator& CommFor(MeshGroup group) = 0;
  virtual int rank() const = 0;  // in the world
  virtual int shard_rank() const = 0;
  // The gradient scale the optimizer applies once: 1 / (ranks x micro-steps).
  virtual double grad_scale() const = 0;
};

class OptimizerDriver {
 public:
  virtual ~OptimizerDriver() = default;

  // Once, when the executor is created (its buffers allocated, zeroed).
  virtual Status Init(ExecutorParts& parts) = 0;

  virtual Stream* NodeStream(int i, int64_t step) = 0;
  virtual Stream* BeginNode(int i, int64_t step) = 0;
  virtual Status BeforeWaits(int i, int64_t step, Stream& s) = 0;
  virtual Status AfterWaits(int i, int64_t step, Stream& s) = 0;
  virtual StatusOr<bool> Run(int i, int64_t step, bool init, Stream& s) = 0;
  virtual Status AfterNode(int i, int64_t step, Stream& s) = 0;
  virtual void EndNode(int i, int64_t step, const Status& issue) = 0;

  virtual Status Synchronize() = 0;
  virtual Status CanCapture() const = 0;
};

// Makes one driver per executor (ExecutorOptions::optimizer_driver).
using OptimizerDriverFactory = std::function<std::unique_ptr<OptimizerDriver>()>;

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_OPTIMIZER_DRIVER_H_
