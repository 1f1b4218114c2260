#include "baton/runtime/version.h"

#include <string>

#include "gtest/gtest.h"

namespace {

TEST(Version, HeaderAgreesWithTheBuild) {
  EXPECT_EQ(std::string(BATON_VERSION), std::string(BATON_BZL_VERSION));
}

TEST(Version, StringIsMajorMinorPatch) {
  EXPECT_EQ(std::string(BATON_VERSION),
            std::to_string(BATON_VERSION_MAJOR) + "." +
                std::to_string(BATON_VERSION_MINOR) + "." +
                std::to_string(BATON_VERSION_PATCH));
}

}  // namespace
