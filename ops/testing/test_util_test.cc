// The ops tests' guard bands (testing::Shifted) see a write on either side
// of the buffer, and only such a write.
#include "baton/ops/testing/test_util.h"

#include "gtest/gtest.h"

namespace baton::ops::testing {
namespace {

TEST(ShiftedTest, GuardsSeeWritesOutsideTheBufferOnly) {
  for (auto& device : TestDevices()) {
    SCOPED_TRACE(device->name());
    auto stream = *device->CreateStream();
    for (size_t shift : {0, 2, 4}) {
      Shifted b = Poisoned(*device, *stream, 40, shift);
      // Writing every byte of the payload leaves the guards intact.
      ASSERT_TRUE(stream->MemsetAsync(b.data(), 0, 40).ok());
      EXPECT_EQ(b.CheckGuards(*stream), "");
      // One byte past the end.
      ASSERT_TRUE(stream->MemsetAsync(static_cast<char*>(b.data()) + 40, 0, 1).ok());
      EXPECT_NE(b.CheckGuards(*stream).find("past the end"), std::string::npos);
      // One byte before the start.
      Shifted c = Poisoned(*device, *stream, 40, shift);
      ASSERT_TRUE(stream->MemsetAsync(static_cast<char*>(c.data()) - 1, 0, 1).ok());
      EXPECT_NE(c.CheckGuards(*stream).find("before the start"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace baton::ops::testing
