#include "baton/ops/lora.h"

#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Fetch;
using testing::Pack;
using testing::Random;
using testing::Round;
using testing::Tolerance;
using testing::Upload;

// c[m, n] = sum_k a[m, k] b[n, k] (b transposed: the linear's convention).
std::vector<double> MulT(const std::vector<double>& a, const std::vector<double>& b, int64_t m,
                         int64_t n, int64_t k) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t l = 0; l < k; ++l) c[i * n + j] += a[i * k + l] * b[j * k + l];
    }
  }
  return c;
}

// a [m, k] -> a^T [k, m].
std::vector<double> T(const std::vector<double>& a, int64_t m, int64_t k) {
  std::vector<double> t(m * k);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < k; ++j) t[j * m + i] = a[i * k + j];
  }
  return t;
}

std::vector<double> Add(std::vector<double> a, const std::vector<double>& b, double s = 1) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += s * b[i];
  return a;
}

class LoraTest : public ::testing::TestWithParam<DataType> {};

// y, dx, da, db against the float64 formulas of ops/lora.h, with the
// outputs accumulated onto prior values (accumulate_*) and written.
TEST_P(LoraTest, ForwardAndBackwardMatchTheFloat64Reference) {
  const DataType t = GetParam();
  const DataType gt = t;  // gradients in the input dtype (f32 or bf16)
  const int64_t R = 9, I = 24, O = 20, K = 4;
  const double s = 16.0 / K;
  const auto x = Round(Random(R * I, 1), t), w = Round(Random(O * I, 2, 0.2), t),
             a = Round(Random(K * I, 3, 0.2), t), b = Round(Random(O * K, 4, 0.2), t),
             dy = Round(Random(R * O, 5), t), prior_y = Round(Random(R * O, 6), t),
             prior_dx = Round(Random(R * I, 7), t), prior_da = Round(Random(K * I, 8), gt),
             prior_db = Round(Random(O * K, 9), gt);
  // Reference (xa rounded as the op stores it).
  const auto xa = Round(Add(std::vector<double>(R * K, 0.0), MulT(x, a, R, K, I), s), t);
  const auto y = Add(MulT(x, w, R, O, I), MulT(xa, b, R, O, K));
  const auto u = Round(Add(std::vector<double>(R * K, 0.0), MulT(dy, T(b, O, K), R, K, O), s), t);
  const auto dx = Add(MulT(dy, T(w, O, I), R, I, O), MulT(u, T(a, K, I), R, I, K));
  const auto db = MulT(T(dy, R, O), T(xa, R, K), O, K, R);
  const auto da = MulT(T(u, R, K), T(x, R, I), K, I, R);
  const double tol = Tolerance(t);
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    auto stream = *device->CreateStream();
    for (bool acc : {false, true}) {
      SCOPED_TRACE(acc ? "accumulate" : "write");
      const size_t e = DataTypeSize(t);
      DeviceBuffer bx = Upload(*device, *stream, Pack(x, t)),
                   bw = Upload(*device, *stream, Pack(w, t)),
                   ba = Upload(*device, *stream, Pack(a, t)),
                   bb = Upload(*device, *stream, Pack(b, t)),
                   bdy = Upload(*device, *stream, Pack(dy, t)),
                   bxa = testing::Poisoned(*device, *stream, R * K * e),
                   bu = testing::Poisoned(*device, *stream, R * K * e);
      DeviceBuffer by = acc ? Upload(*device, *stream, Pack(prior_y, t))
                            : testing::Poisoned(*device, *stream, R * O * e),
                   bdx = acc ? Upload(*device, *stream, Pack(prior_dx, t))
                             : testing::Poisoned(*device, *stream, R * I * e),
                   bda = acc ? Upload(*device, *stream, Pack(prior_da, gt))
                             : testing::Poisoned(*device, *stream, K * I * e),
                   bdb = acc ? Upload(*device, *stream, Pack(prior_db, gt))
                             : testing::Poisoned(*device, *stream, O * K * e);
      const LoraShape shape{R, I, O, K, static_cast<float>(s), t};
      ASSERT_TRUE(LoraForward(*stream, shape, bx.data(), bw.data(), ba.data(), bb.data(),
                              bxa.data(), by.data(), acc).ok());
      LoraGrads g{bdx.data(), acc, bda.data(), bdb.data(), gt, acc, acc};
      ASSERT_TRUE(LoraBackward(*stream, shape, bdy.data(), bx.data(), bw.data(), ba.data(),
                               bb.data(), bxa.data(), bu.data(), g).ok());
      auto want = [&](const std::vector<double>& v, const std::vector<double>& prior) {
        return acc ? Add(v, prior) : v;
      };
      EXPECT_EQ(Compare("xa", Fetch(*stream, bxa, R * K, t), xa, tol), "");
      EXPECT_EQ(Compare("y", Fetch(*stream, by, R * O, t), want(y, prior_y), tol), "");
      EXPECT_EQ(Compare("dx", Fetch(*stream, bdx, R * I, t), want(dx, prior_dx), tol), "");
      EXPECT_EQ(Compare("da", Fetch(*stream, bda, K * I, gt), want(da, prior_da), tol), "");
      EXPECT_EQ(Compare("db", Fetch(*stream, bdb, O * K, gt), want(db, prior_db), tol), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LoraTest, ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return std::string(DataTypeName(info.param)); });

// Without dx (the first layer's input): the adapters' gradients alone; and
// with a zero b (LoRA's initial state) y is the base layer's output and a
// gets no gradient.
TEST(LoraTest, ZeroBIsTheBaseLayerAndNullDxIsAllowed) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const int64_t R = 3, I = 5, O = 4, K = 2;
  std::vector<float> x(R * I, 1.0f), w(O * I, 0.5f), a(K * I, 0.25f), b(O * K, 0.0f),
      xa(R * K), y(R * O), dy(R * O, 1.0f), u(R * K), da(K * I, 9.0f), db(O * K);
  const LoraShape s{R, I, O, K, 8.0f, DataType::kF32};
  ASSERT_TRUE(LoraForward(*stream, s, x.data(), w.data(), a.data(), b.data(), xa.data(),
                          y.data()).ok());
  LoraGrads g;
  g.da = da.data();
  g.db = db.data();
  ASSERT_TRUE(LoraBackward(*stream, s, dy.data(), x.data(), w.data(), a.data(), b.data(),
                           xa.data(), u.data(), g).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  for (float v : y) EXPECT_EQ(v, 2.5f);    // 5 x 1 x 0.5
  for (float v : xa) EXPECT_EQ(v, 10.0f);  // 8 x 5 x 0.25
  for (float v : da) EXPECT_EQ(v, 0.0f);
  for (float v : db) EXPECT_EQ(v, 30.0f);  // 3 rows x 1 x 10
}

TEST(LoraTest, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[64] = {};
  const LoraShape ok{2, 2, 2, 1, 1.0f, DataType::kF32};
  LoraShape zero_rank = ok;
  zero_rank.rank = 0;
  const Status st =
      LoraForward(*stream, zero_rank, buf, buf, buf, buf, buf + 8, buf + 16);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("rank"), std::string::npos) << st;
  LoraShape inf = ok;
  inf.scale = 1.0f / 0.0f;
  EXPECT_EQ(LoraForward(*stream, inf, buf, buf, buf, buf, buf + 8, buf + 16).code(),
            absl::StatusCode::kInvalidArgument);
  LoraGrads g;  // da, db null
  EXPECT_EQ(LoraBackward(*stream, ok, buf, buf, buf, buf, buf, buf, buf + 8, g).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ScaleInPlace(*stream, buf, 4, DataType::kI32, 2.0f).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
