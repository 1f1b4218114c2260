#include "baton/memory/arena.h"

#include <cstring>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace baton::memory {
namespace {

using ::testing::HasSubstr;

// Two buffers planned into the same bytes: x (live a..b), y (live c..d).
MemoryPlan SharedPlan(PlanInput& in) {
  NodeId a = in.dag.AddNode("a", 0);
  NodeId b = in.dag.AddNode("b", 0);
  NodeId c = in.dag.AddNode("c", 0);
  NodeId d = in.dag.AddNode("d", 0);
  in.AddBuffer("x", 512, a, {b});
  in.AddBuffer("y", 512, c, {d});
  StatusOr<MemoryPlan> plan = PlanMemory(in);
  EXPECT_TRUE(plan.ok());
  EXPECT_EQ(plan->buffers[0].offset, plan->buffers[1].offset);
  return *plan;
}

class ArenaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    device_ = std::move(*CreateHostDevice());
    stream_ = std::move(*device_->CreateStream());
    plan_ = SharedPlan(in_);
    ArenaOptions opts;
    opts.poison = true;
    auto arena = Arena::Create(*device_, plan_, opts);
    ASSERT_TRUE(arena.ok()) << arena.status();
    arena_ = std::move(*arena);
  }
  void Fill(BufferId b, unsigned char v) {
    BufferView view = *arena_->View(b);
    ASSERT_TRUE(stream_->MemsetAsync(view.data, v, view.bytes).ok());
  }

  PlanInput in_;
  MemoryPlan plan_;
  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Arena> arena_;
};

TEST_F(ArenaTest, ViewsFollowThePlan) {
  EXPECT_EQ(arena_->bytes(), plan_.arena_bytes);
  BufferView x = *arena_->View(0);
  EXPECT_EQ(static_cast<char*>(x.data) - static_cast<char*>(arena_->base()),
            static_cast<ptrdiff_t>(plan_.buffers[0].offset));
  EXPECT_EQ(x.bytes, 512u);
  EXPECT_EQ(arena_->View(2).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(arena_->View(-1).status().code(), absl::StatusCode::kOutOfRange);
  // Poison at creation.
  EXPECT_EQ(static_cast<unsigned char*>(x.data)[17], 0xA5);
}

TEST_F(ArenaTest, OrderedReusePasses) {
  Fill(0, 1);
  ASSERT_TRUE(arena_->MarkWritten(0, *stream_).ok());
  ASSERT_TRUE(arena_->CheckIntact(0, *stream_).ok());
  ASSERT_TRUE(arena_->Release(0, *stream_).ok());
  Fill(1, 2);
  ASSERT_TRUE(arena_->MarkWritten(1, *stream_).ok());
  ASSERT_TRUE(arena_->Release(1, *stream_).ok());
  EXPECT_TRUE(stream_->Synchronize().ok());
  // Released bytes hold the poison pattern.
  EXPECT_EQ(static_cast<unsigned char*>(arena_->View(1)->data)[3], 0xA5);
}

TEST_F(ArenaTest, OverwriteWhileLiveIsCaught) {
  Fill(0, 1);
  ASSERT_TRUE(arena_->MarkWritten(0, *stream_).ok());
  Fill(1, 2);  // y written into x's bytes while x is live: a reuse race
  ASSERT_TRUE(arena_->CheckIntact(0, *stream_).ok());
  Status s = stream_->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'x'"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("overwritten while live"));
}

TEST_F(ArenaTest, ReadBeforeWriteIsCaught) {
  ASSERT_TRUE(arena_->CheckIntact(1, *stream_).ok());
  Status s = stream_->Synchronize();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'y'"));
}

TEST(Arena, WithoutPoisonHooksAreFree) {
  auto device = std::move(*CreateHostDevice());
  auto stream = std::move(*device->CreateStream());
  PlanInput in;
  MemoryPlan plan = SharedPlan(in);
  auto arena = Arena::Create(*device, plan, ArenaOptions{});
  ASSERT_TRUE(arena.ok());
  EXPECT_TRUE((*arena)->CheckIntact(1, *stream).ok());
  EXPECT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ((*arena)->MarkWritten(9, *stream).code(),
            absl::StatusCode::kOutOfRange);
}

TEST(Arena, RejectsAPlanThatOverrunsItsArena) {
  auto device = std::move(*CreateHostDevice());
  MemoryPlan plan;
  plan.arena_bytes = 100;
  plan.buffers.push_back({"big", 200, 8, 0, 0, 0});
  Status s = Arena::Create(*device, plan, ArenaOptions{}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("'big'"));
}

}  // namespace
}  // namespace baton::memory
