// The executor's half of a checkpoint save (scheduler/checkpoint.h): the
// checkpoint stream, the "copied" event, the host staging of this rank's
// share of the state, and the writer thread. Internal to the executor.
//
// Issue enqueues, on the checkpoint stream, the broadcast of the save's
// nonce (rank 0 draws it), waits on `after` (the last step's stream
// events), the copies of the plan's spans into staging, and records
// copied(); then starts the writer job, which waits for that event on its
// own thread. Nothing blocks the calling thread except a save still being
// written (Issue waits for it first).
//
// Thread safety: one thread (the executor's) calls it; the writer thread
// only reads the staging after copied() completed.
#ifndef BATON_SCHEDULER_CHECKPOINT_SAVER_H_
#define BATON_SCHEDULER_CHECKPOINT_SAVER_H_

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "baton/comm/communicator.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/checkpoint.h"
#include "baton/scheduler/checkpoint_io.h"
#include "baton/scheduler/checkpoint_plan.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler {

class CheckpointSaver {
 public:
  // Plans this rank's share of `graph`'s state and allocates its staging.
  static StatusOr<std::unique_ptr<CheckpointSaver>> Create(const StepGraph& graph,
                                                           Device& device, int rank);
  ~CheckpointSaver();  // lets the running job finish

  // Waits for the previous save (its error, sticky, is returned and nothing
  // is issued), then issues this one (see above). `buffer(b)` is the memory
  // of graph buffer b.
  Status Issue(const SaveOptions& options, int64_t step, Communicator& comm,
               const std::vector<Event*>& after, const std::function<void*(int)>& buffer,
               std::chrono::steady_clock::time_point called);
  // Recorded after the copies of the last Issue (never recorded before).
  Event& copied() { return *copied_; }
  // Blocks until the copies of the last Issue are done.
  Status WaitCopies();
  // Blocks until the writer is done; the last save's status and stats.
  Status Wait(SaveStats* stats);

 private:
  CheckpointSaver(const StepGraph& graph, int rank) : graph_(graph), rank_(rank) {}

  const StepGraph& graph_;
  const int rank_;
  std::vector<CheckpointParam> params_;
  RankSavePlan plan_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> copied_;
  DeviceBuffer staging_;     // host (pinned on CUDA): nonce word, then the plan's bytes
  DeviceBuffer nonce_dev_;   // the broadcast's buffer (device memory)
  bool issued_ = false;
  // Last: destroyed first, so its job ends while the above still exist.
  std::unique_ptr<SaveWriter> writer_;
};

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_CHECKPOINT_SAVER_H_
