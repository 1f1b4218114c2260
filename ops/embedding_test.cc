#include "baton/ops/embedding.h"

#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Fetch;
using testing::IdBytes;
using testing::Pack;
using testing::Poisoned;
using testing::Random;
using testing::Shifted;
using testing::Round;
using testing::Upload;

class EmbeddingTest : public ::testing::TestWithParam<DataType> {};

// Repeated ids exercise the scatter-add; rows of ids that never occur must
// come out zero (=) or unchanged (+=).
TEST_P(EmbeddingTest, ForwardAndBackwardMatchTheFloat64Reference) {
  const DataType t = GetParam();
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    // Rows of 1000 and 36 elements (16-byte vectors, or not, for bf16 and
    // f32), tokens not filling the last block, and every buffer one element
    // off 16-byte alignment (the scalar kernels of ops/embedding.cu).
    for (auto [tokens, vocab, hidden, shift] :
         std::vector<std::tuple<int64_t, int64_t, int64_t, size_t>>{
             {1, 1, 1, 0}, {9, 5, 3, 0}, {256, 100, 64, 0}, {37, 50, 1000, 0},
             {300, 40, 36, 0}, {37, 50, 1000, DataTypeSize(t)}, {300, 40, 36, DataTypeSize(t)}}) {
      SCOPED_TRACE(::testing::Message() << tokens << "x" << hidden << " shift " << shift);
      auto stream = *device->CreateStream();
      std::vector<int32_t> ids(tokens);
      for (int64_t i = 0; i < tokens; ++i) ids[i] = static_cast<int32_t>((i * 7 + 3) % (vocab - vocab / 4));
      const auto table = Round(Random(vocab * hidden, 1), t);
      const auto dy = Round(Random(tokens * hidden, 2), t);
      const auto d0 = Random(vocab * hidden, 3);
      DeviceBuffer bids = Upload(*device, *stream, IdBytes(ids));
      Shifted btab = Upload(*device, *stream, Pack(table, t), shift),
              bdy = Upload(*device, *stream, Pack(dy, t), shift);
      Shifted by = Poisoned(*device, *stream, tokens * hidden * DataTypeSize(t), shift);
      Shifted bdt = Poisoned(*device, *stream, vocab * hidden * 4, shift ? 4 : 0);
      Shifted bdt_acc = Upload(*device, *stream, Pack(d0, DataType::kF32), shift ? 4 : 0);
      // A bf16 dtable: accumulated in an fp32 scratch buffer, then rounded.
      const auto d0_16 = Round(d0, DataType::kBF16);
      Shifted bdt16 = Poisoned(*device, *stream, vocab * hidden * 2, shift ? 2 : 0);
      Shifted bdt16_acc = Upload(*device, *stream, Pack(d0_16, DataType::kBF16), shift ? 2 : 0);
      const EmbeddingShape s{tokens, vocab, hidden, t};
      const auto* pid = static_cast<const int32_t*>(bids.data());
      ASSERT_TRUE(EmbeddingForward(*stream, s, pid, btab.data(), by.data()).ok());
      ASSERT_TRUE(EmbeddingBackward(*stream, s, pid, bdy.data(), bdt.data(), DataType::kF32,
                                    false).ok());
      ASSERT_TRUE(EmbeddingBackward(*stream, s, pid, bdy.data(), bdt_acc.data(),
                                    DataType::kF32, true).ok());
      ASSERT_TRUE(EmbeddingBackward(*stream, s, pid, bdy.data(), bdt16.data(), DataType::kBF16,
                                    false).ok());
      ASSERT_TRUE(EmbeddingBackward(*stream, s, pid, bdy.data(), bdt16_acc.data(),
                                    DataType::kBF16, true).ok());
      std::vector<double> ry(tokens * hidden), rdt(vocab * hidden, 0), racc = d0,
          racc16 = d0_16;
      for (int64_t i = 0; i < tokens; ++i) {
        for (int64_t e = 0; e < hidden; ++e) {
          ry[i * hidden + e] = table[ids[i] * hidden + e];
          rdt[ids[i] * hidden + e] += dy[i * hidden + e];
          racc[ids[i] * hidden + e] += dy[i * hidden + e];
          racc16[ids[i] * hidden + e] += dy[i * hidden + e];
        }
      }
      EXPECT_EQ(Compare("y", Fetch(*stream, by, tokens * hidden, t), ry, 0), "");
      EXPECT_EQ(Compare("dtable", Fetch(*stream, bdt, vocab * hidden, DataType::kF32), rdt, 1e-5), "");
      EXPECT_EQ(Compare("dtable (+=)", Fetch(*stream, bdt_acc, vocab * hidden, DataType::kF32),
                        racc, 1e-5), "");
      const double tol16 = testing::Tolerance(DataType::kBF16);
      EXPECT_EQ(Compare("dtable bf16", Fetch(*stream, bdt16, vocab * hidden, DataType::kBF16),
                        rdt, tol16), "");
      EXPECT_EQ(Compare("dtable bf16 (+=)",
                        Fetch(*stream, bdt16_acc, vocab * hidden, DataType::kBF16), racc16,
                        tol16), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, EmbeddingTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return DataTypeName(info.param); });

TEST(EmbeddingGradTest, BackwardMatchesFiniteDifferences) {
  const int64_t tokens = 4, vocab = 3, hidden = 2;
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const std::vector<int32_t> ids = {2, 0, 2, 1};
  const auto table = Random(vocab * hidden, 5), g = Random(tokens * hidden, 6);
  auto loss = [&](const std::vector<double>& tab) {
    double l = 0;
    for (int64_t i = 0; i < tokens; ++i)
      for (int64_t e = 0; e < hidden; ++e) l += tab[ids[i] * hidden + e] * g[i * hidden + e];
    return l;
  };
  std::vector<float> gf(g.begin(), g.end()), dt(vocab * hidden);
  ASSERT_TRUE(EmbeddingBackward(*stream, {tokens, vocab, hidden, DataType::kF32}, ids.data(),
                                gf.data(), dt.data(), DataType::kF32, false).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(Compare("dtable", {dt.begin(), dt.end()}, testing::FiniteDifference(loss, table),
                    1e-5), "");
}

TEST(EmbeddingTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[8] = {};
  const int32_t ids[2] = {0, 5};
  EXPECT_EQ(EmbeddingForward(*stream, {2, 4, 2, DataType::kF32}, nullptr, buf, buf).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(EmbeddingForward(*stream, {2, 0, 2, DataType::kF32}, ids, buf, buf).code(),
            absl::StatusCode::kInvalidArgument);
  // An id out of range is data: the host work fails and the stream says so.
  ASSERT_TRUE(EmbeddingForward(*stream, {2, 4, 2, DataType::kF32}, ids, buf, buf).ok());
  const Status st = stream->Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token 1 has id 5"), std::string::npos) << st;
}

}  // namespace
}  // namespace baton::ops
