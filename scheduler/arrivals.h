// Stragglers (issue 38): when each rank reached each collective of a step,
// the arrival skew and the slowest rank per collective.
//
// A rank's arrival at a collective is when its stream reached it (the
// flight recorder's start time, comm/flight_recorder.h: the host stream's
// worker on inproc and ucx, a timing event on the GPU on nccl with
// CommConfig::device_arrivals), else when the host issued it (inproc's
// event protocol; nccl without device arrivals). Arrivals are host-clock
// times (absl::GetCurrentTimeNanos): exact between the processes of one
// machine, as good as the clock synchronization (NTP, PTP) across machines.
//
// After a step has completed on every rank's streams (Executor::
// Synchronize), every rank calls Collect(step): one all-gather of every
// rank's arrivals at the step's collectives (8 bytes per rank and
// collective, tag kArrivalsTag, in `device`'s memory) over `comm`, then
// every rank computes the same StepArrivals. A collective over a mesh
// group is measured within each group (ranks of other groups run their
// own copy of it) and reported for the group with the largest skew.
//
// The simulator's straggler input (sim/cluster.h straggler_cv) is the
// coefficient of variation of one rank's compute time per step; every rank
// waits for the slowest, so a step's waiting time is cv x compute x
// E[max of N standard normals]. StepArrivals::straggler_ms is that waiting
// time as measured (the mean rank's wait for the last arrival, summed over
// the step's collectives); examples/train_tiny --arrivals turns it into
// straggler_cv for `simulate --cluster-file`.
//
// Not thread-safe: the thread that drives the executor calls it.
#ifndef BATON_SCHEDULER_ARRIVALS_H_
#define BATON_SCHEDULER_ARRIVALS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "baton/comm/communicator.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/schedule_check.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler {

struct CollectiveArrival {
  ScheduleEntry entry;
  int ranks = 0;         // ranks whose arrival was recorded
  double skew_ms = 0;    // last minus first arrival (in its worst group)
  int slowest = -1;      // the world rank that arrived last there
  double wait_ms = 0;    // mean over ranks of (last arrival - own arrival)
};

struct StepArrivals {
  int64_t step = 0;
  std::vector<CollectiveArrival> collectives;  // those recorded, node order
  double max_skew_ms = 0;
  int max_skew = -1;  // index into collectives
  double mean_skew_ms = 0;
  // How long the mean rank waited for later ranks in this step.
  double straggler_ms = 0;
  std::vector<int> slowest_count;  // per world rank: collectives it was last at
  int slowest_rank = -1;           // the rank most often last
};

class ArrivalMonitor {
 public:
  // `graph`, `comm` (the executor's world communicator, whose flight
  // recorder its mesh groups' communicators share) and `device` must
  // outlive the monitor.
  ArrivalMonitor(const StepGraph& graph, Communicator& comm, Device& device);

  // See above: collective over `comm`. FailedPrecondition when the
  // communicator has no flight recorder.
  StatusOr<StepArrivals> Collect(int64_t step);

 private:
  const StepGraph& graph_;
  Communicator& comm_;
  Device& device_;
  const std::vector<ScheduleEntry> schedule_;
};

// "step 3: arrival skew max 1.234 ms at node 12 (all_gather of bucket 3
// over dp_shard+hpz, slowest rank 2), mean 0.210 ms over 14 collectives;
// straggler wait 0.850 ms; slowest most often rank 2 (9 of 14)" and a
// second line with every collective's slowest rank and skew.
std::string FormatStepArrivals(const StepArrivals& a);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_ARRIVALS_H_
