#include "baton/sim/kernel_table.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "baton/sim/compute_model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace baton::sim {
namespace {

TEST(KernelTableTest, ShippedTableKeepsItsProvenanceAndMeasurements) {
  const StatusOr<KernelTable>& t = H100KernelTable();
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->gpu, "NVIDIA H100 80GB HBM3");
  EXPECT_NE(t->provenance.find("PyTorch 2.11"), std::string::npos);
  EXPECT_EQ(t->gemm.size(), 250u);
  EXPECT_EQ(t->attention.size(), 20u);
  EXPECT_NEAR(t->launch_us, 8.93, 0.01);
  // Each entry was timed alone after a synchronize: one launch's gap is
  // taken off every entry (exact attention, AdamW and RMSNorm rows return
  // their measurement less it).
  EXPECT_DOUBLE_EQ(t->entry_gap_us, t->launch_us);
  const double gap = t->launch_us * 1e-6;
  EXPECT_NEAR(t->AttentionSeconds(8, 32, 8, 2048, 128, false),
              0.0005383679866790772 - gap, 1e-12);
  EXPECT_NEAR(t->AttentionSeconds(8, 32, 8, 2048, 128, true),
              0.0020110080242156983 - gap, 1e-12);
  EXPECT_NEAR(t->AdamwSeconds(67108864), 0.0009544960260391235 - gap, 1e-12);
  EXPECT_NEAR(*t->ElementwiseSeconds("rmsnorm", 67108864, false),
              4.4383998960256575e-05 - gap, 1e-15);
  // A GEMM takes the fastest rate of the 4 nearest measured shapes: the
  // first row's own (2048 x 12288 x 4096, 706 TFLOP/s measured) or faster;
  // llama3-8b's 2048-token QKV, measured at 187 TFLOP/s beside 571 at
  // 4096 tokens, runs at its neighbours' rate.
  const double first = t->GemmSeconds(2048, 12288, 4096);
  EXPECT_LE(first, 0.0002921920120716095 - gap + 1e-12);
  const double qkv = t->GemmSeconds(2048, 6144, 4096);
  EXPECT_GT(2.0 * 2048 * 6144 * 4096 / qkv / 1e12, 500);
  double fastest = 0;
  for (const KernelTable::Gemm& g : t->gemm) fastest = std::max(fastest, 2 * g.m * g.n * g.k / g.s);
  EXPECT_LE(2.0 * 2048 * 6144 * 4096 / qkv, fastest * (1 + 1e-12));
}

// A table's declared entry gap is taken off every entry; a gap not shorter
// than an entry is refused by name.
TEST(KernelTableTest, DeclaredEntryGap) {
  const std::string text = R"({"gpu": "x", "launch_overhead_us": 5, "entry_gap_us": 10,
      "gemm": [{"m": 64, "n": 64, "k": 64, "s": 1e-4}],
      "sdpa": [{"batch": 1, "heads": 8, "kv_heads": 8, "seq": 1024, "head_dim": 64,
                "fwd_s": 1e-4, "bwd_s": 3e-4}],
      "elementwise": [{"op": "rmsnorm", "bytes_fwd": 1e6, "fwd_s": 1e-4, "bwd_s": 2e-4}],
      "adamw": [{"params": 1e6, "s": 1e-4}]})";
  auto t = ParseKernelTable(text, "gap.json");
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_DOUBLE_EQ(t->entry_gap_us, 10);
  EXPECT_NEAR(t->GemmSeconds(64, 64, 64), 0.9e-4, 1e-15);
  EXPECT_NEAR(t->AttentionSeconds(1, 8, 8, 1024, 64, true), 2.9e-4, 1e-15);
  EXPECT_NEAR(*t->ElementwiseSeconds("rmsnorm", 1e6, true), 1.9e-4, 1e-15);
  EXPECT_NEAR(t->AdamwSeconds(1e6), 0.9e-4, 1e-15);
  std::string big = text;
  big.replace(big.find("\"entry_gap_us\": 10"), 18, "\"entry_gap_us\": 200");
  auto bad = ParseKernelTable(big, "gap.json");
  ASSERT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("entry_gap_us"), std::string::npos);
  EXPECT_NE(bad.status().message().find("gap.json"), std::string::npos);
}

TEST(KernelTableTest, InterpolatesBetweenAndScalesBeyondMeasuredSizes) {
  const KernelTable& t = *H100KernelTable();
  // Between two measured rmsnorm sizes the time lies between theirs.
  const double lo = *t.ElementwiseSeconds("rmsnorm", 67108864, false);
  const double hi = *t.ElementwiseSeconds("rmsnorm", 134217728, false);
  const double mid = *t.ElementwiseSeconds("rmsnorm", 100e6, false);
  EXPECT_GT(mid, lo);
  EXPECT_LT(mid, hi);
  // Beyond the largest, proportional to size.
  const double top = *t.ElementwiseSeconds("rmsnorm", 1073741824, false);
  EXPECT_NEAR(*t.ElementwiseSeconds("rmsnorm", 4.0 * 1073741824, false), 4 * top,
              1e-12);
  // Monotone: the noisy 4096 x 14336 SwiGLU forward is not slower than a
  // larger SwiGLU.
  EXPECT_LE(*t.ElementwiseSeconds("swiglu", 352321536, false),
            *t.ElementwiseSeconds("swiglu", 704643072, false));
  // A GEMM between measured shapes runs at a rate within the measured range.
  const double s = t.GemmSeconds(3000, 9000, 6000);
  const double rate = 2.0 * 3000 * 9000 * 6000 / s / 1e12;
  EXPECT_GT(rate, 180);
  EXPECT_LT(rate, 810);
  EXPECT_EQ(t.ElementwiseSeconds("layernorm", 1e6, false).status().code(),
            absl::StatusCode::kInvalidArgument);
  // Attention beyond the measured range (sequence 2k-32k, head dim 128)
  // runs at a rate inside the measured one, never faster; a shape with a
  // zero dimension costs 0, not NaN.
  double lo_rate = INFINITY, hi_rate = 0;
  for (const KernelTable::Attention& a : t.attention) {
    const double r = 2 * a.batch * a.heads * a.seq * a.seq * a.head_dim / a.fwd_s;
    lo_rate = std::min(lo_rate, r);
    hi_rate = std::max(hi_rate, r);
  }
  const struct {
    double b, h, kv, s, d;
  } outside[] = {{1, 32, 8, 131072, 128}, {64, 32, 32, 512, 128}, {1, 8, 8, 4096, 64},
                 {1, 16, 16, 8192, 256}, {2, 256, 8, 2048, 128}};
  for (const auto& q : outside) {
    const double sec = t.AttentionSeconds(q.b, q.h, q.kv, q.s, q.d, false);
    const double r = 2 * q.b * q.h * q.s * q.s * q.d / sec;
    EXPECT_GE(r, lo_rate * (1 - 1e-9)) << q.s << " " << q.d;
    EXPECT_LE(r, hi_rate * (1 + 1e-9)) << q.s << " " << q.d;
  }
  EXPECT_EQ(t.AttentionSeconds(1, 32, 0, 4096, 128, false), 0);
  EXPECT_EQ(t.AttentionSeconds(1, 32, 8, 4096, 0, true), 0);
  EXPECT_EQ(t.AttentionSeconds(1, 32, 8, 4096, NAN, true), 0);
}

std::string Table(const std::string& gemm_row) {
  return R"({"gpu": "x", "launch_overhead_us": 5, "gemm": [)" + gemm_row +
         R"(], "sdpa": [{"batch": 1, "heads": 8, "kv_heads": 8, "seq": 1024,
         "head_dim": 64, "fwd_s": 1e-4, "bwd_s": 3e-4}],
         "elementwise": [{"op": "rmsnorm", "bytes_fwd": 1e6, "fwd_s": 1e-5,
         "bwd_s": 2e-5}], "adamw": [{"params": 1e6, "s": 1e-4}]})";
}

TEST(KernelTableTest, BadTablesNameTheField) {
  auto ok = ParseKernelTable(Table(R"({"m": 1, "n": 2, "k": 3, "s": 1e-6})"), "t.json");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->peak_tflops, 0);  // no reference GPU: not scaled
  struct Case {
    std::string text, expect;
  } cases[] = {
      {Table(R"({"m": "1", "n": 2, "k": 3, "s": 1e-6})"), "gemm[0].\"m\" must be a number, got string"},
      {Table(R"({"m": 1, "n": 2, "k": 3})"), "gemm[0].\"s\" is missing"},
      {Table(R"({"m": 1, "n": 2, "k": 3, "s": -1})"), "gemm[0].\"s\" must be positive"},
      {Table(R"({"m": 1, "n": 2, "k": 3, "s": 1}, [])"), "gemm[1] must be an object, got array"},
      {Table(R"({"m": 1, "n": 2, "k": 3, "s": null})"), "must be a number, got null"},
      {Table(R"({"m": 1, "n": 2, "k": 3, "s": true})"), "must be a number, got boolean"},
      {Table(""), "\"gemm\" has no rows"},
      {R"({"gpu": "x", "launch_overhead_us": 1, "gemm": {}})", "\"gemm\" must be an array, got object"},
      {R"({"gpu": 7})", "\"gpu\" must be a string"},
      {R"({"gpu": "x"})", "\"launch_overhead_us\" is missing"},
      {R"([1, 2])", "must be an object, got array"},
      {R"({"gpu": "x",)", "not valid JSON"},
      {"", "not valid JSON"},
      {R"({"gpu": "x", "gpu": "y"})", "kernel table t.json: duplicate key \"gpu\""},
      {Table(R"({"m": 1, "n": 2, "k": 3, "s": 1e-6, "s": 1})"),
       "kernel table t.json: duplicate key \"s\" at gemm[0]"},
      {std::string(100000, '[') + std::string(100000, ']'), "nests deeper than 8"},
      {R"({"gpu": "x", "peak_tflops": "989", "launch_overhead_us": 1})", "\"peak_tflops\" must be a number"},
  };
  for (const Case& c : cases) {
    auto r = ParseKernelTable(c.text, "t.json");
    ASSERT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.expect;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << r.status().message() << " / wanted: " << c.expect;
    EXPECT_NE(r.status().message().find("t.json"), std::string::npos);
  }
  // A string holding brackets does not count as nesting.
  std::string deep_string = Table(R"({"m": 1, "n": 2, "k": 3, "s": 1e-6})");
  deep_string.insert(1, "\"note\": \"" + std::string(50, '[') + "\", ");
  EXPECT_TRUE(ParseKernelTable(deep_string, "t.json").ok());
  EXPECT_EQ(ReadKernelTable("/nonexistent/table.json").status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ComputeModelTest, OtherGpusScaleByPeakAndBandwidth) {
  const KernelTable& t = *H100KernelTable();
  ClusterSpec h100 = *ClusterPreset("h100");
  ClusterSpec a100 = *ClusterPreset("a100");
  const scheduler::ModelSpec m = *scheduler::ModelPreset("llama3-8b");
  auto kh = ComputeModel::Create(t, h100, m, 8192, 1, 8192);
  auto ka = ComputeModel::Create(t, a100, m, 8192, 1, 8192);
  ASSERT_TRUE(kh.ok() && ka.ok());
  EXPECT_DOUBLE_EQ(kh->compute_scale(), 1);
  EXPECT_DOUBLE_EQ(ka->compute_scale(), 989.0 / 312);
  EXPECT_DOUBLE_EQ(ka->memory_scale(), 3000.0 / 1800);
  // A block is GEMM-bound: the A100 takes between the bandwidth and the
  // peak ratio longer.
  const double ratio = ka->BlockForward().seconds / kh->BlockForward().seconds;
  EXPECT_GT(ratio, 3000.0 / 1800);
  EXPECT_LE(ratio, 989.0 / 312 + 1e-9);
  // Every kernel pays at least the launch cost.
  EXPECT_EQ(kh->EmbeddingBackward().kernels, 2 + kEmbeddingSortKernels);
  EXPECT_GE(kh->EmbeddingBackward().seconds,
            kh->EmbeddingBackward().kernels * kh->launch_s());
  // Accumulating gradients adds one kernel per parameter tensor.
  EXPECT_EQ(kh->BlockBackward(true).kernels, kh->BlockBackward(false).kernels + 9);
  EXPECT_GT(kh->BlockBackward(true).seconds, kh->BlockBackward(false).seconds);
}

// An attention kernel given by utilization replaces the table's attention
// and nothing else: halving the utilization adds exactly one more attention
// time; a padded head dim costs its padded width; no_rope drops 6 kernels.
TEST(ComputeModelTest, AttentionKernelByUtilization) {
  const KernelTable& t = *H100KernelTable();
  const ClusterSpec h100 = *ClusterPreset("h100");
  scheduler::ModelSpec m = *scheduler::ModelPreset("llama2-7b");
  m.head_dim = 96;  // a FlashAttention template; Triton pads it to 128
  m.hidden = m.heads * m.head_dim;
  AttentionKernel fast{0.4, 0.2, false, false};
  AttentionKernel slow{0.2, 0.1, false, false};
  AttentionKernel padded{0.4, 0.2, true, false};
  AttentionKernel no_rope{0.4, 0.2, false, true};
  auto f = ComputeModel::Create(t, h100, m, 8192, 2, 4096, fast);
  auto s = ComputeModel::Create(t, h100, m, 8192, 2, 4096, slow);
  auto p = ComputeModel::Create(t, h100, m, 8192, 2, 4096, padded);
  auto n = ComputeModel::Create(t, h100, m, 8192, 2, 4096, no_rope);
  ASSERT_TRUE(f.ok() && s.ok() && p.ok() && n.ok());
  const double flops = 2.0 * 2 * m.heads * 4096.0 * 4096 * 96;
  const double attn_f = flops / (0.4 * 989e12);
  EXPECT_NEAR(s->BlockForward().seconds - f->BlockForward().seconds, attn_f, 1e-9);
  EXPECT_NEAR(s->BlockBackward(false).seconds - f->BlockBackward(false).seconds,
              2.5 * flops / (0.2 * 989e12), 1e-9);
  EXPECT_NEAR(p->BlockForward().seconds - f->BlockForward().seconds,
              attn_f * (128.0 / 96 - 1), 1e-9);
  EXPECT_EQ(n->BlockForward().kernels, f->BlockForward().kernels - 6);
  EXPECT_LT(n->BlockForward().seconds, f->BlockForward().seconds);
  // Utilizations of 0 keep the table's attention.
  auto table = ComputeModel::Create(t, h100, m, 8192, 2, 4096);
  ASSERT_TRUE(table.ok());
  EXPECT_NE(table->BlockForward().seconds, f->BlockForward().seconds);
}

// The head dim each attention kernel runs at (compute_model.h
// KernelHeadDim): FlashAttention's CUDA templates, Triton's powers of two.
TEST(ComputeModelTest, KernelHeadDimRoundsToTheKernelsTemplates) {
  const AttentionKernel flash{}, triton{0.25, 0.175, true, false};
  const std::pair<int64_t, int64_t> flash_dims[] = {
      {1, 32},    {32, 32},   {40, 64},   {64, 64},   {80, 96},  {96, 96},
      {112, 128}, {128, 128}, {129, 160}, {176, 192}, {200, 256}, {256, 256},
      {257, 257}, {512, 512}};
  for (const auto& [d, want] : flash_dims) {
    auto got = KernelHeadDim(flash, d);
    ASSERT_TRUE(got.ok()) << d << ": " << got.status();
    EXPECT_EQ(*got, want) << d;
  }
  const std::pair<int64_t, int64_t> triton_dims[] = {
      {1, 16}, {16, 16}, {17, 32}, {80, 128}, {96, 128}, {112, 128}, {128, 128}};
  for (const auto& [d, want] : triton_dims) {
    auto got = KernelHeadDim(triton, d);
    ASSERT_TRUE(got.ok()) << d << ": " << got.status();
    EXPECT_EQ(*got, want) << d;
  }
  // Triton FlashAttention asserts d <= 128: a model beyond it is refused,
  // by name, also when building a compute model.
  auto big = KernelHeadDim(triton, 160);
  ASSERT_EQ(big.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.status().message().find("up to 128"), std::string::npos);
  EXPECT_NE(big.status().message().find("160"), std::string::npos);
  EXPECT_EQ(KernelHeadDim(flash, 0).status().code(), absl::StatusCode::kInvalidArgument);
  scheduler::ModelSpec m = *scheduler::ModelPreset("llama2-7b");
  m.head_dim = 160;
  m.hidden = m.heads * m.head_dim;
  auto c = ComputeModel::Create(*H100KernelTable(), *ClusterPreset("h100"), m,
                                4096, 1, 4096, triton);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument);
}

// The table's attention at a head dim it lacks is looked up at the width
// the flash kernel runs and pays that width's FLOPs: a head dim of 112
// costs what 128 costs (the shipped table has 128 only); a table with rows
// at the model's own head dim is taken at it.
TEST(ComputeModelTest, TableAttentionAtThePaddedHeadDim) {
  const KernelTable& t = *H100KernelTable();
  const ClusterSpec h100 = *ClusterPreset("h100");
  scheduler::ModelSpec m = *scheduler::ModelPreset("llama2-7b");
  m.head_dim = 112;
  const double attn128 = t.AttentionSeconds(1, m.heads, m.kv_heads, 4096, 128, false);
  const double attn112 = t.AttentionSeconds(1, m.heads, m.kv_heads, 4096, 112, false);
  // An unpadded lookup: about the same rate, 112/128 of the FLOPs.
  EXPECT_NEAR(attn112 / attn128, 112.0 / 128, 1e-3);
  // Doubling the table's attention times adds the 128 time to the block,
  // not the unpadded 112 one.
  KernelTable slow = t;
  for (KernelTable::Attention& row : slow.attention) {
    row.fwd_s *= 2;
    row.bwd_s *= 2;
  }
  auto a = ComputeModel::Create(t, h100, m, 4096, 1, 4096);
  auto s = ComputeModel::Create(slow, h100, m, 4096, 1, 4096);
  ASSERT_TRUE(a.ok() && s.ok());
  EXPECT_NEAR(s->BlockForward().seconds - a->BlockForward().seconds, attn128, 1e-12);
  // A table with rows at the model's own head dim is taken at it.
  KernelTable own = t;
  for (KernelTable::Attention row : t.attention) {
    row.head_dim = 112;
    row.fwd_s *= 3;
    row.bwd_s *= 3;
    own.attention.push_back(row);
  }
  const double own112 = own.AttentionSeconds(1, m.heads, m.kv_heads, 4096, 112, false);
  const double own128 = own.AttentionSeconds(1, m.heads, m.kv_heads, 4096, 128, false);
  EXPECT_GT(std::fabs(own112 / own128 - 1), 0.05);  // the check below can tell them apart
  auto o = ComputeModel::Create(own, h100, m, 4096, 1, 4096);
  ASSERT_TRUE(o.ok());
  EXPECT_NEAR(o->BlockForward().seconds - a->BlockForward().seconds, own112 - attn128,
              1e-12);
}

// The named kernels behind `simulate --attention-kernel` (compute_model.h).
TEST(ComputeModelTest, AttentionKernelPresets) {
  auto table = AttentionKernelPreset("table", "h100");
  ASSERT_TRUE(table.ok());
  EXPECT_FALSE(table->active());
  EXPECT_FALSE(table->no_rope);
  auto h100 = AttentionKernelPreset("triton", "h100");
  ASSERT_TRUE(h100.ok());
  EXPECT_DOUBLE_EQ(h100->fwd_utilization, 0.35 / 1.4);
  EXPECT_DOUBLE_EQ(h100->bwd_utilization, 0.35 / 2);
  EXPECT_TRUE(h100->pad_head_dim);
  EXPECT_FALSE(h100->no_rope);
  auto a100 = AttentionKernelPreset("triton-alibi", "a100");
  ASSERT_TRUE(a100.ok());
  EXPECT_DOUBLE_EQ(a100->fwd_utilization, 0.73 / 1.4);
  EXPECT_TRUE(a100->no_rope);
  auto unknown = AttentionKernelPreset("flash9", "h100");
  EXPECT_EQ(unknown.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.status().message().find("table, triton, triton-alibi"),
            std::string::npos);
  auto gpu = AttentionKernelPreset("triton", "mi300x");
  EXPECT_EQ(gpu.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(gpu.status().message().find("mi300x"), std::string::npos);
}

}  // namespace
}  // namespace baton::sim

namespace baton::sim {
namespace {

// Kernel stacks and a rank's shard (compute_model.h KernelStack,
// ShardShape): fp8 halves the block's GEMMs and adds its casts; compiled
// fuses the memory-bound kernels; tensor parallelism divides the GEMMs.
TEST(ComputeModelTest, StacksAndShards) {
  const KernelTable& t = *H100KernelTable();
  const ClusterSpec h100 = *ClusterPreset("h100");
  const scheduler::ModelSpec m = *scheduler::ModelPreset("llama3-70b");
  auto eager = ComputeModel::Create(t, h100, m, 8192, 1, 8192);
  KernelStack fp8;
  fp8.fp8 = true;
  KernelStack compiled;
  compiled.compiled = true;
  auto f = ComputeModel::Create(t, h100, m, 8192, 1, 8192, {}, fp8);
  auto c = ComputeModel::Create(t, h100, m, 8192, 1, 8192, {}, compiled);
  ASSERT_TRUE(eager.ok() && f.ok() && c.ok());
  const BlockSegments& e = eager->Segments();
  double gemm = 0;
  for (double g : e.gemm_fwd) gemm += g;
  double gemm8 = 0;
  for (double g : f->Segments().gemm_fwd) gemm8 += g;
  EXPECT_NEAR(gemm8 / gemm, 989.0 / 1979, 1e-9);
  EXPECT_GT(f->BlockForward().kernels, eager->BlockForward().kernels);  // the casts
  EXPECT_LT(f->BlockForward().seconds, eager->BlockForward().seconds);
  EXPECT_LT(c->BlockForward().kernels, eager->BlockForward().kernels);
  EXPECT_LT(c->BlockBackward(false).seconds, eager->BlockBackward(false).seconds);
  // The default stack's segments add up to the block (up to rounding).
  EXPECT_NEAR(e.Forward().seconds, eager->BlockForward().seconds, 1e-9);
  EXPECT_NEAR(e.Backward().seconds, eager->BlockBackward(false).seconds, 1e-9);
  // Input- and weight-gradient parts make the backward.
  double input = 0;
  for (const KernelSum& k : e.bwd_input) input += k.seconds;
  EXPECT_NEAR(input + e.weight.seconds, e.Backward().seconds, 1e-9);
  // TP 8: GEMM time falls about 8-fold (smaller GEMMs run a little slower).
  ShardShape tp8;
  tp8.tp = 8;
  tp8.sp = true;
  auto s = ComputeModel::Create(t, h100, m, 8192, 1, 8192, {}, {}, tp8);
  ASSERT_TRUE(s.ok());
  double gemm_tp = 0;
  for (double g : s->Segments().gemm_fwd) gemm_tp += g;
  EXPECT_GT(gemm / gemm_tp, 6.5);
  EXPECT_LE(gemm / gemm_tp, 8.0 + 1e-9);
  // No FP8 on the A100: refused by name.
  auto a = ComputeModel::Create(t, *ClusterPreset("a100"), m, 8192, 1, 8192, {}, fp8);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KernelStackFor("eager", "fp8", *ClusterPreset("a100")).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(KernelStackFor("compiled", "fp8", h100).ok());
}

}  // namespace
}  // namespace baton::sim
