#include "baton/runtime/crc32c.h"

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

TEST(Crc32cTest, StandardCheckValues) {
  EXPECT_EQ(Crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32cExtendPortable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(Crc32c("", 0), 0u);
  // RFC 3720 (iSCSI) B.4: 32 bytes of zeros, of 0xFF.
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(Crc32c(zeros.data(), 32), 0x8A9136AAu);
  EXPECT_EQ(Crc32c(ones.data(), 32), 0x62A8AB43u);
}

// Both paths agree on every length and alignment, and extending equals
// one pass over the concatenation.
TEST(Crc32cTest, PathsAgreeAndExtendComposes) {
  std::mt19937 rng(7);
  std::vector<uint8_t> buf(4099);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t start : {0, 1, 3, 7}) {
    for (size_t n : {0, 1, 7, 8, 9, 63, 64, 65, 1000, 4092}) {
      const uint8_t* p = buf.data() + start;
      const uint32_t whole = Crc32c(p, n);
      EXPECT_EQ(whole, Crc32cExtendPortable(0, p, n)) << start << " " << n;
      for (size_t cut : {size_t{0}, n / 3, n}) {
        EXPECT_EQ(Crc32cExtend(Crc32c(p, cut), p + cut, n - cut), whole);
      }
    }
  }
}

TEST(Crc32cTest, DetectsOneFlippedBit) {
  std::vector<uint8_t> buf(1 << 16, 0x5A);
  const uint32_t good = Crc32c(buf.data(), buf.size());
  for (size_t at : {size_t{0}, size_t{12345}, buf.size() - 1}) {
    buf[at] ^= 0x10;
    EXPECT_NE(Crc32c(buf.data(), buf.size()), good) << at;
    buf[at] ^= 0x10;
  }
}

}  // namespace
}  // namespace baton
