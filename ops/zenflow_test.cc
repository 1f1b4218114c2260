#include "baton/ops/zenflow.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/host_adamw.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

std::vector<float> Floats(int64_t n, uint64_t seed) {
  std::vector<float> out;
  for (double d : testing::Random(n, seed)) out.push_back(static_cast<float>(d));
  return out;
}

void ExpectInvalid(const Status& s, const std::string& names) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(names), std::string::npos) << s;
}

TEST(ZenFlowConfigTest, BadKnobsAreNamed) {
  EXPECT_TRUE(CheckZenFlowConfig({}).ok());
  EXPECT_TRUE(CheckZenFlowConfig({1.0, 8, 4}).ok());
  for (double r : {0.0, -0.1, 1.5, std::numeric_limits<double>::quiet_NaN()}) {
    ExpectInvalid(CheckZenFlowConfig({r, 4, 4}), "topk_ratio");
    ExpectInvalid(ZenFlowSelectCount(r, 10).status(), "topk_ratio");
  }
  ExpectInvalid(CheckZenFlowConfig({0.1, 4, 0}), "update_interval");
  ExpectInvalid(CheckZenFlowConfig({0.1, 0, 4}), "select_interval");
  ExpectInvalid(CheckZenFlowConfig({0.1, -2, 1}), "select_interval");
  ExpectInvalid(CheckZenFlowConfig({0.1, 6, 4}), "select_interval");
}

TEST(ZenFlowConfigTest, SelectCount) {
  EXPECT_EQ(*ZenFlowSelectCount(0.05, 100), 5);
  EXPECT_EQ(*ZenFlowSelectCount(0.05, 10), 1);  // at least one
  EXPECT_EQ(*ZenFlowSelectCount(0.5, 7), 3);
  EXPECT_EQ(*ZenFlowSelectCount(1.0, 7), 7);
  ExpectInvalid(ZenFlowSelectCount(0.5, 0).status(), "cols");
}

TEST(ColumnSelectionTest, CreateAndCount) {
  ExpectInvalid(ColumnSelection::Create(0, {}).status(), "cols");
  ExpectInvalid(ColumnSelection::Create(5, {1, 1}).status(), "increase");
  ExpectInvalid(ColumnSelection::Create(5, {3, 1}).status(), "increase");
  ExpectInvalid(ColumnSelection::Create(5, {5}).status(), "[0, 5)");
  ExpectInvalid(ColumnSelection::Create(5, {-1}).status(), "[0, 5)");
  const ColumnSelection s = *ColumnSelection::Create(7, {0, 3, 6});
  EXPECT_TRUE(s.selected(3));
  EXPECT_FALSE(s.selected(4));
  // CountIn against counting element by element, blocks starting and ending
  // anywhere.
  for (int64_t first : {0, 1, 3, 6, 7, 20}) {
    for (int64_t n : {0, 1, 2, 6, 7, 8, 15, 30}) {
      int64_t want = 0;
      for (int64_t e = first; e < first + n; ++e) want += s.selected(e % 7);
      EXPECT_EQ(s.CountIn({first, n, 7}), want) << first << " " << n;
    }
  }
}

// Any cut of the matrix into consecutive blocks gives the same sums, equal
// to a per-column sum in row order; bf16 widens exactly.
TEST(ZenFlowOpsTest, ColumnSquaresAnyBlocks) {
  const int64_t rows = 9, cols = 13, n = rows * cols;
  const auto g = Floats(n, 5);
  std::vector<float> want(cols, 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) want[j] += g[r * cols + j] * g[r * cols + j];
  }
  for (const std::vector<int64_t>& cuts :
       {std::vector<int64_t>{0, n}, {0, 5, 13, 50, 51, n}, {0, 26, 65, n}}) {
    std::vector<float> got(cols, 0.0f);
    for (size_t c = 0; c + 1 < cuts.size(); ++c) {
      const ColumnBlock b{cuts[c], cuts[c + 1] - cuts[c], cols};
      ASSERT_TRUE(AccumulateColumnSquares(g.data() + b.first, DataType::kF32, b, got.data()).ok());
    }
    EXPECT_EQ(std::memcmp(got.data(), want.data(), cols * 4), 0);
  }
  const auto bytes = testing::Pack(testing::Random(n, 5), DataType::kBF16);
  const auto rounded = testing::Round(testing::Random(n, 5), DataType::kBF16);
  std::vector<float> got(cols, 1.0f), want16(cols, 1.0f);
  for (int64_t e = 0; e < n; ++e) {
    const float x = static_cast<float>(rounded[e]);
    want16[e % cols] += x * x;
  }
  ASSERT_TRUE(AccumulateColumnSquares(bytes.data(), DataType::kBF16, {0, n, cols}, got.data()).ok());
  EXPECT_EQ(std::memcmp(got.data(), want16.data(), cols * 4), 0);
  ExpectInvalid(AccumulateColumnSquares(g.data(), DataType::kI32, {0, n, cols}, got.data()),
                "grad dtype");
  ExpectInvalid(AccumulateColumnSquares(g.data(), DataType::kF32, {0, n, 0}, got.data()), "cols");
  ExpectInvalid(AccumulateColumnSquares(g.data(), DataType::kF32, {0, n, cols}, nullptr), "norms");
}

TEST(ZenFlowOpsTest, TopColumnsTieBreakAndNaN) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> norms = {1, 5, 3, 5, nan, 0, 3, 5};
  EXPECT_EQ(SelectTopColumns(norms.data(), 8, 1)->columns(), (std::vector<int64_t>{4}));
  EXPECT_EQ(SelectTopColumns(norms.data(), 8, 3)->columns(), (std::vector<int64_t>{1, 3, 4}));
  EXPECT_EQ(SelectTopColumns(norms.data(), 8, 5)->columns(), (std::vector<int64_t>{1, 2, 3, 4, 7}));
  EXPECT_EQ(SelectTopColumns(norms.data(), 8, 8)->columns().size(), 8u);
  ExpectInvalid(SelectTopColumns(norms.data(), 8, 0).status(), "k");
  ExpectInvalid(SelectTopColumns(norms.data(), 8, 9).status(), "k");
  ExpectInvalid(SelectTopColumns(nullptr, 8, 2).status(), "norms");
  // Random norms: the k largest, against a full sort.
  const auto r = Floats(1000, 9);
  std::vector<float> abs;
  for (float x : r) abs.push_back(std::fabs(x));
  const auto top = SelectTopColumns(abs.data(), 1000, 50)->columns();
  std::vector<float> sorted = abs;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());
  ASSERT_EQ(top.size(), 50u);
  for (int64_t c : top) EXPECT_GE(abs[c], sorted[49]);
}

TEST(ZenFlowOpsTest, SplitGatherScatterCopy) {
  const int64_t cols = 11;
  const ColumnSelection s = *ColumnSelection::Create(cols, {2, 3, 9});
  for (const ColumnBlock b : {ColumnBlock{0, 44, cols}, ColumnBlock{5, 30, cols}, ColumnBlock{13, 1, cols},
                              ColumnBlock{14, 0, cols}}) {
    const auto g = Floats(b.n, 3 + b.first);
    std::vector<float> rest(b.n, 0.5f), packed(s.CountIn(b) + 1, -7.0f);
    ASSERT_TRUE(SplitGradient(g.data(), DataType::kF32, b, s, packed.data(), rest.data()).ok());
    int64_t k = 0;
    for (int64_t i = 0; i < b.n; ++i) {
      if (s.selected((b.first + i) % cols)) {
        EXPECT_EQ(packed[k++], g[i]);
        EXPECT_EQ(rest[i], 0.5f);  // untouched
      } else {
        EXPECT_EQ(rest[i], 0.5f + g[i]);
      }
    }
    EXPECT_EQ(k, s.CountIn(b));
    EXPECT_EQ(packed[k], -7.0f);  // nothing past the count

    std::vector<float> gathered(s.CountIn(b) + 1, -7.0f), w = Floats(b.n, 4);
    ASSERT_TRUE(GatherColumns(w.data(), b, s, gathered.data()).ok());
    for (int64_t i = 0; i + 1 < static_cast<int64_t>(gathered.size()); ++i) gathered[i] += 1.0f;
    std::vector<float> w2 = w;
    ASSERT_TRUE(ScatterColumns(gathered.data(), b, s, w2.data()).ok());
    std::vector<float> sel_only(b.n, 0.0f), unsel_only(b.n, 0.0f);
    ASSERT_TRUE(CopyColumns(w.data(), sel_only.data(), b, s, WhichColumns::kSelected).ok());
    ASSERT_TRUE(CopyColumns(w.data(), unsel_only.data(), b, s, WhichColumns::kUnselected).ok());
    for (int64_t i = 0; i < b.n; ++i) {
      const bool sel = s.selected((b.first + i) % cols);
      EXPECT_EQ(w2[i], sel ? w[i] + 1.0f : w[i]);
      EXPECT_EQ(sel_only[i], sel ? w[i] : 0.0f);
      EXPECT_EQ(unsel_only[i], sel ? 0.0f : w[i]);
    }
  }
  std::vector<float> buf(8, 0.0f);
  ExpectInvalid(SplitGradient(buf.data(), DataType::kF32, {0, 8, 7}, s, buf.data(), buf.data()),
                "columns");
  ExpectInvalid(SplitGradient(buf.data(), DataType::kF32, {0, 8, cols}, s, nullptr, buf.data()),
                "selected");
  ExpectInvalid(GatherColumns(buf.data(), {-1, 8, cols}, s, buf.data()), "first");
  ExpectInvalid(CopyColumns(nullptr, buf.data(), {0, 8, cols}, s, WhichColumns::kSelected), "src");
}

// HostAdamWSkipping: the unselected elements bit-identical to HostAdamW over
// everything; the selected ones (master, moments, param) untouched.
TEST(ZenFlowOpsTest, HostAdamWSkippingTouchesOnlyUnselected) {
  const int64_t cols = 37;
  const ColumnSelection s = *ColumnSelection::Create(cols, {0, 5, 6, 7, 20, 36});
  HostPool pool(3);
  for (const ColumnBlock b : {ColumnBlock{0, 37 * 1000, cols}, ColumnBlock{11, 40000, cols},
                              ColumnBlock{3, 9, cols}}) {
    for (HostPool* p : {static_cast<HostPool*>(nullptr), &pool}) {
      const auto master = Floats(b.n, 1), grad = Floats(b.n, 2);
      auto run = [&](bool skipping, std::vector<float>& w, std::vector<float>& m1,
                     std::vector<float>& m2, std::vector<uint16_t>& param) {
        w = master;
        m1.assign(b.n, 0.01f);
        m2.assign(b.n, 0.02f);
        param.assign(b.n, 0xFFFF);
        AdamWArgs a;
        a.n = b.n;
        a.step = 2;
        a.grad_scale = 0.25f;
        a.master = w.data();
        a.moment1 = m1.data();
        a.moment2 = m2.data();
        a.grad = grad.data();
        a.param = param.data();
        const AdamWConfig c{1e-2f, 0.9f, 0.99f, 1e-8f, 0.01f};
        return skipping ? HostAdamWSkipping(c, a, s.mask(), b.first, cols, p) : HostAdamW(c, a, p);
      };
      std::vector<float> w1, m11, m21, w2, m12, m22;
      std::vector<uint16_t> p1, p2;
      ASSERT_TRUE(run(false, w1, m11, m21, p1).ok());
      ASSERT_TRUE(run(true, w2, m12, m22, p2).ok());
      for (int64_t i = 0; i < b.n; ++i) {
        if (s.selected((b.first + i) % cols)) {
          ASSERT_EQ(w2[i], master[i]);
          ASSERT_EQ(m12[i], 0.01f);
          ASSERT_EQ(m22[i], 0.02f);
          ASSERT_EQ(p2[i], 0xFFFF);
        } else {
          ASSERT_EQ(std::memcmp(&w2[i], &w1[i], 4), 0) << i;
          ASSERT_EQ(std::memcmp(&m12[i], &m11[i], 4), 0) << i;
          ASSERT_EQ(std::memcmp(&m22[i], &m21[i], 4), 0) << i;
          ASSERT_EQ(p2[i], p1[i]) << i;
        }
      }
    }
  }
  float buf[4] = {};
  AdamWArgs a;
  a.n = 4;
  a.master = a.moment1 = a.moment2 = buf;
  a.grad = buf;
  ExpectInvalid(HostAdamWSkipping({}, a, nullptr, 0, 4, nullptr), "skip_column");
  ExpectInvalid(HostAdamWSkipping({}, a, s.mask(), 0, 0, nullptr), "cols");
}

}  // namespace
}  // namespace baton::ops
