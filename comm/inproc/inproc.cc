#include "baton/comm/inproc/inproc.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "baton/comm/backend_util.h"
#include "baton/comm/flight_recorder.h"
#include "baton/comm/hang_reporting.h"
#include "baton/comm/inproc/move.h"
#include "baton/comm/inproc/p2p.h"
#include "baton/comm/inproc/p2p_events.h"
#include "baton/comm/inproc/signal_words.h"

namespace baton {
namespace {

using inproc_internal::EnqueueMoveAll;
using inproc_internal::Mailbox;
using inproc_internal::P2PPost;
using inproc_internal::MoveShare;
using inproc_internal::RankBuffers;
using inproc_internal::SignalWords;
using inproc_internal::StreamMailbox;

struct Arrival {
  const void* send = nullptr;
  void* recv = nullptr;
  CollectiveHeader header;
  // The arriving rank's flight record (the event protocol's last rank
  // completes everyone's). The World's reports keep the recorder alive.
  FlightRecorder* rec = nullptr;
  uint64_t rec_index = FlightRecorder::kNoRecord;
};

// Slot key of Split's meeting (sequence: the Split's number; the host path
// uses the plain tag).
constexpr uint32_t kPhaseSplit = 0x400;

// Words of Device::AllocateValues per allocation of the event protocol.

// One collective of the event protocol (inproc.h), from the first rank's
// issue until the last rank has enqueued the data movement or the
// collective failed. Ranks that issued before the last wait on `word`
// reaching `target`, then run Check() on their stream.
struct StreamSlot {
  StreamSlot(int n, uint64_t* w, uint64_t t, absl::Time d)
      : arrivals(n), ready(n), present(n, false), word(w), target(t),
        deadline(d) {}
  std::vector<Arrival> arrivals;
  std::vector<std::unique_ptr<Event>> ready;  // each rank's `ready` record
  // The waiting ranks' streams, failed before the word is written on a
  // failure (guarded by the group's mutex).
  std::vector<std::shared_ptr<StreamErrorSink>> sinks;
  std::vector<bool> present;
  int arrived = 0;
  uint64_t* const word;
  const uint64_t target;
  absl::Time deadline;  // the earliest of the arrivals' deadlines
  std::pair<uint32_t, uint64_t> key;  // (tag, sequence number)
  absl::Duration timeout;

  // What the waiting ranks' streams report once released.
  Status Check() const {
    absl::MutexLock lock(&mu);
    return status;
  }
  void Fail(Status s) {
    absl::MutexLock lock(&mu);
    if (status.ok()) status = std::move(s);
  }
  mutable absl::Mutex mu;
  Status status ABSL_GUARDED_BY(mu);
};

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
  // `reports`: the hang reports of the job this group belongs to (the root
  // group's, shared by the groups Split makes from it).
  World(std::string group, int size,
        std::shared_ptr<InProcessHangReports> reports)
      : group_(std::move(group)),
        size_(size),
        id_(next_world_id.fetch_add(1)),
        reports_(std::move(reports)),
        stream_mailbox_(size,
                        [r = reports_](Status e) { return r->Report(e); }),
        joined_(size, false) {
    free_events_.resize(size);
  }

  ~World() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
      cv_.Signal();
    }
    if (watchdog_.joinable()) watchdog_.join();
  }

  int size() const { return size_; }
  const std::string& group() const { return group_; }
  uint64_t id() const { return id_; }
  const std::shared_ptr<InProcessHangReports>& reports() const {
    return reports_;
  }
  Mailbox& mailbox() { return mailbox_; }
  StreamMailbox& stream_mailbox() { return stream_mailbox_; }

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
          slot->status = reports_->Report(absl::InvalidArgumentError(
              absl::StrCat("inproc ", CollectiveLabel(a.header),
                           ": mismatched calls: ", diff)));
          // The ranks disagree on the schedule: fail the group, so the
          // ranks waiting in other collectives end now, not at their
          // timeout (the event protocol fails its group likewise).
          if (aborted_.ok()) aborted_ = slot->status;
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
      slot->status = reports_->Report(absl::DeadlineExceededError(absl::StrCat(
          "inproc ", CollectiveLabel(a.header), " on rank ", rank,
          ": rank(s) ", Missing(slot->present), " did not arrive within ",
          absl::FormatDuration(timeout))));
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
      return reports_->Report(absl::DeadlineExceededError(
          absl::StrCat("inproc ", CollectiveLabel(h), " on rank ", rank,
                       ": peers did not finish in time")));
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
      aborted_ = reports_->Report(absl::UnavailableError(
          absl::StrCat("inproc group '", group_, "': rank ", rank,
                       " aborted")));
    }
    mailbox_.Abort(aborted_);
    stream_mailbox_.Abort(aborted_);
    while (!stream_slots_.empty()) {
      std::shared_ptr<StreamSlot> slot = stream_slots_.begin()->second;
      FailSlotLocked(slot, aborted_);
    }
  }

  // ---- The event protocol (inproc.h) ----

  Status EventProtocolStatus() {
    absl::MutexLock lock(&mu_);
    return stream_failed_;
  }

  // A `ready` event of `rank` (from its pool, or new).
  StatusOr<std::unique_ptr<Event>> TakeEvent(int rank, Device& device) {
    {
      absl::MutexLock lock(&mu_);
      std::vector<std::unique_ptr<Event>>& pool = free_events_[rank];
      if (!pool.empty()) {
        std::unique_ptr<Event> e = std::move(pool.back());
        pool.pop_back();
        return e;
      }
    }
    return device.CreateEvent();
  }

  // Events whose waits have been issued (or that no one will wait on) go
  // back to their ranks' pools; ready[q] belongs to rank q.
  void GiveBackEvents(std::vector<std::unique_ptr<Event>> ready) {
    absl::MutexLock lock(&mu_);
    GiveBackEventsLocked(ready);
  }

  struct StreamArrival {
    std::shared_ptr<StreamSlot> slot;
    bool last = false;
    // For the last rank: every rank's buffers and `ready` events, and
    // their arrivals (to complete their flight records).
    std::vector<RankBuffers> buffers;
    std::vector<std::unique_ptr<Event>> ready;
    std::vector<Arrival> arrivals;
  };

  // Publishes rank's buffers and `ready` (recorded on its stream) in the
  // slot of (tag, seq); never waits. The last rank to arrive gets the slot
  // out of the table with everything it needs to enqueue the movement;
  // mismatched headers fail the slot (InvalidArgument for every rank).
  StatusOr<StreamArrival> ArriveOnStream(
      int rank, const Arrival& a, std::unique_ptr<Event> ready,
      std::shared_ptr<StreamErrorSink> sink, Device& device,
      absl::Time deadline, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    if (!aborted_.ok()) return aborted_;
    if (!stream_failed_.ok()) return stream_failed_;
    const SlotKey key{a.header.tag, a.header.seq};
    std::shared_ptr<StreamSlot>& entry = stream_slots_[key];
    if (entry == nullptr) {
      StatusOr<SignalWords::Word> word = words_.Take(device);
      if (!word.ok()) {
        stream_slots_.erase(key);
        return word.status();
      }
      entry = std::make_shared<StreamSlot>(size_, word->word, word->target,
                                           deadline);
      entry->key = key;
      entry->timeout = timeout;
      StartWatchdogLocked();
      // The watchdog may sleep with no deadline (every earlier slot was
      // matched): wake it to see this one's.
      cv_.Signal();
    }
    std::shared_ptr<StreamSlot> slot = entry;
    if (slot->present[rank]) {
      return absl::InternalError(absl::StrCat(
          "inproc ", CollectiveLabel(a.header), ": rank ", rank,
          " issued it twice"));
    }
    slot->arrivals[rank] = a;
    slot->ready[rank] = std::move(ready);
    if (sink != nullptr) slot->sinks.push_back(std::move(sink));
    slot->present[rank] = true;
    if (deadline < slot->deadline) {
      slot->deadline = deadline;
      cv_.Signal();
    }
    StreamArrival out;
    out.slot = slot;
    if (++slot->arrived < size_) return out;
    for (int q = 1; q < size_; ++q) {
      const std::string diff = DescribeMismatch(
          slot->arrivals[0].header, 0, slot->arrivals[q].header, q);
      if (!diff.empty()) {
        Status s = reports_->Report(absl::InvalidArgumentError(absl::StrCat(
            "inproc ", CollectiveLabel(a.header), ": mismatched calls: ",
            diff)));
        FailSlotLocked(slot, s);
        return s;
      }
    }
    stream_slots_.erase(key);
    out.last = true;
    out.buffers.resize(size_);
    for (int q = 0; q < size_; ++q) {
      out.buffers[q] = RankBuffers{slot->arrivals[q].send,
                                   slot->arrivals[q].recv};
    }
    out.ready = std::move(slot->ready);
    out.arrivals = slot->arrivals;
    return out;
  }

  // The last rank could not enqueue its part (or a waiting rank its wait):
  // fails the slot and the group and releases the waiting ranks.
  void FailStreamSlot(const std::shared_ptr<StreamSlot>& slot, Status s) {
    absl::MutexLock lock(&mu_);
    FailSlotLocked(slot, std::move(s));
  }

 private:
  // Fails `slot` (if still open) and the group's event protocol, then
  // releases the ranks waiting on its word: their streams then report the
  // slot's status. Once the group has failed no word is handed out again,
  // so a late stream write of an old target is harmless.
  void FailSlotLocked(const std::shared_ptr<StreamSlot>& slot, Status s)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    slot->Fail(s);
    for (const std::shared_ptr<StreamErrorSink>& sink : slot->sinks) {
      sink->Fail(s);
    }
    if (stream_failed_.ok()) stream_failed_ = s;
    auto it = stream_slots_.find(slot->key);
    if (it != stream_slots_.end() && it->second == slot) {
      stream_slots_.erase(it);
      GiveBackEventsLocked(slot->ready);
    }
    words_.Write({slot->word, slot->target});
  }

  void GiveBackEventsLocked(std::vector<std::unique_ptr<Event>>& ready)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t q = 0; q < ready.size(); ++q) {
      if (ready[q] != nullptr) free_events_[q].push_back(std::move(ready[q]));
    }
  }

  void StartWatchdogLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!watchdog_.joinable()) watchdog_ = std::thread([this] { Watch(); });
  }

  // Fails the open slots whose deadline has passed: nobody else waits on
  // the host, so this is what turns a missing rank into DeadlineExceeded.
  void Watch() {
    absl::MutexLock lock(&mu_);
    while (!stop_) {
      absl::Time next = absl::InfiniteFuture();
      for (const auto& [key, slot] : stream_slots_) {
        next = std::min(next, slot->deadline);
      }
      if (next > absl::Now()) {
        cv_.WaitWithDeadline(&mu_, next);
        continue;
      }
      const absl::Time now = absl::Now();
      std::vector<std::shared_ptr<StreamSlot>> expired;
      for (const auto& [key, slot] : stream_slots_) {
        if (slot->deadline <= now) expired.push_back(slot);
      }
      for (const std::shared_ptr<StreamSlot>& slot : expired) {
        const Arrival* any = nullptr;
        for (int q = 0; q < size_ && any == nullptr; ++q) {
          if (slot->present[q]) any = &slot->arrivals[q];
        }
        FailSlotLocked(
            slot, reports_->Report(absl::DeadlineExceededError(absl::StrCat(
                      "inproc ", CollectiveLabel(any->header), ": rank(s) ",
                      Missing(slot->present), " of ", size_,
                      " did not issue it within ",
                      absl::FormatDuration(slot->timeout)))));
      }
    }
  }

  const std::string group_;
  const int size_;
  const uint64_t id_;
  const std::shared_ptr<InProcessHangReports> reports_;
  Mailbox mailbox_;  // point-to-point on host streams (p2p.h)
  StreamMailbox stream_mailbox_;  // on the event protocol (p2p_events.h)
  absl::Mutex mu_;
  absl::CondVar cv_;  // wakes the watchdog
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;  // started with the first event-protocol slot
  std::map<SlotKey, std::shared_ptr<StreamSlot>> stream_slots_
      ABSL_GUARDED_BY(mu_);
  Status stream_failed_ ABSL_GUARDED_BY(mu_);
  std::vector<std::vector<std::unique_ptr<Event>>> free_events_
      ABSL_GUARDED_BY(mu_);
  SignalWords words_ ABSL_GUARDED_BY(mu_){1024};
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

  // `reports`: the job's hang reports (a child group's parent's); null for
  // a new job's group, which then makes its own from `config`.
  StatusOr<std::shared_ptr<World>> Join(
      const CommConfig& config,
      std::shared_ptr<InProcessHangReports> reports) {
    const std::string& group = config.group;
    const int rank = config.rank;
    const int size = config.size;
    const absl::Duration timeout = config.timeout;
    std::shared_ptr<World> world;
    {
      absl::MutexLock lock(&mu_);
      std::shared_ptr<World>& entry = forming_[group];
      if (entry == nullptr) {
        if (reports == nullptr) {
          const std::vector<int> w = WorldRanks(config);
          reports = std::make_shared<InProcessHangReports>(
              *std::max_element(w.begin(), w.end()) + 1,
              config.on_hang_report);
        }
        entry = std::make_shared<World>(group, size, std::move(reports));
      }
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

StatusOr<std::unique_ptr<Communicator>> CreateMember(
    const CommConfig& config, std::shared_ptr<InProcessHangReports> reports);

class InprocCommunicator : public CommunicatorBase {
 public:
  // `root`: the first communicator of its recorder (not a Split child).
  InprocCommunicator(std::shared_ptr<World> world, int rank,
                     const CommConfig& config, bool root)
      : world_(std::move(world)),
        rank_(rank),
        config_(config),
        timeout_(config.timeout),
        device_(config.device),
        event_protocol_(config.inproc_event_protocol),
        rec_(StartRecording(config, "inproc")),
        world_ranks_(WorldRanks(config)) {
    if (root) world_->reports()->Register(world_ranks_[rank_], rec_.recorder);
  }

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }
  const char* backend() const override { return "inproc"; }
  CommCaps caps() const override {
    CommCaps c;
    c.accumulate_fp32 = true;
    c.graph_capture = false;  // ranks are matched on the host at issue time
    c.host_memory = true;
    c.p2p_host_memory = true;
#if defined(BATON_HAVE_CUDA)
    c.device_memory = true;
    c.p2p_device_memory = true;  // on CUDA streams (p2p_events.h)
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

  FlightRecorder* recorder() override { return rec_.recorder.get(); }

  // Also a failure of the event protocol seen by another rank, which this
  // rank's stream reports when it reaches the collective, and a failed
  // message this rank's stream waited for (p2p_events.h).
  Status health() override {
    Status s = health_.Get();
    if (s.ok()) s = world_->EventProtocolStatus();
    return s.ok() ? world_->stream_mailbox().RankStatus(rank_) : s;
  }

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
    child.recorder = rec_.recorder;
    child.world_ranks = ChildWorldRanks(all, rank_, world_ranks_);
    return CreateMember(child, world_->reports());
  }

  void Abort() override {
    rec_.recorder->MarkAborted();
    world_->Abort(rank_);
    health_.Fail(absl::UnavailableError(
        absl::StrCat("inproc rank ", rank_, " aborted")));
  }

  // Host streams without the event protocol (p2p.h): the group is one host
  // work item on `stream`. CUDA streams and the event protocol:
  // SendRecvOnStream.
  Status SendRecvGroup(absl::Span<const P2POp> ops, Stream& stream,
                       const CollectiveOptions& options) override {
    BATON_RETURN_IF_ERROR(ValidateP2P("inproc", rank_, size(), ops, options));
    if (stream.kind() != device_->kind()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "inproc: a ", DeviceKindName(stream.kind()),
          " stream on a communicator of a ", DeviceKindName(device_->kind()),
          " device"));
    }
    if (event_protocol_ || stream.kind() == DeviceKind::kCuda) {
      return SendRecvOnStream(ops, stream, options);
    }
    BATON_RETURN_IF_ERROR(health_.Get());
    std::vector<P2PPost> posts = Post(ops, options);
    const absl::Duration timeout = EffectiveTimeout(options, timeout_);
    const uint32_t tag = options.tag;
    return stream.Enqueue([this, posts = std::move(posts), tag,
                           timeout]() -> Status {
      Status s = health_.Get();
      if (s.ok()) {
        s = world_->mailbox().RunGroup(
            rank_, posts, tag, timeout, rec_.recorder.get(),
            [this](Status e) { return world_->reports()->Report(e); });
      } else {
        for (const P2PPost& p : posts) rec_.recorder->Complete(p.record, false);
      }
      if (!s.ok()) health_.Fail(s);
      return s;
    });
  }

  // Each op numbered in its (kind, peer, tag) order and recorded as issued.
  std::vector<P2PPost> Post(absl::Span<const P2POp> ops, const CollectiveOptions& options) {
    std::vector<P2PPost> posts;
    posts.reserve(ops.size());
    for (const P2POp& op : ops) {
      const uint64_t seq = p2p_seqs_.Next(op.kind, op.peer, options.tag);
      posts.push_back(P2PPost{op, seq, RecordP2P(rec_, op, options, seq, world_ranks_)});
    }
    return posts;
  }

  // The event protocol's point-to-point (p2p_events.h): enqueued at the
  // call, never waits for the peers. A failure found at the call fails this
  // rank and its stream too, as for the collectives.
  Status SendRecvOnStream(absl::Span<const P2POp> ops, Stream& stream,
                          const CollectiveOptions& options) {
    BATON_RETURN_IF_ERROR(health());
    std::vector<P2PPost> posts = Post(ops, options);
    Status s = world_->stream_mailbox().Issue(
        rank_, posts, options.tag, EffectiveTimeout(options, timeout_),
        rec_.recorder.get(), *device_, stream);
    if (!s.ok()) {
      health_.Fail(s);
      (void)stream.Enqueue([s]() { return s; });
    }
    return s;
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
    const uint64_t ri = rec_.Issue(h, options.position);
    const absl::Duration timeout = EffectiveTimeout(options, timeout_);
    if (event_protocol_ || stream.kind() == DeviceKind::kCuda) {
      Status s = IssueWithEvents(h, ri, send, recv, stream, timeout);
      if (!s.ok()) {
        rec_.recorder->Complete(ri, false);
        health_.Fail(s);
        // Also into the stream's error state, as on the host path.
        (void)stream.Enqueue([s]() { return s; });
      }
      return s;
    }
    return stream.Enqueue([this, h, ri, send, recv, timeout]() -> Status {
      FlightRecorder& rec = *rec_.recorder;
      rec.Start(ri);
      Status s = health_.Get();
      if (s.ok()) s = Run(h, ri, send, recv, timeout);
      rec.Complete(ri, s.ok());
      if (!s.ok()) health_.Fail(s);
      return s;
    });
  }

  Status Run(const CollectiveHeader& h, uint64_t ri, const void* send,
             void* recv, absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    BATON_ASSIGN_OR_RETURN(
        std::shared_ptr<Slot> slot,
        world_->Arrive(rank_, Arrival{send, recv, h, rec_.recorder.get(), ri},
                       deadline, timeout));
    std::vector<RankBuffers> a(size());
    for (int q = 0; q < size(); ++q) {
      a[q] = RankBuffers{slot->arrivals[q].send, slot->arrivals[q].recv};
    }
    MoveShare(h, a, rank_);
    return world_->Depart(rank_, h, *slot, deadline);
  }

  // The event protocol (inproc.h): never waits for the peers.
  Status IssueWithEvents(const CollectiveHeader& h, uint64_t ri,
                         const void* send, void* recv, Stream& stream,
                         absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Event> ready,
                           world_->TakeEvent(rank_, *device_));
    BATON_RETURN_IF_ERROR(ready->Record(stream));
    std::shared_ptr<StreamErrorSink> sink = stream.error_sink();
    const bool check_on_stream = sink == nullptr;
    BATON_ASSIGN_OR_RETURN(
        World::StreamArrival arrival,
        world_->ArriveOnStream(
            rank_, Arrival{send, recv, h, rec_.recorder.get(), ri},
            std::move(ready), std::move(sink), *device_, deadline, timeout));
    const std::shared_ptr<StreamSlot>& slot = arrival.slot;
    if (!arrival.last) {
      // Wait for the last rank's stream to finish the movement. A failure
      // reaches this stream through its error sink before the word is
      // written; a stream without a sink checks the slot after the wait.
      Status s = stream.WaitValue(slot->word, slot->target);
      if (s.ok() && check_on_stream) {
        s = stream.Enqueue([slot]() { return slot->Check(); });
      }
      if (!s.ok()) world_->FailStreamSlot(slot, s);
      return s;
    }
    // The last rank: every peer's `ready` was recorded before it arrived,
    // so these waits capture the right records (device.h rule 3).
    Status s;
    for (int q = 0; q < size() && s.ok(); ++q) {
      if (q != rank_) s = stream.Wait(*arrival.ready[q]);
    }
    if (s.ok()) s = EnqueueMoveAll(h, std::move(arrival.buffers), stream);
    if (s.ok()) s = stream.WriteValue(slot->word, slot->target);
    // Matched and its movement enqueued: what "completed" means on this
    // protocol (the host does not see the streams finish it).
    for (const Arrival& a : arrival.arrivals) {
      if (s.ok() && a.rec != nullptr) a.rec->Complete(a.rec_index, true);
    }
    world_->GiveBackEvents(std::move(arrival.ready));
    if (!s.ok()) world_->FailStreamSlot(slot, s);
    return s;
  }

  const std::shared_ptr<World> world_;
  const int rank_;
  const CommConfig config_;  // for children (Split)
  const absl::Duration timeout_;
  Device* const device_;
  const bool event_protocol_;
  SequenceCounters seqs_;
  P2PCounters p2p_seqs_;
  HealthState health_;
  int limit_calls_ = 0;
  uint64_t split_calls_ = 0;
  const Recording rec_;
  const std::vector<int> world_ranks_;
};

StatusOr<std::unique_ptr<Communicator>> CreateMember(
    const CommConfig& config, std::shared_ptr<InProcessHangReports> reports) {
  BATON_RETURN_IF_ERROR(ValidateWorldRanks(config));
  const bool root = reports == nullptr;
  BATON_ASSIGN_OR_RETURN(std::shared_ptr<World> world,
                         Registry::Get().Join(config, std::move(reports)));
  return std::unique_ptr<Communicator>(
      new InprocCommunicator(std::move(world), config.rank, config, root));
}

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateInprocCommunicator(
    const CommConfig& config) {
  return CreateMember(config, nullptr);
}

}  // namespace baton
