// The flight recorder of one rank's collectives (issue 38): for every
// collective its communicators issue, what it was (kind, count, type, tag,
// sequence number), where it sits in the schedule (SchedulePosition,
// comm/communicator.h) and when it was issued, reached by its stream
// (arrival) and completed, in a ring of the last `capacity` collectives;
// and per communicator and tag, how many were issued and completed.
//
// Every backend records into one (CommConfig::recorder, shared by a
// communicator and the children Split makes from it). On a failure the
// backends snapshot it into a RankState, which travels through the store as
// text (SerializeRankState / ParseRankState) to the rank that writes the
// hang report (comm/hang_report.h); scheduler/arrivals.h reads the arrival
// times of a step's collectives from it for straggler reports.
//
// Cost: Issue, Start and Complete are lock-free and allocate nothing (a
// fetch_add, about a dozen relaxed stores and one clock read each;
// //bench:runtime's BM_FlightRecorder* rows measure them). No
// synchronization with other ranks.
//
// Thread safety: Issue, Start, Complete, SetStart and MarkAborted may be
// called from any threads at once; Snapshot and Records from any thread at
// any time (a record being written is skipped, never torn).
// AddCommunicator takes a mutex. A Start or Complete whose record the ring
// has already overwritten (capacity newer collectives) is dropped.
#ifndef BATON_COMM_FLIGHT_RECORDER_H_
#define BATON_COMM_FLIGHT_RECORDER_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "baton/comm/communicator.h"
#include "baton/runtime/status.h"

namespace baton {

// Sends and receives (kSend, kRecv) are recorded like collectives, with
// SchedulePosition::peer set and seq their number within (pair, tag); they
// do not move the per-tag issued / completed counters.
inline bool IsPointToPoint(CollectiveKind k) {
  return k == CollectiveKind::kSend || k == CollectiveKind::kRecv;
}

// One collective as the recorder saw it.
struct CollectiveRecord {
  uint64_t index = 0;  // issue number on the recorder (all its communicators)
  int comm = 0;        // which communicator (RankState::comms[comm])
  uint32_t tag = 0;
  uint64_t seq = 0;  // matching number within (communicator, tag)
  CollectiveKind kind = CollectiveKind::kBarrier;
  DataType type = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = 0;
  uint64_t count = 0;
  SchedulePosition position;
  // Host clock (absl::GetCurrentTimeNanos, comparable across the processes
  // of one machine) at the call, when its stream reached it (0: not
  // observed) and when it completed (0: not yet, or not observed).
  int64_t issue_ns = 0;
  int64_t start_ns = 0;
  int64_t done_ns = 0;
  bool failed = false;  // completed with an error

  // Its arrival: when the stream reached it, else when it was issued.
  int64_t arrival_ns() const { return start_ns != 0 ? start_ns : issue_ns; }
};

// What Issue records about a call.
struct CollectiveCall {
  CollectiveKind kind = CollectiveKind::kBarrier;
  DataType type = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int32_t root = 0;
  uint64_t count = 0;
  uint32_t tag = 0;
  uint64_t seq = 0;
};

// A snapshot of one rank's recorder.
struct RankState {
  struct Tag {
    uint32_t tag = 0;
    uint64_t issued = 0;     // collectives issued with this tag
    uint64_t completed = 0;  // 1 + the highest sequence number completed
  };
  struct Comm {
    // The same on every member and different for different groups: the
    // root communicator's group name, then "/split<n>/<colour>" per Split.
    std::string key;
    int rank = 0;                  // this rank in it
    std::vector<int> world_ranks;  // its members' world ranks, by rank
    std::vector<Tag> tags;         // the tags it issued anything with
  };
  int world_rank = 0;
  int world_size = 1;
  std::string backend;
  int64_t now_ns = 0;      // when the snapshot was taken
  int64_t aborted_ns = 0;  // when Abort was called (0: never)
  std::vector<Comm> comms;
  std::vector<CollectiveRecord> records;  // oldest first
};

class FlightRecorder {
 public:
  static constexpr size_t kDefaultCapacity = 1024;
  static constexpr int kMaxCommunicators = 1024;
  // Issue's answer when nothing was recorded (communicator not registered).
  static constexpr uint64_t kNoRecord = ~uint64_t{0};

  // `capacity` is rounded up to a power of two (at least 16).
  explicit FlightRecorder(size_t capacity = kDefaultCapacity);
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  // Registers a communicator: `key` (RankState::Comm::key), this rank's
  // rank in it and its members' world ranks. The first one registered is
  // the world: its key names the job's store keys (hang_store.h) and its
  // size the world size. Returns its number, or -1 past kMaxCommunicators
  // (its collectives are then not recorded).
  int AddCommunicator(std::string key, int rank, std::vector<int> world_ranks,
                      std::string backend);
  // This rank's world rank, the world size and the world's key (of the
  // first communicator registered; 0, 1 and "" before).
  int world_rank() const;
  int world_size() const;
  std::string world_key() const;
  // The world ranks of communicator `comm`'s members (empty if unknown).
  std::vector<int> world_ranks(int comm) const;

  // A collective was issued on communicator `comm` (a negative `comm`
  // records nothing). Returns its index for Start and Complete.
  uint64_t Issue(int comm, const CollectiveCall& call,
                 const SchedulePosition& position);
  // Its stream reached it (now, or at host time `ns`: a device event's
  // time converted to the host clock).
  void Start(uint64_t index);
  void SetStart(uint64_t index, int64_t ns);
  // It completed (ok) or failed.
  void Complete(uint64_t index, bool ok);
  // Abort() was called on one of the communicators.
  void MarkAborted();

  // The last `max_records` records (oldest first) and every communicator's
  // counters.
  RankState Snapshot(size_t max_records = 64) const;
  // Every record still in the ring, oldest first.
  std::vector<CollectiveRecord> Records() const { return Snapshot(capacity_).records; }
  size_t capacity() const { return capacity_; }

  // The hang report of this rank (comm/hang_reporting.h), once for all the
  // communicators that share this recorder: several streams may fail at
  // once, and their store calls share one connection, so one thread
  // reports and the others wait for its verdict. The first caller gets
  // true and must call FinishReport; later callers wait up to `wait` for
  // it, get false and the verdict in *verdict (empty if it did not come).
  bool StartReport(absl::Duration wait, std::string* verdict);
  void FinishReport(const std::string& verdict);

 private:
  static constexpr int kWords = 8;
  struct Slot {
    std::atomic<uint64_t> version{0};  // 2i+1 while written, 2i+2 published
    std::array<std::atomic<uint64_t>, kWords> words{};
    std::atomic<int64_t> start_ns{0};
    std::atomic<int64_t> done_ns{0};
    std::atomic<bool> failed{false};
  };
  struct CommSlot {
    std::string key;
    int rank = 0;
    std::vector<int> world_ranks;
    std::array<std::atomic<uint64_t>, 256> issued{};
    std::array<std::atomic<uint64_t>, 256> completed{};
  };
  // The slot of `index` if it still holds it.
  Slot* Find(uint64_t index) const;
  bool Read(uint64_t index, CollectiveRecord* out) const;

  const size_t capacity_;
  std::unique_ptr<Slot[]> slots_;
  std::atomic<uint64_t> next_{0};
  std::atomic<int64_t> aborted_ns_{0};
  std::array<std::atomic<CommSlot*>, kMaxCommunicators> comms_{};
  mutable absl::Mutex mu_;
  std::vector<std::unique_ptr<CommSlot>> owned_ ABSL_GUARDED_BY(mu_);
  std::string backend_ ABSL_GUARDED_BY(mu_);
  absl::Mutex report_mu_;
  bool report_started_ ABSL_GUARDED_BY(report_mu_) = false;
  bool report_done_ ABSL_GUARDED_BY(report_mu_) = false;
  std::string verdict_ ABSL_GUARDED_BY(report_mu_);
};

// RankState as text and back (for the store). Parse checks every field
// (numbers, enum values, ranks within the world size, communicator
// numbers) and answers InvalidArgument naming the first bad line.
std::string SerializeRankState(const RankState& state);
StatusOr<RankState> ParseRankState(absl::string_view text);

// "dp_shard+hpz" for SchedulePosition::group bits (mesh dimension names
// in bit order, as scheduler/mesh.h names them); "none" for 0.
std::string MeshGroupBitsName(uint8_t bits);

}  // namespace baton

#endif  // BATON_COMM_FLIGHT_RECORDER_H_
