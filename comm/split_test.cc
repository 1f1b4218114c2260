// Sub-communicators (Communicator::Split) on the inproc backend: 8 ranks as
// 2 x 4 and 4 x 2 (comm/testing/split_check.h), on the host path and the
// event protocol; a rank that never splits.
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "baton/comm/factory.h"
#include "baton/comm/testing/split_check.h"
#include "gtest/gtest.h"
#include "baton/runtime/device.h"

namespace baton {
namespace {

std::vector<std::unique_ptr<Communicator>> MakeGroup(Device& device, int n,
                                                     absl::Duration timeout,
                                                     bool event_protocol) {
  CommConfig cfg;
  cfg.device = &device;
  cfg.group = "";
  cfg.timeout = timeout;
  cfg.inproc_event_protocol = event_protocol;
  auto comms = CreateInprocGroup(n, cfg);
  EXPECT_TRUE(comms.ok()) << comms.status();
  return comms.ok() ? std::move(*comms)
                    : std::vector<std::unique_ptr<Communicator>>();
}

struct Layout {
  int groups;
  bool event_protocol;
};

class InprocSplitTest : public ::testing::TestWithParam<Layout> {};

TEST_P(InprocSplitTest, ChildrenAreExactAndIndependentOfTheParent) {
  const Layout l = GetParam();
  auto device = *CreateHostDevice();
  auto comms = MakeGroup(*device, 8, absl::Seconds(30), l.event_protocol);
  ASSERT_EQ(comms.size(), 8u);
  std::vector<Status> results(8);
  std::vector<std::thread> threads;
  for (int r = 0; r < 8; ++r) {
    threads.emplace_back([&, r] {
      results[r] = RunSplitScenario(*comms[r], *device, l.groups,
                                    /*cross_order=*/!l.event_protocol);
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 8; ++r) EXPECT_TRUE(results[r].ok()) << results[r];
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, InprocSplitTest,
    ::testing::Values(Layout{2, false}, Layout{4, false}, Layout{2, true},
                      Layout{4, true}),
    [](const ::testing::TestParamInfo<Layout>& i) {
      return absl::StrCat(i.param.groups, "x", 8 / i.param.groups,
                          i.param.event_protocol ? "_events" : "_host");
    });

TEST(InprocSplitTest, ARankThatNeverSplitsGivesDeadlineExceeded) {
  auto device = *CreateHostDevice();
  auto comms = MakeGroup(*device, 3, absl::Milliseconds(300), false);
  ASSERT_EQ(comms.size(), 3u);
  std::vector<Status> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] { results[r] = comms[r]->Split(0, r).status(); });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(results[r].code(), absl::StatusCode::kDeadlineExceeded)
        << results[r];
    EXPECT_TRUE(absl::StrContains(results[r].message(), "2")) << results[r];
  }
}

TEST(InprocSplitTest, AnAbortedParentCreatesNothing) {
  auto device = *CreateHostDevice();
  auto comms = MakeGroup(*device, 2, absl::Seconds(5), false);
  ASSERT_EQ(comms.size(), 2u);
  comms[0]->Abort();
  auto child = comms[0]->Split(0, 0);
  EXPECT_EQ(child.status().code(), absl::StatusCode::kUnavailable)
      << child.status();
  auto other = comms[1]->Split(0, 0);
  EXPECT_EQ(other.status().code(), absl::StatusCode::kUnavailable)
      << other.status();
}

}  // namespace
}  // namespace baton
