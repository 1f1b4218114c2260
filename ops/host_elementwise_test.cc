// The CPU paths of RMSNorm, SwiGLU and rotary (chunked, widened rows, AVX2
// conversions when the CPU has them) give exactly the bits of the plain
// scalar loops they replaced, kept here as the reference, for f32 and bf16,
// on odd shapes and with special values (zeros of both signs, infinities,
// NaN, values that round up to the next bf16 exponent).
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/host_convert.h"
#include "baton/ops/op_util.h"
#include "baton/ops/rmsnorm.h"
#include "baton/ops/rotary.h"
#include "baton/ops/swiglu.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

float OldLoad(const void* p, DataType t, int64_t i) {
  return t == DataType::kBF16 ? Bf16ToFloat(static_cast<const uint16_t*>(p)[i])
                              : static_cast<const float*>(p)[i];
}
void OldStore(void* p, DataType t, int64_t i, float v) {
  if (t == DataType::kBF16) {
    static_cast<uint16_t*>(p)[i] = FloatToBf16(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// n values in dtype t: normal noise with special values sprinkled in.
std::vector<uint8_t> Data(int64_t n, uint64_t seed, DataType t, bool specials) {
  std::vector<double> v = testing::Random(n, seed);
  if (specials) {
    const double inf = std::numeric_limits<double>::infinity();
    const double spec[] = {0.0, -0.0, inf, -inf, std::nan(""), 1.0 + 1.0 / 256, 3.999,
                           -1e30, 1e-30};
    for (int64_t i = 0; i < n; i += 7) v[i] = spec[(i / 7) % 9];
  }
  return testing::Pack(v, t);
}

class HostElementwiseTest : public ::testing::TestWithParam<DataType> {};

TEST_P(HostElementwiseTest, RmsNormIsBitIdenticalToTheScalarLoop) {
  const DataType t = GetParam();
  for (auto [tokens, hidden] : {std::pair<int64_t, int64_t>{1, 1}, {3, 7}, {17, 100},
                                {8, 64}, {9, 33}, {20, 256}}) {
    SCOPED_TRACE(::testing::Message() << tokens << "x" << hidden);
    const RmsNormShape s{tokens, hidden, t, 1e-5f};
    const int64_t n = tokens * hidden;
    const size_t bytes = n * DataTypeSize(t);
    const auto x = Data(n, 1, t, false), w = Data(hidden, 2, t, false),
               g = Data(n, 3, t, false), dx0 = Data(n, 4, t, false);
    // The old forward.
    std::vector<uint8_t> y_old(bytes), dx_old = dx0, dw_old(hidden * 4);
    std::vector<float> r_old(tokens);
    for (int64_t tt = 0; tt < tokens; ++tt) {
      float sum = 0;
      for (int64_t i = 0; i < hidden; ++i) {
        const float v = OldLoad(x.data(), t, tt * hidden + i);
        sum += v * v;
      }
      r_old[tt] = 1.0f / std::sqrt(sum / static_cast<float>(hidden) + s.eps);
      for (int64_t i = 0; i < hidden; ++i) {
        OldStore(y_old.data(), t, tt * hidden + i,
                 OldLoad(x.data(), t, tt * hidden + i) * r_old[tt] * OldLoad(w.data(), t, i));
      }
    }
    // The old backward (dx +=, dw =).
    std::vector<float> dw_acc(hidden, 0.0f);
    for (int64_t tt = 0; tt < tokens; ++tt) {
      const int64_t row = tt * hidden;
      const float r = r_old[tt];
      float c = 0;
      for (int64_t i = 0; i < hidden; ++i) {
        c += OldLoad(g.data(), t, row + i) * OldLoad(w.data(), t, i) * OldLoad(x.data(), t, row + i);
      }
      c /= static_cast<float>(hidden);
      for (int64_t i = 0; i < hidden; ++i) {
        const float xv = OldLoad(x.data(), t, row + i), gv = OldLoad(g.data(), t, row + i);
        const float prev = OldLoad(dx_old.data(), t, row + i);
        OldStore(dx_old.data(), t, row + i,
                 prev + r * (gv * OldLoad(w.data(), t, i) - xv * r * r * c));
        dw_acc[i] += gv * xv * r;
      }
    }
    std::memcpy(dw_old.data(), dw_acc.data(), hidden * 4);

    std::vector<uint8_t> y(bytes), dx = dx0, dw(hidden * 4);
    std::vector<float> r(tokens);
    RmsNormForwardCpu(s, x.data(), w.data(), y.data(), r.data());
    RmsNormBackwardCpu(s, g.data(), x.data(), w.data(), r.data(), dx.data(), true, dw.data(),
                       DataType::kF32, false);
    EXPECT_EQ(y, y_old);
    EXPECT_EQ(0, std::memcmp(r.data(), r_old.data(), tokens * 4));
    EXPECT_EQ(dx, dx_old);
    EXPECT_EQ(dw, dw_old);
  }
}

TEST_P(HostElementwiseTest, SwiGluIsBitIdenticalToTheScalarLoop) {
  const DataType t = GetParam();
  auto sig = [](float v) { return 1.0f / (1.0f + std::exp(-v)); };
  for (int64_t n : {1, 7, 2048, 2049, 5000}) {
    SCOPED_TRACE(n);
    const SwiGluShape s{1, n, t};
    const auto g = Data(n, 5, t, true), u = Data(n, 6, t, true), dh = Data(n, 7, t, true);
    const size_t bytes = n * DataTypeSize(t);
    std::vector<uint8_t> h_old(bytes), dg_old(bytes), du_old(bytes);
    for (int64_t i = 0; i < n; ++i) {
      const float gv = OldLoad(g.data(), t, i), uv = OldLoad(u.data(), t, i),
                  d = OldLoad(dh.data(), t, i);
      const float sg = sig(gv);
      OldStore(h_old.data(), t, i, gv * sig(gv) * uv);
      OldStore(dg_old.data(), t, i, d * uv * sg * (1.0f + gv * (1.0f - sg)));
      OldStore(du_old.data(), t, i, d * gv * sg);
    }
    std::vector<uint8_t> h(bytes), dg(bytes), du(bytes);
    SwiGluForwardCpu(s, g.data(), u.data(), h.data());
    SwiGluBackwardCpu(s, dh.data(), g.data(), u.data(), dg.data(), du.data());
    EXPECT_EQ(h, h_old);
    EXPECT_EQ(dg, dg_old);
    EXPECT_EQ(du, du_old);
  }
}

TEST_P(HostElementwiseTest, RotaryIsBitIdenticalToTheScalarLoop) {
  const DataType t = GetParam();
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  for (RotaryShape s : {RotaryShape{1, 1, 1, 2, 10000.0, t}, RotaryShape{2, 5, 3, 8, 10000.0, t},
                        RotaryShape{3, 17, 2, 22, 500000.0, t}}) {
    for (double sign : {1.0, -1.0}) {
      const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
      auto x = Data(n, 8, t, false);
      std::vector<uint8_t> old = x;
      const int64_t half = s.head_dim / 2;
      for (int64_t tt = 0; tt < s.batch * s.seq; ++tt) {
        const double p = static_cast<double>(tt % s.seq);
        for (int64_t i = 0; i < half; ++i) {
          const double a =
              sign * p * std::pow(s.theta, -2.0 * i / static_cast<double>(s.head_dim));
          const float c = static_cast<float>(std::cos(a)), sn = static_cast<float>(std::sin(a));
          for (int64_t h = 0; h < s.heads; ++h) {
            const int64_t k = (tt * s.heads + h) * s.head_dim + i;
            const float x1 = OldLoad(old.data(), t, k), x2 = OldLoad(old.data(), t, k + half);
            OldStore(old.data(), t, k, x1 * c - x2 * sn);
            OldStore(old.data(), t, k + half, x2 * c + x1 * sn);
          }
        }
      }
      // Twice: the second call takes the cached angle table.
      for (int rep = 0; rep < 2; ++rep) {
        std::vector<uint8_t> got = x;
        ASSERT_TRUE((sign > 0 ? RotaryForward(*stream, s, got.data())
                              : RotaryBackward(*stream, s, got.data())).ok());
        ASSERT_TRUE(stream->Synchronize().ok());
        EXPECT_EQ(got, old) << s.head_dim << " sign " << sign << " rep " << rep;
      }
    }
  }
}

// The row conversions against runtime/dtype.h's scalar ones, every bf16
// pattern and every length remainder of the 8-wide loops.
TEST(HostConvertTest, RowConversionsMatchTheScalarOnes) {
  std::vector<uint16_t> all(65536 + 5);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);
  std::vector<float> wide(all.size());
  WidenRow(all.data(), DataType::kBF16, static_cast<int64_t>(all.size()), wide.data());
  for (size_t i = 0; i < all.size(); ++i) {
    const float want = Bf16ToFloat(all[i]);
    ASSERT_EQ(0, std::memcmp(&wide[i], &want, 4)) << i;
  }
  std::vector<float> fs = wide;
  for (size_t i = 0; i < fs.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &fs[i], 4);
    bits += static_cast<uint32_t>(i * 2654435761u) & 0xffffu;  // low bits: rounding
    std::memcpy(&fs[i], &bits, 4);
  }
  for (int64_t len : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{13},
                      static_cast<int64_t>(fs.size())}) {
    std::vector<uint16_t> narrow(len);
    NarrowRow(fs.data(), len, DataType::kBF16, narrow.data());
    for (int64_t i = 0; i < len; ++i) ASSERT_EQ(narrow[i], FloatToBf16(fs[i])) << i;
  }
  std::printf("row conversions use AVX2: %s\n", HostConvertUsesAvx2() ? "yes" : "no");
}

INSTANTIATE_TEST_SUITE_P(Dtypes, HostElementwiseTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return DataTypeName(info.param); });

}  // namespace
}  // namespace baton::ops
