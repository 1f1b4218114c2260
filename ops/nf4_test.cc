#include "baton/ops/nf4.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/adamw8bit.h"
#include "baton/ops/testing/test_util.h"

namespace baton::ops {
namespace {

using testing::Download;
using testing::Fetch;
using testing::Random;
using testing::Upload;

// QLoRA's NF4 table (bitsandbytes' values, in double).
constexpr double kQloraNf4[16] = {
    -1.0, -0.6961928009986877, -0.5250730514526367, -0.39491748809814453,
    -0.28444138169288635, -0.18477343022823334, -0.09105003625154495, 0.0,
    0.07958029955625534, 0.16093020141124725, 0.24611230194568634, 0.33791524171829224,
    0.44070982933044434, 0.5626170039176941, 0.7229568362236023, 1.0};

std::vector<uint8_t> Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

// Values whose blocks differ in scale by up to 1000x (so the 8-bit absmax
// spans decades), with a few exact zeros and a whole zero block.
std::vector<float> TestValues(int64_t n, uint64_t seed) {
  const std::vector<double> r = Random(n, seed);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t b = i / kNf4Block;
    const double block_scale = std::pow(10.0, -3.0 * static_cast<double>(b % 7) / 6.0);
    v[i] = b == 5 ? 0.0f : static_cast<float>(r[i] * block_scale);
  }
  v[3] = 0.0f;
  return v;
}

TEST(Nf4Test, TheTableIsQlorasAndNearestRoundsToTheNearestValue) {
  const auto& c = Nf4Code();
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(c[i], static_cast<float>(kQloraNf4[i])) << i;
    EXPECT_EQ(Nf4Nearest(c[i]), i) << i;
  }
  EXPECT_EQ(Nf4Nearest(0.0f), 7);
  EXPECT_EQ(Nf4Nearest(-5.0f), 0);
  EXPECT_EQ(Nf4Nearest(5.0f), 15);
  // A midpoint goes to the smaller index, just above it to the larger.
  const float mid = 0.5f * (c[9] + c[10]);
  EXPECT_EQ(Nf4Nearest(mid), 9);
  EXPECT_EQ(Nf4Nearest(std::nextafter(mid, 1.0f)), 10);
}

TEST(Nf4Test, LayoutIsFourPointOneTwoSevenBitsAnElement) {
  const Nf4Layout l = Nf4LayoutFor(16384);
  EXPECT_EQ(l.codes, 0);
  EXPECT_EQ(l.absmax, 8192);
  EXPECT_EQ(l.scales, 8192 + 256);
  EXPECT_EQ(l.bytes, 8192 + 256 + 4);
  EXPECT_NEAR(8.0 * Nf4LayoutFor(16384 * 64).bytes / (16384 * 64), 4.127, 1e-3);
  // A short last block and group; an odd count.
  const Nf4Layout s = Nf4LayoutFor(16384 + 65);
  EXPECT_EQ(s.absmax, 8225);
  EXPECT_EQ(s.scales, (8225 + 258 + 3) / 4 * 4);
  EXPECT_EQ(s.bytes, s.scales + 8);
}

// A packing written by hand: block 0 at the group scale (code8 = 1.0),
// block 1 at code8[100]; element i has code i % 16.
TEST(Nf4Test, DequantizeOfAKnownPackingIsExact) {
  const int64_t n = 128;
  const Nf4Layout l = Nf4LayoutFor(n);
  std::vector<uint8_t> packed(l.bytes, 0);
  for (int64_t i = 0; i < n; i += 2) {
    packed[i / 2] = static_cast<uint8_t>((i % 16) | (((i + 1) % 16) << 4));
  }
  packed[l.absmax] = 255;
  packed[l.absmax + 1] = 100;
  const float scale = 2.5f;
  std::memcpy(packed.data() + l.scales, &scale, 4);
  const auto& c8 = DynamicCode(false);
  ASSERT_EQ(c8[255], 1.0f);
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    auto stream = *device->CreateStream();
    DeviceBuffer in = Upload(*device, *stream, packed);
    for (DataType t : {DataType::kF32, DataType::kBF16}) {
      DeviceBuffer out = testing::Poisoned(*device, *stream, n * DataTypeSize(t));
      ASSERT_TRUE(Nf4Dequantize(*stream, in.data(), n, out.data(), t).ok());
      const std::vector<double> got = Fetch(*stream, out, n, t);
      for (int64_t i = 0; i < n; ++i) {
        const float a = i < 64 ? scale : c8[100] * scale;
        const float want = Nf4Code()[i % 16] * a;
        const double want_t = t == DataType::kF32 ? want : Bf16ToFloat(FloatToBf16(want));
        ASSERT_EQ(got[i], want_t) << "element " << i;
      }
    }
  }
}

// Packs (on every device) and checks each stored value against the
// definition in float64: the scale is the group's largest |x|, the absmax
// byte and every code are the nearest values (a float64 ratio within 1e-6
// of a midpoint may go either way), the odd nibble is 0; the round trip
// is within the bound of ops/nf4.h.
TEST(Nf4Test, PackMatchesTheReferenceAndRoundTripsWithinTheBound) {
  const int64_t n = 2 * 16384 + 999;  // three groups, the last short; odd
  const std::vector<float> x = TestValues(n, 7);
  const Nf4Layout l = Nf4LayoutFor(n);
  const auto& c4 = Nf4Code();
  const auto& c8 = DynamicCode(false);
  // Index of the nearest value of `code` (m values) to r, or -1 if it is
  // not `got` and r is not within 1e-6 of the midpoint next to got.
  auto check_nearest = [](const float* code, int m, double r, int got) {
    int want = 0;
    for (int i = 0; i + 1 < m; ++i) want += (double{code[i]} + code[i + 1]) / 2 < r ? 1 : 0;
    if (want == got) return true;
    const int k = std::min(want, got);
    return std::fabs(r - (double{code[k]} + code[k + 1]) / 2) < 1e-6 && std::abs(want - got) == 1;
  };
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    auto stream = *device->CreateStream();
    DeviceBuffer in = Upload(*device, *stream, Bytes(x));
    DeviceBuffer out = testing::Poisoned(*device, *stream, l.bytes);
    ASSERT_TRUE(Nf4Pack(*stream, static_cast<const float*>(in.data()), n, out.data()).ok());
    const std::vector<uint8_t> p = Download(*stream, out, l.bytes);
    std::vector<float> scales((l.bytes - l.scales) / 4);
    std::memcpy(scales.data(), p.data() + l.scales, scales.size() * 4);
    DeviceBuffer deq = testing::Poisoned(*device, *stream, n * 4);
    ASSERT_TRUE(Nf4Dequantize(*stream, out.data(), n, deq.data(), DataType::kF32).ok());
    const std::vector<double> y = Fetch(*stream, deq, n, DataType::kF32);
    double err2 = 0, x2 = 0, worst = 0;
    for (int64_t b = 0; b * kNf4Block < n; ++b) {
      const int64_t begin = b * kNf4Block, end = std::min(n, begin + kNf4Block);
      double block_max = 0, group_max = 0;
      for (int64_t i = begin; i < end; ++i) {
        block_max = std::max(block_max, std::fabs(double{x[i]}));
      }
      const int64_t g = b / kNf4Group, group = kNf4Group * kNf4Block;
      for (int64_t i = g * group; i < std::min(n, (g + 1) * group); ++i) {
        group_max = std::max(group_max, std::fabs(double{x[i]}));
      }
      ASSERT_EQ(scales[g], group_max) << "group " << g;
      const uint8_t q = p[l.absmax + b];
      ASSERT_TRUE(check_nearest(c8.data(), 256, block_max / group_max, q)) << "block " << b;
      const float a = c8[q] * scales[g];
      for (int64_t i = begin; i < end; ++i) {
        const int c = i % 2 == 0 ? p[i / 2] & 0xF : p[i / 2] >> 4;
        ASSERT_TRUE(a == 0.0f ? c == 7 : check_nearest(c4.data(), 16, x[i] / double{a}, c))
            << "element " << i << " code " << c;
        const double e = std::fabs(y[i] - x[i]);
        ASSERT_LE(e, 0.15191 * a + std::max(0.0, std::fabs(double{x[i]}) - a) + 1e-7 * a)
            << "element " << i;
        err2 += e * e;
        x2 += double{x[i]} * x[i];
        worst = std::max(worst, a > 0 ? e / a : 0.0);
      }
    }
    EXPECT_EQ(p[n / 2] >> 4, 0) << "the odd count's last high nibble";
    const double rel = std::sqrt(err2 / x2);
    std::printf("%s: NF4 round trip of %lld values: rms error / rms value %.4f, "
                "largest error / block absmax %.4f\n",
                device->name().c_str(), static_cast<long long>(n), rel, worst);
    // Normal data: NF4 keeps about 3 significant bits.
    EXPECT_LT(rel, 0.12);
  }
}

// The host packer the executor calls and the stream launcher write the
// same bytes; on a GPU, so do the CUDA kernels, and the CUDA dequantize
// writes the host's values (bf16 too).
TEST(Nf4Test, CudaKernelsComputeTheHostsBits) {
  const int64_t n = 16384 + 4097;
  const std::vector<float> x = TestValues(n, 11);
  const Nf4Layout l = Nf4LayoutFor(n);
  std::vector<uint8_t> host(l.bytes);
  ASSERT_TRUE(Nf4PackHost(x.data(), n, host.data()).ok());
  auto devices = testing::TestDevices();
  std::vector<std::vector<double>> deq[2];
  for (auto& device : devices) {
    SCOPED_TRACE(device->name());
    auto stream = *device->CreateStream();
    DeviceBuffer in = Upload(*device, *stream, Bytes(x));
    DeviceBuffer out = testing::Poisoned(*device, *stream, l.bytes);
    ASSERT_TRUE(Nf4Pack(*stream, static_cast<const float*>(in.data()), n, out.data()).ok());
    EXPECT_EQ(Download(*stream, out, l.bytes), host);
    for (int k = 0; k < 2; ++k) {
      const DataType t = k == 0 ? DataType::kF32 : DataType::kBF16;
      DeviceBuffer y = testing::Poisoned(*device, *stream, n * DataTypeSize(t));
      ASSERT_TRUE(Nf4Dequantize(*stream, out.data(), n, y.data(), t).ok());
      deq[k].push_back(Fetch(*stream, y, n, t));
    }
  }
  if (devices.size() < 2) GTEST_SKIP() << "no CUDA device: the host path alone was checked";
  EXPECT_EQ(deq[0][1], deq[0][0]);
  EXPECT_EQ(deq[1][1], deq[1][0]);
}

TEST(Nf4Test, BadArgumentsAreRefused) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[4] = {};
  EXPECT_EQ(Nf4PackHost(buf, -1, buf).code(), absl::StatusCode::kInvalidArgument);
  const Status null_out = Nf4Pack(*stream, buf, 4, nullptr);
  EXPECT_EQ(null_out.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(null_out.message().find("packed"), std::string::npos) << null_out;
  EXPECT_EQ(Nf4Dequantize(*stream, buf, 4, buf, DataType::kI32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Nf4Dequantize(*stream, nullptr, 4, buf, DataType::kF32).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Nf4PackHost(nullptr, 0, nullptr).ok());
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
