// ContextAttention (both variants) over C = 1..4 ranks as threads on the
// inproc backend, against the unsplit float64 attention (ops/testing/).
// Three modes: host streams (one host work item per transfer), host streams
// on the event protocol, and CUDA streams on one GPU (skipped without one).
#include "baton/parallel/context/context_attention.h"

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "baton/comm/factory.h"
#include "baton/comm/flight_recorder.h"
#include "baton/ops/testing/attention_reference.h"
#include "baton/ops/testing/test_util.h"
#include "baton/runtime/device.h"
#include "gtest/gtest.h"

namespace baton::context {
namespace {

using ops::AttentionShape;
using ops::testing::Compare;

enum class Mode { kHost, kEvents, kGpu };

const char* ModeName(Mode m) {
  return m == Mode::kHost ? "host" : m == Mode::kEvents ? "events" : "gpu";
}

// The ranks of one context group: communicators and two streams each.
class Ranks {
 public:
  // one_stream: the transfers go on the compute stream too.
  Ranks(int n, Mode mode, absl::Duration timeout = absl::Seconds(60), bool one_stream = false)
      : n_(n), one_stream_(one_stream) {
    device_ = mode == Mode::kGpu ? *CreateCudaDevice(0) : *CreateHostDevice();
    CommConfig cfg;
    cfg.device = device_.get();
    cfg.group = "";
    cfg.timeout = timeout;
    cfg.inproc_event_protocol = mode == Mode::kEvents;
    cfg.on_hang_report = [](const std::string&) {};  // keep the log short
    auto comms = CreateInprocGroup(n, cfg);
    EXPECT_TRUE(comms.ok()) << comms.status();
    for (int r = 0; r < n && comms.ok(); ++r) {
      comms_.push_back(std::move((*comms)[r]));
      compute_.push_back(*device_->CreateStream({0, "compute"}));
      comm_.push_back(*device_->CreateStream({-1, "comm"}));
    }
  }
  ~Ranks() {
    for (int r = 0; r < static_cast<int>(compute_.size()); ++r) {
      (void)compute_[r]->Synchronize();
      (void)comm_[r]->Synchronize();
    }
  }
  // body(r) on one thread per rank in `who` (every rank when empty).
  void Run(const std::function<void(int)>& body, std::vector<int> who = {}) {
    if (who.empty()) {
      for (int r = 0; r < n_; ++r) who.push_back(r);
    }
    std::vector<std::thread> threads;
    for (int r : who) threads.emplace_back(body, r);
    for (auto& t : threads) t.join();
  }
  Device& device() { return *device_; }
  Communicator& comm(int r) { return *comms_[r]; }
  Stream& compute(int r) { return *compute_[r]; }
  Stream& comm_stream(int r) { return one_stream_ ? *compute_[r] : *comm_[r]; }

 private:
  int n_;
  bool one_stream_;
  std::unique_ptr<Device> device_;
  std::vector<std::unique_ptr<Communicator>> comms_;
  std::vector<std::unique_ptr<Stream>> compute_, comm_;
};

// The rows of `rank` out of whole sequences of `width` elements per row,
// and back.
std::vector<double> LocalRows(const std::vector<double>& full, const ContextSplit& s, int rank,
                              int64_t batch, int64_t width) {
  std::vector<double> local(batch * s.local_seq() * width);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t row = 0; row < s.local_seq(); ++row)
      for (int64_t e = 0; e < width; ++e)
        local[(b * s.local_seq() + row) * width + e] =
            full[(b * s.seq() + s.Position(rank, row)) * width + e];
  return local;
}
void PutRows(std::vector<double>& full, const std::vector<double>& local, const ContextSplit& s,
             int rank, int64_t batch, int64_t width) {
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t row = 0; row < s.local_seq(); ++row)
      for (int64_t e = 0; e < width; ++e)
        full[(b * s.seq() + s.Position(rank, row)) * width + e] =
            local[(b * s.local_seq() + row) * width + e];
}

// One attention layer's global inputs, its float64 reference and what the
// ranks computed, put back in sequence order.
struct Layer {
  std::vector<double> q, k, v, dout;
  ops::testing::AttentionReference want;
  std::vector<double> out, lse, dq, dk, dv;
};

Layer MakeLayer(const AttentionShape& g, uint64_t seed) {
  using ops::testing::Random;
  using ops::testing::Round;
  Layer l;
  const int64_t nq = g.batch * g.seq * g.heads * g.head_dim;
  const int64_t nk = g.batch * g.seq * g.kv_heads * g.head_dim;
  l.q = Round(Random(nq, seed), g.dtype);
  l.k = Round(Random(nk, seed + 1), g.dtype);
  l.v = Round(Random(nk, seed + 2), g.dtype);
  l.dout = Round(Random(nq, seed + 3), g.dtype);
  l.want = ops::testing::Float64Attention(g, l.q, l.k, l.v, l.dout);
  l.out.assign(nq, NAN);
  l.dq.assign(nq, NAN);
  l.dk.assign(nk, NAN);
  l.dv.assign(nk, NAN);
  l.lse.assign(g.batch * g.heads * g.seq, NAN);
  return l;
}

// Runs `layers` forward in order and backward in reverse (as a step does)
// with one ContextAttention per rank, and puts each rank's results into the
// layers. `observer(r)`: rank r's observer (none when null); with
// `after_forward`, each rank synchronizes its compute stream after the
// forwards and calls it with its rank before the backwards.
void RunLayers(Ranks& ranks, int cp, const AttentionShape& g, std::vector<Layer>& layers,
               const ContextAttentionOptions& options,
               const std::function<ContextAttentionObserver*(int)>& observer = nullptr,
               const std::function<void(int)>& after_forward = nullptr) {
  using ops::testing::Fetch;
  using ops::testing::Pack;
  using ops::testing::Poisoned;
  using ops::testing::Upload;
  const ContextSplit s = *ContextSplit::Create(g.seq, cp);
  AttentionShape local = g;
  local.seq = s.local_seq();
  const int64_t qw = g.heads * g.head_dim, kw = g.kv_heads * g.head_dim;
  const int64_t nq = g.batch * local.seq * qw, nk = g.batch * local.seq * kw;
  const int64_t nl = g.batch * g.heads * local.seq;
  const size_t es = DataTypeSize(g.dtype);
  ranks.Run([&](int r) {
    Device& dev = ranks.device();
    Stream& compute = ranks.compute(r);
    ContextAttentionOptions o = options;
    if (observer) o.observer = observer(r);
    auto made = ContextAttention::Create(ranks.comm(r), dev, local, o);
    ASSERT_TRUE(made.ok()) << made.status();
    ContextAttention& ca = **made;
    struct Bufs {
      DeviceBuffer q, k, v, dout, out, lse, dq, dk, dv;
    };
    std::vector<Bufs> b(layers.size());
    for (size_t i = 0; i < layers.size(); ++i) {
      b[i].q = Upload(dev, compute, Pack(LocalRows(layers[i].q, s, r, g.batch, qw), g.dtype));
      b[i].k = Upload(dev, compute, Pack(LocalRows(layers[i].k, s, r, g.batch, kw), g.dtype));
      b[i].v = Upload(dev, compute, Pack(LocalRows(layers[i].v, s, r, g.batch, kw), g.dtype));
      b[i].dout =
          Upload(dev, compute, Pack(LocalRows(layers[i].dout, s, r, g.batch, qw), g.dtype));
      b[i].out = Poisoned(dev, compute, nq * es);
      b[i].lse = Poisoned(dev, compute, nl * 4);
      b[i].dq = Poisoned(dev, compute, nq * es);
      b[i].dk = Poisoned(dev, compute, nk * es);
      b[i].dv = Poisoned(dev, compute, nk * es);
    }
    for (size_t i = 0; i < layers.size(); ++i) {
      ASSERT_TRUE(ca.Forward(compute, ranks.comm_stream(r), b[i].q.data(), b[i].k.data(),
                             b[i].v.data(), b[i].out.data(),
                             static_cast<float*>(b[i].lse.data())).ok());
    }
    if (after_forward) {
      const Status fwd = compute.Synchronize();
      ASSERT_TRUE(fwd.ok()) << fwd;
      after_forward(r);
    }
    for (size_t i = layers.size(); i-- > 0;) {
      ASSERT_TRUE(ca.Backward(compute, ranks.comm_stream(r), b[i].dout.data(), b[i].q.data(),
                              b[i].k.data(), b[i].v.data(), b[i].out.data(),
                              static_cast<const float*>(b[i].lse.data()), b[i].dq.data(),
                              b[i].dk.data(), b[i].dv.data()).ok());
    }
    const Status done = compute.Synchronize();
    ASSERT_TRUE(done.ok()) << done;
    for (size_t i = 0; i < layers.size(); ++i) {
      Layer& l = layers[i];  // each rank writes its own rows
      PutRows(l.out, Fetch(compute, b[i].out, nq, g.dtype), s, r, g.batch, qw);
      PutRows(l.dq, Fetch(compute, b[i].dq, nq, g.dtype), s, r, g.batch, qw);
      PutRows(l.dk, Fetch(compute, b[i].dk, nk, g.dtype), s, r, g.batch, kw);
      PutRows(l.dv, Fetch(compute, b[i].dv, nk, g.dtype), s, r, g.batch, kw);
      PutRows(l.lse, Fetch(compute, b[i].lse, nl, DataType::kF32), s, r, g.batch * g.heads, 1);
    }
  });
}

void ExpectEqualsUnsplit(const Layer& l, DataType t) {
  const double tol = ops::testing::Tolerance(t);
  // fp32: 1e-5 of the scale; bf16: the rounding of out (which the
  // backward's delta reads) and of the gradients dominates.
  const double gtol = t == DataType::kF32 ? 1e-5 : 3e-2;
  EXPECT_EQ(Compare("out", l.out, l.want.out, tol), "");
  EXPECT_EQ(Compare("lse", l.lse, l.want.lse, 1e-5), "");
  EXPECT_EQ(Compare("dq", l.dq, l.want.dq, gtol), "");
  EXPECT_EQ(Compare("dk", l.dk, l.want.dk, gtol), "");
  EXPECT_EQ(Compare("dv", l.dv, l.want.dv, gtol), "");
}

class ContextAttentionTest
    : public ::testing::TestWithParam<std::tuple<Mode, ContextAttentionKind>> {
 protected:
  void SetUp() override {
    if (mode() == Mode::kGpu && CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  }
  Mode mode() const { return std::get<0>(GetParam()); }
  ContextAttentionKind kind() const { return std::get<1>(GetParam()); }
};

// Two layers forward, then backward in reverse, on one object per rank:
// every rank's rows of out, lse, dq, dk and dv equal the unsplit attention's.
TEST_P(ContextAttentionTest, ForwardAndBackwardEqualTheUnsplitAttention) {
  for (int cp : {1, 2, 3, 4}) {
    for (DataType t : {DataType::kF32, DataType::kBF16}) {
      // GQA (4 query heads on 2 key / value heads) and MHA; 2 sequences of
      // 2 cp chunks of 3 tokens.
      for (AttentionShape g : {AttentionShape{2, 6 * cp, 4, 2, 8, t},
                               AttentionShape{2, 6 * cp, 2, 2, 4, t}}) {
        SCOPED_TRACE(::testing::Message() << "cp " << cp << " " << DataTypeName(t) << " heads "
                                          << g.heads << "/" << g.kv_heads);
        Ranks ranks(cp, mode());
        std::vector<Layer> layers = {MakeLayer(g, 10 * cp + 1), MakeLayer(g, 10 * cp + 5)};
        ContextAttentionOptions o;
        o.kind = kind();
        RunLayers(ranks, cp, g, layers, o);
        for (const Layer& l : layers) ExpectEqualsUnsplit(l, t);
      }
    }
  }
}

// The transfers on the compute stream itself: correct, without overlap.
TEST_P(ContextAttentionTest, OneStreamForComputeAndTransfersIsCorrect) {
  if (mode() == Mode::kGpu) GTEST_SKIP() << "the host modes cover the stream order";
  const int cp = 3;
  const AttentionShape g{1, 6 * cp, 4, 2, 8, DataType::kF32};
  Ranks ranks(cp, mode(), absl::Seconds(60), /*one_stream=*/true);
  std::vector<Layer> layers = {MakeLayer(g, 3)};
  ContextAttentionOptions o;
  o.kind = kind();
  RunLayers(ranks, cp, g, layers, o);
  ExpectEqualsUnsplit(layers[0], g.dtype);
}

INSTANTIATE_TEST_SUITE_P(
    ModesAndKinds, ContextAttentionTest,
    ::testing::Combine(::testing::Values(Mode::kHost, Mode::kEvents, Mode::kGpu),
                       ::testing::Values(ContextAttentionKind::kRing,
                                         ContextAttentionKind::kAllGather)),
    [](const auto& info) {
      return absl::StrCat(ModeName(std::get<0>(info.param)), "_",
                          ContextAttentionKindName(std::get<1>(info.param)));
    });

// Holds the blocks of each ring step on the compute stream until the
// transfers that the step's blocks must overlap with have ENDED on the comm
// stream (host work waiting on notifications set by host work after each
// transfer): if a transfer waited for those blocks instead, the gate would
// time out and the call fail. Also logs the order in which work is issued.
// One call at a time: Reset between calls, after the streams have run.
class GateObserver : public ContextAttentionObserver {
 public:
  explicit GateObserver(int cp) : cp_(cp) {}

  Status Around(ContextWork what, int step, Stream& stream,
                const std::function<Status()>& issue) override {
    log_.push_back(absl::StrCat(ContextWorkName(what), " ", step));
    if (what == ContextWork::kKvTransfer || what == ContextWork::kDkvTransfer) {
      BATON_RETURN_IF_ERROR(issue());
      absl::Notification* ended = Ended(what, step);
      return stream.Enqueue([ended] {
        ended->Notify();
        return absl::OkStatus();
      });
    }
    // The blocks of step s overlap T(s+1); backward ones also D(s), which
    // brings the dK / dV they will add to.
    std::vector<std::pair<std::string, absl::Notification*>> before;
    if (step + 1 < cp_) {
      before.emplace_back(absl::StrCat("kv transfer ", step + 1),
                          Ended(ContextWork::kKvTransfer, step + 1));
    }
    if (what == ContextWork::kBackwardBlocks && step >= 1) {
      before.emplace_back(absl::StrCat("dkv transfer ", step),
                          Ended(ContextWork::kDkvTransfer, step));
    }
    BATON_RETURN_IF_ERROR(stream.Enqueue([before, step]() -> Status {
      for (const auto& [name, n] : before) {
        if (!n->WaitForNotificationWithTimeout(absl::Seconds(20))) {
          return absl::DeadlineExceededError(absl::StrCat(
              "the blocks of step ", step, " could not run before ", name,
              " ended: the transfer waits for them (not overlapped)"));
        }
      }
      return absl::OkStatus();
    }));
    return issue();
  }

  std::vector<std::string> TakeLog() { return std::exchange(log_, {}); }
  void Reset() { ended_.clear(); }

 private:
  absl::Notification* Ended(ContextWork what, int step) {
    auto& n = ended_[{static_cast<int>(what), step}];
    if (n == nullptr) n = std::make_unique<absl::Notification>();
    return n.get();
  }
  int cp_;
  std::vector<std::string> log_;
  std::map<std::pair<int, int>, std::unique_ptr<absl::Notification>> ended_;
};

class ContextRingTest : public ::testing::TestWithParam<Mode> {};

// Ring attention over 3 and 4 ranks with every step's blocks gated on the
// transfers they overlap (so the overlap is a fact, not a timing): the
// results still equal the unsplit attention; the issue order is T(1), B(0),
// T(2), B(1), ...; every transfer is recorded with the call's position and
// its peer (sends to rank + 1, receives from rank - 1).
TEST_P(ContextRingTest, TransfersOverlapTheBlocksOfTheStepBefore) {
  for (int cp : {3, 4}) {
    SCOPED_TRACE(::testing::Message() << "cp " << cp);
    const AttentionShape g{1, 2 * cp * 2, 4, 2, 8, DataType::kF32};
    Ranks ranks(cp, GetParam());
    std::vector<std::unique_ptr<GateObserver>> gates;
    for (int r = 0; r < cp; ++r) gates.push_back(std::make_unique<GateObserver>(cp));
    std::vector<Layer> layers = {MakeLayer(g, 7)};
    ContextAttentionOptions o;
    o.position.step = 7;
    std::vector<std::vector<std::string>> forward_log(cp);
    RunLayers(
        ranks, cp, g, layers, o, [&](int r) { return gates[r].get(); },
        [&](int r) {
          forward_log[r] = gates[r]->TakeLog();
          gates[r]->Reset();
        });
    ExpectEqualsUnsplit(layers[0], g.dtype);
    std::vector<std::string> fwd, bwd;
    for (int s = 0; s < cp; ++s) {
      if (s + 1 < cp) fwd.push_back(absl::StrCat("kv transfer ", s + 1));
      fwd.push_back(absl::StrCat("attention blocks ", s));
      if (s + 1 < cp) bwd.push_back(absl::StrCat("kv transfer ", s + 1));
      bwd.push_back(absl::StrCat("attention blocks backward ", s));
      bwd.push_back(absl::StrCat("dkv transfer ", s + 1));
    }
    for (int r = 0; r < cp; ++r) {
      EXPECT_EQ(forward_log[r], fwd) << "rank " << r;
      EXPECT_EQ(gates[r]->TakeLog(), bwd) << "rank " << r;
      // Forward and backward: 2 (cp - 1) K / V groups of 2 sends and 2
      // receives, cp dK / dV groups of 1 and 1.
      const std::vector<CollectiveRecord> recs = ranks.comm(r).recorder()->Records();
      EXPECT_EQ(recs.size(), static_cast<size_t>(8 * (cp - 1) + 2 * cp));
      for (const CollectiveRecord& rec : recs) {
        const bool send = rec.kind == CollectiveKind::kSend;
        EXPECT_EQ(rec.position.peer, send ? (r + 1) % cp : (r + cp - 1) % cp);
        EXPECT_EQ(rec.position.step, 7);
        EXPECT_FALSE(rec.failed);
      }
    }
  }
}

// A rank of the ring that never comes: its neighbours fail within the
// timeout, each naming it as the peer that did not send or receive, and
// their flight records of the failed transfers carry the step. The
// all-gather variant names it too.
TEST_P(ContextRingTest, AStoppedRankIsNamedByItsPeersWithinTheTimeout) {
  for (ContextAttentionKind kind : {ContextAttentionKind::kRing, ContextAttentionKind::kAllGather}) {
    SCOPED_TRACE(ContextAttentionKindName(kind));
    const int cp = 3;
    const AttentionShape local{1, 4, 2, 1, 4, DataType::kF32};
    Ranks ranks(cp, GetParam(), absl::Milliseconds(300));
    ContextAttentionOptions o;
    o.kind = kind;
    o.position.step = 5;
    std::vector<Status> got(cp);
    std::vector<absl::Duration> took(cp);
    ranks.Run(
        [&](int r) {
          auto ca = *ContextAttention::Create(ranks.comm(r), ranks.device(), local, o);
          // local: 4 rows of 2 x 4 (q, out) and 1 x 4 (k, v); lse 2 x 4.
          std::vector<float> q(32, 0.5f), kv(16, 0.25f), out(32), lse(8);
          const absl::Time t0 = absl::Now();
          Status s = ca->Forward(ranks.compute(r), ranks.comm_stream(r), q.data(), kv.data(),
                                 kv.data(), out.data(), lse.data());
          if (s.ok()) s = ranks.compute(r).Synchronize();
          got[r] = s;
          took[r] = absl::Now() - t0;
          (void)ranks.comm_stream(r).Synchronize();
        },
        {0, 2});  // rank 1 has stopped
    for (int r : {0, 2}) {
      EXPECT_EQ(got[r].code(), absl::StatusCode::kDeadlineExceeded) << got[r];
      EXPECT_LT(took[r], absl::Seconds(10)) << "rank " << r;
      const std::string m(got[r].message());
      if (kind == ContextAttentionKind::kRing) {
        // Rank 2 waits for what rank 1 sends, rank 0 for rank 1 to receive.
        EXPECT_NE(m.find(r == 2 ? "rank 1 did not send" : "rank 1 did not receive"),
                  std::string::npos) << m;
        EXPECT_NE(m.find(absl::StrCat("on rank ", r)), std::string::npos) << m;
        bool recorded = false;
        for (const CollectiveRecord& rec : ranks.comm(r).recorder()->Records()) {
          recorded |= rec.failed && rec.position.peer == 1 && rec.position.step == 5;
        }
        EXPECT_TRUE(recorded) << "rank " << r << " has no failed record with peer 1, step 5";
      } else {
        EXPECT_NE(m.find("rank(s) 1"), std::string::npos) << m;
        EXPECT_NE(m.find("step 5"), std::string::npos) << m;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, ContextRingTest, ::testing::Values(Mode::kHost, Mode::kEvents),
                         [](const auto& info) { return ModeName(info.param); });

TEST(ContextAttentionArgsTest, BadArgumentsAreRefusedInOneLine) {
  Ranks ranks(2, Mode::kHost);
  const auto refused = [&](AttentionShape local, ContextAttentionOptions o, const char* says) {
    const auto made = ContextAttention::Create(ranks.comm(0), ranks.device(), local, o);
    ASSERT_FALSE(made.ok()) << says;
    EXPECT_EQ(made.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(made.status().message(), says);
  };
  refused({1, 5, 2, 1, 4, DataType::kF32}, {},
          "context attention: the local seq 5 is not two equal chunks");
  refused({1, 4, 3, 2, 4, DataType::kF32}, {},
          "context attention: kv_heads 2 does not divide heads 3");
  refused({1, 4, 2, 1, 0, DataType::kF32}, {},
          "context attention: head_dim must be positive, got 0");
  refused({1, 4, 2, 1, 4, DataType::kI32}, {},
          "context attention: dtype must be float or bfloat16, got int32");
  ContextAttentionOptions tag;
  tag.tag = 300;
  refused({1, 4, 2, 1, 4, DataType::kF32}, tag, "context attention: tag 300 is over 255");
  EXPECT_EQ(ParseContextAttentionKind("ringg").status().message(),
            "unknown context attention 'ringg' (ring or allgather)");
  EXPECT_EQ(*ParseContextAttentionKind("allgather"), ContextAttentionKind::kAllGather);
  auto ca = *ContextAttention::Create(ranks.comm(0), ranks.device(),
                                      {1, 4, 2, 1, 4, DataType::kF32}, {});
  EXPECT_EQ(ca->split().seq(), 8);
  // The header's workspace formulas: Q = 128, KV = 64, L = 32 bytes, e = 1.
  EXPECT_EQ(ca->workspace_bytes(), 2 * 128 + 2 * 32 + 8 * 64 + 4 * 64u);
  ContextAttentionOptions ag;
  ag.kind = ContextAttentionKind::kAllGather;
  EXPECT_EQ((*ContextAttention::Create(ranks.comm(0), ranks.device(),
                                       {1, 4, 2, 1, 4, DataType::kF32}, ag))
                ->workspace_bytes(),
            2 * 128 + 2 * 32 + 2 * 64 + 4 * 2 * 2 * 64u);
  float buf[32] = {};
  const Status st =
      ca->Forward(ranks.compute(0), ranks.comm_stream(0), buf, nullptr, buf, buf, buf);
  EXPECT_EQ(st.message(), "context attention forward: k is null");
}

}  // namespace
}  // namespace baton::context
