// The collectives check has no blind spots (issue 16, item 12): inputs do
// not repeat across ranks or indices, sums are exact in every type for
// every reduction order up to the largest world sizes, and each planted
// miss is caught.
#include "baton/comm/testing/collective_check.h"

#include <cstring>
#include <vector>

#include "gtest/gtest.h"

namespace baton {
namespace {

// A rank's correct output, built from the inputs.
std::vector<char> Expected(const CheckCase& c, int rank) {
  const size_t es = DataTypeSize(c.type);
  std::vector<char> out(RecvBytes(c.kind, c.nranks, c.count, c.type) + es);
  auto put = [&](size_t i, double v) { StoreFromDouble(out.data(), c.type, i, v); };
  switch (c.kind) {
    case CollectiveKind::kAllGather:
      for (int q = 0; q < c.nranks; ++q) {
        for (size_t i = 0; i < c.count; ++i) put(q * c.count + i, InputValue(c, q, i));
      }
      break;
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllReduce: {
      const size_t base = c.kind == CollectiveKind::kReduceScatter ? rank * c.count : 0;
      for (size_t i = 0; i < c.count; ++i) {
        double sum = 0;
        for (int q = 0; q < c.nranks; ++q) sum += InputValue(c, q, base + i);
        put(i, sum);
      }
      break;
    }
    case CollectiveKind::kBroadcast:
      for (size_t i = 0; i < c.count; ++i) put(i, InputValue(c, c.root, i));
      break;
    case CollectiveKind::kSend:  // the ring exchange: the previous rank's
      for (size_t i = 0; i < c.count; ++i) {
        put(i, InputValue(c, (rank + c.nranks - 1) % c.nranks, i));
      }
      break;
    case CollectiveKind::kBarrier:
    case CollectiveKind::kRecv:
      break;
  }
  return out;
}

constexpr DataType kTypes[] = {DataType::kF32, DataType::kBF16, DataType::kF16,
                               DataType::kI32};

TEST(CollectiveCheckTest, EveryReductionOrderIsExactUpTo4096Ranks) {
  for (DataType t : kTypes) {
    for (int n : {2, 3, 8, 12, 16, 64, 129, 300, 4096}) {
      CheckCase c;
      c.kind = CollectiveKind::kAllReduce;
      c.type = t;
      c.nranks = n;
      c.seed = n;
      int64_t nonzero = 0;
      for (size_t i = 0; i < 64; ++i) {
        double exact = 0, fwd = 0, bwd = 0;
        // Accumulate in the type itself, rounding after every add.
        auto add = [&](double acc, double v) {
          double stored[2];
          StoreFromDouble(stored, t, 0, acc + v);
          return LoadAsDouble(stored, t, 0);
        };
        for (int q = 0; q < n; ++q) {
          const double v = InputValue(c, q, i);
          ASSERT_GE(v, 0);
          nonzero += v != 0;
          exact += v;
          fwd = add(fwd, v);
          bwd = add(bwd, InputValue(c, n - 1 - q, i));
        }
        ASSERT_EQ(fwd, exact) << DataTypeName(t) << " n=" << n << " i=" << i;
        ASSERT_EQ(bwd, exact) << DataTypeName(t) << " n=" << n << " i=" << i;
      }
      EXPECT_GT(nonzero, 16) << DataTypeName(t) << " n=" << n;
    }
  }
}

TEST(CollectiveCheckTest, NoTwoRanksOrShiftsLookAlike) {
  // The old inputs (7 rank + 3 i + 5 seed) mod 11 repeated every 11 ranks
  // and 11 elements. Now every pair of ranks differs in a 64-element chunk,
  // and so does every shift of 1..64 elements.
  for (DataType t : kTypes) {
    for (CollectiveKind k : {CollectiveKind::kAllGather, CollectiveKind::kAllReduce}) {
      CheckCase c;
      c.kind = k;
      c.type = t;
      c.nranks = 64;
      for (int a = 0; a < c.nranks; ++a) {
        for (int b = 0; b < c.nranks; ++b) {
          if (a == b) continue;
          int same = 0;
          for (size_t i = 0; i < 64; ++i) same += InputValue(c, a, i) == InputValue(c, b, i);
          ASSERT_LT(same, 64) << "ranks " << a << " and " << b;
        }
        for (size_t shift = 1; shift <= 64; ++shift) {
          int same = 0;
          for (size_t i = 0; i < 64; ++i) {
            same += InputValue(c, a, i) == InputValue(c, a, i + shift);
          }
          ASSERT_LT(same, 64) << "rank " << a << " shift " << shift;
        }
      }
    }
  }
}

TEST(CollectiveCheckTest, PlantedMissesAreCaught) {
  for (DataType t : kTypes) {
    const size_t es = DataTypeSize(t);
    for (int n : {12, 13, 16}) {
      SCOPED_TRACE(testing::Message() << DataTypeName(t) << " n=" << n);
      // All-gather: correct output passes; rank 12's chunk in rank 1's slot
      // (the old inputs' blind spot) and an 11-element shift are caught.
      CheckCase ag;
      ag.kind = CollectiveKind::kAllGather;
      ag.type = t;
      ag.nranks = n;
      ag.count = 1000;
      ag.seed = 3;
      std::vector<char> out = Expected(ag, 0);
      EXPECT_EQ(CountWrong(ag, 0, out.data()), 0u);
      const int from = n > 12 ? 12 : 11;
      std::vector<char> planted = out;
      std::memcpy(&planted[1 * ag.count * es], &out[from * ag.count * es], ag.count * es);
      EXPECT_GT(CountWrong(ag, 0, planted.data()), ag.count * 9 / 10);
      std::vector<char> shifted = out;
      std::memmove(&shifted[11 * es], &out[0], (n * ag.count - 11) * es);
      EXPECT_GT(CountWrong(ag, 0, shifted.data()), n * ag.count * 9 / 10);
      // A stale iteration (last seed's output) is caught too.
      CheckCase prev = ag;
      prev.seed = 2;
      EXPECT_GT(CountWrong(ag, 0, Expected(prev, 0).data()), n * ag.count * 9 / 10);

      // Reduce-scatter: rank 1 given block 12's (or 11's) sum.
      CheckCase rs = ag;
      rs.kind = CollectiveKind::kReduceScatter;
      EXPECT_EQ(CountWrong(rs, 1, Expected(rs, 1).data()), 0u);
      EXPECT_GT(CountWrong(rs, 1, Expected(rs, from).data()), rs.count / 2);
      // All-reduce shifted by 11 elements.
      CheckCase ar = ag;
      ar.kind = CollectiveKind::kAllReduce;
      std::vector<char> sum = Expected(ar, 0);
      EXPECT_EQ(CountWrong(ar, 0, sum.data()), 0u);
      std::vector<char> sum_shifted = sum;
      std::memmove(&sum_shifted[11 * es], &sum[0], (ar.count - 11) * es);
      EXPECT_GT(CountWrong(ar, 0, sum_shifted.data()), ar.count / 2);
      // Broadcast from the wrong root.
      CheckCase bc = ag;
      bc.kind = CollectiveKind::kBroadcast;
      bc.root = 1;
      CheckCase wrong_root = bc;
      wrong_root.root = from;
      EXPECT_EQ(CountWrong(bc, 5, Expected(bc, 5).data()), 0u);
      EXPECT_GT(CountWrong(bc, 5, Expected(wrong_root, 5).data()), bc.count * 9 / 10);
    }
  }
}

}  // namespace
}  // namespace baton
