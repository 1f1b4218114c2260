// The factory of //comm:core alone: inproc built in, ucx and nccl absent
// (they are not linked into this test), and backends registered at run time.
#include "baton/comm/backend_registry.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
#include "baton/comm/factory.h"
#include "gtest/gtest.h"

namespace baton {
namespace {

CommConfig Config(const std::string& backend, Device* device) {
  CommConfig c;
  c.backend = backend;
  c.device = device;
  c.timeout = absl::Seconds(2);
  return c;
}

TEST(BackendRegistry, UnlinkedBackendNamesTheTargetToAdd) {
  auto device = CreateHostDevice();
  ASSERT_TRUE(device.ok());
  auto ucx = CreateCommunicator(Config("ucx", device->get()));
  ASSERT_FALSE(ucx.ok());
  EXPECT_EQ(ucx.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(ucx.status().message(), "//:baton_ucx"))
      << ucx.status();
  auto nccl = CreateCommunicator(Config("nccl", device->get()));
  ASSERT_FALSE(nccl.ok());
  EXPECT_EQ(nccl.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_TRUE(absl::StrContains(nccl.status().message(), "//:baton_nccl"))
      << nccl.status();
  auto bad = CreateCommunicator(Config("mpi", device->get()));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(bad.status().message(), "'mpi'"));
}

TEST(BackendRegistry, OnlyInprocIsBuiltIn) {
  const auto built = BuiltBackends();
  ASSERT_FALSE(built.empty());
  EXPECT_EQ(built[0], "inproc");
  EXPECT_EQ(std::count(built.begin(), built.end(), "ucx"), 0);
  EXPECT_EQ(std::count(built.begin(), built.end(), "nccl"), 0);
  auto device = CreateHostDevice();
  ASSERT_TRUE(device.ok());
  auto inproc = CreateCommunicator(Config("inproc", device->get()));
  ASSERT_TRUE(inproc.ok()) << inproc.status();
  EXPECT_EQ((*inproc)->size(), 1);
}

int calls = 0;
StatusOr<std::unique_ptr<Communicator>> FakeFactory(const CommConfig& c) {
  ++calls;
  return absl::AbortedError("fake backend for rank " + std::to_string(c.rank));
}
StatusOr<std::unique_ptr<Communicator>> OtherFactory(const CommConfig&) {
  return absl::InternalError("the second registration must not be used");
}

TEST(BackendRegistry, RegisteredBackendIsUsedAndTheFirstRegistrationWins) {
  EXPECT_TRUE(internal::RegisterBackend("fake", &FakeFactory));
  EXPECT_FALSE(internal::RegisterBackend("fake", &OtherFactory));
  EXPECT_FALSE(internal::RegisterBackend("", &FakeFactory));
  EXPECT_FALSE(internal::RegisterBackend("null", nullptr));
  EXPECT_EQ(internal::FindBackend("null"), nullptr);
  const auto built = BuiltBackends();
  EXPECT_EQ(std::count(built.begin(), built.end(), "fake"), 1);

  auto device = CreateHostDevice();
  ASSERT_TRUE(device.ok());
  auto c = CreateCommunicator(Config("fake", device->get()));
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(c.status().message(), "fake backend for rank 0");
  EXPECT_EQ(calls, 1);
}

}  // namespace
}  // namespace baton
