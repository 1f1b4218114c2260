// ContextAttention (both variants) over C = 1..4 ranks as threads on the
// inproc backend, against the unsplit float64 attention (ops/testing/).
// Three modes: host streams (one host work item per transfer), host streams
// on the event protocol, and CUDA streams on one GPU (skipped without one).
#include "baton/parallel/context/context_attention.h"

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <thread>
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
  Ranks(int n, Mode mode, absl::Duration timeout = absl::Seconds(60)) : n_(n) {
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
  Stream& comm_stream(int r) { return *comm_[r]; }

 private:
  int n_;
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
// layers. `options` as given (the test's observer and position).
void RunLayers(Ranks& ranks, int cp, const AttentionShape& g, std::vector<Layer>& layers,
               const ContextAttentionOptions& options,
               const std::function<ContextAttentionObserver*(int)>& observer = nullptr) {
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

INSTANTIATE_TEST_SUITE_P(
    ModesAndKinds, ContextAttentionTest,
    ::testing::Combine(::testing::Values(Mode::kHost, Mode::kEvents, Mode::kGpu),
                       ::testing::Values(ContextAttentionKind::kRing,
                                         ContextAttentionKind::kAllGather)),
    [](const auto& info) {
      return absl::StrCat(ModeName(std::get<0>(info.param)), "_",
                          ContextAttentionKindName(std::get<1>(info.param)));
    });

}  // namespace
}  // namespace baton::context
