#include "comm/inproc/inproc.h"

#include <algorithm>
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
#include "comm/backend_util.h"

namespace baton {
namespace {

struct Arrival {
  const void* send = nullptr;
  void* recv = nullptr;
  CollectiveHeader header;
};

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
      : group_(std::move(group)), size_(size), joined_(size, false) {}

  int size() const { return size_; }
  const std::string& group() const { return group_; }

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
                                         absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return aborted_;
    const SlotKey key{a.header.tag, a.header.seq};
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
                absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    if (++slot.departed == size_) slots_.erase(SlotKey{h.tag, h.seq});
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

class InprocCommunicator : public Communicator {
 public:
  InprocCommunicator(std::shared_ptr<World> world, int rank,
                     absl::Duration timeout)
      : world_(std::move(world)), rank_(rank), timeout_(timeout) {}

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  const char* backend() const override { return "inproc"; }

  Status AllGather(const void* send, void* recv, size_t count, DataType type,
                   Stream& stream, const CollectiveOptions& options) override {
    return Issue(CollectiveKind::kAllGather, send, recv, count, type,
                 ReduceOp::kSum, 0, stream, options);
  }
  Status ReduceScatter(const void* send, void* recv, size_t count,
                       DataType type, ReduceOp op, Stream& stream,
                       const CollectiveOptions& options) override {
    return Issue(CollectiveKind::kReduceScatter, send, recv, count, type, op,
                 0, stream, options);
  }
  Status AllReduce(const void* send, void* recv, size_t count, DataType type,
                   ReduceOp op, Stream& stream,
                   const CollectiveOptions& options) override {
    return Issue(CollectiveKind::kAllReduce, send, recv, count, type, op, 0,
                 stream, options);
  }
  Status Broadcast(const void* send, void* recv, size_t count, DataType type,
                   int root, Stream& stream,
                   const CollectiveOptions& options) override {
    return Issue(CollectiveKind::kBroadcast, send, recv, count, type,
                 ReduceOp::kSum, root, stream, options);
  }
  Status Barrier(Stream& stream, const CollectiveOptions& options) override {
    return Issue(CollectiveKind::kBarrier, nullptr, nullptr, 0,
                 DataType::kF32, ReduceOp::kSum, 0, stream, options);
  }

  StatusOr<Limit> MeasureLimit(size_t bytes, int iters) override {
    if (bytes == 0) {
      return absl::InvalidArgumentError("MeasureLimit: bytes must be > 0");
    }
    const int epoch = ++limit_calls_;
    if (rank_ == 0) {
      std::vector<char> src(bytes, 1), dst(bytes, 0);
      double best = 0;
      for (int i = 0; i < std::max(iters, 1) + 1; ++i) {
        const absl::Time t0 = absl::Now();
        std::memcpy(dst.data(), src.data(), bytes);
        const double s = absl::ToDoubleSeconds(absl::Now() - t0);
        if (i > 0 && s > 0) best = std::max(best, bytes / s / 1e9);  // i=0 warms
        src[i % bytes] = static_cast<char>(dst[(i * 7) % bytes] + 1);
      }
      world_->PublishLimit(best);
    }
    BATON_ASSIGN_OR_RETURN(double gbps,
                           world_->AwaitLimit(epoch, absl::Now() + timeout_));
    return Limit{gbps, "memcpy"};
  }

  Status health() override { return health_.Get(); }

  void Abort() override {
    world_->Abort(rank_);
    health_.Fail(absl::UnavailableError(
        absl::StrCat("inproc rank ", rank_, " aborted")));
  }

 private:
  Status Issue(CollectiveKind kind, const void* send, void* recv,
               size_t count, DataType type, ReduceOp op, int root,
               Stream& stream, const CollectiveOptions& options) {
    BATON_RETURN_IF_ERROR(ValidateCollective(kind, rank_, size(), send, recv,
                                             count, type, root, options));
    if (stream.kind() != DeviceKind::kHost) {
      return absl::UnimplementedError(
          "inproc on device memory (CUDA streams) is not implemented in this "
          "build; use host streams, or the nccl backend with one rank per "
          "GPU");
    }
    BATON_RETURN_IF_ERROR(health_.Get());
    const CollectiveHeader h = MakeHeader(kind, count, type, op, root, options,
                                          seqs_.Next(options.tag));
    const absl::Duration timeout = EffectiveTimeout(options, timeout_);
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
          if (chunk != 0 && dst != a[q].send) std::memcpy(dst, a[q].send, chunk);
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
          std::memcpy(static_cast<char*>(a[q].recv) + begin * esize, mine,
                      (end - begin) * esize);
        }
        return;
      }
      case CollectiveKind::kBroadcast: {
        const void* src = a[h.root].send;
        if (chunk != 0 && a[rank_].recv != src) {
          std::memcpy(a[rank_].recv, src, chunk);
        }
        return;
      }
      case CollectiveKind::kBarrier:
        return;
    }
  }

  const std::shared_ptr<World> world_;
  const int rank_;
  const absl::Duration timeout_;
  SequenceCounters seqs_;
  HealthState health_;
  int limit_calls_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateInprocCommunicator(
    const CommConfig& config) {
  if (config.device != nullptr && config.device->kind() != DeviceKind::kHost) {
    return absl::UnimplementedError(
        "inproc on device memory is not implemented in this build; use a "
        "host device");
  }
  BATON_ASSIGN_OR_RETURN(
      std::shared_ptr<World> world,
      Registry::Get().Join(config.group, config.rank, config.size,
                           config.timeout));
  return std::unique_ptr<Communicator>(
      new InprocCommunicator(std::move(world), config.rank, config.timeout));
}

}  // namespace baton
