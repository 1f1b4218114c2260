#include "baton/comm/ucx/ucx.h"

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <deque>
#include <cstring>
#include <list>
#include <map>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "baton/comm/backend_util.h"
#include "baton/comm/bootstrap/sealed_value.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/flight_recorder.h"
#include "baton/comm/hang_reporting.h"
#include "baton/comm/ucx/blame.h"
#include "baton/comm/ucx/p2p.h"
#include "baton/comm/ucx/ring.h"
#include "baton/runtime/ucx_check.h"

namespace baton {
namespace {

using ucx_internal::P2PJob;
using ucx_internal::P2PLinks;
using ucx_internal::RingJob;
using ucx_internal::RingLinks;
using ucx_internal::Scratch;
using ucx_internal::Suspect;

constexpr absl::string_view kAddressKind = "ucx-worker-address";

constexpr const char* kDefaultTls = "self,posix,sysv,tcp";
constexpr int kMaxRanks = 1 << 14;  // step field of the tag

// A job and the notification its stream work waits on.
struct Submission {
  std::unique_ptr<RingJob> job;     // a collective, or
  std::unique_ptr<P2PJob> p2p;      // a group of sends and receives
  absl::Notification done;
  Status status;
  Suspect suspect;  // whom a failure points at
  // Set by the waiting thread once the wait is long (WaitNotice); the
  // progress thread then keeps `waiting_on` (this communicator's rank the
  // job waits on) current.
  std::atomic<bool> want_peer{false};
  std::atomic<int> waiting_on{-1};
};

class UcxCommunicator : public CommunicatorBase {
 public:
  ~UcxCommunicator() override { Shutdown(); }

  static StatusOr<std::unique_ptr<UcxCommunicator>> Create(
      const CommConfig& config) {
    auto c = std::unique_ptr<UcxCommunicator>(new UcxCommunicator(config));
    BATON_RETURN_IF_ERROR(c->Init(config));
    return c;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "ucx"; }
  CommCaps caps() const override {
    CommCaps c;
    c.accumulate_fp32 = true;
    c.host_memory = true;
    c.p2p_host_memory = true;
    return c;
  }

  StatusOr<Limit> MeasureLimit(size_t bytes, int iters) override {
    if (bytes == 0) {
      return absl::InvalidArgumentError("MeasureLimit: bytes must be > 0");
    }
    BATON_RETURN_IF_ERROR(health_.Get());
    if (size_ == 1) {
      return absl::FailedPreconditionError(
          "ucx: the transfer limit needs at least 2 ranks");
    }
    std::vector<char> src(bytes, 1), dst(bytes, 0);
    // A private tag so the probe never matches user collectives.
    CollectiveOptions o;
    o.tag = 255;
    double total_s = 0;
    const int n = std::max(iters, 1);
    for (int i = 0; i < n + 1; ++i) {  // i == 0 warms up
      BATON_RETURN_IF_ERROR(RunNow(
          MakeHeader(CollectiveKind::kBarrier, 0, DataType::kF32,
                     ReduceOp::kSum, 0, o, probe_seq_++),
          nullptr, nullptr, false));
      const absl::Time t0 = absl::Now();
      CollectiveHeader h = MakeHeader(CollectiveKind::kBroadcast, bytes,
                                      DataType::kI32, ReduceOp::kSum, 0, o,
                                      probe_seq_++);
      BATON_RETURN_IF_ERROR(RunNow(h, src.data(), dst.data(), true));
      if (i > 0) total_s += absl::ToDoubleSeconds(absl::Now() - t0);
    }
    const double best = total_s > 0 ? static_cast<double>(bytes) * n / total_s / 1e9 : 0;
    // Every rank reports the slowest rank's figure: gather them.
    std::vector<float> all(size_);
    float mine = static_cast<float>(best);
    std::memcpy(&all[rank_], &mine, sizeof(float));
    BATON_RETURN_IF_ERROR(RunNow(
        MakeHeader(CollectiveKind::kAllGather, 1, DataType::kF32,
                   ReduceOp::kSum, 0, o, probe_seq_++),
        &all[rank_], all.data(), false));
    return Limit{*std::min_element(all.begin(), all.end()), "ucx-tag"};
  }

  Status health() override { return health_.Get(); }

  // One P2PJob (p2p.h) on the progress thread per group, enqueued on
  // `stream` like a collective. Endpoints to peers other than the ring
  // neighbours are made on first use from the addresses every rank
  // published at creation.
  Status SendRecvGroup(absl::Span<const P2POp> ops, Stream& stream,
                       const CollectiveOptions& options) override {
    BATON_RETURN_IF_ERROR(ValidateP2P("ucx", rank_, size_, ops, options));
    if (stream.kind() != DeviceKind::kHost) {
      return absl::InvalidArgumentError(
          "ucx: send/recv run on host streams (host memory)");
    }
    if (options.tag == 255) {
      return absl::InvalidArgumentError("ucx: tag 255 is reserved");
    }
    BATON_RETURN_IF_ERROR(health_.Get());
    for (const P2POp& op : ops) BATON_RETURN_IF_ERROR(FetchAddress(op.peer));
    std::vector<P2PJob::Op> jobs;
    std::vector<uint64_t> records;
    for (const P2POp& op : ops) {
      const uint64_t seq = p2p_seqs_.Next(op.kind, op.peer, options.tag);
      jobs.push_back(P2PJob::Op{op, seq});
      records.push_back(
          RecordP2P(rec_, op, options, seq, WorldRanks(config_)));
    }
    const absl::Duration timeout = EffectiveTimeout(options, timeout_);
    const uint32_t tag = options.tag;
    return stream.Enqueue([this, jobs = std::move(jobs),
                           records = std::move(records), tag,
                           timeout]() mutable -> Status {
      FlightRecorder& rec = *rec_.recorder;
      for (uint64_t ri : records) rec.Start(ri);
      Status s = health_.Get();
      if (s.ok()) {
        auto sub = std::make_shared<Submission>();
        sub->p2p = std::make_unique<P2PJob>(std::move(jobs), tag, p2p_links_,
                                            timeout);
        s = Submit(std::move(sub), timeout);
      }
      for (uint64_t ri : records) rec.Complete(ri, s.ok());
      return s;
    });
  }

  FlightRecorder* recorder() override { return rec_.recorder.get(); }

  // Every rank's colour and key travel in an all-gather on the private tag;
  // each child is a new communicator (its own UCP context and worker, so
  // its tag matching is its own) made through the store under a group name
  // derived from this one, the Split's number and the colour.
  StatusOr<std::unique_ptr<Communicator>> Split(int colour, int key) override {
    BATON_RETURN_IF_ERROR(health_.Get());
    const uint64_t number = split_calls_++;
    std::vector<int32_t> all(2 * size_);
    all[2 * rank_] = colour < 0 ? kSplitNoColour : colour;
    all[2 * rank_ + 1] = key;
    if (size_ > 1) {
      CollectiveOptions o;
      o.tag = 255;
      BATON_RETURN_IF_ERROR(RunNow(
          MakeHeader(CollectiveKind::kAllGather, 2, DataType::kI32,
                     ReduceOp::kSum, 0, o, probe_seq_++),
          &all[2 * rank_], all.data(), false));
    }
    if (all[2 * rank_] < 0) return std::unique_ptr<Communicator>();
    std::vector<std::pair<int, int>> pairs(size_);
    for (int q = 0; q < size_; ++q) pairs[q] = {all[2 * q], all[2 * q + 1]};
    const SplitPlace place = PlaceInSplit(pairs, rank_);
    CommConfig child = config_;
    child.rank = place.rank;
    child.size = place.size;
    child.group =
        absl::StrCat(group_, "/split", number, "/", all[2 * rank_]);
    child.recorder = rec_.recorder;
    child.world_ranks = ChildWorldRanks(pairs, rank_, WorldRanks(config_));
    child.failure_group = FailureGroup();
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<UcxCommunicator> c,
                           UcxCommunicator::Create(child));
    return std::unique_ptr<Communicator>(std::move(c));
  }

  void Abort() override {
    rec_.recorder->MarkAborted();
    health_.Fail(absl::UnavailableError(
        absl::StrCat("ucx rank ", rank_, " aborted")));
    // Closing the endpoints makes the peers' transfers fail (or time out).
    absl::MutexLock lock(&mu_);
    abort_requested_ = true;
  }

 private:
  explicit UcxCommunicator(const CommConfig& config)
      : rank_(config.rank),
        size_(config.size),
        config_(config),
        store_(config.store),
        group_(config.group),
        timeout_(config.timeout),
        chunk_bytes_(config.chunk_bytes),
        rec_(StartRecording(config, "ucx")) {}

  Status Init(const CommConfig& config) {
    BATON_RETURN_IF_ERROR(ValidateWorldRanks(config));
    if (config.store == nullptr && size_ > 1) {
      return absl::InvalidArgumentError("ucx: CommConfig::store is null");
    }
    if (config.device->kind() != DeviceKind::kHost) {
      return absl::InvalidArgumentError(
          "ucx: the ucx backend moves host memory; give it a host device");
    }
    if (size_ > kMaxRanks) {
      return absl::InvalidArgumentError(
          absl::StrCat("ucx: at most ", kMaxRanks, " ranks"));
    }
    if (chunk_bytes_ < 64) {
      return absl::InvalidArgumentError("ucx: chunk_bytes must be >= 64");
    }
    ucp_config_t* cfg = nullptr;
    BATON_UCX_CHECK(ucp_config_read(nullptr, nullptr, &cfg));
    if (std::getenv("UCX_TLS") == nullptr) {
      ucp_config_modify(cfg, "TLS", kDefaultTls);
    }
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG;
    const ucs_status_t st = ucp_init(&params, cfg, &context_);
    ucp_config_release(cfg);
    BATON_UCX_CHECK(st);
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SINGLE;
    BATON_UCX_CHECK(ucp_worker_create(context_, &wp, &worker_));
    if (size_ > 1) BATON_RETURN_IF_ERROR(Connect(config));
    connected_ = true;
    thread_ = std::thread([this] { Loop(); });
    return Status();
  }

  Status Connect(const CommConfig& config) {
    Store& store = *config.store;
    ucp_address_t* addr = nullptr;
    size_t len = 0;
    BATON_UCX_CHECK(ucp_worker_get_address(worker_, &addr, &len));
    const std::string mine(reinterpret_cast<const char*>(addr), len);
    ucp_worker_release_address(worker_, addr);
    const std::string prefix = absl::StrCat(config.group, "/ucx/");
    // Sealed (kind, rank, length, checksum), so that a garbled or foreign
    // value is refused here instead of crashing inside UCX.
    BATON_RETURN_IF_ERROR(store.Set(absl::StrCat(prefix, "addr/", rank_),
                                    SealValue(kAddressKind, rank_, mine)));
    const int prev = (rank_ - 1 + size_) % size_;
    const int next = (rank_ + 1) % size_;
    for (int peer : {next, prev}) {
      if (eps_.count(peer) != 0) continue;
      const std::string key = absl::StrCat(prefix, "addr/", peer);
      StatusOr<std::string> sealed = store.Get(key, timeout_);
      if (!sealed.ok()) {
        return absl::Status(sealed.status().code(),
                            absl::StrCat("ucx: rank ", peer,
                                         " never published its address: ",
                                         sealed.status().message()));
      }
      StatusOr<std::string> theirs =
          OpenSealedValue(key, kAddressKind, peer, *sealed);
      if (!theirs.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("ucx rank ", rank_, ": ", theirs.status().message()));
      }
      BATON_ASSIGN_OR_RETURN(eps_[peer], CreateEndpoint(*theirs));
    }
    links_.worker = worker_;
    links_.next = eps_.at(next);
    links_.prev = eps_.at(prev);
    links_.rank = rank_;
    links_.size = size_;
    links_.chunk_bytes = chunk_bytes_;
    links_.peer_status = [this](int peer) { return PeerStatus(peer); };
    p2p_links_.worker = worker_;
    p2p_links_.rank = rank_;
    p2p_links_.endpoint = [this](int peer) { return EndpointTo(peer); };
    p2p_links_.peer_status = links_.peer_status;
    return GroupBarrier(store, absl::StrCat(prefix, "ready"));
  }

  // A barrier of this communicator's ranks through the store: the store's
  // own Barrier when they are all its ranks, else a counter (a child of
  // Split has fewer ranks than the store; its names are used once).
  Status GroupBarrier(Store& store, const std::string& name) {
    if (size_ == store.world_size()) return store.Barrier(name, timeout_);
    BATON_ASSIGN_OR_RETURN(int64_t arrived,
                           store.Add(absl::StrCat(name, "/arrived"), 1));
    if (arrived == size_) {
      BATON_RETURN_IF_ERROR(store.Set(absl::StrCat(name, "/open"), "1"));
    }
    StatusOr<std::string> open =
        store.Get(absl::StrCat(name, "/open"), timeout_);
    if (open.ok()) return Status();
    StatusOr<int64_t> now = store.Add(absl::StrCat(name, "/arrived"), 0);
    return absl::Status(
        open.status().code(),
        absl::StrCat("ucx barrier '", name, "': ", now.ok() ? *now : -1,
                     " of ", size_, " ranks arrived within ",
                     absl::FormatDuration(timeout_)));
  }

  // The peer's worker address from the store (published at creation), kept
  // for the progress thread to connect (EndpointTo).
  Status FetchAddress(int peer) {
    {
      absl::MutexLock lock(&peers_mu_);
      if (addresses_.count(peer) != 0) return Status();
    }
    const std::string key = absl::StrCat(group_, "/ucx/addr/", peer);
    StatusOr<std::string> sealed = store_->Get(key, timeout_);
    if (!sealed.ok()) {
      return absl::Status(sealed.status().code(),
                          absl::StrCat("ucx: rank ", peer,
                                       " never published its address: ",
                                       sealed.status().message()));
    }
    StatusOr<std::string> theirs =
        OpenSealedValue(key, kAddressKind, peer, *sealed);
    if (!theirs.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("ucx rank ", rank_, ": ", theirs.status().message()));
    }
    absl::MutexLock lock(&peers_mu_);
    addresses_[peer] = *std::move(theirs);
    return Status();
  }

  // Progress thread: the endpoint to `peer`, made on first use.
  StatusOr<ucp_ep_h> EndpointTo(int peer) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto it = eps_.find(peer);
    if (it != eps_.end()) return it->second;
    std::string address;
    {
      absl::MutexLock lock(&peers_mu_);
      auto a = addresses_.find(peer);
      if (a == addresses_.end()) {
        return absl::FailedPreconditionError(
            absl::StrCat("no address of rank ", peer));
      }
      address = a->second;
    }
    BATON_ASSIGN_OR_RETURN(ucp_ep_h h, CreateEndpoint(address));
    eps_[peer] = h;
    return h;
  }

  StatusOr<ucp_ep_h> CreateEndpoint(const std::string& address) {
    ucp_ep_params_t ep{};
    ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS |
                    UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                    UCP_EP_PARAM_FIELD_ERR_HANDLER;
    ep.address = reinterpret_cast<const ucp_address_t*>(address.data());
    ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    ep.err_handler.cb = &UcxCommunicator::OnEndpointError;
    ep.err_handler.arg = this;
    ucp_ep_h h = nullptr;
    BATON_UCX_CHECK(ucp_ep_create(worker_, &ep, &h));
    return h;
  }

  static void OnEndpointError(void* arg, ucp_ep_h ep, ucs_status_t status) {
    auto* self = static_cast<UcxCommunicator*>(arg);
    absl::MutexLock lock(&self->peers_mu_);
    for (const auto& [peer, h] : self->eps_) {
      if (h == ep && self->peer_errors_.count(peer) == 0) {
        self->peer_errors_[peer] = absl::UnavailableError(
            absl::StrCat("endpoint error: ", ucs_status_string(status)));
      }
    }
  }

  Status PeerStatus(int peer) {
    absl::MutexLock lock(&peers_mu_);
    auto it = peer_errors_.find(peer);
    return it == peer_errors_.end() ? Status() : it->second;
  }

  Status Issue(CollectiveKind kind, const void* send, void* recv,
               size_t count, DataType type, ReduceOp op, int root,
               Stream& stream, const CollectiveOptions& options) override {
    BATON_RETURN_IF_ERROR(ValidateCollective(kind, rank_, size_, send, recv,
                                             count, type, root, options));
    if (stream.kind() != DeviceKind::kHost) {
      return absl::InvalidArgumentError(
          "ucx: collectives run on host streams (host memory)");
    }
    if (options.tag == 255) {
      return absl::InvalidArgumentError("ucx: tag 255 is reserved");
    }
    BATON_RETURN_IF_ERROR(health_.Get());
    const CollectiveHeader h = MakeHeader(kind, count, type, op, root, options,
                                          seqs_.Next(options.tag));
    const uint64_t ri = rec_.Issue(h, options.position);
    const absl::Duration timeout = EffectiveTimeout(options, timeout_);
    return stream.Enqueue([this, h, ri, send, recv, timeout]() -> Status {
      FlightRecorder& rec = *rec_.recorder;
      rec.Start(ri);
      Status s = health_.Get();
      if (s.ok()) s = Run(h, send, recv, timeout, false);
      rec.Complete(ri, s.ok());
      return s;
    });
  }

  Status RunNow(const CollectiveHeader& h, const void* send, void* recv,
                bool raw) {
    return Run(h, send, recv, timeout_, raw);
  }

  // Hands the collective to the progress thread and waits for it.
  Status Run(const CollectiveHeader& h, const void* send, void* recv,
             absl::Duration timeout, bool raw) {
    auto sub = std::make_shared<Submission>();
    {
      absl::MutexLock lock(&mu_);
      std::unique_ptr<Scratch> scratch;
      if (!scratch_pool_.empty()) {
        scratch = std::move(scratch_pool_.back());
        scratch_pool_.pop_back();
      }
      sub->job = std::make_unique<RingJob>(h, send, recv,
                                           links_, timeout, std::move(scratch),
                                           raw);
    }
    return Submit(std::move(sub), timeout);
  }

  // Hands a job to the progress thread, waits for it, and on a failure
  // writes the hang report and names the failed rank.
  Status Submit(std::shared_ptr<Submission> sub, absl::Duration timeout) {
    {
      absl::MutexLock lock(&mu_);
      if (stopping_) return absl::CancelledError("ucx: communicator closed");
      if (abort_requested_) {
        return absl::UnavailableError(
            absl::StrCat("ucx rank ", rank_, " aborted"));
      }
      incoming_.push_back(sub);
    }
    if (store_ != nullptr && size_ > 1 &&
        !sub->done.WaitForNotificationWithTimeout(timeout / 4)) {
      // A long wait: say on whom we wait (blame.h), so that a rank waiting
      // on us that times out before we do follows us to the rank that
      // stopped instead of naming us.
      sub->want_peer.store(true, std::memory_order_relaxed);
      ucx_internal::WaitNotice notice(store_, Blame(timeout));
      const std::vector<int> world = WorldRanks(config_);
      const absl::Duration poll =
          std::clamp(timeout / 16, absl::Milliseconds(10), absl::Seconds(1));
      do {
        const int peer = sub->waiting_on.load(std::memory_order_relaxed);
        if (peer >= 0 && peer < size_) notice.Waiting(world[peer]);
      } while (!sub->done.WaitForNotificationWithTimeout(poll));
      // A wait cut short by closing the communicator is no failure.
      notice.Finish(/*failed=*/!sub->status.ok() &&
                    !absl::IsCancelled(sub->status));
    }
    sub->done.WaitForNotification();
    Status s = sub->status;
    if (!s.ok()) {
      // The hang report (hang_reporting.h): this rank's flight record goes
      // to the store first, so the reporting rank has it while the ranks
      // attribute the failure. One failing stream of this rank reports;
      // the others wait for it (their store calls share one connection).
      HangStoreOptions ho;
      ho.collect = std::clamp(timeout / 4, absl::Milliseconds(100),
                              absl::Seconds(5));
      // One store call that times out leaves the connection unusable, so
      // give it a whole timeout (a busy rank 0 answers late, not never).
      ho.store_timeout = std::clamp(timeout, absl::Seconds(1), absl::Seconds(5));
      ho.sink = config_.on_hang_report;
      const std::vector<int> world = WorldRanks(config_);
      const ucx_internal::BlameOptions bo = Blame(timeout);
      ucx_internal::Suspect suspect = sub->suspect;
      if (suspect.rank >= 0 && suspect.rank < size_) {
        suspect.rank = world[suspect.rank];
      }
      if (world != DefaultWorld()) {
        // The transport's own message counts in this communicator's ranks.
        s = Status(s.code(), absl::StrCat(s.message(), " (ranks of '", group_,
                                          "': world ranks ",
                                          absl::StrJoin(world, ","), ")"));
      }
      FlightRecorder& rec = *rec_.recorder;
      std::string verdict;
      const bool reporter = rec.StartReport(
          ho.collect + 2 * bo.grace + 8 * ho.store_timeout, &verdict);
      StoreHangReport report(store_, ho, rec);
      if (reporter) report.Publish();
      // Name the rank that failed as the first rank to see it did (this
      // happens before the caller can react, e.g. by closing connections).
      s = ucx_internal::AttributeFailure(store_, bo, s, suspect);
      if (reporter) {
        s = report.Conclude(s);
        rec.FinishReport(report.verdict());
      } else {
        s = WithHangVerdict(s, verdict.empty()
                                   ? "this rank's first failure is still "
                                     "reporting"
                                   : verdict);
      }
      health_.Fail(s);
    }
    return s;
  }

  // Who failed is named in world ranks, under the job's failure group
  // (shared with the parent and the siblings of a Split).
  ucx_internal::BlameOptions Blame(absl::Duration timeout) const {
    const std::vector<int> world = WorldRanks(config_);
    ucx_internal::BlameOptions bo;
    bo.prefix = absl::StrCat(FailureGroup(), "/ucx/");
    bo.rank = world[rank_];
    bo.size = std::max(store_ != nullptr ? store_->world_size() : size_,
                       *std::max_element(world.begin(), world.end()) + 1);
    bo.name = config_.rank_name;
    bo.grace = std::min(timeout / 4, absl::Seconds(5));
    // As the hang report's store calls (Submit).
    bo.store_timeout = std::clamp(timeout, absl::Seconds(1), absl::Seconds(5));
    return bo;
  }

  std::string FailureGroup() const {
    return config_.failure_group.empty() ? group_ : config_.failure_group;
  }
  std::vector<int> DefaultWorld() const {
    std::vector<int> w(size_);
    for (int r = 0; r < size_; ++r) w[r] = r;
    return w;
  }

  void Loop() {
    std::list<std::shared_ptr<Submission>> active;
    for (;;) {
      {
        absl::MutexLock lock(&mu_);
        auto wake = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return !incoming_.empty() || stopping_ ||
                 (abort_requested_ && eps_open_);
        };
        // With jobs in flight, poll; otherwise sleep until there is work.
        if (active.empty()) mu_.Await(absl::Condition(&wake));
        if (stopping_) break;
        if (abort_requested_ && eps_open_) {
          eps_open_ = false;
          // Fail our jobs, then close the endpoints so that the peers'
          // transfers with us fail instead of waiting for their timeout.
          for (auto& sub : active) {
            sub->status = absl::UnavailableError(
                absl::StrCat("ucx rank ", rank_, " aborted"));
            Keep(*sub);
            sub->done.Notify();
          }
          active.clear();
          failed_.clear();
          failed_p2p_.clear();
          CloseEndpoints(/*graceful=*/false);
        }
        while (!incoming_.empty()) {
          active.push_back(std::move(incoming_.front()));
          incoming_.pop_front();
        }
      }
      unsigned progressed = 0;
      while (unsigned n = ucp_worker_progress(worker_)) progressed += n;
      // Polling: give the core away when nothing moved (ranks may share
      // cores with their peers).
      if (progressed == 0) std::this_thread::yield();
      for (auto it = active.begin(); it != active.end();) {
        Submission& sub = **it;
        if (sub.p2p != nullptr ? !sub.p2p->Advance() : !sub.job->Advance()) {
          if (sub.want_peer.load(std::memory_order_relaxed)) {
            sub.waiting_on.store(sub.p2p != nullptr ? sub.p2p->waiting_on()
                                                    : sub.job->waiting_on(),
                                 std::memory_order_relaxed);
          }
          ++it;
          continue;
        }
        sub.status = sub.p2p != nullptr ? sub.p2p->status() : sub.job->status();
        sub.suspect =
            sub.p2p != nullptr ? sub.p2p->suspect() : sub.job->suspect();
        {
          absl::MutexLock lock(&mu_);
          if (sub.status.ok()) {
            if (sub.job != nullptr) {
              if (auto s = sub.job->TakeScratch(); s != nullptr) {
                scratch_pool_.push_back(std::move(s));
              }
            }
          } else {
            // Requests were cancelled; keep the memory they pointed at
            // until the worker is gone.
            Keep(sub);
          }
        }
        sub.done.Notify();
        it = active.erase(it);
      }
    }
    // Stopping: fail what is still in flight.
    for (auto& sub : active) {
      sub->status = absl::CancelledError("ucx: communicator closed");
      Keep(*sub);
      sub->done.Notify();
    }
  }

  // Progress thread: keeps a finished job's memory until the worker goes.
  void Keep(Submission& sub) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (sub.job != nullptr) failed_.push_back(std::move(sub.job));
    if (sub.p2p != nullptr) failed_p2p_.push_back(std::move(sub.p2p));
  }

  void Shutdown() {
    // Healthy: meet the other ranks first, so that nobody closes its
    // connections while a peer still completes its last transfers.
    if (connected_ && store_ != nullptr && size_ > 1 && health_.Get().ok()) {
      (void)GroupBarrier(*store_, absl::StrCat(group_, "/ucx/close"));
    }
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      for (auto& sub : incoming_) {
        sub->status = absl::CancelledError("ucx: communicator closed");
        sub->done.Notify();
      }
      incoming_.clear();
    }
    if (thread_.joinable()) thread_.join();
    failed_.clear();  // cancels and frees their requests
    failed_p2p_.clear();
    // Flush our last messages to the peers when healthy; after a failure
    // some transfers can never complete, so drop them.
    CloseEndpoints(/*graceful=*/health_.Get().ok());
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
    worker_ = nullptr;
    context_ = nullptr;
  }

  // Progress thread or Shutdown only. A graceful close flushes what we
  // sent (a peer may still be receiving our last messages) before the
  // connection goes; a forced one (Abort) drops it.
  void CloseEndpoints(bool graceful) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::vector<ucs_status_ptr_t> pending;
    for (auto& [peer, ep] : eps_) {
      ucp_request_param_t p{};
      p.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      p.flags = graceful ? 0 : UCP_EP_CLOSE_FLAG_FORCE;
      ucs_status_ptr_t r = ucp_ep_close_nbx(ep, &p);
      if (UCS_PTR_IS_PTR(r)) pending.push_back(r);
    }
    const absl::Time until = absl::Now() + (graceful ? timeout_ : absl::Seconds(2));
    for (ucs_status_ptr_t r : pending) {
      while (ucp_request_check_status(r) == UCS_INPROGRESS &&
             absl::Now() < until) {
        if (ucp_worker_progress(worker_) == 0) std::this_thread::yield();
      }
      ucp_request_free(r);
    }
    eps_.clear();
  }

  const int rank_;
  const int size_;
  const CommConfig config_;  // for children (Split)
  Store* const store_;  // not owned; used at creation and destruction
  const std::string group_;
  const absl::Duration timeout_;
  const size_t chunk_bytes_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  // Written by Connect and CloseEndpoints; read under mu_ by the wake test.
  std::map<int, ucp_ep_h> eps_;
  RingLinks links_;
  P2PLinks p2p_links_;
  SequenceCounters seqs_;
  P2PCounters p2p_seqs_;
  HealthState health_;
  uint64_t probe_seq_ = 0;  // private tag 255: MeasureLimit and Split
  uint64_t split_calls_ = 0;
  bool connected_ = false;  // creation completed
  const Recording rec_;

  absl::Mutex peers_mu_;
  std::map<int, Status> peer_errors_ ABSL_GUARDED_BY(peers_mu_);
  // Worker addresses of SendRecvGroup's peers (FetchAddress).
  std::map<int, std::string> addresses_ ABSL_GUARDED_BY(peers_mu_);

  absl::Mutex mu_;
  std::deque<std::shared_ptr<Submission>> incoming_ ABSL_GUARDED_BY(mu_);
  std::vector<std::unique_ptr<Scratch>> scratch_pool_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool abort_requested_ ABSL_GUARDED_BY(mu_) = false;
  bool eps_open_ ABSL_GUARDED_BY(mu_) = true;
  std::thread thread_;
  // Failed jobs: owned by the progress thread, then by Shutdown.
  std::vector<std::unique_ptr<RingJob>> failed_;
  std::vector<std::unique_ptr<P2PJob>> failed_p2p_;
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateUcxCommunicator(
    const CommConfig& config) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<UcxCommunicator> c,
                         UcxCommunicator::Create(config));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace baton
