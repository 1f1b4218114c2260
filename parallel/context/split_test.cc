#include "baton/parallel/context/split.h"

#include <cstdint>
#include <cstring>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "baton/comm/factory.h"
#include "baton/runtime/device.h"
#include "gtest/gtest.h"

namespace baton::context {
namespace {

TEST(ContextSplitTest, RefusesWhatDoesNotSplitInOneLine) {
  const auto bad = [](int64_t seq, int cp, const char* says) {
    const auto s = ContextSplit::Create(seq, cp);
    ASSERT_FALSE(s.ok()) << seq << " " << cp;
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.status().message(), says);
  };
  bad(10, 3, "seq 10 does not split into 2 x cp = 6 equal chunks");
  bad(7, 1, "seq 7 does not split into 2 x cp = 2 equal chunks");
  bad(8, 0, "cp must be positive, got 0");
  bad(0, 2, "seq must be positive, got 0");
  EXPECT_TRUE(ContextSplit::Create(12, 3).ok());
}

TEST(ContextSplitTest, RankHoldsChunksRAndTwoCMinusOneMinusR) {
  const ContextSplit s2 = *ContextSplit::Create(8, 2);
  EXPECT_EQ(s2.chunk(), 2);
  EXPECT_EQ(s2.local_seq(), 4);
  EXPECT_EQ(s2.Positions(0), (std::vector<int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(s2.Positions(1), (std::vector<int64_t>{2, 3, 4, 5}));
  const ContextSplit s3 = *ContextSplit::Create(12, 3);
  EXPECT_EQ(s3.Positions(1), (std::vector<int64_t>{2, 3, 8, 9}));
  EXPECT_EQ(s3.ChunkOf(2, 1), 3);
  // Every position is held by exactly one rank, and every rank does the
  // same causal work: sum over its rows of (position + 1).
  for (int cp = 1; cp <= 5; ++cp) {
    const ContextSplit s = *ContextSplit::Create(2 * cp * 3, cp);
    std::multiset<int64_t> seen;
    int64_t work0 = -1;
    for (int r = 0; r < cp; ++r) {
      int64_t work = 0;
      for (int64_t p : s.Positions(r)) {
        seen.insert(p);
        work += p + 1;
      }
      if (r == 0) work0 = work;
      EXPECT_EQ(work, work0) << "cp " << cp << " rank " << r;
    }
    ASSERT_EQ(seen.size(), static_cast<size_t>(s.seq()));
    for (int64_t p = 0; p < s.seq(); ++p) EXPECT_EQ(seen.count(p), 1u) << p;
  }
  EXPECT_FALSE(s3.CheckRank(3).ok());
  EXPECT_EQ(s3.CheckRank(-1).message(), "context rank -1 is outside the group of cp = 3");
}

std::vector<uint8_t> Bytes(size_t n, int seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * 7 + seed * 31 + 1);
  return v;
}

TEST(ContextSplitTest, SplitAndUnsplitRoundTripOnAStream) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const ContextSplit s = *ContextSplit::Create(12, 3);
  const int64_t batch = 2;
  const size_t row = 3;  // odd row bytes
  const std::vector<uint8_t> full = Bytes(batch * s.seq() * row, 1);
  std::vector<uint8_t> by_rank(full.size()), back(full.size()), split_all(full.size());
  for (int r = 0; r < s.cp(); ++r) {
    uint8_t* local = by_rank.data() + r * batch * s.local_seq() * row;
    ASSERT_TRUE(SplitSequence(*stream, s, r, batch, row, full.data(), local).ok());
  }
  ASSERT_TRUE(UnsplitSequence(*stream, s, batch, row, by_rank.data(), back.data()).ok());
  ASSERT_TRUE(SplitAllRanks(*stream, s, batch, row, full.data(), split_all.data()).ok());
  ASSERT_TRUE(stream->Synchronize().ok());
  EXPECT_EQ(back, full);
  EXPECT_EQ(split_all, by_rank);
  // Row 1 of rank 1's second sequence is position Position(1, 1) of it.
  const uint8_t* got = by_rank.data() + (1 * batch * s.local_seq() + s.local_seq() + 1) * row;
  EXPECT_EQ(std::memcmp(got, full.data() + (s.seq() + s.Position(1, 1)) * row, row), 0);
  EXPECT_EQ(SplitSequence(*stream, s, 3, batch, row, full.data(), back.data()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(UnsplitSequence(*stream, s, 0, row, full.data(), back.data()).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ContextSplitTest, GatherSequenceBringsTheWholeSequenceToEveryRank) {
  auto device = *CreateHostDevice();
  CommConfig cfg;
  cfg.device = device.get();
  cfg.group = "";
  cfg.timeout = absl::Seconds(30);
  const int cp = 3;
  auto comms = *CreateInprocGroup(cp, cfg);
  const ContextSplit s = *ContextSplit::Create(18, cp);
  const int64_t batch = 2;
  const size_t elems = 5;  // floats per row
  const std::vector<uint8_t> full = Bytes(batch * s.seq() * elems * 4, 2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < cp; ++r) {
    ranks.emplace_back([&, r] {
      auto stream = *device->CreateStream();
      std::vector<uint8_t> local(full.size() / cp), scratch(full.size()), got(full.size());
      ASSERT_TRUE(
          SplitSequence(*stream, s, r, batch, elems * 4, full.data(), local.data()).ok());
      ASSERT_TRUE(GatherSequence(*comms[r], *stream, s, batch, elems, DataType::kF32,
                                 local.data(), scratch.data(), got.data(), {})
                      .ok());
      ASSERT_TRUE(stream->Synchronize().ok());
      EXPECT_EQ(got, full) << "rank " << r;
    });
  }
  for (auto& t : ranks) t.join();
  const ContextSplit two = *ContextSplit::Create(8, 2);
  auto stream = *device->CreateStream();
  const Status st = GatherSequence(*comms[0], *stream, two, 1, 1, DataType::kF32, full.data(),
                                   nullptr, nullptr, {});
  EXPECT_EQ(st.message(), "GatherSequence: the group has 3 ranks but cp is 2");
}

}  // namespace
}  // namespace baton::context
