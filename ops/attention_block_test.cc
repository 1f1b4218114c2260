#include "baton/ops/attention_block.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "baton/ops/attention.h"
#include "baton/ops/testing/attention_reference.h"
#include "baton/ops/testing/test_util.h"
#include "baton/runtime/stream_ops.h"

namespace baton::ops {
namespace {

using testing::Compare;
using testing::Fetch;
using testing::Pack;
using testing::Random;
using testing::Upload;

TEST(ChunkMaskTest, EarlierChunksAreFullTheSameDiagonalLaterEmpty) {
  EXPECT_EQ(ChunkMaskOf(3, 1), ChunkMask::kFull);
  EXPECT_EQ(ChunkMaskOf(3, 3), ChunkMask::kDiagonal);
  EXPECT_EQ(ChunkMaskOf(1, 3), ChunkMask::kEmpty);
  EXPECT_STREQ(ChunkMaskName(ChunkMaskOf(0, 0)), "diagonal");
  // ChunkBlock's positions give the same masks: a full block sees every key
  // from its first query row, an empty one none from its last.
  const AttentionBlockShape base{1, 2, 1, 4, DataType::kF32, 12, 0, 0, 12, 0, 0};
  const AttentionBlockShape full = ChunkBlock(base, 3, 0, 2, 1, 0);
  EXPECT_EQ(full.q_begin, 0);
  EXPECT_EQ(full.kv_begin, 3);
  EXPECT_GE(full.q_pos - full.kv_pos + 1, full.kv_len);
  const AttentionBlockShape empty = ChunkBlock(base, 3, 1, 0, 0, 3);
  EXPECT_LT(empty.q_pos + empty.q_len - 1, empty.kv_pos);
}

// Float64 reference of one block (ops/attention_block.h's math) over the
// whole q-side / kv-side tensors: out, lse of the block's rows, and the
// backward's additions given lse and delta.
struct BlockReference {
  std::vector<double> out, lse, dq, dk, dv;
};

BlockReference Float64Block(const AttentionBlockShape& s, const std::vector<double>& q,
                            const std::vector<double>& k, const std::vector<double>& v,
                            const std::vector<double>& dout, const std::vector<double>& lse_in,
                            const std::vector<double>& delta) {
  const int64_t d = s.head_dim, qw = s.heads * d, kw = s.kv_heads * d;
  BlockReference r;
  r.out.assign(s.batch * s.q_seq * qw, 0);
  r.lse.assign(s.batch * s.heads * s.q_seq, -std::numeric_limits<double>::infinity());
  r.dq.assign(r.out.size(), 0);
  r.dk.assign(s.batch * s.kv_seq * kw, 0);
  r.dv.assign(r.dk.size(), 0);
  const double c = 1 / std::sqrt(static_cast<double>(d));
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t g = h / (s.heads / s.kv_heads);
      for (int64_t i = 0; i < s.q_len; ++i) {
        const int64_t qi = (b * s.q_seq + s.q_begin + i) * qw + h * d;
        const int64_t row = (b * s.heads + h) * s.q_seq + s.q_begin + i;
        std::vector<double> sc;
        for (int64_t j = 0; j < s.kv_len; ++j) {
          if (s.mask == BlockMask::kCausal && s.kv_pos + j > s.q_pos + i) break;
          const int64_t kj = (b * s.kv_seq + s.kv_begin + j) * kw + g * d;
          double dot = 0;
          for (int64_t e = 0; e < d; ++e) dot += q[qi + e] * k[kj + e];
          sc.push_back(c * dot);
        }
        if (sc.empty()) continue;
        const double m = *std::max_element(sc.begin(), sc.end());
        double l = 0;
        for (double x : sc) l += std::exp(x - m);
        r.lse[row] = m + std::log(l);
        for (size_t j = 0; j < sc.size(); ++j) {
          const int64_t kj = (b * s.kv_seq + s.kv_begin + j) * kw + g * d;
          const double p = std::exp(sc[j] - r.lse[row]);
          const double pb = std::exp(sc[j] - lse_in[row]);
          double dpv = 0;
          for (int64_t e = 0; e < d; ++e) {
            r.out[qi + e] += p * v[kj + e];
            dpv += dout[qi + e] * v[kj + e];
          }
          const double ds = pb * (dpv - delta[row]);
          for (int64_t e = 0; e < d; ++e) {
            r.dq[qi + e] += c * ds * k[kj + e];
            r.dk[kj + e] += c * ds * q[qi + e];
            r.dv[kj + e] += pb * dout[qi + e];
          }
        }
      }
    }
  return r;
}

// Values of `v` at the positions where `keep` is false replaced by `with`.
std::vector<double> Outside(const std::vector<double>& v, const std::vector<bool>& in_block,
                            double with) {
  std::vector<double> out(v);
  for (size_t i = 0; i < v.size(); ++i) {
    if (!in_block[i]) out[i] = with;
  }
  return out;
}

class AttentionBlockTest : public ::testing::TestWithParam<DataType> {};

// One block inside larger tensors (windows not at row 0, positions that
// leave some query rows without keys, and the unmasked block) against the
// float64 block: its rows only are written, the backward adds to what the
// accumulators held.
TEST_P(AttentionBlockTest, OneBlockMatchesTheFloat64BlockAndTouchesOnlyItsRows) {
  const DataType t = GetParam();
  AttentionBlockShape causal{2, 4, 2, 8, t, 7, 2, 4, 9, 3, 5, BlockMask::kCausal, 10, 11};
  AttentionBlockShape none = causal;
  none.mask = BlockMask::kNone;
  AttentionBlockShape mha{1, 3, 3, 4, t, 5, 0, 5, 5, 0, 5, BlockMask::kCausal, 0, 0};
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    for (const AttentionBlockShape& s : {causal, none, mha}) {
      SCOPED_TRACE(::testing::Message() << "mask " << static_cast<int>(s.mask) << " heads "
                                        << s.heads << "/" << s.kv_heads);
      auto stream = *device->CreateStream();
      const int64_t nq = s.batch * s.q_seq * s.heads * s.head_dim;
      const int64_t nk = s.batch * s.kv_seq * s.kv_heads * s.head_dim;
      const int64_t nl = s.batch * s.heads * s.q_seq;
      const auto q = testing::Round(Random(nq, 11), t), k = testing::Round(Random(nk, 12), t),
                 v = testing::Round(Random(nk, 13), t), dout = testing::Round(Random(nq, 14), t);
      const auto delta = Random(nl, 15, 0.3);
      std::vector<double> lse_in(nl);
      {  // the block's own lse, plus a shift, so p is not the forward's
        const BlockReference f = Float64Block(s, q, k, v, dout, std::vector<double>(nl, 0), delta);
        for (int64_t i = 0; i < nl; ++i) lse_in[i] = std::isfinite(f.lse[i]) ? f.lse[i] + 0.25 : 0;
      }
      const BlockReference want = Float64Block(s, q, k, v, dout, lse_in, delta);
      const auto dq0 = Random(nq, 16), dk0 = Random(nk, 17), dv0 = Random(nk, 18);
      auto bq = Upload(*device, *stream, Pack(q, t)), bk = Upload(*device, *stream, Pack(k, t)),
           bv = Upload(*device, *stream, Pack(v, t)),
           bdo = Upload(*device, *stream, Pack(dout, t));
      auto bout = testing::Poisoned(*device, *stream, nq * 4);
      auto blse = testing::Poisoned(*device, *stream, nl * 4);
      auto bli = Upload(*device, *stream, Pack(lse_in, DataType::kF32));
      auto bdelta = Upload(*device, *stream, Pack(delta, DataType::kF32));
      auto bdq = Upload(*device, *stream, Pack(dq0, DataType::kF32));
      auto bdk = Upload(*device, *stream, Pack(dk0, DataType::kF32));
      auto bdv = Upload(*device, *stream, Pack(dv0, DataType::kF32));
      ASSERT_TRUE(AttentionBlockForward(*stream, s, bq.data(), bk.data(), bv.data(),
                                        static_cast<float*>(bout.data()),
                                        static_cast<float*>(blse.data())).ok());
      ASSERT_TRUE(AttentionBlockBackward(*stream, s, bdo.data(), bq.data(), bk.data(), bv.data(),
                                         static_cast<const float*>(bli.data()),
                                         static_cast<const float*>(bdelta.data()),
                                         static_cast<float*>(bdq.data()),
                                         static_cast<float*>(bdk.data()),
                                         static_cast<float*>(bdv.data())).ok());
      // Which elements lie in the block's rows.
      std::vector<bool> qrow(nq), lrow(nl);
      const int64_t qw = s.heads * s.head_dim;
      for (int64_t i = 0; i < nq; ++i) {
        const int64_t r = i / qw % s.q_seq;
        qrow[i] = r >= s.q_begin && r < s.q_begin + s.q_len;
      }
      for (int64_t i = 0; i < nl; ++i) {
        const int64_t r = i % s.q_seq;
        lrow[i] = r >= s.q_begin && r < s.q_begin + s.q_len;
      }
      const std::vector<double> out = Fetch(*stream, bout, nq, DataType::kF32);
      const std::vector<double> lse = Fetch(*stream, blse, nl, DataType::kF32);
      for (int64_t i = 0; i < nq; ++i) {
        ASSERT_EQ(qrow[i], !std::isnan(out[i])) << "out element " << i;
      }
      // Compare the block's rows (the rest was NaN, as checked).
      EXPECT_EQ(Compare("out", Outside(out, qrow, 0), want.out, 1e-5), "");
      const double ninf = -std::numeric_limits<double>::infinity();
      for (int64_t i = 0; i < nl; ++i) {
        if (!lrow[i]) {
          EXPECT_TRUE(std::isnan(lse[i])) << "lse element " << i << " outside the block";
        } else if (want.lse[i] == ninf) {
          EXPECT_EQ(lse[i], ninf) << "lse element " << i << " sees no key";
        } else {
          EXPECT_NEAR(lse[i], want.lse[i], 1e-5 * (1 + std::abs(want.lse[i]))) << i;
        }
      }
      auto plus = [](std::vector<double> a, const std::vector<double>& b) {
        for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
        return a;
      };
      // The inputs are exact in either dtype and the arithmetic is fp32.
      EXPECT_EQ(Compare("dq", Fetch(*stream, bdq, nq, DataType::kF32), plus(dq0, want.dq), 1e-5), "");
      EXPECT_EQ(Compare("dk", Fetch(*stream, bdk, nk, DataType::kF32), plus(dk0, want.dk), 1e-5), "");
      EXPECT_EQ(Compare("dv", Fetch(*stream, bdv, nk, DataType::kF32), plus(dv0, want.dv), 1e-5), "");
    }
  }
}

// A causal sequence cut into n chunks: every (query chunk, key chunk)
// block, merged (in descending key order, with the empty blocks merged
// too), gives the unsplit attention's out and lse; the blocks' backward
// summed gives its dq, dk and dv (float64 reference, ops/testing/).
TEST_P(AttentionBlockTest, ChunkBlocksMergedEqualTheUnsplitAttention) {
  const DataType t = GetParam();
  struct Case {
    AttentionShape s;
    int64_t chunks;
  };
  const std::vector<Case> cases = {{{1, 4, 2, 1, 4, t}, 1},
                                   {{2, 12, 4, 2, 8, t}, 4},
                                   {{1, 18, 6, 2, 8, t}, 6},
                                   {{2, 8, 3, 3, 4, t}, 8}};
  for (auto& device : testing::TestDevices()) {
    SCOPED_TRACE(device->name());
    for (const Case& cs : cases) {
      const AttentionShape& s = cs.s;
      SCOPED_TRACE(::testing::Message() << s.batch << "x" << s.seq << " heads " << s.heads << "/"
                                        << s.kv_heads << " chunks " << cs.chunks);
      auto stream = *device->CreateStream();
      testing::AttentionCase c = testing::MakeAttentionCase(*device, *stream, s);
      const int64_t chunk = s.seq / cs.chunks, nl = s.batch * s.heads * s.seq;
      const AttentionBlockShape base{s.batch, s.heads, s.kv_heads, s.head_dim, t,
                                     s.seq,   0,       0,          s.seq,      0, 0};
      auto acc = testing::Poisoned(*device, *stream, c.nq * 4);
      auto part = testing::Poisoned(*device, *stream, c.nq * 4);
      auto part_lse = testing::Poisoned(*device, *stream, nl * 4);
      float* lse = static_cast<float*>(c.blse.data());
      for (int64_t a = 0; a < cs.chunks; ++a) {
        for (int64_t b = cs.chunks - 1; b >= 0; --b) {
          const AttentionBlockShape blk = ChunkBlock(base, chunk, a, a, b, b);
          const bool first = b == cs.chunks - 1;  // written straight into the result
          float* o = first ? static_cast<float*>(acc.data()) : static_cast<float*>(part.data());
          float* l = first ? lse : static_cast<float*>(part_lse.data());
          ASSERT_TRUE(AttentionBlockForward(*stream, blk, c.bq.data(), c.bk.data(), c.bv.data(),
                                            o, l).ok());
          if (!first) {
            ASSERT_TRUE(AttentionBlockMerge(*stream, blk, static_cast<float*>(acc.data()), lse,
                                            static_cast<const float*>(part.data()),
                                            static_cast<const float*>(part_lse.data())).ok());
          }
        }
      }
      const testing::AttentionReference r = testing::Float64Attention(s, c.q, c.k, c.v, c.dout);
      EXPECT_EQ(Compare("out", Fetch(*stream, acc, c.nq, DataType::kF32), r.out, 1e-5), "");
      EXPECT_EQ(Compare("lse", Fetch(*stream, c.blse, nl, DataType::kF32), r.lse, 1e-5), "");
      // Backward: the final out in dtype, its delta, every non-empty block.
      ASSERT_TRUE(CastFromF32(*stream, c.bo.data(), static_cast<const float*>(acc.data()), t,
                              c.nq).ok());
      auto delta = testing::Poisoned(*device, *stream, nl * 4);
      AttentionBlockShape all = base;
      all.q_len = s.seq;
      ASSERT_TRUE(AttentionBlockDelta(*stream, all, c.bdo.data(), c.bo.data(),
                                      static_cast<float*>(delta.data())).ok());
      auto dq = Upload(*device, *stream, Pack(std::vector<double>(c.nq, 0), DataType::kF32));
      auto dk = Upload(*device, *stream, Pack(std::vector<double>(c.nk, 0), DataType::kF32));
      auto dv = Upload(*device, *stream, Pack(std::vector<double>(c.nk, 0), DataType::kF32));
      for (int64_t a = 0; a < cs.chunks; ++a) {
        for (int64_t b = 0; b < cs.chunks; ++b) {  // the empty ones add nothing
          ASSERT_TRUE(AttentionBlockBackward(
                          *stream, ChunkBlock(base, chunk, a, a, b, b), c.bdo.data(),
                          c.bq.data(), c.bk.data(), c.bv.data(), lse,
                          static_cast<const float*>(delta.data()), static_cast<float*>(dq.data()),
                          static_cast<float*>(dk.data()), static_cast<float*>(dv.data())).ok());
        }
      }
      // fp32: 1e-5; bf16: the rounding of out (which delta reads) dominates.
      const double gtol = t == DataType::kF32 ? 1e-5 : 3e-2;
      EXPECT_EQ(Compare("dq", Fetch(*stream, dq, c.nq, DataType::kF32), r.dq, gtol), "");
      EXPECT_EQ(Compare("dk", Fetch(*stream, dk, c.nk, DataType::kF32), r.dk, gtol), "");
      EXPECT_EQ(Compare("dv", Fetch(*stream, dv, c.nk, DataType::kF32), r.dv, gtol), "");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, AttentionBlockTest,
                         ::testing::Values(DataType::kF32, DataType::kBF16),
                         [](const auto& info) { return DataTypeName(info.param); });

TEST(AttentionBlockArgsTest, BadArgumentsAreRefusedNamingTheProblem) {
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  float buf[256] = {};
  const AttentionBlockShape ok{1, 2, 1, 2, DataType::kF32, 4, 0, 4, 4, 0, 4};
  auto refused = [&](AttentionBlockShape s, const char* says) {
    const Status st = AttentionBlockForward(*stream, s, buf, buf, buf, buf, buf);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_NE(st.message().find(says), std::string::npos) << st;
  };
  AttentionBlockShape s = ok;
  s.kv_begin = 1;
  refused(s, "key rows [1, 5) are outside the 4 rows of a sequence");
  s = ok;
  s.q_begin = -1;
  refused(s, "query rows [-1, 3) are outside");
  s = ok;
  s.kv_heads = 3;
  s.heads = 4;
  refused(s, "kv_heads 3 does not divide heads 4");
  s = ok;
  s.kv_len = 0;
  refused(s, "kv_len must be positive, got 0");
  s = ok;
  s.dtype = DataType::kI32;
  refused(s, "dtype must be float or bfloat16");
  EXPECT_EQ(AttentionBlockForward(*stream, ok, buf, nullptr, buf, buf, buf).code(),
            absl::StatusCode::kInvalidArgument);
  // Merge and delta read the q-side fields only.
  AttentionBlockShape q_only = ok;
  q_only.kv_seq = q_only.kv_len = 0;
  EXPECT_TRUE(AttentionBlockMerge(*stream, q_only, buf, buf, buf, buf).ok());
  const Status st = AttentionBlockBackward(*stream, ok, buf, buf, buf, buf, buf, buf, nullptr,
                                           buf, buf);
  EXPECT_NE(st.message().find("dq is null"), std::string::npos) << st;
  EXPECT_TRUE(stream->Synchronize().ok());
}

}  // namespace
}  // namespace baton::ops
