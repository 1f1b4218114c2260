#include "baton/bench/op_cases.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/ops/adamw.h"
#include "baton/ops/attention.h"
#include "baton/ops/cross_entropy.h"
#include "baton/ops/embedding.h"
#include "baton/ops/linear.h"
#include "baton/ops/rmsnorm.h"
#include "baton/ops/rotary.h"
#include "baton/ops/swiglu.h"

namespace baton::bench {
namespace {

constexpr size_t kPatternBytes = size_t{1} << 20;

uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

double Uniform(uint64_t& state) {  // in (0, 1)
  return (static_cast<double>(SplitMix(state) >> 11) + 0.5) * 0x1.0p-53;
}

// The buffers of one factory's cases; freed with the last case.
using Owned = std::shared_ptr<std::vector<DeviceBuffer>>;

void* Keep(const Owned& owned, DeviceBuffer b) {
  owned->push_back(std::move(b));
  return owned->back().data();
}

// Copies `pattern` into the start of `dst` and tiles it over `bytes` by
// doubling device copies.
Status Tile(Stream& s, void* dst, size_t bytes, const std::vector<uint8_t>& pattern) {
  const size_t first = std::min(bytes, pattern.size());
  BATON_RETURN_IF_ERROR(s.MemcpyAsync(dst, pattern.data(), first));
  auto* d = static_cast<uint8_t*>(dst);
  for (size_t done = first; done < bytes;) {
    const size_t n = std::min(done, bytes - done);
    BATON_RETURN_IF_ERROR(s.MemcpyAsync(d + done, d, n));
    done += n;
  }
  return s.Synchronize();  // `pattern` is freed when the caller returns
}

OpCase Case(const Owned& own, const char* op, const char* pass,
            std::string shape, Bound bound, double amount,
            std::function<Status()> run) {
  OpCase c;
  c.buffers = own;
  c.op = op;
  c.pass = pass;
  c.shape = std::move(shape);
  c.bound = bound;
  (bound == Bound::kMemory ? c.bytes : c.flops) = amount;
  c.run = std::move(run);
  return c;
}

}  // namespace

StatusOr<DeviceBuffer> Filler::Random(int64_t count, DataType t, double scale,
                                      uint64_t seed) {
  const size_t e = DataTypeSize(t);
  const size_t bytes = static_cast<size_t>(count) * e;
  BATON_ASSIGN_OR_RETURN(DeviceBuffer b, device_.Allocate(std::max<size_t>(bytes, 1)));
  std::vector<uint8_t> pattern(std::min(bytes, kPatternBytes));
  uint64_t state = seed;
  for (size_t i = 0; i + e <= pattern.size(); i += e) {
    // Box-Muller, one value per pair of uniforms.
    const double v = scale * std::sqrt(-2 * std::log(Uniform(state))) *
                     std::cos(2 * M_PI * Uniform(state));
    if (t == DataType::kBF16) {
      const uint16_t h = FloatToBf16(static_cast<float>(v));
      std::copy_n(reinterpret_cast<const uint8_t*>(&h), 2, &pattern[i]);
    } else {
      const float f = static_cast<float>(v);
      std::copy_n(reinterpret_cast<const uint8_t*>(&f), 4, &pattern[i]);
    }
  }
  BATON_RETURN_IF_ERROR(Tile(stream_, b.data(), bytes, pattern));
  return b;
}

StatusOr<DeviceBuffer> Filler::Ids(int64_t count, int64_t bound, uint64_t seed) {
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * 4);
  uint64_t state = seed;
  for (int64_t i = 0; i < count; ++i) {
    const int32_t id = static_cast<int32_t>(SplitMix(state) % static_cast<uint64_t>(bound));
    std::copy_n(reinterpret_cast<const uint8_t*>(&id), 4, &bytes[i * 4]);
  }
  BATON_ASSIGN_OR_RETURN(DeviceBuffer b, device_.Allocate(std::max<size_t>(bytes.size(), 1)));
  BATON_RETURN_IF_ERROR(stream_.MemcpyAsync(b.data(), bytes.data(), bytes.size()));
  BATON_RETURN_IF_ERROR(stream_.Synchronize());
  return b;
}

StatusOr<DeviceBuffer> Filler::Zeros(size_t bytes) {
  BATON_ASSIGN_OR_RETURN(DeviceBuffer b, device_.Allocate(std::max<size_t>(bytes, 1)));
  BATON_RETURN_IF_ERROR(stream_.MemsetAsync(b.data(), 0, bytes));
  BATON_RETURN_IF_ERROR(stream_.Synchronize());
  return b;
}

StatusOr<std::vector<OpCase>> RmsNormCases(Filler& f, int64_t T, int64_t h,
                                           DataType t) {
  const double e = static_cast<double>(DataTypeSize(t));
  auto own = std::make_shared<std::vector<DeviceBuffer>>();
  BATON_ASSIGN_OR_RETURN(auto x, f.Random(T * h, t, 1, 1));
  BATON_ASSIGN_OR_RETURN(auto w, f.Random(h, t, 1, 2));
  BATON_ASSIGN_OR_RETURN(auto dy, f.Random(T * h, t, 1, 3));
  BATON_ASSIGN_OR_RETURN(auto y, f.Zeros(T * h * e));
  BATON_ASSIGN_OR_RETURN(auto dx, f.Zeros(T * h * e));
  BATON_ASSIGN_OR_RETURN(auto dw, f.Zeros(h * e));
  BATON_ASSIGN_OR_RETURN(auto rstd, f.Zeros(T * 4));
  const void *px = Keep(own, std::move(x)), *pw = Keep(own, std::move(w)),
             *pdy = Keep(own, std::move(dy));
  void *py = Keep(own, std::move(y)), *pdx = Keep(own, std::move(dx)),
       *pdw = Keep(own, std::move(dw));
  auto* pr = static_cast<float*>(Keep(own, std::move(rstd)));
  const ops::RmsNormShape s{T, h, t};
  Stream& st = f.stream();
  BATON_RETURN_IF_ERROR(ops::RmsNormForward(st, s, px, pw, py, pr));
  BATON_RETURN_IF_ERROR(st.Synchronize());
  const std::string shape = absl::StrCat(T, "x", h);
  return std::vector<OpCase>{
      Case(own, "rmsnorm", "fwd", shape, Bound::kMemory, 2 * T * h * e,
           [=, &st] { return ops::RmsNormForward(st, s, px, pw, py, pr); }),
      Case(own, "rmsnorm", "bwd", shape, Bound::kMemory, 3 * T * h * e, [=, &st] {
        return ops::RmsNormBackward(st, s, pdy, px, pw, pr, pdx, false, pdw, t, false);
      })};
}

StatusOr<std::vector<OpCase>> SwiGluCases(Filler& f, int64_t rows, int64_t width,
                                          DataType t) {
  const int64_t n = rows * width;
  const double e = static_cast<double>(DataTypeSize(t));
  auto own = std::make_shared<std::vector<DeviceBuffer>>();
  BATON_ASSIGN_OR_RETURN(auto g, f.Random(n, t, 1, 11));
  BATON_ASSIGN_OR_RETURN(auto u, f.Random(n, t, 1, 12));
  BATON_ASSIGN_OR_RETURN(auto dh, f.Random(n, t, 1, 13));
  BATON_ASSIGN_OR_RETURN(auto h, f.Zeros(n * e));
  BATON_ASSIGN_OR_RETURN(auto dg, f.Zeros(n * e));
  BATON_ASSIGN_OR_RETURN(auto du, f.Zeros(n * e));
  const void *pg = Keep(own, std::move(g)), *pu = Keep(own, std::move(u)),
             *pdh = Keep(own, std::move(dh));
  void *ph = Keep(own, std::move(h)), *pdg = Keep(own, std::move(dg)),
       *pdu = Keep(own, std::move(du));
  const ops::SwiGluShape s{rows, width, t};
  Stream& st = f.stream();
  const std::string shape = absl::StrCat(rows, "x", width);
  return std::vector<OpCase>{
      Case(own, "swiglu", "fwd", shape, Bound::kMemory, 3 * n * e,
           [=, &st] { return ops::SwiGluForward(st, s, pg, pu, ph); }),
      Case(own, "swiglu", "bwd", shape, Bound::kMemory, 5 * n * e,
           [=, &st] { return ops::SwiGluBackward(st, s, pdh, pg, pu, pdg, pdu); })};
}

StatusOr<std::vector<OpCase>> RotaryCases(Filler& f, int64_t b, int64_t seq,
                                          int64_t heads, int64_t d, DataType t) {
  const int64_t n = b * seq * heads * d;
  const double e = static_cast<double>(DataTypeSize(t));
  auto own = std::make_shared<std::vector<DeviceBuffer>>();
  BATON_ASSIGN_OR_RETURN(auto x, f.Random(n, t, 1, 21));
  void* px = Keep(own, std::move(x));
  const ops::RotaryShape s{b, seq, heads, d, 10000.0, t};
  Stream& st = f.stream();
  const std::string shape = absl::StrCat("b", b, " s", seq, " h", heads, " d", d);
  return std::vector<OpCase>{
      Case(own, "rotary", "fwd", shape, Bound::kMemory, 2 * n * e,
           [=, &st] { return ops::RotaryForward(st, s, px); }),
      Case(own, "rotary", "bwd", shape, Bound::kMemory, 2 * n * e,
           [=, &st] { return ops::RotaryBackward(st, s, px); })};
}

StatusOr<std::vector<OpCase>> EmbeddingCases(Filler& f, int64_t T, int64_t V,
                                             int64_t h, DataType t) {
  const double e = static_cast<double>(DataTypeSize(t));
  auto own = std::make_shared<std::vector<DeviceBuffer>>();
  BATON_ASSIGN_OR_RETURN(auto ids, f.Ids(T, V, 31));
  BATON_ASSIGN_OR_RETURN(auto table, f.Random(V * h, t, 1, 32));
  BATON_ASSIGN_OR_RETURN(auto dy, f.Random(T * h, t, 1, 33));
  BATON_ASSIGN_OR_RETURN(auto y, f.Zeros(T * h * e));
  BATON_ASSIGN_OR_RETURN(auto dtable, f.Zeros(V * h * e));
  const auto* pids = static_cast<const int32_t*>(Keep(own, std::move(ids)));
  const void *ptable = Keep(own, std::move(table)), *pdy = Keep(own, std::move(dy));
  void *py = Keep(own, std::move(y)), *pdt = Keep(own, std::move(dtable));
  const ops::EmbeddingShape s{T, V, h, t};
  Stream& st = f.stream();
  const std::string shape = absl::StrCat("T", T, " V", V, " h", h);
  return std::vector<OpCase>{
      Case(own, "embedding", "fwd", shape, Bound::kMemory, 2 * T * h * e, [=, &st] {
        return ops::EmbeddingForward(st, s, pids, ptable, py);
      }),
      Case(own, "embedding", "bwd", shape, Bound::kMemory, (T + V) * h * e, [=, &st] {
        return ops::EmbeddingBackward(st, s, pids, pdy, pdt, t, false);
      })};
}

StatusOr<std::vector<OpCase>> CrossEntropyCases(Filler& f, int64_t T, int64_t V,
                                                DataType t) {
  const double e = static_cast<double>(DataTypeSize(t));
  auto own = std::make_shared<std::vector<DeviceBuffer>>();
  BATON_ASSIGN_OR_RETURN(auto logits, f.Random(T * V, t, 1, 41));
  BATON_ASSIGN_OR_RETURN(auto targets, f.Ids(T, V, 42));
  BATON_ASSIGN_OR_RETURN(auto loss, f.Zeros(T * 4));
  void* pz = Keep(own, std::move(logits));
  const auto* py = static_cast<const int32_t*>(Keep(own, std::move(targets)));
  auto* pl = static_cast<float*>(Keep(own, std::move(loss)));
  const ops::CrossEntropyShape s{T, V, t};
  const float scale = 1.0f / static_cast<float>(T);
  Stream& st = f.stream();
  const std::string shape = absl::StrCat(T, "x", V);
  // The fused pass writes the gradient over the logits, as the trainer
  // does; later calls read those gradients as logits (finite, same cost).
  return std::vector<OpCase>{
      Case(own, "cross_entropy", "loss", shape, Bound::kMemory, T * V * e, [=, &st] {
        return ops::CrossEntropy(st, s, pz, py, pl, nullptr, scale);
      }),
      Case(own, "cross_entropy", "fused", shape, Bound::kMemory, 2 * T * V * e,
           [=, &st] { return ops::CrossEntropy(st, s, pz, py, pl, pz, scale); })};
}

StatusOr<std::vector<OpCase>> AttentionCases(Filler& f, int64_t b, int64_t seq,
                                             int64_t H, int64_t G, int64_t d,
                                             DataType t) {
  const double e = static_cast<double>(DataTypeSize(t));
  const int64_t nq = b * seq * H * d, nk = b * seq * G * d;
  auto own = std::make_shared<std::vector<DeviceBuffer>>();
  BATON_ASSIGN_OR_RETURN(auto q, f.Random(nq, t, 1, 51));
  BATON_ASSIGN_OR_RETURN(auto k, f.Random(nk, t, 1, 52));
  BATON_ASSIGN_OR_RETURN(auto v, f.Random(nk, t, 1, 53));
  BATON_ASSIGN_OR_RETURN(auto dout, f.Random(nq, t, 1, 54));
  BATON_ASSIGN_OR_RETURN(auto out, f.Zeros(nq * e));
  BATON_ASSIGN_OR_RETURN(auto lse, f.Zeros(b * H * seq * 4));
  BATON_ASSIGN_OR_RETURN(auto dq, f.Zeros(nq * e));
  BATON_ASSIGN_OR_RETURN(auto dk, f.Zeros(nk * e));
  BATON_ASSIGN_OR_RETURN(auto dv, f.Zeros(nk * e));
  const void *pq = Keep(own, std::move(q)), *pk = Keep(own, std::move(k)),
             *pv = Keep(own, std::move(v)), *pdo = Keep(own, std::move(dout));
  void* po = Keep(own, std::move(out));
  auto* plse = static_cast<float*>(Keep(own, std::move(lse)));
  void *pdq = Keep(own, std::move(dq)), *pdk = Keep(own, std::move(dk)),
       *pdv = Keep(own, std::move(dv));
  const ops::AttentionShape s{b, seq, H, G, d, t};
  Stream& st = f.stream();
  BATON_RETURN_IF_ERROR(ops::AttentionForward(st, s, pq, pk, pv, po, plse));
  BATON_RETURN_IF_ERROR(st.Synchronize());
  const double flops = 2.0 * b * H * static_cast<double>(seq) * seq * d;
  const std::string shape = absl::StrCat("b", b, " s", seq, " h", H, "/", G, " d", d);
  return std::vector<OpCase>{
      Case(own, "attention", "fwd", shape, Bound::kMatmul, flops, [=, &st] {
        return ops::AttentionForward(st, s, pq, pk, pv, po, plse);
      }),
      Case(own, "attention", "bwd", shape, Bound::kMatmul, 2.5 * flops, [=, &st] {
        return ops::AttentionBackward(st, s, pdo, pq, pk, pv, po, plse, pdq, pdk, pdv);
      })};
}

StatusOr<std::vector<OpCase>> LinearCases(Filler& f, int64_t m, int64_t n,
                                          int64_t k, DataType t,
                                          bool with_backward) {
  const double e = static_cast<double>(DataTypeSize(t));
  auto own = std::make_shared<std::vector<DeviceBuffer>>();
  BATON_ASSIGN_OR_RETURN(auto x, f.Random(m * k, t, 1, 61));
  BATON_ASSIGN_OR_RETURN(auto w, f.Random(n * k, t, 0.02, 62));
  BATON_ASSIGN_OR_RETURN(auto y, f.Zeros(m * n * e));
  const void *px = Keep(own, std::move(x)), *pw = Keep(own, std::move(w));
  void* py = Keep(own, std::move(y));
  const ops::LinearShape s{m, k, n, t};
  Stream& st = f.stream();
  const double flops = 2.0 * m * n * static_cast<double>(k);
  const std::string shape = absl::StrCat(m, "x", n, "x", k);
  std::vector<OpCase> cases{Case(own, "linear", "fwd", shape, Bound::kMatmul, flops, [=, &st] {
    return ops::LinearForward(st, s, px, pw, py);
  })};
  if (!with_backward) return cases;
  BATON_ASSIGN_OR_RETURN(auto dy, f.Random(m * n, t, 1, 63));
  BATON_ASSIGN_OR_RETURN(auto dx, f.Zeros(m * k * e));
  BATON_ASSIGN_OR_RETURN(auto dw, f.Zeros(n * k * e));
  const void* pdy = Keep(own, std::move(dy));
  void *pdx = Keep(own, std::move(dx)), *pdw = Keep(own, std::move(dw));
  cases.push_back(Case(own, "linear", "bwd", shape, Bound::kMatmul, 2 * flops, [=, &st] {
    return ops::LinearBackward(st, s, pdy, px, pw, pdx, false, pdw, t, false);
  }));
  return cases;
}

StatusOr<std::vector<OpCase>> AdamWCases(Filler& f, int64_t P) {
  auto own = std::make_shared<std::vector<DeviceBuffer>>();
  BATON_ASSIGN_OR_RETURN(auto master, f.Random(P, DataType::kF32, 0.02, 71));
  BATON_ASSIGN_OR_RETURN(auto grad, f.Random(P, DataType::kF32, 1e-3, 72));
  BATON_ASSIGN_OR_RETURN(auto m1, f.Zeros(P * 4));
  BATON_ASSIGN_OR_RETURN(auto m2, f.Zeros(P * 4));
  BATON_ASSIGN_OR_RETURN(auto param, f.Zeros(P * 2));
  ops::AdamWArgs a;
  a.n = P;
  a.master = static_cast<float*>(Keep(own, std::move(master)));
  a.grad = Keep(own, std::move(grad));
  a.grad_dtype = DataType::kF32;
  a.moment1 = static_cast<float*>(Keep(own, std::move(m1)));
  a.moment2 = static_cast<float*>(Keep(own, std::move(m2)));
  a.param = Keep(own, std::move(param));
  a.param_dtype = DataType::kBF16;
  Stream& st = f.stream();
  return std::vector<OpCase>{
      Case(own, "adamw", "step", absl::StrCat(P, " params"), Bound::kMemory, 30.0 * P,
           [=, &st] { return ops::AdamWStep(st, ops::AdamWConfig(), a); })};
}

}  // namespace baton::bench
