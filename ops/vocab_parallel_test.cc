// The vocabulary-parallel embedding and cross-entropy on 2-4 fake tensor
// ranks (the all-reduces done here on the host) against the whole-vocabulary
// ops (ops/embedding.h, ops/cross_entropy.h): the same losses, logit
// gradients, lookups and table gradients. On the host and, when there is
// one, a GPU.
#include "baton/ops/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Fetch;
using testing::Pack;
using testing::Poisoned;
using testing::Random;
using testing::Round;
using testing::Upload;

std::vector<uint8_t> FloatBytes(const std::vector<double>& v) {
  return Pack(v, DataType::kF32);
}

class VocabParallelTest : public ::testing::TestWithParam<DataType> {};

TEST_P(VocabParallelTest, CrossEntropyEqualsTheWholeVocabulary) {
  const DataType t = GetParam();
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    for (int tp : {2, 3, 4}) {
      const int64_t tokens = 7, rows = 301, vocab = rows * tp;
      SCOPED_TRACE(::testing::Message() << "tp " << tp);
      auto stream = *device->CreateStream();
      // Scaled so that the row maxima sit on different ranks.
      const auto z = Round(Random(tokens * vocab, 11 + tp, 4.0), t);
      std::vector<int32_t> y(tokens);
      for (int64_t i = 0; i < tokens; ++i) y[i] = static_cast<int32_t>((i * 131 + 5) % vocab);
      const float scale = 1.0f / tokens;
      DeviceBuffer by = Upload(*device, *stream, testing::IdBytes(y));
      const auto* py = static_cast<const int32_t*>(by.data());
      // The reference: the whole row.
      DeviceBuffer bz = Upload(*device, *stream, Pack(z, t));
      DeviceBuffer bl = Poisoned(*device, *stream, tokens * 4);
      DeviceBuffer bdz = Poisoned(*device, *stream, tokens * vocab * DataTypeSize(t));
      ASSERT_TRUE(CrossEntropy(*stream, {tokens, vocab, t}, bz.data(), py,
                               static_cast<float*>(bl.data()), bdz.data(), scale)
                      .ok());
      const auto want_loss = Fetch(*stream, bl, tokens, DataType::kF32);
      const auto want_dz = Fetch(*stream, bdz, tokens * vocab, t);
      // Rank r's columns.
      std::vector<std::vector<double>> part(tp);
      for (int r = 0; r < tp; ++r) {
        for (int64_t i = 0; i < tokens; ++i) {
          part[r].insert(part[r].end(), z.begin() + i * vocab + r * rows,
                         z.begin() + i * vocab + (r + 1) * rows);
        }
      }
      const CrossEntropyShape s{tokens, rows, t};
      std::vector<DeviceBuffer> blog;
      // 1. Row maxima, all-reduced MAX.
      std::vector<double> m(tokens, -INFINITY);
      for (int r = 0; r < tp; ++r) {
        blog.push_back(Upload(*device, *stream, Pack(part[r], t)));
        DeviceBuffer bm = Poisoned(*device, *stream, tokens * 4);
        ASSERT_TRUE(
            VocabParallelRowMax(*stream, s, blog[r].data(), static_cast<float*>(bm.data())).ok());
        const auto mr = Fetch(*stream, bm, tokens, DataType::kF32);
        for (int64_t i = 0; i < tokens; ++i) m[i] = std::max(m[i], mr[i]);
      }
      // 2. Sums of exp and the target logits, all-reduced SUM.
      DeviceBuffer bmax = Upload(*device, *stream, FloatBytes(m));
      std::vector<double> sum(tokens, 0.0), zy(tokens, 0.0);
      int owners = 0;
      for (int r = 0; r < tp; ++r) {
        DeviceBuffer bs = Poisoned(*device, *stream, tokens * 4);
        DeviceBuffer bt = Poisoned(*device, *stream, tokens * 4);
        ASSERT_TRUE(VocabParallelSums(*stream, s, {r * rows, vocab}, blog[r].data(), py,
                                      static_cast<const float*>(bmax.data()),
                                      static_cast<float*>(bs.data()),
                                      static_cast<float*>(bt.data()))
                        .ok());
        const auto sr = Fetch(*stream, bs, tokens, DataType::kF32);
        const auto tr = Fetch(*stream, bt, tokens, DataType::kF32);
        for (int64_t i = 0; i < tokens; ++i) {
          sum[i] += sr[i];
          zy[i] += tr[i];
          if (tr[i] != 0) ++owners;
        }
      }
      EXPECT_EQ(owners, tokens);  // exactly one rank contributes each target logit
      DeviceBuffer bsum = Upload(*device, *stream, FloatBytes(sum));
      DeviceBuffer bzy = Upload(*device, *stream, FloatBytes(zy));
      // 3. Loss (the same on every rank) and the local gradient, in place.
      std::vector<double> got_dz(tokens * vocab);
      for (int r = 0; r < tp; ++r) {
        DeviceBuffer bl2 = Poisoned(*device, *stream, tokens * 4);
        ASSERT_TRUE(VocabParallelLoss(*stream, s, {r * rows, vocab}, blog[r].data(), py,
                                      static_cast<const float*>(bmax.data()),
                                      static_cast<const float*>(bsum.data()),
                                      static_cast<const float*>(bzy.data()),
                                      static_cast<float*>(bl2.data()), blog[r].data(), scale)
                        .ok());
        EXPECT_EQ(Compare("loss", Fetch(*stream, bl2, tokens, DataType::kF32), want_loss, 1e-5),
                  "");
        const auto dr = Fetch(*stream, blog[r], tokens * rows, t);
        for (int64_t i = 0; i < tokens; ++i) {
          std::copy(dr.begin() + i * rows, dr.begin() + (i + 1) * rows,
                    got_dz.begin() + i * vocab + r * rows);
        }
      }
      EXPECT_EQ(Compare("dlogits", got_dz, want_dz, testing::Tolerance(t)), "");
    }
  }
}

TEST_P(VocabParallelTest, EmbeddingShardsSumToTheWholeLookup) {
  const DataType t = GetParam();
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    const int tp = 4;
    const int64_t tokens = 9, rows = 5, vocab = rows * tp, hidden = 6;
    auto stream = *device->CreateStream();
    const auto table = Round(Random(vocab * hidden, 3), t);
    const auto dy = Round(Random(tokens * hidden, 4), t);
    std::vector<int32_t> ids = {0, 19, 7, 7, 12, 5, 4, 19, 15};
    DeviceBuffer bids = Upload(*device, *stream, testing::IdBytes(ids));
    const auto* pids = static_cast<const int32_t*>(bids.data());
    DeviceBuffer bt = Upload(*device, *stream, Pack(table, t));
    DeviceBuffer bdy = Upload(*device, *stream, Pack(dy, t));
    DeviceBuffer by = Poisoned(*device, *stream, tokens * hidden * DataTypeSize(t));
    DeviceBuffer bdt = Poisoned(*device, *stream, vocab * hidden * 4);
    const EmbeddingShape whole{tokens, vocab, hidden, t};
    ASSERT_TRUE(EmbeddingForward(*stream, whole, pids, bt.data(), by.data()).ok());
    ASSERT_TRUE(
        EmbeddingBackward(*stream, whole, pids, bdy.data(), bdt.data(), DataType::kF32, false)
            .ok());
    const auto want_y = Fetch(*stream, by, tokens * hidden, t);
    const auto want_dt = Fetch(*stream, bdt, vocab * hidden, DataType::kF32);
    std::vector<double> sum_y(tokens * hidden, 0.0), got_dt;
    const EmbeddingShape part{tokens, rows, hidden, t};
    for (int r = 0; r < tp; ++r) {
      std::vector<double> slice(table.begin() + r * rows * hidden,
                                table.begin() + (r + 1) * rows * hidden);
      DeviceBuffer bs = Upload(*device, *stream, Pack(slice, t));
      DeviceBuffer bys = Poisoned(*device, *stream, tokens * hidden * DataTypeSize(t));
      ASSERT_TRUE(
          VocabShardEmbeddingForward(*stream, part, {r * rows, vocab}, pids, bs.data(), bys.data())
              .ok());
      const auto yr = Fetch(*stream, bys, tokens * hidden, t);
      for (size_t i = 0; i < yr.size(); ++i) sum_y[i] += yr[i];
      // += onto a table of ones: the scatter-add of the rank's tokens only.
      DeviceBuffer bds = Upload(*device, *stream,
                                FloatBytes(std::vector<double>(rows * hidden, 1.0)));
      ASSERT_TRUE(VocabShardEmbeddingBackward(*stream, part, {r * rows, vocab}, pids, bdy.data(),
                                              bds.data(), DataType::kF32, true)
                      .ok());
      auto dr = Fetch(*stream, bds, rows * hidden, DataType::kF32);
      for (double& x : dr) x -= 1.0;
      got_dt.insert(got_dt.end(), dr.begin(), dr.end());
    }
    // Each token's row comes from exactly one rank (the others add zeros).
    EXPECT_EQ(Compare("y", sum_y, want_y, 0), "");
    EXPECT_EQ(Compare("dtable", got_dt, want_dt, 1e-6), "");
  }
}

TEST(VocabParallelTest, RefusesRowsOutsideTheVocabularyAndBadTargets) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  std::vector<float> z(4, 0.0f), m(2), s(2), zy(2);
  std::vector<int32_t> y = {1, 9};  // 9 is outside the vocabulary of 8
  const CrossEntropyShape shape{2, 2, DataType::kF32};
  Status bad = VocabParallelSums(*stream, shape, {7, 8}, z.data(), y.data(), m.data(), s.data(),
                                 zy.data());
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument) << bad;
  ASSERT_TRUE(
      VocabParallelSums(*stream, shape, {2, 8}, z.data(), y.data(), m.data(), s.data(), zy.data())
          .ok());
  Status data = stream->Synchronize();
  EXPECT_EQ(data.code(), absl::StatusCode::kInvalidArgument) << data;
  EXPECT_NE(data.message().find("target 9"), std::string::npos) << data;
}

INSTANTIATE_TEST_SUITE_P(Dtypes, VocabParallelTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(DataTypeName(info.param));
                         });

}  // namespace
}  // namespace baton::ops
