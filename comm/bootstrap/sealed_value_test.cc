#include "baton/comm/bootstrap/sealed_value.h"

#include <string>

#include "gtest/gtest.h"

namespace baton {
namespace {

void ExpectRefused(const StatusOr<std::string>& r, const std::string& what) {
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  // Names the key, the rank and the problem.
  EXPECT_NE(r.status().message().find("'g/ucx/addr/3'"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find("rank 3"), std::string::npos)
      << r.status();
  EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status();
}

TEST(SealedValueTest, RoundTripsAnyBytes) {
  const std::string payload("\0\1addr\xff", 7);
  const std::string sealed = SealValue("ucx-address", 3, payload);
  auto r = OpenSealedValue("g/ucx/addr/3", "ucx-address", 3, sealed);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, payload);
  auto empty = OpenSealedValue("k", "x", 0, SealValue("x", 0, ""));
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(*empty, "");
}

TEST(SealedValueTest, EveryKindOfDamageIsCaught) {
  const std::string good = SealValue("ucx-address", 3, std::string(300, 'a'));
  const char* key = "g/ucx/addr/3";
  ExpectRefused(OpenSealedValue(key, "ucx-address", 3, "garbage"), "no seal");
  ExpectRefused(OpenSealedValue(key, "ucx-address", 3, ""), "no seal");
  ExpectRefused(OpenSealedValue(key, "ucx-address", 3, good.substr(0, 12)),
                "truncated");
  ExpectRefused(OpenSealedValue(key, "ucx-address", 3,
                                good.substr(0, good.size() - 1)),
                "300 bytes but 299");
  ExpectRefused(OpenSealedValue(key, "ucx-address", 3, good + "x"),
                "300 bytes but 301");
  ExpectRefused(OpenSealedValue(key, "nccl-id", 3, good), "holds a ucx");
  ExpectRefused(OpenSealedValue(key, "ucx-address", 3,
                                SealValue("ucx-address", 2, "a")),
                "published by rank 2");
  // Any single flipped byte of the payload or header.
  for (size_t i = 0; i < good.size(); i += 7) {
    std::string bad = good;
    bad[i] ^= 0x20;
    auto r = OpenSealedValue(key, "ucx-address", 3, bad);
    EXPECT_FALSE(r.ok()) << "byte " << i;
  }
  std::string flipped = good;
  flipped.back() ^= 1;
  ExpectRefused(OpenSealedValue(key, "ucx-address", 3, flipped), "checksum");
}

}  // namespace
}  // namespace baton
