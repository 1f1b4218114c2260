#include "baton/runtime/pinned_host.h"

#include <cstdint>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

TEST(PinnedHostTest, HostDeviceGivesAlignedWritableMemory) {
  auto device = *CreateHostDevice();
  EXPECT_FALSE(PinsHostMemory(*device));
  for (size_t alignment : {size_t{1}, size_t{64}, size_t{4096}}) {
    auto b = AllocatePinnedHost(*device, 1000, alignment);
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ(b->size(), 1000u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % alignment, 0u);
    std::memset(b->data(), 0x5A, 1000);
    EXPECT_EQ(static_cast<uint8_t*>(b->data())[999], 0x5A);
  }
}

TEST(PinnedHostTest, BadRequestsAreRefused) {
  auto device = *CreateHostDevice();
  EXPECT_EQ(AllocatePinnedHost(*device, 0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(AllocatePinnedHost(*device, 8, 3).status().code(), absl::StatusCode::kInvalidArgument);
  const Status s = AllocatePinnedHost(*device, 8, 8192).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(s.message()).find("alignment"), std::string::npos) << s;
}

// On a GPU: pinned memory round-trips through device memory with
// MemcpyAsync on one stream. Skipped without one.
TEST(PinnedHostTest, CudaRoundTrip) {
  if (CudaDeviceCount() == 0) GTEST_SKIP() << "no CUDA device";
  auto device = *CreateCudaDevice(0);
  EXPECT_TRUE(PinsHostMemory(*device));
  const size_t bytes = 1 << 20;
  auto src = AllocatePinnedHost(*device, bytes);
  auto dst = AllocatePinnedHost(*device, bytes);
  ASSERT_TRUE(src.ok() && dst.ok());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(src->data()) % 4096, 0u);
  for (size_t i = 0; i < bytes; ++i) static_cast<uint8_t*>(src->data())[i] = static_cast<uint8_t>(i * 7);
  std::memset(dst->data(), 0, bytes);
  auto on_device = *device->Allocate(bytes);
  auto stream = *device->CreateStream();
  ASSERT_TRUE(stream->MemcpyAsync(on_device.data(), src->data(), bytes).ok());
  ASSERT_TRUE(stream->MemcpyAsync(dst->data(), on_device.data(), bytes).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(std::memcmp(src->data(), dst->data(), bytes), 0);
}

}  // namespace
}  // namespace baton
