#include "baton/comm/nccl/nccl.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "baton/comm/backend_util.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/comm/flight_recorder.h"
#include "baton/comm/hang_reporting.h"
#include "baton/runtime/cuda_check.h"
#include "baton/runtime/nccl_check.h"

namespace baton {
namespace {

StatusOr<ncclDataType_t> ToNccl(DataType t) {
  switch (t) {
    case DataType::kF32:
      return ncclFloat32;
    case DataType::kBF16:
      return ncclBfloat16;
    case DataType::kF16:
      return ncclFloat16;
    case DataType::kI32:
      return ncclInt32;
  }
  return absl::InvalidArgumentError("nccl: bad data type");
}

class NcclCommunicator : public CommunicatorBase {
  struct Pending;  // a collective the watchdog waits for

 public:
  static StatusOr<std::unique_ptr<NcclCommunicator>> Create(
      const CommConfig& config) {
    auto c = std::unique_ptr<NcclCommunicator>(new NcclCommunicator(config));
    BATON_RETURN_IF_ERROR(c->Init(config));
    c->watchdog_ = std::thread([p = c.get()] { p->Watch(); });
    return c;
  }

  ~NcclCommunicator() override {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
    }
    if (watchdog_.joinable()) watchdog_.join();
    (void)cudaSetDevice(ordinal_);
    if (comm_ != nullptr) {
      if (health_.Get().ok() && Finalize().ok()) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    for (cudaEvent_t e : free_events_) cudaEventDestroy(e);
    for (cudaEvent_t e : free_timing_events_) cudaEventDestroy(e);
    for (auto& p : pending_) {
      cudaEventDestroy(p.event);
      if (p.start != nullptr) cudaEventDestroy(p.start);
    }
    if (ref_event_ != nullptr) cudaEventDestroy(ref_event_);
    if (ref_stream_ != nullptr) cudaStreamDestroy(ref_stream_);
    if (scratch_ != nullptr) cudaFree(scratch_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "nccl"; }
  CommCaps caps() const override {
    CommCaps c;
    c.accumulate_fp32 = false;  // NCCL reduces in the buffer's type
    c.graph_capture = true;
    c.device_memory = true;
    c.p2p_device_memory = true;
    return c;
  }

  // ncclSend / ncclRecv of every op inside one ncclGroupStart / End on
  // `stream`; watched like a collective (one event for the group). NCCL
  // does not compare the sizes of a send and its receive.
  Status SendRecvGroup(absl::Span<const P2POp> ops, Stream& stream,
                       const CollectiveOptions& options) override {
    BATON_RETURN_IF_ERROR(ValidateP2P("nccl", rank_, size_, ops, options));
    if (stream.kind() != DeviceKind::kCuda) {
      return absl::InvalidArgumentError("nccl: send/recv need a CUDA stream");
    }
    BATON_RETURN_IF_ERROR(health_.Get());
    std::vector<ncclDataType_t> types;
    for (const P2POp& op : ops) {
      BATON_ASSIGN_OR_RETURN(ncclDataType_t t, ToNccl(op.type));
      types.push_back(t);
    }
    auto s = static_cast<cudaStream_t>(stream.native_handle());
    BATON_CUDA_CHECK(cudaSetDevice(ordinal_));
    std::vector<uint64_t> records;
    std::string label;
    for (const P2POp& op : ops) {
      const uint64_t seq = p2p_seqs_.Next(op.kind, op.peer, options.tag);
      records.push_back(
          RecordP2P(rec_, op, options, seq, WorldRanks(config_)));
      if (label.empty()) label = P2PLabel(op, options.tag, seq);
    }
    ncclResult_t r = ncclGroupStart();
    for (size_t i = 0; i < ops.size() && r == ncclSuccess; ++i) {
      const P2POp& op = ops[i];
      r = op.kind == P2POp::Kind::kSend
              ? ncclSend(op.send, op.count, types[i], op.peer, comm_, s)
              : ncclRecv(op.recv, op.count, types[i], op.peer, comm_, s);
    }
    const ncclResult_t end = ncclGroupEnd();
    if (r == ncclSuccess) r = end;
    if (r != ncclSuccess && r != ncclInProgress) {
      for (uint64_t ri : records) rec_.recorder->Complete(ri, false);
      return health_.FailWith([&]() -> Status {
        BATON_NCCL_CHECK(r);
        return Status();
      }());
    }
    BATON_RETURN_IF_ERROR(WaitEnqueued(r, "send/recv group"));
    cudaEvent_t ev;
    {
      absl::MutexLock lock(&mu_);
      if (free_events_.empty()) {
        BATON_CUDA_CHECK(
            cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      } else {
        ev = free_events_.back();
        free_events_.pop_back();
      }
    }
    BATON_CUDA_CHECK(cudaEventRecord(ev, s));
    {
      absl::MutexLock lock(&mu_);
      Pending p{ev, absl::Now() + EffectiveTimeout(options, timeout_),
                absl::StrCat("nccl group of ", ops.size(), " send/recv (",
                             label, ops.size() > 1 ? ", ..." : "",
                             ") on rank ", rank_),
                records[0], nullptr};
      p.more.assign(records.begin() + 1, records.end());
      pending_.push_back(std::move(p));
    }
    return stream.Enqueue([this]() { return health_.Get(); });
  }

  StatusOr<Limit> MeasureLimit(size_t bytes, int iters) override {
    if (bytes == 0) {
      return absl::InvalidArgumentError("MeasureLimit: bytes must be > 0");
    }
    BATON_RETURN_IF_ERROR(health_.Get());
    BATON_CUDA_CHECK(cudaSetDevice(ordinal_));
    void* a = nullptr;
    void* b = nullptr;
    cudaStream_t s = nullptr;
    cudaEvent_t e0 = nullptr, e1 = nullptr;
    auto cleanup = [&] {
      if (a) cudaFree(a);
      if (b) cudaFree(b);
      if (e0) cudaEventDestroy(e0);
      if (e1) cudaEventDestroy(e1);
      if (s) cudaStreamDestroy(s);
    };
    float slowest = 0;  // the figure, once every rank has measured
    Status st = [&]() -> Status {
      BATON_CUDA_CHECK(cudaMalloc(&a, bytes));
      BATON_CUDA_CHECK(cudaMalloc(&b, bytes));
      BATON_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      BATON_CUDA_CHECK(cudaEventCreate(&e0));
      BATON_CUDA_CHECK(cudaEventCreate(&e1));
      BATON_CUDA_CHECK(cudaMemsetAsync(a, 1, bytes, s));
      const int n = std::max(iters, 1);
      BATON_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
      BATON_CUDA_CHECK(cudaEventRecord(e0, s));
      for (int i = 0; i < n; ++i) {
        BATON_CUDA_CHECK(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
      }
      BATON_CUDA_CHECK(cudaEventRecord(e1, s));
      BATON_CUDA_CHECK(cudaEventSynchronize(e1));
      float ms = 0;
      BATON_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
      const double best =
          ms > 0 ? static_cast<double>(bytes) * n / (ms * 1e-3) / 1e9 : 0;
      // The slowest rank's figure, on every rank.
      float v = static_cast<float>(best);
      BATON_CUDA_CHECK(cudaMemcpy(a, &v, sizeof(v), cudaMemcpyHostToDevice));
      BATON_RETURN_IF_ERROR(WaitEnqueued(
          ncclAllReduce(a, a, 1, ncclFloat32, ncclMin, comm_, s), "min"));
      BATON_CUDA_CHECK(cudaMemcpyAsync(&v, a, sizeof(v), cudaMemcpyDeviceToHost, s));
      BATON_CUDA_CHECK(cudaStreamSynchronize(s));
      slowest = v;
      return Status();
    }();
    cleanup();
    BATON_RETURN_IF_ERROR(st);
    return Limit{slowest, "d2d"};
  }

  Status health() override { return health_.Get(); }

  FlightRecorder* recorder() override { return rec_.recorder.get(); }

  // ncclCommSplit; the child is non-blocking like its parent, and owns its
  // NCCL communicator (its own channels and sequence numbers).
  StatusOr<std::unique_ptr<Communicator>> Split(int colour, int key) override {
    BATON_RETURN_IF_ERROR(health_.Get());
    BATON_CUDA_CHECK(cudaSetDevice(ordinal_));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclComm_t child = nullptr;
    ncclComm_t parent = nullptr;
    {
      absl::MutexLock lock(&mu_);
      parent = comm_;
    }
    if (parent == nullptr) {
      return absl::UnavailableError(
          absl::StrCat("nccl rank ", rank_, " aborted"));
    }
    // Every rank's (colour, key): the child's world ranks, for reports.
    const int mine[2] = {colour < 0 ? kSplitNoColour : colour, key};
    BATON_ASSIGN_OR_RETURN(std::vector<int> all, GatherPairs(parent, mine));
    const uint64_t number = split_calls_++;
    const ncclResult_t r =
        ncclCommSplit(parent, colour < 0 ? NCCL_SPLIT_NOCOLOR : colour, key,
                      &child, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
      return health_.FailWith([&]() -> Status {
        BATON_NCCL_CHECK(r);
        return Status();
      }());
    }
    BATON_RETURN_IF_ERROR(WaitEnqueued(r, "split"));
    if (child == nullptr) return std::unique_ptr<Communicator>();
    std::vector<std::pair<int, int>> pairs(size_);
    for (int q = 0; q < size_; ++q) pairs[q] = {all[2 * q], all[2 * q + 1]};
    CommConfig cc = config_;
    cc.group = absl::StrCat(config_.group, "/split", number, "/", mine[0]);
    cc.recorder = rec_.recorder;
    cc.world_ranks = ChildWorldRanks(pairs, rank_, WorldRanks(config_));
    cc.size = static_cast<int>(cc.world_ranks.size());
    cc.rank = PlaceInSplit(pairs, rank_).rank;
    auto c = std::unique_ptr<NcclCommunicator>(new NcclCommunicator(cc));
    c->comm_ = child;
    BATON_RETURN_IF_ERROR(c->WaitEnqueued(ncclInProgress, "split (child)"));
    BATON_NCCL_CHECK(ncclCommCount(child, &c->size_));
    BATON_NCCL_CHECK(ncclCommUserRank(child, &c->rank_));
    BATON_CUDA_CHECK(cudaMalloc(&c->scratch_, 256));
    BATON_CUDA_CHECK(cudaMemset(c->scratch_, 0, 256));
    BATON_RETURN_IF_ERROR(c->AnchorClock());
    c->watchdog_ = std::thread([p = c.get()] { p->Watch(); });
    return std::unique_ptr<Communicator>(std::move(c));
  }

  void Abort() override {
    rec_.recorder->MarkAborted();
    health_.Fail(absl::UnavailableError(
        absl::StrCat("nccl rank ", rank_, " aborted")));
    absl::MutexLock lock(&mu_);
    AbortLocked();
  }

 private:
  // A root communicator, or a child of Split (whose rank and size are
  // checked against NCCL's once it made it).
  explicit NcclCommunicator(const CommConfig& config)
      : rank_(config.rank),
        size_(config.size),
        ordinal_(config.device->ordinal()),
        timeout_(config.timeout),
        config_(config),
        store_(config.store),
        device_arrivals_(config.device_arrivals),
        rec_(StartRecording(config, "nccl")) {}

  // An all-gather of two ints per rank on `comm` (Split's colours and keys),
  // blocking; device memory in between.
  StatusOr<std::vector<int>> GatherPairs(ncclComm_t comm, const int mine[2]) {
    std::vector<int> all(2 * size_);
    void* buf = nullptr;
    cudaStream_t s = nullptr;
    Status st = [&]() -> Status {
      BATON_CUDA_CHECK(cudaMalloc(&buf, all.size() * sizeof(int)));
      BATON_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      int* mine_dev = static_cast<int*>(buf) + 2 * rank_;
      BATON_CUDA_CHECK(cudaMemcpyAsync(mine_dev, mine, 2 * sizeof(int),
                                       cudaMemcpyHostToDevice, s));
      BATON_RETURN_IF_ERROR(WaitEnqueued(
          ncclAllGather(mine_dev, buf, 2, ncclInt32, comm, s), "split"));
      BATON_CUDA_CHECK(cudaMemcpyAsync(all.data(), buf,
                                       all.size() * sizeof(int),
                                       cudaMemcpyDeviceToHost, s));
      BATON_CUDA_CHECK(cudaStreamSynchronize(s));
      return Status();
    }();
    if (buf != nullptr) cudaFree(buf);
    if (s != nullptr) cudaStreamDestroy(s);
    BATON_RETURN_IF_ERROR(st);
    return all;
  }

  // Device arrivals: a timing event on a private stream, completed now,
  // whose host time converts later events' times (cudaEventElapsedTime)
  // to the host clock. The watchdog renews it every few seconds (float
  // milliseconds lose microseconds past about 10 s).
  Status AnchorClock() {
    if (!device_arrivals_) return Status();
    if (ref_stream_ == nullptr) {
      BATON_CUDA_CHECK(
          cudaStreamCreateWithFlags(&ref_stream_, cudaStreamNonBlocking));
      BATON_CUDA_CHECK(cudaEventCreate(&ref_event_));
    }
    BATON_CUDA_CHECK(cudaEventRecord(ref_event_, ref_stream_));
    BATON_CUDA_CHECK(cudaEventSynchronize(ref_event_));
    ref_ns_ = absl::GetCurrentTimeNanos();
    return Status();
  }

  Status Init(const CommConfig& config) {
    BATON_RETURN_IF_ERROR(ValidateWorldRanks(config));
    if (config.device->kind() != DeviceKind::kCuda) {
      return absl::InvalidArgumentError(
          "nccl: the nccl backend needs a CUDA device");
    }
    if (size_ > 1 && config.store == nullptr) {
      return absl::InvalidArgumentError("nccl: CommConfig::store is null");
    }
    BATON_CUDA_CHECK(cudaSetDevice(ordinal_));
    const std::string prefix = absl::StrCat(config.group, "/nccl/");
    ncclUniqueId id;
    if (size_ > 1) {
      BATON_RETURN_IF_ERROR(CheckDistinctGpus(*config.store, prefix));
      if (rank_ == 0) {
        BATON_NCCL_CHECK(ncclGetUniqueId(&id));
        BATON_RETURN_IF_ERROR(config.store->Set(
            absl::StrCat(prefix, "id"),
            std::string(reinterpret_cast<const char*>(&id), sizeof(id))));
      } else {
        BATON_ASSIGN_OR_RETURN(
            std::string s,
            config.store->Get(absl::StrCat(prefix, "id"), timeout_));
        if (s.size() != sizeof(id)) {
          return absl::InternalError("nccl: unique id of the wrong size");
        }
        std::memcpy(&id, s.data(), sizeof(id));
      }
    } else {
      BATON_NCCL_CHECK(ncclGetUniqueId(&id));
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    const ncclResult_t r =
        ncclCommInitRankConfig(&comm_, size_, id, rank_, &cfg);
    if (r != ncclSuccess && r != ncclInProgress) {
      BATON_NCCL_CHECK(r);
    }
    BATON_RETURN_IF_ERROR(WaitEnqueued(r, "init"));
    BATON_CUDA_CHECK(cudaMalloc(&scratch_, 256));
    BATON_CUDA_CHECK(cudaMemset(scratch_, 0, 256));
    return AnchorClock();
  }

  Status CheckDistinctGpus(Store& store, const std::string& prefix) {
    cudaDeviceProp prop;
    BATON_CUDA_CHECK(cudaGetDeviceProperties(&prop, ordinal_));
    char host[256] = {0};
    ::gethostname(host, sizeof(host) - 1);
    const std::string me = absl::StrCat(
        host, "/",
        absl::BytesToHexString(absl::string_view(prop.uuid.bytes, 16)));
    BATON_RETURN_IF_ERROR(store.Set(absl::StrCat(prefix, "gpu/", rank_), me));
    for (int q = 0; q < size_; ++q) {
      if (q == rank_) continue;
      BATON_ASSIGN_OR_RETURN(
          std::string theirs,
          store.Get(absl::StrCat(prefix, "gpu/", q), timeout_));
      if (theirs == me) {
        return absl::FailedPreconditionError(absl::StrCat(
            "nccl: ranks ", std::min(q, rank_), " and ", std::max(q, rank_),
            " both use GPU ", me,
            "; NCCL 2.28 refuses two ranks of one communicator on one GPU. "
            "Give each rank its own GPU, or use backend 'inproc' for several "
            "ranks on one GPU"));
      }
    }
    return Status();
  }

  // Polls a non-blocking call until NCCL has finished enqueuing it.
  Status WaitEnqueued(ncclResult_t r, const char* what) {
    const absl::Time deadline = absl::Now() + timeout_;
    while (r == ncclInProgress) {
      if (absl::Now() > deadline) {
        absl::MutexLock lock(&mu_);
        AbortLocked();
        return health_.FailWith(absl::DeadlineExceededError(absl::StrCat(
            "nccl ", what, " on rank ", rank_, " did not complete within ",
            absl::FormatDuration(timeout_), " (a rank never arrived?)")));
      }
      std::this_thread::yield();
      ncclCommGetAsyncError(comm_, &r);
    }
    if (r != ncclSuccess) {
      Status s = [&]() -> Status {
        BATON_NCCL_CHECK(r);
        return Status();
      }();
      return health_.FailWith(s);
    }
    return Status();
  }

  Status Finalize() {
    ncclResult_t r = ncclCommFinalize(comm_);
    if (r != ncclSuccess && r != ncclInProgress) return absl::InternalError("finalize");
    return WaitEnqueued(r, "finalize");
  }

  Status Issue(CollectiveKind kind, const void* send, void* recv,
               size_t count, DataType type, ReduceOp op, int root,
               Stream& stream, const CollectiveOptions& options) override {
    BATON_RETURN_IF_ERROR(ValidateCollective(kind, rank_, size_, send, recv,
                                             count, type, root, options));
    if (kind == CollectiveKind::kBarrier) {
      // NCCL has no barrier: an all-reduce of one int on a private buffer.
      send = recv = scratch_;
      count = 1;
      type = DataType::kI32;
    }
    if (stream.kind() != DeviceKind::kCuda) {
      return absl::InvalidArgumentError("nccl: collectives need a CUDA stream");
    }
    if (options.accumulate_fp32 && DataTypeSize(type) == 2 && op != ReduceOp::kMax) {
      return absl::InvalidArgumentError(
          "nccl: accumulate_fp32 is not supported (NCCL reduces in the "
          "buffer's type); reduce an fp32 buffer instead");
    }
    BATON_RETURN_IF_ERROR(health_.Get());
    BATON_ASSIGN_OR_RETURN(ncclDataType_t t, ToNccl(type));
    const ncclRedOp_t nop =
        op == ReduceOp::kAvg ? ncclAvg : op == ReduceOp::kMax ? ncclMax : ncclSum;
    auto s = static_cast<cudaStream_t>(stream.native_handle());
    BATON_CUDA_CHECK(cudaSetDevice(ordinal_));
    const CollectiveHeader h = MakeHeader(kind, count, type, op, root, options,
                                          seqs_.Next(options.tag));
    // Arrival on the device (CommConfig::device_arrivals): a timing event
    // just before the collective.
    cudaEvent_t start = nullptr;
    if (device_arrivals_) {
      {
        absl::MutexLock lock(&mu_);
        if (!free_timing_events_.empty()) {
          start = free_timing_events_.back();
          free_timing_events_.pop_back();
        }
      }
      if (start == nullptr) BATON_CUDA_CHECK(cudaEventCreate(&start));
      BATON_CUDA_CHECK(cudaEventRecord(start, s));
    }
    const uint64_t ri = rec_.Issue(h, options.position);
    ncclResult_t r = ncclSuccess;
    switch (kind) {
      case CollectiveKind::kAllGather:
        r = ncclAllGather(send, recv, count, t, comm_, s);
        break;
      case CollectiveKind::kReduceScatter:
        r = ncclReduceScatter(send, recv, count, t, nop, comm_, s);
        break;
      case CollectiveKind::kAllReduce:
      case CollectiveKind::kBarrier:
        r = ncclAllReduce(send, recv, count, t, nop, comm_, s);
        break;
      case CollectiveKind::kBroadcast:
        r = ncclBroadcast(send, recv, count, t, root, comm_, s);
        break;
      case CollectiveKind::kSend:  // SendRecvGroup, never Issue
      case CollectiveKind::kRecv:
        return absl::InternalError("nccl: send/recv issued as a collective");
    }
    if (r != ncclSuccess && r != ncclInProgress) {
      return health_.FailWith([&]() -> Status {
        BATON_NCCL_CHECK(r);
        return Status();
      }());
    }
    BATON_RETURN_IF_ERROR(WaitEnqueued(r, CollectiveName(kind)));
    // Watch its completion, and surface the health on the stream.
    cudaEvent_t ev;
    {
      absl::MutexLock lock(&mu_);
      if (free_events_.empty()) {
        BATON_CUDA_CHECK(
            cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
      } else {
        ev = free_events_.back();
        free_events_.pop_back();
      }
    }
    BATON_CUDA_CHECK(cudaEventRecord(ev, s));
    {
      absl::MutexLock lock(&mu_);
      pending_.push_back(Pending{
          ev, absl::Now() + EffectiveTimeout(options, timeout_),
          absl::StrCat("nccl ", CollectiveLabel(h), " on rank ", rank_), ri,
          start});
    }
    return stream.Enqueue([this]() { return health_.Get(); });
  }

  // Polls NCCL's asynchronous error and the pending collectives' events:
  // completes their flight records (and device arrivals), and on an error
  // or a collective past its deadline writes the hang report (outside the
  // lock: store calls), fails the communicator and aborts it.
  void Watch() {
    (void)cudaSetDevice(ordinal_);
    absl::Time anchored = absl::Now();
    for (;;) {
      absl::SleepFor(absl::Milliseconds(20));
      Status failure;
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        if (comm_ == nullptr || aborted_) continue;
        if (device_arrivals_ && pending_.empty() &&
            absl::Now() - anchored > absl::Seconds(5)) {
          (void)AnchorClock();
          anchored = absl::Now();
        }
        ncclResult_t r = ncclSuccess;
        ncclCommGetAsyncError(comm_, &r);
        if (r != ncclSuccess && r != ncclInProgress) {
          failure = absl::UnavailableError(absl::StrCat(
              "nccl rank ", rank_, ": asynchronous error: ",
              ncclGetErrorString(r), " (", ncclGetLastError(comm_), ")"));
        }
        while (failure.ok() && !pending_.empty()) {
          Pending& p = pending_.front();
          const cudaError_t q = cudaEventQuery(p.event);
          if (q == cudaErrorNotReady) {
            if (absl::Now() > p.deadline) {
              failure = absl::DeadlineExceededError(absl::StrCat(
                  p.label, " did not complete within its timeout; the "
                           "communicator was aborted"));
            }
            break;
          }
          CompleteLocked(p);
          pending_.pop_front();
        }
      }
      if (failure.ok()) continue;
      health_.Fail(ReportHangThroughStore(store_, HangOptions(),
                                          *rec_.recorder, failure));
      absl::MutexLock lock(&mu_);
      AbortLocked();
    }
  }

  // A pending collective's events completed.
  void CompleteLocked(const Pending& p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (p.start != nullptr) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, ref_event_, p.start) == cudaSuccess) {
        rec_.recorder->SetStart(p.record,
                                ref_ns_ + static_cast<int64_t>(ms * 1e6));
      }
      free_timing_events_.push_back(p.start);
    }
    rec_.recorder->Complete(p.record, true);
    for (uint64_t ri : p.more) rec_.recorder->Complete(ri, true);
    free_events_.push_back(p.event);
  }

  HangStoreOptions HangOptions() const {
    HangStoreOptions o;
    o.collect = std::clamp(timeout_ / 4, absl::Milliseconds(100),
                           absl::Seconds(5));
    o.store_timeout =
        std::clamp(timeout_ / 2, absl::Milliseconds(500), absl::Seconds(5));
    o.sink = config_.on_hang_report;
    return o;
  }

  void AbortLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (aborted_ || comm_ == nullptr) return;
    aborted_ = true;
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

  struct Pending {
    cudaEvent_t event;
    absl::Time deadline;
    std::string label;
    uint64_t record = FlightRecorder::kNoRecord;
    cudaEvent_t start = nullptr;  // device arrival (timing event) or null
    std::vector<uint64_t> more;   // a send/recv group's other records
  };

  int rank_;  // const after creation
  int size_;  // const after creation
  const int ordinal_;
  const absl::Duration timeout_;
  const CommConfig config_;  // for children (Split) and the reports
  Store* const store_;       // the hang report's; may be null (one rank)
  const bool device_arrivals_;
  const Recording rec_;
  uint64_t split_calls_ = 0;
  ncclComm_t comm_ = nullptr;
  void* scratch_ = nullptr;
  SequenceCounters seqs_;
  P2PCounters p2p_seqs_;
  HealthState health_;
  std::thread watchdog_;
  // Device arrivals: the clock anchor (AnchorClock; Init, then only the
  // watchdog).
  cudaStream_t ref_stream_ = nullptr;
  cudaEvent_t ref_event_ = nullptr;
  int64_t ref_ns_ = 0;

  absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Pending> pending_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaEvent_t> free_events_ ABSL_GUARDED_BY(mu_);
  std::vector<cudaEvent_t> free_timing_events_ ABSL_GUARDED_BY(mu_);
};

}  // namespace

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CommConfig& config) {
  BATON_ASSIGN_OR_RETURN(std::unique_ptr<NcclCommunicator> c,
                         NcclCommunicator::Create(config));
  return std::unique_ptr<Communicator>(std::move(c));
}

}  // namespace baton
