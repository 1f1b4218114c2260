// The bench library on the host runtime: timing, fills, every op's cases
// and their accounting, skipping, and the kernel table it writes (parsed
// back by sim/kernel_table).
#include <chrono>
#include <cmath>
#include <cstring>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "baton/bench/kernel_table_json.h"
#include "baton/bench/op_cases.h"
#include "baton/bench/op_suite.h"
#include "baton/bench/op_timing.h"
#include "baton/runtime/device.h"
#include "baton/scheduler/model.h"
#include "baton/sim/kernel_table.h"

namespace baton::bench {
namespace {

class OpBenchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = *CreateHostDevice();
    stream_ = *device_->CreateStream();
  }
  void TearDown() override {
    stream_.reset();
    device_.reset();
  }
  TimingOptions Fast() const {
    TimingOptions o;
    o.min_seconds = 1e-3;
    o.reps = 3;
    return o;
  }
  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
};

TEST_F(OpBenchTest, TimePerCallMeasuresTheWork) {
  // Host work of 2 ms per call: the median per call is at least that (an
  // upper bound would only test the machine's load).
  auto sleep = [&] {
    return stream_->Enqueue([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return absl::OkStatus();
    });
  };
  TimingOptions o;
  o.min_seconds = 0.02;
  StatusOr<double> s = TimePerCall(*stream_, sleep, o);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GE(*s, 2e-3);
  EXPECT_LT(*s, 2.0);
}

TEST_F(OpBenchTest, TimePerCallReturnsErrors) {
  StatusOr<double> s = TimePerCall(
      *stream_, [] { return absl::InternalError("enqueue failed"); }, Fast());
  EXPECT_EQ(s.status().message(), "enqueue failed");
  // An error from the work itself comes back through the stream.
  auto other = *device_->CreateStream();
  s = TimePerCall(
      *other, [&] { return other->Enqueue([] { return absl::DataLossError("bad data"); }); },
      Fast());
  EXPECT_TRUE(absl::IsDataLoss(s.status())) << s.status();
  TimingOptions bad = Fast();
  bad.min_seconds = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(
      TimePerCall(*stream_, [] { return absl::OkStatus(); }, bad).status()));
}

TEST_F(OpBenchTest, FillerTilesItsPatternAndKeepsIdsInRange) {
  Filler f(*device_, *stream_);
  const int64_t n = (int64_t{1} << 20) + 12345;  // past one 1 MiB pattern (f32)
  StatusOr<DeviceBuffer> b = f.Random(n, DataType::kF32, 1.0, 7);
  ASSERT_TRUE(b.ok()) << b.status();
  const float* v = static_cast<const float*>(b->data());
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < (1 << 18); ++i) {
    ASSERT_TRUE(std::isfinite(v[i]));
    sum += v[i];
    sq += v[i] * v[i];
  }
  EXPECT_NEAR(sum / (1 << 18), 0, 0.02);
  EXPECT_NEAR(sq / (1 << 18), 1, 0.05);
  EXPECT_EQ(std::memcmp(v, v + (1 << 18), 12345 * 4), 0);      // tiled
  EXPECT_EQ(v[n - 1], v[(n - 1) % (1 << 18)]);
  StatusOr<DeviceBuffer> ids = f.Ids(1000, 37, 3);
  ASSERT_TRUE(ids.ok());
  const int32_t* id = static_cast<const int32_t*>(ids->data());
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(id[i] >= 0 && id[i] < 37) << id[i];
}

// Every op's cases run on the host and account bytes / FLOPs as the header says.
TEST_F(OpBenchTest, EveryOpRunsWithItsAccounting) {
  Filler f(*device_, *stream_);
  const DataType t = DataType::kBF16;
  struct Want {
    StatusOr<std::vector<OpCase>> cases;
    std::vector<double> amounts;  // bytes or FLOPs per pass
  };
  std::vector<Want> all;
  all.push_back({RmsNormCases(f, 4, 8, t), {2 * 32 * 2, 3 * 32 * 2}});
  all.push_back({SwiGluCases(f, 4, 6, t), {3 * 24 * 2, 5 * 24 * 2}});
  all.push_back({RotaryCases(f, 2, 3, 2, 4, t), {2 * 48 * 2, 2 * 48 * 2}});
  all.push_back({EmbeddingCases(f, 5, 11, 4, t), {2 * 20 * 2, (5 + 11) * 4 * 2}});
  all.push_back({CrossEntropyCases(f, 3, 10, t), {30 * 2, 2 * 30 * 2}});
  all.push_back({AttentionCases(f, 2, 8, 4, 2, 4, t),
                 {2.0 * 2 * 4 * 64 * 4, 2.5 * 2 * 2 * 4 * 64 * 4}});
  all.push_back({LinearCases(f, 3, 5, 7, t, true), {2 * 105, 4 * 105}});
  all.push_back({AdamWCases(f, 100), {3000}});
  for (Want& w : all) {
    ASSERT_TRUE(w.cases.ok()) << w.cases.status();
    ASSERT_EQ(w.cases->size(), w.amounts.size()) << (*w.cases)[0].op;
    for (size_t i = 0; i < w.amounts.size(); ++i) {
      const OpCase& c = (*w.cases)[i];
      EXPECT_DOUBLE_EQ(c.bound == Bound::kMemory ? c.bytes : c.flops, w.amounts[i])
          << c.op << " " << c.pass;
      ASSERT_TRUE(c.run().ok()) << c.op << " " << c.pass;
    }
  }
  EXPECT_TRUE(stream_->Synchronize().ok());
}

TEST_F(OpBenchTest, RefusedShapesAreSkippedOtherErrorsStop) {
  std::vector<CaseSpec> specs(2);
  specs[0].op = "refused";
  specs[0].build = [](Filler&) -> StatusOr<std::vector<OpCase>> {
    return absl::InvalidArgumentError("seq past the kernel's limit");
  };
  specs[1].op = "rmsnorm";
  specs[1].dims = {4, 8};
  specs[1].build = [](Filler& f) { return RmsNormCases(f, 4, 8, DataType::kF32); };
  Limits limits;
  limits.copy_gbps = 1;
  limits.gemm_tflops = 1;
  std::vector<std::string> skipped;
  int rows = 0;
  auto run = [&] {
    return RunSpecs(*device_, *stream_, specs, limits, Fast(),
                    [&](const Measured& m) {
                      ++rows;
                      EXPECT_GT(m.seconds, 0);
                      EXPECT_DOUBLE_EQ(m.ratio, m.rate);  // limits of 1
                    },
                    [&](const CaseSpec& s, const Status&) { skipped.push_back(s.op); });
  };
  StatusOr<std::vector<Measured>> r = run();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 2u);
  EXPECT_EQ(rows, 2);
  EXPECT_EQ(skipped, std::vector<std::string>{"refused"});
  specs[0].build = [](Filler&) -> StatusOr<std::vector<OpCase>> {
    return absl::InternalError("device lost");
  };
  EXPECT_EQ(run().status().message(), "device lost");
}

// The kernel bench's path in small: measure the micro model's table, write
// it, parse it back as the simulator does.
TEST_F(OpBenchTest, MeasuredTableParsesAsAKernelTable) {
  KernelTableShapes k;
  k.models = {*scheduler::ModelPreset("micro")};
  k.tokens = {16};
  k.seqs = {8, 16};
  k.attention_tokens = 16;
  k.adamw_params = {1000, 4000};
  const std::vector<CaseSpec> specs = KernelTableSpecs(k);
  StatusOr<Limits> limits =
      MeasureLimits(*device_, *stream_, 1 << 20, 64, DataType::kBF16, Fast());
  ASSERT_TRUE(limits.ok()) << limits.status();
  EXPECT_GT(limits->copy_gbps, 0);
  EXPECT_GT(limits->gemm_tflops, 0);
  EXPECT_GT(limits->launch_s, 0);
  StatusOr<std::vector<Measured>> rows = RunSpecs(
      *device_, *stream_, specs, *limits, Fast(), [](const Measured&) {},
      [](const CaseSpec& s, const Status& st) { ADD_FAILURE() << s.op << ": " << st; });
  ASSERT_TRUE(rows.ok()) << rows.status();
  StatusOr<nlohmann::json> j = KernelTableJson("host CPU", "test", *limits, *rows);
  ASSERT_TRUE(j.ok()) << j.status();
  StatusOr<sim::KernelTable> t = sim::ParseKernelTable(j->dump(), "measured");
  ASSERT_TRUE(t.ok()) << t.status();
  // 5 matrices x 3 passes, shapes shared once (micro's LM head has the
  // shape of its fused QKV).
  const scheduler::ModelSpec& m = k.models[0];
  const int64_t T = 16, h = m.hidden, F = m.intermediate;
  const int64_t qkv = (m.heads + 2 * m.kv_heads) * m.head_dim, q = m.heads * m.head_dim;
  std::set<std::vector<int64_t>> shapes;
  for (auto [out, in] : std::vector<std::pair<int64_t, int64_t>>{
           {qkv, h}, {h, q}, {2 * F, h}, {h, F}, {m.vocab, h}}) {
    shapes.insert({T, out, in});
    shapes.insert({T, in, out});
    shapes.insert({in, out, T});
  }
  EXPECT_EQ(t->gemm.size(), shapes.size());
  EXPECT_EQ(t->attention.size(), 2u);
  EXPECT_EQ((*j)["adamw"].size(), 2u);
  EXPECT_GE(t->adamw.points.size(), 1u);  // the parser drops noisy points
  for (const char* op : {"rmsnorm", "swiglu", "cross_entropy", "rotary", "embedding"}) {
    EXPECT_EQ(t->elementwise.count(op), 1u) << op;
  }
  EXPECT_DOUBLE_EQ(t->copy_gbps, limits->copy_gbps);
  EXPECT_DOUBLE_EQ(t->launch_us, limits->launch_s * 1e6);
  // A measured GEMM runs at the fastest rate of the measured shapes
  // nearest it, itself among them (sim/kernel_table.h): at most its own
  // time, and at the rate of one of the table's rows.
  const Measured* gemm = nullptr;
  for (const Measured& m : *rows) {
    if (m.op == "linear") gemm = &m;
  }
  ASSERT_NE(gemm, nullptr);
  const double g = t->GemmSeconds(gemm->dims[0], gemm->dims[1], gemm->dims[2]);
  EXPECT_LE(g, gemm->seconds * (1 + 1e-9));
  const double flops = 2.0 * gemm->dims[0] * gemm->dims[1] * gemm->dims[2];
  bool a_row_rate = false;
  for (const sim::KernelTable::Gemm& row : t->gemm) {
    a_row_rate |= std::fabs(flops / g - 2 * row.m * row.n * row.k / row.s) <= 1e-9 * flops / g;
  }
  EXPECT_TRUE(a_row_rate);
}

TEST_F(OpBenchTest, ATableMissingASectionIsRefused) {
  Limits limits;
  limits.copy_gbps = 1;
  limits.launch_s = 1e-6;
  Measured gemm;
  gemm.op = "linear";
  gemm.pass = "fwd";
  gemm.dims = {2, 3, 4};
  gemm.seconds = 1e-3;
  StatusOr<nlohmann::json> j = KernelTableJson("x", "y", limits, {gemm});
  EXPECT_TRUE(absl::IsFailedPrecondition(j.status()));
  EXPECT_NE(j.status().message().find("attention"), std::string::npos) << j.status();
}

TEST_F(OpBenchTest, OpsBenchHasEveryOp) {
  for (DeviceKind kind : {DeviceKind::kHost, DeviceKind::kCuda}) {
    StatusOr<std::vector<CaseSpec>> specs = OpsBenchSpecs(kind, DataType::kBF16);
    ASSERT_TRUE(specs.ok()) << specs.status();
    std::set<std::string> ops;
    for (const CaseSpec& s : *specs) ops.insert(s.op);
    EXPECT_EQ(ops, (std::set<std::string>{"rmsnorm", "swiglu", "rotary", "embedding",
                                          "cross_entropy", "attention", "linear", "adamw"}))
        << DeviceKindName(kind);
  }
  // CUDA's shapes are the shipped table's, with PyTorch's times.
  StatusOr<std::vector<CaseSpec>> cuda = OpsBenchSpecs(DeviceKind::kCuda, DataType::kBF16);
  ASSERT_TRUE(cuda.ok());
  bool found = false;
  for (const CaseSpec& s : *cuda) {
    if (s.op == "attention" && s.dims == std::vector<int64_t>{4, 4096, 32, 8, 128}) {
      found = true;
      EXPECT_NEAR(s.reference_s.at("fwd"), 0.000952, 1e-6);
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
}  // namespace baton::bench
