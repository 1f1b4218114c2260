#include "baton/comm/inproc/inproc.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "baton/comm/backend_util.h"
#if defined(BATON_HAVE_CUDA)
#include "baton/comm/inproc/reduce_kernel.h"
#endif

namespace baton {
namespace {

struct Arrival {
  const void* send = nullptr;
  void* recv = nullptr;
  CollectiveHeader header;
  Event* event = nullptr;  // event protocol: `ready` (phase 1), `done` (2)
};

// Slot keys of the event protocol's two meetings (the host path uses the
// plain tag).
constexpr uint32_t kPhase1 = 0x100;
constexpr uint32_t kPhase2 = 0x200;
// Slot key of Split's meeting (sequence: the Split's number).
constexpr uint32_t kPhaseSplit = 0x400;

// Distinguishes groups of the same name, for the names of their children.
std::atomic<uint64_t> next_world_id{1};

struct Slot {
  explicit Slot(int n) : arrivals(n), present(n, false) {}
  std::vector<Arrival> arrivals;
  std::vector<bool> present;
  int arrived = 0;
  int departed = 0;
  Status status;
};

using SlotKey = std::pair<uint32_t, uint64_t>;  // (tag, sequence number)

std::string Missing(const std::vector<bool>& present) {
  std::vector<int> missing;
  for (size_t i = 0; i < present.size(); ++i) {
    if (!present[i]) missing.push_back(static_cast<int>(i));
  }
  return absl::StrJoin(missing, ",");
}

// The shared state of one group of ranks.
class World {
 public:
  World(std::string group, int size)
      : group_(std::move(group)),
        size_(size),
        id_(next_world_id.fetch_add(1)),
        joined_(size, false) {}

  int size() const { return size_; }
  const std::string& group() const { return group_; }
  uint64_t id() const { return id_; }

  Status MarkJoined(int rank) {
    absl::MutexLock lock(&mu_);
    if (joined_[rank]) {
      return absl::AlreadyExistsError(absl::StrCat(
          "inproc group '", group_, "': rank ", rank, " joined twice"));
    }
    joined_[rank] = true;
    ++njoined_;
    return Status();
  }

  Status AwaitJoined(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto all = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return njoined_ == size_;
    };
    if (mu_.AwaitWithDeadline(absl::Condition(&all), deadline)) return Status();
    return absl::DeadlineExceededError(absl::StrCat(
        "inproc group '", group_, "': rank(s) ", Missing(joined_),
        " of ", size_, " did not join in time"));
  }

  StatusOr<std::shared_ptr<Slot>> Arrive(int rank, const Arrival& a,
                                         absl::Time deadline,
                                         absl::Duration timeout,
                                         uint32_t phase = 0) {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return aborted_;
    const SlotKey key{a.header.tag | phase, a.header.seq};
    std::shared_ptr<Slot>& entry = slots_[key];
    if (entry == nullptr) entry = std::make_shared<Slot>(size_);
    std::shared_ptr<Slot> slot = entry;
    if (!slot->status.ok()) return slot->status;
    slot->arrivals[rank] = a;
    slot->present[rank] = true;
    if (++slot->arrived == size_) {
      for (int q = 1; q < size_; ++q) {
        const std::string diff = DescribeMismatch(
            slot->arrivals[0].header, 0, slot->arrivals[q].header, q);
        if (!diff.empty()) {
          slot->status = absl::InvalidArgumentError(absl::StrCat(
              "inproc ", CollectiveLabel(a.header), ": mismatched calls: ",
              diff));
          break;
        }
      }
    }
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return slot->arrived == size_ || !slot->status.ok() || !aborted_.ok();
    };
    const bool in_time = mu_.AwaitWithDeadline(absl::Condition(&done),
                                               deadline);
    if (!aborted_.ok()) return aborted_;
    if (!slot->status.ok()) return slot->status;
    if (!in_time) {
      // Fail the slot so that a late rank does not read our buffers.
      slot->status = absl::DeadlineExceededError(absl::StrCat(
          "inproc ", CollectiveLabel(a.header), " on rank ", rank,
          ": rank(s) ", Missing(slot->present), " did not arrive within ",
          absl::FormatDuration(timeout)));
      return slot->status;
    }
    return slot;
  }

  Status Depart(int rank, const CollectiveHeader& h, Slot& slot,
                absl::Time deadline, uint32_t phase = 0) {
    absl::MutexLock lock(&mu_);
    if (++slot.departed == size_) slots_.erase(SlotKey{h.tag | phase, h.seq});
    auto done = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return slot.departed == size_ || !aborted_.ok();
    };
    const bool in_time = mu_.AwaitWithDeadline(absl::Condition(&done),
                                               deadline);
    if (!aborted_.ok()) return aborted_;
    if (!in_time) {
      return absl::DeadlineExceededError(
          absl::StrCat("inproc ", CollectiveLabel(h), " on rank ", rank,
                       ": peers did not finish in time"));
    }
    return Status();
  }

  // Rank 0 measures, the others wait for its figure (MeasureLimit).
  void PublishLimit(double gbps) {
    absl::MutexLock lock(&mu_);
    limit_gbps_ = gbps;
    ++limit_epoch_;
  }
  StatusOr<double> AwaitLimit(int epoch, absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto ready = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return limit_epoch_ >= epoch || !aborted_.ok();
    };
    if (!mu_.AwaitWithDeadline(absl::Condition(&ready), deadline)) {
      return absl::DeadlineExceededError("inproc: rank 0 did not measure");
    }
    if (!aborted_.ok()) return aborted_;
    return limit_gbps_;
  }

  void Abort(int rank) {
    absl::MutexLock lock(&mu_);
    if (aborted_.ok()) {
      aborted_ = absl::UnavailableError(
          absl::StrCat("inproc group '", group_, "': rank ", rank,
                       " aborted"));
    }
  }

 private:
  const std::string group_;
  const int size_;
  const uint64_t id_;
  absl::Mutex mu_;
  std::vector<bool> joined_ ABSL_GUARDED_BY(mu_);
  int njoined_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<SlotKey, std::shared_ptr<Slot>> slots_ ABSL_GUARDED_BY(mu_);
  Status aborted_ ABSL_GUARDED_BY(mu_);
  double limit_gbps_ ABSL_GUARDED_BY(mu_) = 0;
  int limit_epoch_ ABSL_GUARDED_BY(mu_) = 0;
};

// Groups being formed, by name. A group leaves the registry once complete.
class Registry {
 public:
  static Registry& Get() {
    static Registry* r = new Registry;
    return *r;
  }

  StatusOr<std::shared_ptr<World>> Join(const std::string& group, int rank,
                                        int size, absl::Duration timeout) {
    std::shared_ptr<World> world;
    {
      absl::MutexLock lock(&mu_);
      std::shared_ptr<World>& entry = forming_[group];
      if (entry == nullptr) entry = std::make_shared<World>(group, size);
      if (entry->size() != size) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inproc group '", group, "': rank ", rank, " says size ", size,
            " but the group was started with size ", entry->size()));
      }
      world = entry;
      BATON_RETURN_IF_ERROR(world->MarkJoined(rank));
    }
    Status s = world->AwaitJoined(absl::Now() + timeout);
    absl::MutexLock lock(&mu_);
    auto it = forming_.find(group);
    if (it != forming_.end() && it->second == world) forming_.erase(it);
    if (!s.ok()) return s;
    return world;
  }

 private:
  absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<World>> forming_ ABSL_GUARDED_BY(mu_);
};

class InprocCommunicator : public CommunicatorBase {
 public:
  InprocCommunicator(std::shared_ptr<World> world, int rank,
                     const CommConfig& config)
      : world_(std::move(world)),
        rank_(rank),
        config_(config),
        timeout_(config.timeout),
        device_(config.device),
        event_protocol_(config.inproc_event_protocol) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  const char* backend() const override { return "inproc"; }
  CommCaps caps() const override {
    CommCaps c;
    c.accumulate_fp32 = true;
    c.graph_capture = false;  // ranks meet on the host at issue time
    c.host_memory = true;
#if defined(BATON_HAVE_CUDA)
    c.device_memory = true;
#endif
    return c;
  }

  StatusOr<Limit> MeasureLimit(size_t bytes, int iters) override {
    if (bytes == 0) {
      return absl::InvalidArgumentError("MeasureLimit: bytes must be > 0");
    }
    const int epoch = ++limit_calls_;
    if (rank_ == 0 && device_->kind() == DeviceKind::kCuda) {
      BATON_ASSIGN_OR_RETURN(double gbps, MeasureDeviceCopy(bytes, iters));
      world_->PublishLimit(gbps);
    } else if (rank_ == 0) {
      std::vector<char> src(bytes, 1), dst(bytes, 0);
      std::memcpy(dst.data(), src.data(), bytes);  // warm-up, faults pages
      const int n = std::max(iters, 1);
      const absl::Time t0 = absl::Now();
      for (int i = 0; i < n; ++i) {
        std::memcpy(dst.data(), src.data(), bytes);
        src[i % bytes] = static_cast<char>(dst[(i * 7) % bytes] + 1);
      }
      const double s = absl::ToDoubleSeconds(absl::Now() - t0);
      const double best = s > 0 ? static_cast<double>(bytes) * n / s / 1e9 : 0;
      world_->PublishLimit(best);
    }
    BATON_ASSIGN_OR_RETURN(double gbps,
                           world_->AwaitLimit(epoch, absl::Now() + timeout_));
    return Limit{gbps, device_->kind() == DeviceKind::kCuda ? "d2d" : "memcpy"};
  }

  // Device-to-device copies on one stream, timed from the host around a
  // synchronize (mean over `iters` after one warm-up).
  StatusOr<double> MeasureDeviceCopy(size_t bytes, int iters) {
    BATON_ASSIGN_OR_RETURN(DeviceBuffer a, device_->Allocate(bytes));
    BATON_ASSIGN_OR_RETURN(DeviceBuffer b, device_->Allocate(bytes));
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Stream> s, device_->CreateStream());
    BATON_RETURN_IF_ERROR(s->MemsetAsync(a.data(), 1, bytes));
    BATON_RETURN_IF_ERROR(s->MemcpyAsync(b.data(), a.data(), bytes));
    BATON_RETURN_IF_ERROR(s->Synchronize());
    const int n = std::max(iters, 1);
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < n; ++i) {
      BATON_RETURN_IF_ERROR(s->MemcpyAsync(b.data(), a.data(), bytes));
    }
    BATON_RETURN_IF_ERROR(s->Synchronize());
    const double sec = absl::ToDoubleSeconds(absl::Now() - t0);
    return sec > 0 ? static_cast<double>(bytes) * n / sec / 1e9 : 0.0;
  }

  Status health() override { return health_.Get(); }

  // Meets the other ranks in a slot of their own (like the event protocol's
  // meetings), reads every rank's colour and key from their arrivals, then
  // joins a fresh in-process group named after this World's id, the Split's
  // number and the colour.
  StatusOr<std::unique_ptr<Communicator>> Split(int colour, int key) override {
    BATON_RETURN_IF_ERROR(health_.Get());
    const uint64_t number = split_calls_++;
    const CollectiveHeader h =
        MakeHeader(CollectiveKind::kBarrier, 0, DataType::kF32, ReduceOp::kSum,
                   0, CollectiveOptions{}, number);
    const int mine[2] = {colour < 0 ? kSplitNoColour : colour, key};
    const absl::Time deadline = absl::Now() + timeout_;
    BATON_ASSIGN_OR_RETURN(
        std::shared_ptr<Slot> slot,
        world_->Arrive(rank_, Arrival{mine, nullptr, h}, deadline, timeout_,
                       kPhaseSplit));
    std::vector<std::pair<int, int>> all(size());
    for (int q = 0; q < size(); ++q) {
      const int* theirs = static_cast<const int*>(slot->arrivals[q].send);
      all[q] = {theirs[0], theirs[1]};
    }
    // Peers read `mine` until every rank has departed.
    BATON_RETURN_IF_ERROR(
        world_->Depart(rank_, h, *slot, deadline, kPhaseSplit));
    if (mine[0] < 0) return std::unique_ptr<Communicator>();
    const SplitPlace place = PlaceInSplit(all, rank_);
    CommConfig child = config_;
    child.rank = place.rank;
    child.size = place.size;
    child.group = absl::StrCat(world_->group(), "#", world_->id(), "/split",
                               number, "/", mine[0]);
    return CreateInprocCommunicator(child);
  }

  void Abort() override {
    world_->Abort(rank_);
    health_.Fail(absl::UnavailableError(
        absl::StrCat("inproc rank ", rank_, " aborted")));
  }

 private:
  Status Issue(CollectiveKind kind, const void* send, void* recv,
               size_t count, DataType type, ReduceOp op, int root,
               Stream& stream, const CollectiveOptions& options) override {
    BATON_RETURN_IF_ERROR(ValidateCollective(kind, rank_, size(), send, recv,
                                             count, type, root, options));
    if (stream.kind() != device_->kind()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inproc: a ", DeviceKindName(stream.kind()),
          " stream on a communicator of a ", DeviceKindName(device_->kind()),
          " device"));
    }
    BATON_RETURN_IF_ERROR(health_.Get());
    const CollectiveHeader h = MakeHeader(kind, count, type, op, root, options,
                                          seqs_.Next(options.tag));
    const absl::Duration timeout = EffectiveTimeout(options, timeout_);
    if (event_protocol_ || stream.kind() == DeviceKind::kCuda) {
      Status s = IssueWithEvents(h, send, recv, stream, timeout);
      if (!s.ok()) {
        health_.Fail(s);
        // Also into the stream's error state, as on the host path.
        (void)stream.Enqueue([s]() { return s; });
      }
      return s;
    }
    return stream.Enqueue([this, h, send, recv, timeout]() -> Status {
      BATON_RETURN_IF_ERROR(health_.Get());
      Status s = Run(h, send, recv, timeout);
      if (!s.ok()) health_.Fail(s);
      return s;
    });
  }

  Status Run(const CollectiveHeader& h, const void* send, void* recv,
             absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    BATON_ASSIGN_OR_RETURN(std::shared_ptr<Slot> slot,
                           world_->Arrive(rank_, Arrival{send, recv, h},
                                          deadline, timeout));
    Move(h, slot->arrivals);
    return world_->Depart(rank_, h, *slot, deadline);
  }

  // The device-memory protocol (inproc.h).
  Status IssueWithEvents(const CollectiveHeader& h, const void* send,
                         void* recv, Stream& stream, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Event> ready,
                           device_->CreateEvent());
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Event> done,
                           device_->CreateEvent());
    BATON_RETURN_IF_ERROR(ready->Record(stream));
    BATON_ASSIGN_OR_RETURN(
        std::shared_ptr<Slot> one,
        world_->Arrive(rank_, Arrival{send, recv, h, ready.get()}, deadline,
                       timeout, kPhase1));
    const std::vector<Arrival> a = one->arrivals;
    for (int q = 0; q < size(); ++q) {
      if (q != rank_) BATON_RETURN_IF_ERROR(stream.Wait(*a[q].event));
    }
    BATON_RETURN_IF_ERROR(MoveOnStream(h, a, stream));
    BATON_RETURN_IF_ERROR(done->Record(stream));
    BATON_RETURN_IF_ERROR(world_->Depart(rank_, h, *one, deadline, kPhase1));
    BATON_ASSIGN_OR_RETURN(
        std::shared_ptr<Slot> two,
        world_->Arrive(rank_, Arrival{send, recv, h, done.get()}, deadline,
                       timeout, kPhase2));
    for (int q = 0; q < size(); ++q) {
      if (q != rank_) {
        BATON_RETURN_IF_ERROR(stream.Wait(*two->arrivals[q].event));
      }
    }
    // Once every rank has issued its waits, the events may go (waits
    // already issued stay valid; runtime/device.h).
    return world_->Depart(rank_, h, *two, deadline, kPhase2);
  }

  // This rank's share of the data movement, enqueued on its stream.
  Status MoveOnStream(const CollectiveHeader& h, std::vector<Arrival> a,
                      Stream& stream) {
    if (stream.kind() == DeviceKind::kHost) {
      return stream.Enqueue([this, h, a = std::move(a)]() {
        Move(h, a);
        return Status();
      });
    }
    const int n = size();
    const auto type = static_cast<DataType>(h.type);
    const size_t esize = DataTypeSize(type);
    const size_t chunk = h.count * esize;
    const int divisor = static_cast<ReduceOp>(h.op) == ReduceOp::kAvg ? n : 1;
    std::vector<const void*> srcs(n);
    switch (static_cast<CollectiveKind>(h.kind)) {
      case CollectiveKind::kAllGather:
        for (int q = 0; q < n; ++q) {
          char* dst = static_cast<char*>(a[rank_].recv) + q * chunk;
          if (chunk != 0 && dst != a[q].send) {
            BATON_RETURN_IF_ERROR(stream.MemcpyAsync(dst, a[q].send, chunk));
          }
        }
        return Status();
      case CollectiveKind::kBroadcast:
        if (chunk != 0 && a[rank_].recv != a[h.root].send) {
          return stream.MemcpyAsync(a[rank_].recv, a[h.root].send, chunk);
        }
        return Status();
      case CollectiveKind::kReduceScatter:
        for (int q = 0; q < n; ++q) {
          srcs[q] = static_cast<const char*>(a[q].send) + rank_ * chunk;
        }
        return DeviceReduce(a[rank_].recv, srcs, h.count, type, divisor,
                            stream);
      case CollectiveKind::kAllReduce: {
        const size_t begin = h.count * rank_ / n;
        const size_t end = h.count * (rank_ + 1) / n;
        if (begin == end) return Status();
        for (int q = 0; q < n; ++q) {
          srcs[q] = static_cast<const char*>(a[q].send) + begin * esize;
        }
        char* mine = static_cast<char*>(a[rank_].recv) + begin * esize;
        BATON_RETURN_IF_ERROR(
            DeviceReduce(mine, srcs, end - begin, type, divisor, stream));
        for (int q = 0; q < n; ++q) {
          if (q == rank_) continue;
          BATON_RETURN_IF_ERROR(stream.MemcpyAsync(
              static_cast<char*>(a[q].recv) + begin * esize, mine,
              (end - begin) * esize));
        }
        return Status();
      }
      case CollectiveKind::kBarrier:
        return Status();
    }
    return Status();
  }

  Status DeviceReduce(void* out, const std::vector<const void*>& srcs,
                      size_t count, DataType type, int divisor,
                      Stream& stream) {
#if defined(BATON_HAVE_CUDA)
    if (srcs.size() > inproc_internal::kMaxReduceSources) {
      return absl::UnimplementedError(absl::StrCat(
          "inproc on a GPU reduces at most ",
          inproc_internal::kMaxReduceSources, " ranks"));
    }
    const int err = inproc_internal::LaunchReduce(
        out, srcs.data(), static_cast<int>(srcs.size()), count,
        static_cast<int>(type), divisor, stream.native_handle());
    if (err != 0) {
      return absl::InternalError(
          absl::StrCat("inproc: reduction kernel launch failed (cudaError ",
                       err, ")"));
    }
    return Status();
#else
    return absl::UnimplementedError("inproc: built without CUDA");
#endif
  }

  // This rank's share of the data movement (see inproc.h).
  void Move(const CollectiveHeader& h, const std::vector<Arrival>& a) {
    const int n = size();
    const auto type = static_cast<DataType>(h.type);
    const size_t esize = DataTypeSize(type);
    const size_t chunk = h.count * esize;
    const int divisor = static_cast<ReduceOp>(h.op) == ReduceOp::kAvg ? n : 1;
    const bool acc = h.accumulate_fp32 != 0;
    std::vector<const void*> srcs(n);
    switch (static_cast<CollectiveKind>(h.kind)) {
      case CollectiveKind::kAllGather:
        for (int q = 0; q < n; ++q) {
          char* dst = static_cast<char*>(a[rank_].recv) + q * chunk;
          if (chunk != 0 && dst != a[q].send) CopyBytes(dst, a[q].send, chunk);
        }
        return;
      case CollectiveKind::kReduceScatter:
        for (int q = 0; q < n; ++q) {
          srcs[q] = static_cast<const char*>(a[q].send) + rank_ * chunk;
        }
        ReduceSources(a[rank_].recv, srcs.data(), n, h.count, type, acc,
                      divisor);
        return;
      case CollectiveKind::kAllReduce: {
        const size_t begin = h.count * rank_ / n;
        const size_t end = h.count * (rank_ + 1) / n;
        if (begin == end) return;
        for (int q = 0; q < n; ++q) {
          srcs[q] = static_cast<const char*>(a[q].send) + begin * esize;
        }
        char* mine = static_cast<char*>(a[rank_].recv) + begin * esize;
        ReduceSources(mine, srcs.data(), n, end - begin, type, acc, divisor);
        for (int q = 0; q < n; ++q) {
          if (q == rank_) continue;
          CopyBytes(static_cast<char*>(a[q].recv) + begin * esize, mine,
                    (end - begin) * esize);
        }
        return;
      }
      case CollectiveKind::kBroadcast: {
        const void* src = a[h.root].send;
        if (chunk != 0 && a[rank_].recv != src) {
          CopyBytes(a[rank_].recv, src, chunk);
        }
        return;
      }
      case CollectiveKind::kBarrier:
        return;
    }
  }

  const std::shared_ptr<World> world_;
  const int rank_;
  const CommConfig config_;  // for children (Split)
  const absl::Duration timeout_;
  Device* const device_;
  const bool event_protocol_;
  SequenceCounters seqs_;
  HealthState health_;
  int limit_calls_ = 0;
  uint64_t split_calls_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateInprocCommunicator(
    const CommConfig& config) {
  BATON_ASSIGN_OR_RETURN(
      std::shared_ptr<World> world,
      Registry::Get().Join(config.group, config.rank, config.size,
                           config.timeout));
  return std::unique_ptr<Communicator>(
      new InprocCommunicator(std::move(world), config.rank, config));
}

}  // namespace baton
