// Pieces shared by the backends (not a public header).
#ifndef BATON_COMM_BACKEND_UTIL_H_
#define BATON_COMM_BACKEND_UTIL_H_

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "baton/comm/comm_config.h"
#include "baton/comm/communicator.h"
#include "baton/comm/flight_recorder.h"

namespace baton {

// What one rank believes a collective is; ranks compare these to detect
// mismatched calls. Plain bytes, sent as is by the ucx backend.
struct CollectiveHeader {
  uint32_t magic = 0xBA70C011u;
  uint8_t kind = 0;
  uint8_t type = 0;
  uint8_t op = 0;
  uint8_t accumulate_fp32 = 0;
  int32_t root = 0;
  uint32_t tag = 0;
  uint64_t seq = 0;
  uint64_t count = 0;
  // Set by a rank that has seen a mismatch, so it travels around the ring.
  uint32_t error = 0;
  uint32_t error_rank = 0;   // the rank that found the difference
  uint32_t error_other = 0;  // the rank whose call differed from its own
  // The caller's SchedulePosition (compared only when both set `check`).
  int64_t step = -1;
  int32_t node = -1;
  int32_t bucket = -1;
  uint8_t group = 0;
  uint8_t check = 0;
};

CollectiveHeader MakeHeader(CollectiveKind kind, size_t count, DataType type,
                            ReduceOp op, int root,
                            const CollectiveOptions& options, uint64_t seq);

// Empty when they describe the same collective, else a sentence naming the
// first difference, e.g. "rank 0 has count 4 but rank 2 has count 5".
std::string DescribeMismatch(const CollectiveHeader& a, int rank_a,
                             const CollectiveHeader& b, int rank_b);

// "all_gather #12 (tag 0)", and " step 1 node 4 bucket 2" when the
// position was given.
std::string CollectiveLabel(const CollectiveHeader& h);

// What the flight recorder keeps of a header.
CollectiveCall CallOf(const CollectiveHeader& h);

// A backend's place in a flight recorder (comm/flight_recorder.h).
struct Recording {
  std::shared_ptr<FlightRecorder> recorder;
  int comm = -1;  // its number in the recorder
  uint64_t Issue(const CollectiveHeader& h, const SchedulePosition& p) const {
    return recorder->Issue(comm, CallOf(h), p);
  }
};
// Registers a communicator of `config` (rank, size, group as its key,
// world_ranks or 0..size-1) in config.recorder or a new recorder.
Recording StartRecording(const CommConfig& config, const char* backend);
// The world ranks of a communicator of `config` (config.world_ranks, or
// 0..size-1 when empty).
std::vector<int> WorldRanks(const CommConfig& config);
// InvalidArgument unless config.world_ranks is empty or holds `size`
// distinct ranks >= 0.
Status ValidateWorldRanks(const CommConfig& config);
// Split: the world ranks of the child that parent rank `rank` joins (the
// members with its colour, ordered by key then parent rank, mapped through
// the parent's world ranks).
std::vector<int> ChildWorldRanks(
    const std::vector<std::pair<int, int>>& colour_key, int rank,
    const std::vector<int>& parent_world_ranks);

// ---- Point-to-point (communicator.h, "Point-to-point") ----

// Sequence numbers of sends and receives, per (direction, peer, tag): the
// k-th send from a to b with tag t matches b's k-th receive from a with t.
// Thread-safe.
class P2PCounters {
 public:
  uint64_t Next(P2POp::Kind kind, int peer, uint32_t tag) {
    absl::MutexLock lock(&mu_);
    const uint64_t key = (static_cast<uint64_t>(peer) << 9) |
                         (kind == P2POp::Kind::kSend ? 256u : 0u) |
                         (tag & 255);
    return next_[key]++;
  }

 private:
  absl::Mutex mu_;
  std::map<uint64_t, uint64_t> next_ ABSL_GUARDED_BY(mu_);
};

// The header of one op (kind kSend / kRecv, root = the peer), as recorded.
CollectiveHeader P2PHeader(const P2POp& op, const CollectiveOptions& options,
                           uint64_t seq);
// "send #3 (tag 0) to rank 2, 4096 bytes" (or "recv ... from rank 2").
std::string P2PLabel(const P2POp& op, uint32_t tag, uint64_t seq);
// Records one op in `rec` with options.position and its peer's world rank
// (from `world_ranks`, communicator rank -> world rank).
uint64_t RecordP2P(const Recording& rec, const P2POp& op,
                   const CollectiveOptions& options, uint64_t seq,
                   const std::vector<int>& world_ranks);

// Per-tag sequence numbers, taken at issue time.
class SequenceCounters {
 public:
  uint64_t Next(uint32_t tag) {
    return counters_[tag & 255].fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::array<std::atomic<uint64_t>, 256> counters_{};
};

// The first failure of a communicator; later collectives fail with it.
class HealthState {
 public:
  Status Get() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }
  // Keeps the first error.
  void Fail(Status s) { (void)FailWith(std::move(s)); }
  // Same, and returns the stored (first) error.
  Status FailWith(Status s) {
    absl::MutexLock lock(&mu_);
    if (status_.ok()) status_ = std::move(s);
    return status_;
  }

 private:
  mutable absl::Mutex mu_;
  Status status_ ABSL_GUARDED_BY(mu_);
};

// The base of the backends: the five verbs funnel into one Issue().
class CommunicatorBase : public Communicator {
 public:
  Status AllGather(const void* send, void* recv, size_t count, DataType type,
                   Stream& stream, const CollectiveOptions& options) final {
    return Issue(CollectiveKind::kAllGather, send, recv, count, type,
                 ReduceOp::kSum, 0, stream, options);
  }
  Status ReduceScatter(const void* send, void* recv, size_t count,
                       DataType type, ReduceOp op, Stream& stream,
                       const CollectiveOptions& options) final {
    return Issue(CollectiveKind::kReduceScatter, send, recv, count, type, op,
                 0, stream, options);
  }
  Status AllReduce(const void* send, void* recv, size_t count, DataType type,
                   ReduceOp op, Stream& stream,
                   const CollectiveOptions& options) final {
    return Issue(CollectiveKind::kAllReduce, send, recv, count, type, op, 0,
                 stream, options);
  }
  Status Broadcast(const void* send, void* recv, size_t count, DataType type,
                   int root, Stream& stream,
                   const CollectiveOptions& options) final {
    return Issue(CollectiveKind::kBroadcast, send, recv, count, type,
                 ReduceOp::kSum, root, stream, options);
  }
  Status Barrier(Stream& stream, const CollectiveOptions& options) final {
    return Issue(CollectiveKind::kBarrier, nullptr, nullptr, 0,
                 DataType::kF32, ReduceOp::kSum, 0, stream, options);
  }

 protected:
  // Validates (ValidateCollective and the backend's own checks) and
  // enqueues one collective; see communicator.h for the contract.
  virtual Status Issue(CollectiveKind kind, const void* send, void* recv,
                       size_t count, DataType type, ReduceOp op, int root,
                       Stream& stream, const CollectiveOptions& options) = 0;
};

// Split (communicator.h): from every parent rank's (colour, key), the child
// rank and size of parent rank `rank`, whose colour must be >= 0. Members
// are ordered by key, then by parent rank.
struct SplitPlace {
  int rank = 0;
  int size = 0;
};
SplitPlace PlaceInSplit(const std::vector<std::pair<int, int>>& colour_key,
                        int rank);

inline absl::Duration EffectiveTimeout(const CollectiveOptions& o,
                                       absl::Duration fallback) {
  return o.timeout > absl::ZeroDuration() ? o.timeout : fallback;
}

}  // namespace baton

#endif  // BATON_COMM_BACKEND_UTIL_H_
