#include "baton/ops/zenflow_stream.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/host_convert.h"
#include "baton/ops/testing/test_util.h"
#include "baton/ops/zenflow.h"
#include "baton/ops/zenflow_kernels.h"
#include "baton/runtime/device.h"

namespace baton::ops {
namespace {

using ops_internal::kZenFlowRowsPerChunk;
using testing::Random;
using testing::Shifted;

void ExpectInvalid(const Status& s, const std::string& names) {
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(std::string(s.message()).find(names), std::string::npos) << s;
}

ColumnSelection Select(int64_t cols, std::vector<int64_t> columns) {
  return *ColumnSelection::Create(cols, std::move(columns));
}

// The selections every block is run with: none, all, about one column in
// ten (seeded; at least one), and the last column alone.
std::vector<ColumnSelection> Selections(int64_t cols, uint64_t seed) {
  std::vector<int64_t> all, some;
  const std::vector<double> u = Random(cols, seed);
  for (int64_t c = 0; c < cols; ++c) {
    all.push_back(c);
    if (u[c] > 1.28) some.push_back(c);  // P(N(0,1) > 1.28) ~ 0.1
  }
  if (some.empty()) some.push_back(cols / 2);
  return {Select(cols, {}), Select(cols, all), Select(cols, some), Select(cols, {cols - 1})};
}

// ---------------------------------------------------------------------------
// Host: the slot table and the index arithmetic the kernels use.

TEST(ZenFlowSlotTableTest, UnionOfTwoSelections) {
  std::vector<int32_t> t(9);
  ASSERT_TRUE(WriteColumnSlotTable(Select(8, {1, 5}), Select(8, {2, 5}), t.data()).ok());
  EXPECT_EQ(t, (std::vector<int32_t>{-1, 0, 1, -3, -3, 2, -4, -4, 3}));
  ExpectInvalid(WriteColumnSlotTable(Select(8, {1}), Select(9, {1}), t.data()),
                "8 and 9 columns");
}

TEST(ZenFlowSlotTableTest, Layout) {
  EXPECT_EQ(*ColumnSlotTable(Select(6, {1, 3, 4})),
            (std::vector<int32_t>{-1, 0, -2, 1, 2, -4, 3}));
  EXPECT_EQ(*ColumnSlotTable(Select(3, {})), (std::vector<int32_t>{-1, -1, -1, 0}));
  EXPECT_EQ(*ColumnSlotTable(Select(3, {0, 1, 2})), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(ColumnSlotTableSize(6), 7);
  ExpectInvalid(WriteColumnSlotTable(Select(3, {1}), nullptr), "table");
}

// For every block and selection: the kernels' coordinates of element i
// (virtual row and column, stepped across a group of four as GroupSlots in
// zenflow_cuda.cu does) name the element's column, the closed-form packed
// index counts the selected elements before it (ops/zenflow.h's element
// order), RowsOf lists exactly a column's elements, the chunks of the
// column squares cover its rows once, and PackedCapacity bounds CountIn.
TEST(ZenFlowSlotTableTest, IndexArithmeticMatchesElementOrder) {
  int blocks = 0;
  for (int64_t cols : {1, 2, 5, 7, 13, 64}) {
    for (const ColumnSelection& sel : Selections(cols, 100 + cols)) {
      const std::vector<int32_t> table = *ColumnSlotTable(sel);
      const int64_t k_all = table[cols];
      ASSERT_EQ(k_all, static_cast<int64_t>(sel.columns().size()));
      for (int64_t first : {int64_t{0}, int64_t{1}, cols - 1, cols, 2 * cols + 3, 5 * cols - 2}) {
        for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{3}, cols - 1, cols, cols + 1,
                          3 * cols + 2, 70 * cols + 5}) {
          if (first < 0 || n < 0) continue;
          ++blocks;
          const ColumnBlock b{first, n, cols};
          SCOPED_TRACE(::testing::Message() << "cols " << cols << " first " << first << " n "
                                            << n << " K " << k_all);
          const int64_t c0 = first % cols;
          const int64_t base = ops_internal::ZenFlowPrefix(table[c0]);
          std::vector<std::vector<int64_t>> by_col(cols);
          int64_t k = 0, max_r = -1;
          for (int64_t g0 = 0; g0 < n; g0 += 4) {  // a thread's group
            const int64_t p = c0 + g0;
            int64_t r = p / cols, c = p - r * cols;
            for (int64_t i = g0; i < g0 + 4 && i < n; ++i) {
              ASSERT_EQ(c, (first + i) % cols) << "element " << i;
              ASSERT_EQ(r * cols + c - c0, i);
              by_col[c].push_back(i);
              max_r = r;
              const int32_t t = table[c];
              ASSERT_EQ(t >= 0, sel.selected(c));
              if (t >= 0) {
                ASSERT_EQ(ops_internal::ZenFlowPackedIndex(r, t, k_all, base), k)
                    << "element " << i;
                ++k;
              }
              if (++c == cols) {
                c = 0;
                ++r;
              }
            }
          }
          EXPECT_EQ(k, sel.CountIn(b));
          EXPECT_LE(k, PackedCapacity(b, k_all));
          EXPECT_LE(PackedCapacity(b, k_all), n);
          // (The launchers run for n >= 1 only.)
          if (n > 0) {
            EXPECT_EQ(ops_internal::ZenFlowVirtualRows(c0, n, cols), max_r + 1);
          }
          const int64_t chunks = (max_r + 1 + kZenFlowRowsPerChunk - 1) / kZenFlowRowsPerChunk;
          for (int64_t c = 0; c < cols; ++c) {
            const ops_internal::ZenFlowRows rows = ops_internal::ZenFlowRowsOf(c0, n, cols, c);
            std::vector<int64_t> listed;
            for (int64_t r = rows.lo; r < rows.hi; ++r) listed.push_back(r * cols + c - c0);
            ASSERT_EQ(listed, by_col[c]) << "column " << c;
            // The squares kernel's chunk ranges: [max(lo, 64q), min(hi, 64q + 64)).
            int64_t covered = 0;
            for (int64_t q = 0; q < chunks; ++q) {
              const int64_t lo = std::max(rows.lo, q * kZenFlowRowsPerChunk);
              const int64_t hi = std::min(rows.hi, (q + 1) * kZenFlowRowsPerChunk);
              if (lo < hi) {
                covered += hi - lo;
                // FinishSquares adds exactly the chunks lo / 64 .. (hi - 1) / 64.
                EXPECT_GE(q, rows.lo / kZenFlowRowsPerChunk);
                EXPECT_LE(q, (rows.hi - 1) / kZenFlowRowsPerChunk);
              }
            }
            EXPECT_EQ(covered, static_cast<int64_t>(by_col[c].size()));
          }
        }
      }
    }
  }
  EXPECT_GT(blocks, 1000);
}

// ---------------------------------------------------------------------------
// Host: argument checks come first (InvalidArgument naming the argument,
// nothing enqueued).

TEST(ZenFlowStreamArgsTest, BadArgumentsAreNamedAndNothingRuns) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  Stream& s = *stream;
  std::vector<float> a(64, 1.0f), bufb(64, 2.0f), bufc(64, 3.0f);
  const std::vector<int32_t> table = *ColumnSlotTable(Select(8, {2, 5}));
  const DeviceColumnSlots slots{table.data(), 8};
  const ColumnBlock ok{3, 40, 8};
  float* p = a.data();
  float* q = bufb.data();
  float* r = bufc.data();

  // Blocks.
  for (const ColumnBlock& bad : {ColumnBlock{-1, 4, 8}, ColumnBlock{0, -1, 8},
                                 ColumnBlock{0, 4, 0}}) {
    ExpectInvalid(AccumulateColumnSquares(s, p, DataType::kF32, bad, 1.0f, q), "bad block");
    ExpectInvalid(SplitGradient(s, p, DataType::kF32, bad, 1.0f, slots, q, r), "bad block");
    ExpectInvalid(GatherColumns(s, p, bad, slots, q), "bad block");
    ExpectInvalid(ScatterColumns(s, p, bad, slots, q, DataType::kF32), "bad block");
    ExpectInvalid(CopyColumns(s, p, q, DataType::kF32, bad, slots, WhichColumns::kSelected),
                  "bad block");
  }
  // The slot table: its column count and pointer; the int32 range.
  const DeviceColumnSlots wrong_cols{table.data(), 9}, null_table{nullptr, 8};
  ExpectInvalid(SplitGradient(s, p, DataType::kF32, ok, 1.0f, wrong_cols, q, r),
                "slot table has 9");
  ExpectInvalid(GatherColumns(s, p, ok, wrong_cols, q), "slot table has 9");
  ExpectInvalid(ScatterColumns(s, p, ok, null_table, q, DataType::kF32), "slot table is null");
  ExpectInvalid(CopyColumns(s, p, q, DataType::kF32, ok, null_table, WhichColumns::kUnselected),
                "slot table is null");
  const int64_t huge = kMaxSlotTableCols + 1;
  ExpectInvalid(GatherColumns(s, p, {0, 4, huge}, {table.data(), huge}, q), "int32 range");
  ExpectInvalid(
      CopyColumns(s, p, q, DataType::kF32, ok, slots, static_cast<WhichColumns>(7)),
      "which");
  // Dtypes and the scale.
  ExpectInvalid(AccumulateColumnSquares(s, p, DataType::kI32, ok, 1.0f, q), "grad dtype");
  ExpectInvalid(SplitGradient(s, p, DataType::kF16, ok, 1.0f, slots, q, r), "grad dtype");
  ExpectInvalid(ScatterColumns(s, p, ok, slots, q, DataType::kI32), "dst dtype");
  ExpectInvalid(CopyColumns(s, p, q, DataType::kF16, ok, slots, WhichColumns::kSelected),
                "dtype");
  for (float bad : {std::numeric_limits<float>::quiet_NaN(),
                    std::numeric_limits<float>::infinity()}) {
    ExpectInvalid(AccumulateColumnSquares(s, p, DataType::kF32, ok, bad, q), "scale");
    ExpectInvalid(SplitGradient(s, p, DataType::kF32, ok, bad, slots, q, r), "scale");
  }
  // Null pointers, each named.
  ExpectInvalid(AccumulateColumnSquares(s, nullptr, DataType::kF32, ok, 1.0f, q), "grad is null");
  ExpectInvalid(AccumulateColumnSquares(s, p, DataType::kBF16, ok, 1.0f, nullptr), "norms is null");
  ExpectInvalid(SplitGradient(s, nullptr, DataType::kF32, ok, 1.0f, slots, q, r),
                "grad is null");
  ExpectInvalid(SplitGradient(s, p, DataType::kF32, ok, 1.0f, slots, nullptr, r),
                "selected is null");
  ExpectInvalid(GatherColumns(s, nullptr, ok, slots, q), "src is null");
  ExpectInvalid(GatherColumns(s, p, ok, slots, nullptr), "packed is null");
  ExpectInvalid(ScatterColumns(s, nullptr, ok, slots, q, DataType::kF32), "packed is null");
  ExpectInvalid(ScatterColumns(s, p, ok, slots, nullptr, DataType::kBF16), "dst is null");
  ExpectInvalid(CopyColumns(s, nullptr, q, DataType::kF32, ok, slots, WhichColumns::kSelected),
                "src is null");
  ExpectInvalid(CopyColumns(s, p, nullptr, DataType::kBF16, ok, slots, WhichColumns::kSelected),
                "dst is null");

  // An empty block is nothing to do, null pointers or not (as on the host).
  const ColumnBlock empty{5, 0, 8};
  EXPECT_TRUE(AccumulateColumnSquares(s, nullptr, DataType::kF32, empty, 1.0f, nullptr).ok());
  EXPECT_TRUE(
      SplitGradient(s, nullptr, DataType::kF32, empty, 1.0f, slots, nullptr, nullptr).ok());
  EXPECT_TRUE(GatherColumns(s, nullptr, empty, slots, nullptr).ok());
  EXPECT_TRUE(ScatterColumns(s, nullptr, empty, slots, nullptr, DataType::kF32).ok());
  EXPECT_TRUE(
      CopyColumns(s, nullptr, nullptr, DataType::kF32, empty, slots, WhichColumns::kSelected)
          .ok());

  // Nothing was enqueued or written.
  EXPECT_TRUE(s.Synchronize().ok());
  EXPECT_EQ(a, std::vector<float>(64, 1.0f));
  EXPECT_EQ(bufb, std::vector<float>(64, 2.0f));
  EXPECT_EQ(bufc, std::vector<float>(64, 3.0f));
}

TEST(ZenFlowStreamArgsTest, ColumnSquaresScratch) {
  EXPECT_EQ(ColumnSquaresScratch({0, 64 * 8, 8}), 0);          // 64 rows: one chunk
  EXPECT_EQ(ColumnSquaresScratch({3, 64 * 8, 8}), 2 * 8);      // 65 virtual rows
  EXPECT_EQ(ColumnSquaresScratch({0, 129 * 4, 4}), 3 * 4);     // 129 rows: 3 chunks
  EXPECT_EQ(ColumnSquaresScratch({0, 0, 4}), 0);
}

TEST(ZenFlowStreamArgsTest, PackedCapacity) {
  EXPECT_EQ(PackedCapacity({3, 0, 8}, 2), 0);
  EXPECT_EQ(PackedCapacity({3, 40, 8}, 2), 12);  // rows 3..8 of 8 columns: 6 rows
  EXPECT_EQ(PackedCapacity({3, 2, 8}, 8), 2);    // never more than n
  EXPECT_EQ(PackedCapacity({0, 16, 8}, 0), 0);
}

// ---------------------------------------------------------------------------
// GPU: every op against the host op of ops/zenflow.h on the same data.

// Bytes [0, bytes) of a Shifted buffer; fails the test when the op wrote
// outside it.
std::vector<uint8_t> Read(Stream& s, const Shifted& b, size_t bytes) {
  const std::string guards = b.CheckGuards(s);
  EXPECT_EQ(guards, "");
  std::vector<uint8_t> out(bytes);
  if (bytes > 0) {
    EXPECT_TRUE(s.MemcpyAsync(out.data(), b.data(), bytes).ok());
  }
  EXPECT_TRUE(s.Synchronize().ok());
  return out;
}

template <typename T>
std::vector<uint8_t> BytesOf(const std::vector<T>& v) {
  const auto* p = reinterpret_cast<const uint8_t*>(v.data());
  return std::vector<uint8_t>(p, p + v.size() * sizeof(T));
}

std::vector<float> Floats(const std::vector<uint8_t>& bytes) {
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// f32 or bf16 bytes to floats and back (exact both ways for bf16 values;
// Narrow rounds to nearest even, as the device does).
std::vector<float> Widen(const std::vector<uint8_t>& bytes, DataType t) {
  if (t == DataType::kF32) return Floats(bytes);
  std::vector<float> out(bytes.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    uint16_t b;
    std::memcpy(&b, bytes.data() + 2 * i, 2);
    out[i] = Bf16BitsToFloat(b);
  }
  return out;
}

std::vector<uint8_t> Narrow(const std::vector<float>& v, DataType t) {
  if (t == DataType::kF32) return BytesOf(v);
  std::vector<uint16_t> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = FloatToBf16Bits(v[i]);
  return BytesOf(out);
}

// n values of dtype t, uniform in (-2, 2) times `mult` (a power of two:
// the same seed with mult 0.5 gives exactly half the values, in f32 and
// bf16 alike), as bytes. splitmix64: cheap enough for the large block.
std::vector<uint8_t> RandomBytes(int64_t n, DataType t, uint64_t seed, float mult = 1.0f) {
  std::vector<float> v(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float& e : v) {
    uint64_t z = (x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    e = (static_cast<float>(z >> 40) / static_cast<float>(1 << 24) * 4.0f - 2.0f) * mult;
  }
  return Narrow(v, t);
}

// The index of the first differing byte divided by `unit`, or -1.
int64_t FirstDiff(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b, size_t unit) {
  if (a.size() != b.size()) return -2;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return static_cast<int64_t>(i / unit);
  }
  return -1;
}

struct Case {
  int64_t cols, first, n;
};

// On the host device (the ops' host work) and on a GPU (the kernels;
// skipped without one).
class ZenFlowStreamTest : public ::testing::TestWithParam<DeviceKind> {
 protected:
  void SetUp() override {
    if (GetParam() == DeviceKind::kCuda) {
      if (CudaDeviceCount() == 0) {
        GTEST_SKIP() << "no CUDA device: the GPU cases of ZenFlow's kernels did not run";
      }
      device_ = *CreateCudaDevice(0);
    } else {
      device_ = *CreateHostDevice();
    }
    stream_ = *device_->CreateStream();
  }

  Shifted Up(const std::vector<uint8_t>& bytes, size_t shift) {
    return testing::Upload(*device_, *stream_, bytes, shift);
  }
  Shifted Poison(size_t bytes, size_t shift) {
    return testing::Poisoned(*device_, *stream_, bytes, shift);
  }

  void RunSquares(const Case& k, DataType t, bool misaligned);
  void RunSelection(const Case& k, DataType t, bool misaligned, const ColumnSelection& sel);
  // Every op on block k, for f32 and bf16, aligned (the vector paths) and
  // one element off (the scalar ones); `large`: one selection, f32 aligned
  // and bf16 misaligned only (seconds of host reference work each).
  void RunCase(const Case& k, bool large) {
    for (DataType t : {DataType::kF32, DataType::kBF16}) {
      for (bool misaligned : {false, true}) {
        if (large && misaligned != (t == DataType::kBF16)) continue;
        SCOPED_TRACE(::testing::Message()
                     << "cols " << k.cols << " first " << k.first << " n " << k.n << " "
                     << DataTypeName(t) << (misaligned ? " misaligned" : " aligned"));
        RunSquares(k, t, misaligned);
        std::vector<ColumnSelection> sels = Selections(k.cols, 7 + k.cols);
        if (large) sels = {sels[2]};
        for (const ColumnSelection& sel : sels) {
          SCOPED_TRACE(::testing::Message() << sel.columns().size() << " columns selected");
          RunSelection(k, t, misaligned, sel);
        }
      }
    }
  }

  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
};

void ZenFlowStreamTest::RunSquares(const Case& k, DataType t, bool misaligned) {
  const ColumnBlock b{k.first, k.n, k.cols};
  const size_t gshift = misaligned ? DataTypeSize(t) : 0, fshift = misaligned ? 4 : 0;
  // The device scales by 0.5; the host op (no scale) gets the gradient
  // halved, which is exact in f32 and bf16 alike.
  const std::vector<uint8_t> g = RandomBytes(k.n, t, 1 + k.n),
                             half = RandomBytes(k.n, t, 1 + k.n, 0.5f);
  std::vector<float> norms0_f = Widen(RandomBytes(k.cols, DataType::kF32, 2 + k.cols), DataType::kF32);
  for (float& e : norms0_f) e = std::abs(e) + 0.25f;
  const std::vector<uint8_t> norms0_bytes = BytesOf(norms0_f);
  std::vector<float> host = norms0_f;
  ASSERT_TRUE(AccumulateColumnSquares(half.data(), t, b, host.data()).ok());

  Shifted dg = Up(g, gshift), dn = Up(norms0_bytes, fshift);
  ASSERT_TRUE(AccumulateColumnSquares(*stream_, dg.data(), t, b, 0.5f,
                                          static_cast<float*>(dn.data()))
                  .ok());
  const std::vector<float> got = Floats(Read(*stream_, dn, k.cols * sizeof(float)));
  {  // The same with a caller's scratch: the same bits.
    const int64_t want = ColumnSquaresScratch(b);
    Shifted dn2 = Up(norms0_bytes, fshift);
    Shifted part = Poison(std::max<int64_t>(want, 1) * sizeof(float), 0);
    ASSERT_TRUE(AccumulateColumnSquares(*stream_, dg.data(), t, b, 0.5f,
                                        static_cast<float*>(dn2.data()),
                                        static_cast<float*>(part.data()))
                    .ok());
    EXPECT_EQ(FirstDiff(Read(*stream_, dn2, k.cols * sizeof(float)), BytesOf(got), 4), -1)
        << "with a scratch of " << want << " floats";
  }
  const int64_t c0 = k.first % k.cols;
  const int64_t rows = ops_internal::ZenFlowVirtualRows(c0, k.n, k.cols);
  const int64_t chunks = (rows + kZenFlowRowsPerChunk - 1) / kZenFlowRowsPerChunk;
  if (chunks == 1 || GetParam() == DeviceKind::kHost) {
    EXPECT_EQ(FirstDiff(BytesOf(got), BytesOf(host), sizeof(float)), -1)
        << "the host's order (host work, or one chunk of rows), so the same bits";
    return;
  }
  // Several chunks: the bounds of ops/zenflow_stream.h against the float64
  // sum D of norms0 and the squares: the device within (63 + Q + 1) u of D
  // (chunk adds, chunk-sum adds, the rounding of each square), and within
  // (m + 64 + Q) u of the host.
  constexpr double u = 1.0 / (1 << 24);
  std::vector<double> exact(norms0_f.begin(), norms0_f.end());
  std::vector<int64_t> m(k.cols, 0);
  const std::vector<float> hf = Widen(half, t);
  for (int64_t i = 0; i < k.n; ++i) {
    const int64_t c = (k.first + i) % k.cols;
    exact[c] += double{hf[i]} * hf[i];
    ++m[c];
  }
  double worst = 0;
  for (int64_t c = 0; c < k.cols; ++c) {
    const double dev = std::abs(got[c] - exact[c]) / exact[c];
    worst = std::max(worst, dev / u);
    ASSERT_LE(dev, (kZenFlowRowsPerChunk + chunks + 1) * u * 1.001)
        << "column " << c << ": " << got[c] << " vs float64 " << exact[c];
    ASSERT_LE(std::abs(double{got[c]} - host[c]),
              (m[c] + kZenFlowRowsPerChunk + chunks) * u * exact[c] * 1.001)
        << "column " << c << ": " << got[c] << " vs host " << host[c];
  }
  std::cout << "column squares, " << chunks << " chunks: worst relative error vs float64 "
            << worst << " u (bound " << kZenFlowRowsPerChunk + chunks + 1 << " u)\n";
}

// Every op but the squares with one selection. t is the gradient's dtype
// (split) and the dense buffer's (scatter's dst, the copies); packed and
// rest buffers are f32. The host op runs on f32: the gradient halved (the
// device scales by 0.5; exact), bf16 buffers widened and narrowed back
// (exact both ways; the device rounds scatter's values as Narrow does).
void ZenFlowStreamTest::RunSelection(const Case& k, DataType t, bool misaligned,
                                   const ColumnSelection& sel) {
  const ColumnBlock b{k.first, k.n, k.cols};
  const size_t tshift = misaligned ? DataTypeSize(t) : 0, fshift = misaligned ? 4 : 0;
  const int64_t count = sel.CountIn(b);
  const int64_t cap = PackedCapacity(b, static_cast<int64_t>(sel.columns().size()));
  ASSERT_LE(count, cap);
  const size_t fbytes = k.n * sizeof(float), tbytes = k.n * DataTypeSize(t);
  const auto widened = [&](const std::vector<uint8_t>& bytes) { return Widen(bytes, t); };
  const auto narrowed = [&](const std::vector<float>& v) { return Narrow(v, t); };
  // The packed side: `count` floats as the host wrote them, the rest of
  // the capacity still poisoned.
  const auto expect_packed = [&](const std::vector<uint8_t>& got, const std::vector<float>& want,
                                 const char* what) {
    EXPECT_EQ(FirstDiff(std::vector<uint8_t>(got.begin(), got.begin() + count * 4),
                        BytesOf(want), 4),
              -1)
        << what;
    EXPECT_EQ(FirstDiff(std::vector<uint8_t>(got.begin() + count * 4, got.end()),
                        std::vector<uint8_t>((cap - count) * 4, 0xFF), 4),
              -1)
        << what << ": wrote past the selected count";
  };

  Shifted table = Up(BytesOf(*ColumnSlotTable(sel)), 0);
  const DeviceColumnSlots slots{static_cast<const int32_t*>(table.data()), k.cols};
  Stream& s = *stream_;

  {  // SplitGradient
    const std::vector<uint8_t> g = RandomBytes(k.n, t, 3 + k.n),
                               half = RandomBytes(k.n, t, 3 + k.n, 0.5f);
    const std::vector<uint8_t> rest0 = RandomBytes(k.n, DataType::kF32, 4 + k.n);
    std::vector<float> want_sel(count), want_rest = Floats(rest0);
    ASSERT_TRUE(SplitGradient(half.data(), t, b, sel, want_sel.data(), want_rest.data()).ok());
    Shifted dg = Up(g, tshift), drest = Up(rest0, fshift),
            dsel = Poison(cap * sizeof(float), fshift);
    ASSERT_TRUE(SplitGradient(s, dg.data(), t, b, 0.5f, slots,
                                  static_cast<float*>(dsel.data()),
                                  static_cast<float*>(drest.data()))
                    .ok());
    expect_packed(Read(s, dsel, cap * sizeof(float)), want_sel, "split: selected");
    EXPECT_EQ(FirstDiff(Read(s, drest, fbytes), BytesOf(want_rest), 4), -1) << "split: rest";
    // No rest: the selected side alone, the same values.
    Shifted dsel2 = Poison(cap * sizeof(float), fshift);
    ASSERT_TRUE(SplitGradient(s, dg.data(), t, b, 0.5f, slots,
                              static_cast<float*>(dsel2.data()), nullptr)
                    .ok());
    expect_packed(Read(s, dsel2, cap * sizeof(float)), want_sel, "split without rest");
  }
  {  // GatherColumns
    const std::vector<uint8_t> src = RandomBytes(k.n, DataType::kF32, 5 + k.n);
    std::vector<float> want(count);
    ASSERT_TRUE(GatherColumns(Floats(src).data(), b, sel, want.data()).ok());
    Shifted dsrc = Up(src, fshift), dpacked = Poison(cap * sizeof(float), fshift);
    ASSERT_TRUE(GatherColumns(s, static_cast<const float*>(dsrc.data()), b, slots,
                                  static_cast<float*>(dpacked.data()))
                    .ok());
    expect_packed(Read(s, dpacked, cap * sizeof(float)), want, "gather");
  }
  {  // ScatterColumns into a dst of dtype t
    const std::vector<uint8_t> packed = RandomBytes(count, DataType::kF32, 6 + k.n);
    const std::vector<uint8_t> dst0 = RandomBytes(k.n, t, 7 + k.n);
    std::vector<float> want = widened(dst0);
    ASSERT_TRUE(ScatterColumns(Floats(packed).data(), b, sel, want.data()).ok());
    Shifted dpacked = Up(packed, fshift), ddst = Up(dst0, tshift);
    ASSERT_TRUE(ScatterColumns(s, static_cast<const float*>(dpacked.data()), b, slots,
                                   ddst.data(), t)
                    .ok());
    EXPECT_EQ(FirstDiff(Read(s, ddst, tbytes), narrowed(want), DataTypeSize(t)), -1)
        << "scatter";
  }
  // CopyColumns, both ways, elements of dtype t.
  for (WhichColumns which : {WhichColumns::kSelected, WhichColumns::kUnselected}) {
    const std::vector<uint8_t> src = RandomBytes(k.n, t, 8 + k.n);
    const std::vector<uint8_t> dst0 = RandomBytes(k.n, t, 9 + k.n);
    std::vector<float> want = widened(dst0);
    ASSERT_TRUE(CopyColumns(widened(src).data(), want.data(), b, sel, which).ok());
    Shifted dsrc = Up(src, tshift), ddst = Up(dst0, tshift);
    ASSERT_TRUE(CopyColumns(s, dsrc.data(), ddst.data(), t, b, slots, which).ok());
    EXPECT_EQ(FirstDiff(Read(s, ddst, tbytes), narrowed(want), DataTypeSize(t)), -1)
        << "copy " << (which == WhichColumns::kSelected ? "selected" : "unselected");
  }
}

TEST_P(ZenFlowStreamTest, SmallBlocksMatchTheHostOps) {
  const std::vector<Case> cases = {
      {13, 5, 13 * 7 + 3},  // starts and ends mid-row; cols % 4 = 1
      {37, 40, 20},         // inside one row (columns 3 .. 22)
      {37, 74, 37},         // one whole row
      {1, 3, 50},           // one column
      {6, 2, 6 * 150 + 1},  // 151 rows: three chunks of the column squares
      {64, 0, 64 * 10},     // whole rows, every group of four in one class
      {4, 1, 3},            // less than one group
  };
  for (const Case& k : cases) RunCase(k, /*large=*/false);
}

// 4099 x 4133, starting and ending mid-row: more groups than one pass of
// the capped grid covers (grid-stride), 65 chunks for the column squares.
// GPU only: the grid-stride and chunk paths are the kernels'; on the host
// it would be a minute of the same loops.
class ZenFlowStreamLargeTest : public ZenFlowStreamTest {};

TEST_P(ZenFlowStreamLargeTest, LargeBlockMatchesTheHostOps) {
  const int64_t cols = 4133, rows = 4099;
  RunCase({cols, 1000, rows * cols - 1000 - 7}, /*large=*/true);
}

INSTANTIATE_TEST_SUITE_P(AllDevices, ZenFlowStreamTest,
                         ::testing::Values(DeviceKind::kHost, DeviceKind::kCuda),
                         [](const ::testing::TestParamInfo<DeviceKind>& info) {
                           return std::string(DeviceKindName(info.param));
                         });

INSTANTIATE_TEST_SUITE_P(Gpu, ZenFlowStreamLargeTest, ::testing::Values(DeviceKind::kCuda),
                         [](const ::testing::TestParamInfo<DeviceKind>& info) {
                           return std::string(DeviceKindName(info.param));
                         });

}  // namespace
}  // namespace baton::ops
