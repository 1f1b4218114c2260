#include "baton/bench/op_suite.h"

#include <exception>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "baton/sim/kernel_table.h"

namespace baton::bench {
namespace {

using Json = nlohmann::json;

// Builders by op name over `dims` (the factories' size arguments).
CaseSpec Spec(const std::string& op, std::vector<int64_t> d, DataType t) {
  CaseSpec s;
  s.op = op;
  s.dims = d;
  if (op == "rmsnorm") {
    s.build = [d, t](Filler& f) { return RmsNormCases(f, d[0], d[1], t); };
  } else if (op == "swiglu") {
    s.build = [d, t](Filler& f) { return SwiGluCases(f, d[0], d[1], t); };
  } else if (op == "rotary") {
    s.build = [d, t](Filler& f) { return RotaryCases(f, d[0], d[1], d[2], d[3], t); };
  } else if (op == "embedding") {
    s.build = [d, t](Filler& f) { return EmbeddingCases(f, d[0], d[1], d[2], t); };
  } else if (op == "cross_entropy") {
    s.build = [d, t](Filler& f) { return CrossEntropyCases(f, d[0], d[1], t); };
  } else if (op == "attention") {
    s.build = [d, t](Filler& f) {
      return AttentionCases(f, d[0], d[1], d[2], d[3], d[4], t);
    };
  } else if (op == "linear") {
    s.build = [d, t](Filler& f) { return LinearCases(f, d[0], d[1], d[2], t, true); };
  } else if (op == "gemm") {  // the kernel table's GEMMs: the forward only
    s.build = [d, t](Filler& f) { return LinearCases(f, d[0], d[1], d[2], t, false); };
  } else if (op == "adamw") {
    s.build = [d](Filler& f) { return AdamWCases(f, d[0]); };
  } else {
    s.build = [op](Filler&) -> StatusOr<std::vector<OpCase>> {
      return absl::InternalError(absl::StrCat("bench: no cases for op \"", op, "\""));
    };
  }
  return s;
}

// Adds `spec` unless an equal (op, dims) is there already.
class SpecList {
 public:
  CaseSpec* Add(const std::string& op, std::vector<int64_t> dims, DataType t) {
    if (!seen_.insert({op, dims}).second) return nullptr;
    specs_.push_back(Spec(op, std::move(dims), t));
    return &specs_.back();
  }
  std::vector<CaseSpec> Take() { return std::move(specs_); }

 private:
  std::set<std::pair<std::string, std::vector<int64_t>>> seen_;
  std::vector<CaseSpec> specs_;
};

int64_t Int(const Json& row, const char* key) { return row.at(key).get<int64_t>(); }

// The shipped H100 table's rows as specs (OpsBenchSpecs, CUDA).
StatusOr<std::vector<CaseSpec>> H100Specs(DataType t) {
  const Json j = Json::parse(sim::H100KernelTableJson(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return absl::InternalError("sim/data/h100_kernels.json does not parse");
  }
  SpecList list;
  std::map<std::tuple<int64_t, int64_t, int64_t>, double> gemm_s;
  for (const Json& g : j.at("gemm")) gemm_s[{Int(g, "m"), Int(g, "n"), Int(g, "k")}] = g.at("s");
  for (const Json& e : j.at("elementwise")) {
    const std::string op = e.at("op");
    const int64_t rows = Int(e, "rows"), cols = Int(e, "cols");
    const double fwd = e.at("fwd_s"), bwd = e.at("bwd_s");
    if (CaseSpec* s = list.Add(op, {rows, cols}, t)) {
      // PyTorch runs the loss and its gradient as two kernels; baton's
      // fused pass does both.
      s->reference_s = op == "cross_entropy"
                           ? std::map<std::string, double>{{"loss", fwd}, {"fused", fwd + bwd}}
                           : std::map<std::string, double>{{"fwd", fwd}, {"bwd", bwd}};
    }
    if (op == "cross_entropy") list.Add("embedding", {rows, cols, 4096}, t);
  }
  for (const Json& a : j.at("sdpa")) {
    const int64_t b = Int(a, "batch"), h = Int(a, "heads"), s = Int(a, "seq"),
                  d = Int(a, "head_dim");
    if (CaseSpec* c = list.Add("attention", {b, s, h, Int(a, "kv_heads"), d}, t)) {
      c->reference_s = {{"fwd", a.at("fwd_s")}, {"bwd", a.at("bwd_s")}};
    }
    list.Add("rotary", {b, s, h, d}, t);
  }
  for (const Json& g : j.at("gemm")) {
    if (g.value("model", "") != "llama3-8b" || g.value("pass", "") != "fwd") continue;
    const int64_t m = Int(g, "m"), n = Int(g, "n"), k = Int(g, "k");
    if (CaseSpec* c = list.Add("linear", {m, n, k}, t)) {
      c->reference_s["fwd"] = g.at("s");
      auto dgrad = gemm_s.find({m, k, n}), wgrad = gemm_s.find({k, n, m});
      if (dgrad != gemm_s.end() && wgrad != gemm_s.end()) {
        c->reference_s["bwd"] = dgrad->second + wgrad->second;
      }
    }
  }
  for (const Json& a : j.at("adamw")) {
    if (CaseSpec* c = list.Add("adamw", {Int(a, "params")}, t)) {
      c->reference_s["step"] = a.at("s");
    }
  }
  return list.Take();
}

}  // namespace

StatusOr<std::vector<CaseSpec>> OpsBenchSpecs(DeviceKind kind, DataType t) {
  if (kind == DeviceKind::kCuda) {
    try {  // the embedded table is checked by //sim:kernel_table_test
      return H100Specs(t);
    } catch (const std::exception& e) {
      return absl::InternalError(
          absl::StrCat("sim/data/h100_kernels.json: unexpected row: ", e.what()));
    }
  }
  // Host: one small Llama-like shape per op (hidden 512, 8 heads of 64,
  // 2 KV heads, FFN 1408, vocab 4096, 256 tokens; attention over seq 256).
  SpecList list;
  list.Add("rmsnorm", {256, 512}, t);
  list.Add("swiglu", {256, 1408}, t);
  list.Add("rotary", {1, 256, 8, 64}, t);
  list.Add("embedding", {256, 4096, 512}, t);
  list.Add("cross_entropy", {256, 4096}, t);
  list.Add("attention", {1, 256, 8, 2, 64}, t);
  list.Add("linear", {256, 1408, 512}, t);
  list.Add("adamw", {1 << 20}, t);
  return list.Take();
}

std::vector<CaseSpec> KernelTableSpecs(const KernelTableShapes& k) {
  const DataType t = DataType::kBF16;
  SpecList list;
  for (const scheduler::ModelSpec& m : k.models) {
    const int64_t h = m.hidden, F = m.intermediate, V = m.vocab,
                  q = m.heads * m.head_dim, qkv = (m.heads + 2 * m.kv_heads) * m.head_dim;
    // (out, in) of each linear of a block and the LM head.
    const std::pair<int64_t, int64_t> mats[] = {{qkv, h}, {h, q}, {2 * F, h}, {h, F}, {V, h}};
    for (int64_t T : k.tokens) {
      for (const auto& [out, in] : mats) {
        list.Add("gemm", {T, out, in}, t);   // forward      y = x w^T
        list.Add("gemm", {T, in, out}, t);   // input grad   dx = dy w
        list.Add("gemm", {in, out, T}, t);   // weight grad  dw = dy^T x
      }
      list.Add("rmsnorm", {T, h}, t);
      list.Add("swiglu", {T, F}, t);
      list.Add("cross_entropy", {T, V}, t);
      list.Add("rotary", {1, T, m.heads, m.head_dim}, t);
      list.Add("embedding", {T, V, h}, t);
    }
    for (int64_t s : k.seqs) {
      if (s > k.attention_tokens) continue;
      list.Add("attention", {k.attention_tokens / s, s, m.heads, m.kv_heads, m.head_dim}, t);
    }
  }
  for (int64_t p : k.adamw_params) list.Add("adamw", {p}, t);
  return list.Take();
}

StatusOr<std::vector<Measured>> RunSpecs(
    Device& device, Stream& stream, const std::vector<CaseSpec>& specs,
    const Limits& limits, const TimingOptions& options,
    const std::function<void(const Measured&)>& on_row,
    const std::function<void(const CaseSpec&, const Status&)>& on_skip) {
  Filler filler(device, stream);
  std::vector<Measured> out;
  auto skippable = [](const Status& s) {
    return absl::IsInvalidArgument(s) || absl::IsResourceExhausted(s);
  };
  for (const CaseSpec& spec : specs) {
    StatusOr<std::vector<OpCase>> cases = spec.build(filler);
    if (!cases.ok()) {
      if (!skippable(cases.status())) return cases.status();
      on_skip(spec, cases.status());
      continue;
    }
    for (const OpCase& c : *cases) {
      StatusOr<double> s = TimePerCall(stream, c.run, options);
      if (!s.ok()) {
        if (!skippable(s.status())) return s.status();
        on_skip(spec, s.status());
        break;
      }
      Measured m;
      m.op = c.op;
      m.pass = c.pass;
      m.shape = c.shape;
      m.dims = spec.dims;
      m.bound = c.bound;
      m.bytes = c.bytes;
      m.flops = c.flops;
      m.seconds = *s;
      const bool memory = c.bound == Bound::kMemory;
      m.rate = memory ? c.bytes / *s / 1e9 : c.flops / *s / 1e12;
      m.ratio = m.rate / (memory ? limits.copy_gbps : limits.gemm_tflops);
      auto ref = spec.reference_s.find(c.pass);
      if (ref != spec.reference_s.end()) m.reference_s = ref->second;
      on_row(m);
      out.push_back(std::move(m));
    }
  }
  return out;
}

}  // namespace baton::bench
