#include "baton/ops/testing/zenflow_reference.h"

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/adamw.h"
#include "baton/ops/host_adamw.h"
#include "baton/ops/testing/test_util.h"
#include "baton/ops/zenflow.h"
#include "baton/runtime/device.h"

namespace baton::ops {
namespace {

const AdamWConfig kAdamW{1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f};

std::vector<float> Floats(int64_t n, uint64_t seed, double scale = 1.0) {
  std::vector<float> out;
  for (double d : testing::Random(n, seed, scale)) out.push_back(static_cast<float>(d));
  return out;
}

// A gradient that depends on the weights (a quadratic pull towards a
// target) plus noise, so that a wrong weight changes later gradients.
std::vector<float> Gradient(const std::vector<float>& w, int64_t step) {
  const auto target = Floats(static_cast<int64_t>(w.size()), 1000);
  const auto noise = Floats(static_cast<int64_t>(w.size()), 2000 + step, 0.1);
  std::vector<float> g(w.size());
  for (size_t i = 0; i < w.size(); ++i) {
    // Column j's scale grows with j, so the selection has something to find.
    const float col_scale = 1.0f + static_cast<float>(i % 10);
    g[i] = col_scale * (w[i] - target[i]) + noise[i];
  }
  return g;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(ZenFlowReferenceTest, BadInputIsNamed) {
  ZenFlowReferenceOptions o;
  o.rows = 2;
  o.cols = 3;
  auto bad = [&](const ZenFlowReferenceOptions& opt, size_t n, const std::string& name) {
    const Status s = ZenFlowReference::Create(opt, std::vector<float>(n, 0.0f)).status();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(std::string(s.message()).find(name), std::string::npos) << s;
  };
  bad(o, 5, "weights");
  ZenFlowReferenceOptions z = o;
  z.zenflow.topk_ratio = 0.0;
  bad(z, 6, "topk_ratio");
  z = o;
  z.zenflow.update_interval = 0;
  bad(z, 6, "update_interval");
  z = o;
  z.zenflow.select_interval = 0;
  bad(z, 6, "select_interval");
  z = o;
  z.staleness = o.zenflow.update_interval;
  bad(z, 6, "staleness");
  z = o;
  z.rows = 0;
  bad(z, 0, "rows");
  auto ref = *ZenFlowReference::Create(o, std::vector<float>(6, 0.0f));
  EXPECT_EQ(ref.Step(std::vector<float>(5, 0.0f)).code(), absl::StatusCode::kInvalidArgument);
}

// Plain AdamW over the whole matrix, `steps` steps, gradients from Gradient.
std::vector<float> PlainAdamW(std::vector<float> w, int steps) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const int64_t n = static_cast<int64_t>(w.size());
  std::vector<float> m1(n, 0.0f), m2(n, 0.0f);
  for (int s = 0; s < steps; ++s) {
    const auto g = Gradient(w, s);
    AdamWArgs a;
    a.n = n;
    a.step = s + 1;
    a.master = w.data();
    a.moment1 = m1.data();
    a.moment2 = m2.data();
    a.grad = g.data();
    EXPECT_TRUE(AdamWStep(*stream, kAdamW, a).ok());
    EXPECT_TRUE(stream->Synchronize().ok());
  }
  return w;
}

// When nothing is deferred (host update every step, no staleness, one
// selection) or everything is selected (one selection), every column
// follows plain AdamW:
// the reference must then equal AdamWStep over the whole matrix, bit for bit.
TEST(ZenFlowReferenceTest, EqualsPlainAdamWWhenNothingIsDeferred) {
  const int64_t rows = 5, cols = 10;
  const auto w0 = Floats(rows * cols, 7);
  const auto want = PlainAdamW(w0, 12);
  for (const ZenFlowConfig z : {ZenFlowConfig{0.3, 100, 1}, ZenFlowConfig{1.0, 100, 2}}) {
    ZenFlowReferenceOptions o;
    o.rows = rows;
    o.cols = cols;
    o.adamw = kAdamW;
    o.zenflow = z;
    auto ref = *ZenFlowReference::Create(o, w0);
    for (int s = 0; s < 12; ++s) ASSERT_TRUE(ref.Step(Gradient(ref.weights(), s)).ok());
    EXPECT_TRUE(SameBits(ref.weights(), want)) << "topk_ratio " << z.topk_ratio;
  }
  // And deferring does change the result (the check above can fail).
  ZenFlowReferenceOptions o;
  o.rows = rows;
  o.cols = cols;
  o.adamw = kAdamW;
  o.zenflow = {0.3, 4, 2};
  auto ref = *ZenFlowReference::Create(o, w0);
  for (int s = 0; s < 12; ++s) ASSERT_TRUE(ref.Step(Gradient(ref.weights(), s)).ok());
  EXPECT_FALSE(SameBits(ref.weights(), want));
}

// The selected columns (the largest gradients: the last columns) move every
// step; the others only when a host update lands: `staleness` steps after
// the step that follows the window's end, selecting step or not.
TEST(ZenFlowReferenceTest, HostUpdatesLandAfterTheStaleness) {
  const int64_t rows = 3, cols = 10;
  for (int64_t staleness : {0, 2, 3}) {
    ZenFlowReferenceOptions o;
    o.rows = rows;
    o.cols = cols;
    o.adamw = kAdamW;
    o.zenflow = {0.2, 8, 4};
    o.staleness = staleness;
    const auto w0 = Floats(rows * cols, 3);
    auto ref = *ZenFlowReference::Create(o, w0);
    std::vector<int64_t> changed_at;  // step() values where column 0 changed
    std::vector<float> before = ref.weights();
    for (int s = 0; s < 12; ++s) {
      ASSERT_TRUE(ref.Step(Gradient(ref.weights(), s)).ok());
      EXPECT_EQ(ref.selected(), (std::vector<int64_t>{8, 9}));
      EXPECT_NE(ref.weights()[9], before[9]) << "the selected column moves every step";
      if (ref.weights()[0] != before[0]) changed_at.push_back(ref.step());
      before = ref.weights();
    }
    // Windows end at s = 3, 7, 11; each lands before the forward of step
    // s + 1 + staleness (the selecting step 8 does not pull the one ending
    // at 7 forward; the one ending at 11 lands after step 12 unless d = 0).
    const std::vector<int64_t> want =
        staleness == 0   ? std::vector<int64_t>{4, 8, 12}
        : staleness == 2 ? std::vector<int64_t>{6, 10}
                         : std::vector<int64_t>{7, 11};
    EXPECT_EQ(changed_at, want) << "staleness " << staleness;
    EXPECT_EQ(ref.host_updates(), 3);
  }
}

// ZenFlow assembled from the ops the way an executor runs it: two shards
// cut mid-row, the proxy summed shard after shard, the device path through
// AdamWStep on packed columns, the host path through HostAdamWSkipping on a
// thread pool, host results applied after the staleness with CopyColumns.
// Equal to the reference, bit for bit, at every step.
// Columns in `a` and not in `b` (all of `a` without `b`), or in either.
ColumnSelection Minus(const ColumnSelection& a, const std::optional<ColumnSelection>& b) {
  std::vector<int64_t> c;
  for (int64_t j : a.columns()) {
    if (!b || !b->selected(j)) c.push_back(j);
  }
  return *ColumnSelection::Create(a.cols(), c);
}
ColumnSelection Union(const ColumnSelection& a, const ColumnSelection& b) {
  std::vector<int64_t> c;
  for (int64_t j = 0; j < a.cols(); ++j) {
    if (a.selected(j) || b.selected(j)) c.push_back(j);
  }
  return *ColumnSelection::Create(a.cols(), c);
}

void AssembleLikeAnExecutor(const ZenFlowConfig& z, int64_t staleness) {
  const int64_t rows = 6, cols = 10, n = rows * cols;
  ZenFlowReferenceOptions o;
  o.rows = rows;
  o.cols = cols;
  o.adamw = kAdamW;
  o.zenflow = z;
  o.staleness = staleness;
  const auto w0 = Floats(n, 11);
  auto ref = *ZenFlowReference::Create(o, w0);

  struct Shard {
    ColumnBlock b;
    std::vector<float> dev, host, m, v, accum, pending, sel_m, sel_v;
  };
  std::vector<Shard> shards(2);
  shards[0].b = {0, 27, cols};
  shards[1].b = {27, n - 27, cols};
  for (Shard& sh : shards) {
    sh.dev.assign(w0.begin() + sh.b.first, w0.begin() + sh.b.first + sh.b.n);
    sh.host = sh.dev;
    sh.m.assign(sh.b.n, 0.0f);
    sh.v.assign(sh.b.n, 0.0f);
    sh.accum.assign(sh.b.n, 0.0f);
  }
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  HostPool pool(2);
  std::vector<float> norms(cols, 0.0f);
  std::optional<ColumnSelection> sel, pending_sel;
  int64_t sel_step = 0, host_step = 0, pending_at = -1;
  const int64_t k = *ZenFlowSelectCount(o.zenflow.topk_ratio, cols);

  for (int64_t s = 0; s < 16; ++s) {
    std::vector<float> w;
    for (const Shard& sh : shards) w.insert(w.end(), sh.dev.begin(), sh.dev.end());
    ASSERT_TRUE(SameBits(w, ref.weights())) << "before step " << s;
    const auto g = Gradient(w, s);
    ASSERT_TRUE(ref.Step(g).ok());

    for (const Shard& sh : shards) {
      ASSERT_TRUE(AccumulateColumnSquares(g.data() + sh.b.first, DataType::kF32, sh.b,
                                          norms.data()).ok());
    }
    if (s % o.zenflow.select_interval == 0) {
      if (sel) {
        for (Shard& sh : shards) {
          ASSERT_TRUE(CopyColumns(sh.dev.data(), sh.host.data(), sh.b, *sel,
                                  WhichColumns::kSelected).ok());
        }
      }
      const std::optional<ColumnSelection> old = sel;
      sel = *SelectTopColumns(norms.data(), cols, k);
      // New columns start from the host master (its last update included).
      for (Shard& sh : shards) {
        ASSERT_TRUE(CopyColumns(sh.host.data(), sh.dev.data(), sh.b, Minus(*sel, old),
                                WhichColumns::kSelected).ok());
      }
      std::fill(norms.begin(), norms.end(), 0.0f);
      for (Shard& sh : shards) {
        sh.sel_m.assign(sel->CountIn(sh.b), 0.0f);
        sh.sel_v.assign(sel->CountIn(sh.b), 0.0f);
      }
      sel_step = 0;
    }
    EXPECT_EQ(sel->columns(), ref.selected());
    ++sel_step;
    for (Shard& sh : shards) {
      const int64_t count = sel->CountIn(sh.b);
      std::vector<float> packed_g(count), packed_w(count);
      ASSERT_TRUE(SplitGradient(g.data() + sh.b.first, DataType::kF32, sh.b, *sel,
                                packed_g.data(), sh.accum.data()).ok());
      ASSERT_TRUE(GatherColumns(sh.dev.data(), sh.b, *sel, packed_w.data()).ok());
      AdamWArgs a;
      a.n = count;
      a.step = sel_step;
      a.master = packed_w.data();
      a.grad = packed_g.data();
      a.moment1 = sh.sel_m.data();
      a.moment2 = sh.sel_v.data();
      ASSERT_TRUE(AdamWStep(*stream, o.adamw, a).ok());
      ASSERT_TRUE(stream->Synchronize().ok());
      ASSERT_TRUE(ScatterColumns(packed_w.data(), sh.b, *sel, sh.dev.data()).ok());
    }
    if ((s + 1) % o.zenflow.update_interval == 0) {
      ++host_step;
      for (Shard& sh : shards) {
        AdamWArgs a;
        a.n = sh.b.n;
        a.step = host_step;
        a.grad_scale = 1.0f / static_cast<float>(o.zenflow.update_interval);
        a.master = sh.host.data();
        a.grad = sh.accum.data();
        a.moment1 = sh.m.data();
        a.moment2 = sh.v.data();
        ASSERT_TRUE(HostAdamWSkipping(o.adamw, a, sel->mask(), sh.b.first, cols, &pool).ok());
        std::fill(sh.accum.begin(), sh.accum.end(), 0.0f);
        sh.pending = sh.host;
      }
      pending_sel = sel;
      pending_at = s + 1 + o.staleness;
    }
    if (pending_at == s + 1) {
      // Skipped: the columns the update left alone (selected in its window)
      // and those selected now.
      for (Shard& sh : shards) {
        ASSERT_TRUE(CopyColumns(sh.pending.data(), sh.dev.data(), sh.b,
                                Union(*pending_sel, *sel), WhichColumns::kUnselected)
                        .ok());
      }
      pending_at = -1;
    }
  }
  std::vector<float> w;
  for (const Shard& sh : shards) w.insert(w.end(), sh.dev.begin(), sh.dev.end());
  EXPECT_TRUE(SameBits(w, ref.weights()));
  EXPECT_EQ(ref.host_updates(), 16 / z.update_interval);
}

TEST(ZenFlowReferenceTest, OpsAssembledLikeAnExecutorMatchStepByStep) {
  for (int64_t d : {0, 1}) {
    AssembleLikeAnExecutor({0.25, 4, 2}, d);  // select = 2 x update
    AssembleLikeAnExecutor({0.25, 2, 2}, d);  // select = update
  }
  AssembleLikeAnExecutor({0.25, 4, 4}, 3);
}

}  // namespace
}  // namespace baton::ops
