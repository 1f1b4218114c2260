#include "baton/ops/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <tuple>
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
using testing::Shifted;
using testing::Round;
using testing::Upload;

std::vector<double> Losses(const std::vector<double>& z, const std::vector<int32_t>& y,
                           int64_t vocab) {
  std::vector<double> out(y.size());
  for (size_t t = 0; t < y.size(); ++t) {
    double m = -1e300, s = 0;
    for (int64_t v = 0; v < vocab; ++v) m = std::max(m, z[t * vocab + v]);
    for (int64_t v = 0; v < vocab; ++v) s += std::exp(z[t * vocab + v] - m);
    out[t] = m + std::log(s) - z[t * vocab + y[t]];
  }
  return out;
}

class CrossEntropyTest : public ::testing::TestWithParam<DataType> {};

// Out of place over poison, and in place over the logits.
TEST_P(CrossEntropyTest, LossAndGradientMatchTheFloat64Reference) {
  const DataType t = GetParam();
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    // Rows that are not a multiple of 8 elements and logits one element off
    // 16-byte alignment take the scalar kernel of ops/cross_entropy.cu.
    for (auto [tokens, vocab, shift] : std::vector<std::tuple<int64_t, int64_t, size_t>>{
             {1, 1, 0}, {5, 7, 0}, {64, 512, 0}, {3, 5000, 0}, {4, 6007, 0},
             {5, 7, DataTypeSize(t)}, {3, 5000, DataTypeSize(t)}}) {
      SCOPED_TRACE(::testing::Message() << tokens << "x" << vocab << " shift " << shift);
      auto stream = *device->CreateStream();
      const auto z = Round(Random(tokens * vocab, 1 + vocab, 4.0), t);
      std::vector<int32_t> y(tokens);
      for (int64_t i = 0; i < tokens; ++i) y[i] = static_cast<int32_t>((i * 31 + 7) % vocab);
      const float scale = 1.0f / tokens;
      Shifted bz = Upload(*device, *stream, Pack(z, t), shift);
      DeviceBuffer by = Upload(*device, *stream, testing::IdBytes(y));
      DeviceBuffer bl = Poisoned(*device, *stream, tokens * 4),
                   bl2 = Poisoned(*device, *stream, tokens * 4);
      Shifted bdz = Poisoned(*device, *stream, tokens * vocab * DataTypeSize(t), shift);
      const CrossEntropyShape s{tokens, vocab, t};
      const auto* py = static_cast<const int32_t*>(by.data());
      ASSERT_TRUE(CrossEntropy(*stream, s, bz.data(), py, static_cast<float*>(bl.data()),
                               bdz.data(), scale).ok());
      ASSERT_TRUE(CrossEntropy(*stream, s, bz.data(), py, static_cast<float*>(bl2.data()),
                               bz.data(), scale).ok());  // in place
      const auto rl = Losses(z, y, vocab);
      std::vector<double> rdz(tokens * vocab);
      for (int64_t i = 0; i < tokens; ++i)
        for (int64_t v = 0; v < vocab; ++v)
          rdz[i * vocab + v] = scale * (std::exp(z[i * vocab + v] - (rl[i] + z[i * vocab + y[i]])) -
                                        (v == y[i] ? 1 : 0));
      EXPECT_EQ(Compare("loss", Fetch(*stream, bl, tokens, DataType::kF32), rl, 1e-5), "");
      EXPECT_EQ(Compare("loss (in place)", Fetch(*stream, bl2, tokens, DataType::kF32), rl, 1e-5), "");
      const double tol = testing::Tolerance(t);
      EXPECT_EQ(Compare("dlogits", Fetch(*stream, bdz, tokens * vocab, t), rdz, tol), "");
      EXPECT_EQ(Compare("dlogits (in place)", Fetch(*stream, bz, tokens * vocab, t), rdz, tol), "");
    }
  }
}

// A Llama-3 sized vocabulary on the host: the log-sum-exp of 128k terms
// within 1e-6 of the float64 reference (relative to |loss| + rms, about
// 2 x 20 here). A float sum of the exponentials misses it by ~6e-6 at this
// size (logits of scale 4: the sum is dominated by a few terms and the
// running float total drops the small ones); a double sum is at ~3e-8, so
// what is left is the rounding of the loss to float. dlogits keep the
// dtype's tolerance.
TEST_P(CrossEntropyTest, LargeVocabularyLossMatchesTheFloat64ReferenceOnTheHost) {
  const DataType t = GetParam();
  const int64_t tokens = 4, vocab = 131072;
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const auto z = Round(Random(tokens * vocab, 1 + vocab, 4.0), t);
  std::vector<int32_t> y(tokens);
  for (int64_t i = 0; i < tokens; ++i) y[i] = static_cast<int32_t>((i * 31 + 7) % vocab);
  const std::vector<uint8_t> packed = Pack(z, t);
  std::vector<uint8_t> dz(packed.size());
  std::vector<float> loss(tokens);
  const float scale = 1.0f / tokens;
  ASSERT_TRUE(CrossEntropy(*stream, {tokens, vocab, t}, packed.data(), y.data(), loss.data(),
                           dz.data(), scale).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  const auto rl = Losses(z, y, vocab);
  EXPECT_EQ(Compare("loss", {loss.begin(), loss.end()}, rl, 1e-6), "");
  std::vector<double> rdz(tokens * vocab);
  for (int64_t i = 0; i < tokens; ++i)
    for (int64_t v = 0; v < vocab; ++v)
      rdz[i * vocab + v] = scale * (std::exp(z[i * vocab + v] - (rl[i] + z[i * vocab + y[i]])) -
                                    (v == y[i] ? 1 : 0));
  EXPECT_EQ(Compare("dlogits", testing::Unpack(dz, t), rdz, testing::Tolerance(t)), "");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CrossEntropyTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return DataTypeName(info.param); });

TEST(CrossEntropyGradTest, GradientMatchesFiniteDifferences) {
  const int64_t tokens = 3, vocab = 5;
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const auto z = Random(tokens * vocab, 9, 2.0);
  const std::vector<int32_t> y = {4, 0, 2};
  auto mean_loss = [&](const std::vector<double>& zz) {
    double s = 0;
    for (double l : Losses(zz, y, vocab)) s += l;
    return s / tokens;
  };
  std::vector<float> zf(z.begin(), z.end()), loss(tokens), dz(tokens * vocab);
  ASSERT_TRUE(CrossEntropy(*stream, {tokens, vocab, DataType::kF32}, zf.data(), y.data(),
                           loss.data(), dz.data(), 1.0f / tokens).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(Compare("dlogits", {dz.begin(), dz.end()}, testing::FiniteDifference(mean_loss, z),
                    1e-5), "");
}

TEST(CrossEntropyTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[8] = {};
  const int32_t y[2] = {0, 4};
  EXPECT_EQ(CrossEntropy(*stream, {2, 4, DataType::kF32}, buf, nullptr, buf, buf, 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CrossEntropy(*stream, {2, 4, DataType::kF32}, buf, y, buf, buf, NAN).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(CrossEntropy(*stream, {2, 4, DataType::kF32}, buf, y, buf, buf, 1).ok());
  const Status st = stream->Synchronize();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("token 1 has target 4"), std::string::npos) << st;
}

}  // namespace
}  // namespace baton::ops
