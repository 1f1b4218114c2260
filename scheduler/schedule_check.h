// The step graph's collectives as a schedule every rank must follow
// (issue 38): their positions (comm/communicator.h SchedulePosition, which
// the executor fills into every collective it issues) and the check mode's
// comparison of whole schedules before the first step.
//
// Check mode (ExecutorOptions::check_schedule): Executor::Create runs
// CheckSchedule, which compares a hash of this rank's schedule (kind, mesh
// group, bucket, count and type of every collective, in issue order) with
// every rank's in one small all-gather. When they differ it finds the
// first collective where each rank departs from the schedule most ranks
// hold (ties: the lowest rank's) and every rank fails with the same
// InvalidArgument naming the first such rank, the collective and both
// versions, e.g. "schedule check: rank 2's schedule differs from rank 0's
// (held by ranks 0,1,3) at collective 4 of 12: rank 0 has all_gather of
// bucket 2 over dp_shard+hpz (node 9), 4096 x bfloat16, rank 2 has ...",
// instead of hanging (or, on nccl, moving the wrong bytes) later. With
// check mode the executor also sets SchedulePosition::check, so inproc and
// ucx compare positions of every collective they match.
//
// CheckSchedule is collective over `comm` (every rank calls it, once, with
// nothing else in flight on tag kScheduleCheckTag); it uses `device`'s
// memory and a stream of its own and blocks until done.
#ifndef BATON_SCHEDULER_SCHEDULE_CHECK_H_
#define BATON_SCHEDULER_SCHEDULE_CHECK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "baton/comm/communicator.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler {

// Tags of the executor's own checks and measurements (outside the step's
// comm-stream tags and below ucx's reserved 255): the schedule check and
// the arrival exchange (scheduler/arrivals.h).
inline constexpr uint32_t kScheduleCheckTag = 254;
inline constexpr uint32_t kArrivalsTag = 253;

// Whether node `n` is a collective (all-gather, reduce-scatter, all-reduce).
bool IsCollective(const Node& n);

// The position of node `node` of `graph` in step `step`.
SchedulePosition NodePosition(const StepGraph& graph, int node, int64_t step,
                              bool check);

// One collective of the schedule.
struct ScheduleEntry {
  int node = 0;
  NodeKind kind = NodeKind::kAllGather;
  uint8_t group = 0;  // MeshGroup::bits()
  int bucket = -1;
  uint32_t tag = 0;
  int64_t in_numel = 0;  // its input and output buffers
  int64_t out_numel = 0;
  DataType in_type = DataType::kF32;
  DataType out_type = DataType::kF32;

  friend bool operator==(const ScheduleEntry& a, const ScheduleEntry& b);
};

// The graph's collectives in issue order.
std::vector<ScheduleEntry> CollectiveSchedule(const StepGraph& graph);
uint64_t ScheduleHash(const std::vector<ScheduleEntry>& schedule);
// "all_gather of bucket 2 over dp_shard+hpz (node 9, tag 1), 4096 x
// bfloat16 -> 16384 x bfloat16".
std::string DescribeEntry(const ScheduleEntry& e);

// See above.
Status CheckSchedule(const std::vector<ScheduleEntry>& schedule,
                     Communicator& comm, Device& device);
inline Status CheckSchedule(const StepGraph& graph, Communicator& comm,
                            Device& device) {
  return CheckSchedule(CollectiveSchedule(graph), comm, device);
}

// Every rank's copy of `mine` (n words per rank, rank-major) through an
// all-gather over `comm` on `tag`, in `device`'s memory. Blocking. For the
// executor's checks and measurements.
StatusOr<std::vector<uint64_t>> AllGatherWords(Communicator& comm,
                                               Device& device, uint32_t tag,
                                               const std::vector<uint64_t>& mine);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_SCHEDULE_CHECK_H_
