// runtime/stream_ops.h on the host device always and on CUDA device 0 when a
// GPU is present (skipped otherwise): both give the host conversions'
// results bit for bit.
#include "baton/runtime/stream_ops.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

class StreamOpsTest : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    StatusOr<std::unique_ptr<Device>> d = GetParam() == DeviceKind::kHost
                                              ? CreateHostDevice()
                                              : CreateCudaDevice(0);
    if (!d.ok()) {
      ASSERT_EQ(GetParam(), DeviceKind::kCuda) << d.status();
      GTEST_SKIP() << "no CUDA device: " << d.status();
    }
    device_ = std::move(*d);
    stream_ = *device_->CreateStream();
  }
  // A device buffer holding `bytes` of `src`.
  DeviceBuffer Upload(const void* src, size_t bytes) {
    DeviceBuffer b = *device_->Allocate(bytes);
    EXPECT_TRUE(stream_->MemcpyAsync(b.data(), src, bytes).ok());
    return b;
  }
  std::vector<uint8_t> Download(const DeviceBuffer& b, size_t bytes) {
    std::vector<uint8_t> out(bytes);
    EXPECT_TRUE(stream_->MemcpyAsync(out.data(), b.data(), bytes).ok());
    EXPECT_TRUE(stream_->Synchronize().ok());
    return out;
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
};

std::vector<float> Values(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = (static_cast<float>(i % 97) - 48.f) * 0.0371f + 1e-3f * (i % 7);
  }
  return v;
}

TEST_P(StreamOpsTest, CastRoundsAsTheHostConversions) {
  const size_t n = 5000;
  const std::vector<float> src = Values(n);
  for (DataType t : {DataType::kF32, DataType::kBF16, DataType::kF16}) {
    const size_t bytes = n * DataTypeSize(t);
    std::vector<uint8_t> want(bytes);
    NarrowFromF32(want.data(), src.data(), t, n);
    DeviceBuffer in = Upload(src.data(), n * 4);
    DeviceBuffer out = *device_->Allocate(bytes);
    ASSERT_TRUE(CastFromF32(*stream_, out.data(),
                            static_cast<const float*>(in.data()), t, n).ok());
    EXPECT_EQ(Download(out, bytes), want) << DataTypeName(t);
  }
}

TEST_P(StreamOpsTest, AccumulateAddsInFloatAndRoundsOnce) {
  const size_t n = 4099;
  const std::vector<float> a = Values(n), b = Values(n + 13);
  for (DataType t : {DataType::kF32, DataType::kBF16, DataType::kF16}) {
    const size_t bytes = n * DataTypeSize(t);
    std::vector<uint8_t> ta(bytes), tb(bytes), want(bytes);
    NarrowFromF32(ta.data(), a.data(), t, n);
    NarrowFromF32(tb.data(), b.data() + 13, t, n);
    AddInto(want.data(), ta.data(), tb.data(), t, n);
    DeviceBuffer dst = Upload(ta.data(), bytes), src = Upload(tb.data(), bytes);
    ASSERT_TRUE(AccumulateInto(*stream_, dst.data(), src.data(), t, n).ok());
    EXPECT_EQ(Download(dst, bytes), want) << DataTypeName(t);
    // src == dst doubles.
    std::vector<uint8_t> twice(bytes);
    AddInto(twice.data(), want.data(), want.data(), t, n);
    ASSERT_TRUE(AccumulateInto(*stream_, dst.data(), dst.data(), t, n).ok());
    EXPECT_EQ(Download(dst, bytes), twice) << DataTypeName(t);
  }
}

TEST_P(StreamOpsTest, BadArgumentsAreNamedAndNothingIsEnqueued) {
  DeviceBuffer buf = *device_->Allocate(64);
  auto f = static_cast<float*>(buf.data());
  Status s = CastFromF32(*stream_, buf.data(), f, DataType::kI32, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("int32"), std::string::npos) << s;
  s = AccumulateInto(*stream_, nullptr, f, DataType::kF32, 4);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("dst"), std::string::npos) << s;
  s = AccumulateInto(*stream_, f, nullptr, DataType::kBF16, 4);
  EXPECT_NE(s.message().find("src"), std::string::npos) << s;
  EXPECT_TRUE(CastFromF32(*stream_, nullptr, nullptr, DataType::kBF16, 0).ok());
  EXPECT_TRUE(stream_->Synchronize().ok());
}

INSTANTIATE_TEST_SUITE_P(AllDevices, StreamOpsTest,
                         ::testing::Values(DeviceKind::kHost, DeviceKind::kCuda),
                         [](const ::testing::TestParamInfo<DeviceKind>& info) {
                           return std::string(info.param == DeviceKind::kHost
                                                  ? "host"
                                                  : "cuda");
                         });

}  // namespace
}  // namespace baton
