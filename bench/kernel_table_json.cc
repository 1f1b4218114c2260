#include "baton/bench/kernel_table_json.h"

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"

namespace baton::bench {
namespace {

using Json = nlohmann::json;
using Key = std::pair<std::string, std::vector<int64_t>>;

// (rows, cols) of an elementwise op's dims (bench/op_suite.h's order).
std::pair<int64_t, int64_t> RowsCols(const std::string& op, const std::vector<int64_t>& d) {
  if (op == "rotary") return {d[0] * d[1], d[2] * d[3]};  // b, s, heads, head_dim
  if (op == "embedding") return {d[0], d[2]};             // tokens, vocab, hidden
  return {d[0], d[1]};
}

}  // namespace

StatusOr<Json> KernelTableJson(const std::string& gpu, const std::string& provenance,
                               const Limits& limits, const std::vector<Measured>& rows) {
  Json gemm = Json::array(), sdpa = Json::array(), ew = Json::array(),
       adamw = Json::array();
  // Passes of one shape, by (op, dims).
  std::map<Key, std::map<std::string, const Measured*>> passes;
  std::vector<Key> order;
  for (const Measured& m : rows) {
    Key key{m.op, m.dims};
    if (passes.find(key) == passes.end()) order.push_back(key);
    passes[key][m.pass] = &m;
  }
  for (const Key& key : order) {
    const auto& p = passes[key];
    const std::string& op = key.first;
    const std::vector<int64_t>& d = key.second;
    auto has = [&](const char* pass) { return p.count(pass) > 0; };
    if (op == "linear" && has("fwd")) {
      gemm.push_back({{"m", d[0]}, {"n", d[1]}, {"k", d[2]}, {"s", p.at("fwd")->seconds},
                      {"tflops", p.at("fwd")->rate}});
    } else if (op == "attention" && has("fwd") && has("bwd")) {
      sdpa.push_back({{"batch", d[0]}, {"seq", d[1]}, {"heads", d[2]}, {"kv_heads", d[3]},
                      {"head_dim", d[4]}, {"causal", true},
                      {"fwd_s", p.at("fwd")->seconds}, {"bwd_s", p.at("bwd")->seconds}});
    } else if (op == "cross_entropy" && has("loss") && has("fused")) {
      const Measured& loss = *p.at("loss");
      const double fused = p.at("fused")->seconds;
      ew.push_back({{"op", op}, {"rows", d[0]}, {"cols", d[1]}, {"bytes_fwd", loss.bytes},
                    {"fwd_s", loss.seconds},
                    {"bwd_s", std::max(fused - loss.seconds, 0.01 * fused)}});
    } else if (has("fwd") && has("bwd") && op != "linear" && op != "attention") {
      const auto [r, c] = RowsCols(op, d);
      ew.push_back({{"op", op}, {"rows", r}, {"cols", c}, {"bytes_fwd", p.at("fwd")->bytes},
                    {"fwd_s", p.at("fwd")->seconds}, {"bwd_s", p.at("bwd")->seconds}});
    } else if (op == "adamw" && has("step")) {
      adamw.push_back({{"params", d[0]}, {"s", p.at("step")->seconds}});
    }
  }
  auto missing = [](const std::string& what) {
    return absl::FailedPreconditionError(absl::StrCat(
        "kernel table: no ", what, " was measured (the simulator needs it)"));
  };
  if (gemm.empty()) return missing("GEMM");
  if (sdpa.empty()) return missing("attention shape (forward and backward)");
  for (const char* op : {"rmsnorm", "swiglu", "cross_entropy"}) {
    if (std::none_of(ew.begin(), ew.end(), [&](const Json& r) { return r["op"] == op; })) {
      return missing(op);
    }
  }
  if (adamw.empty()) return missing("AdamW size");
  Json j;
  j["gpu"] = gpu;
  j["provenance"] = provenance;
  j["launch_overhead_us"] = limits.launch_s * 1e6;
  j["copy_gbps"] = limits.copy_gbps;
  j["gemm_tflops"] = limits.gemm_tflops;
  j["gemm"] = std::move(gemm);
  j["sdpa"] = std::move(sdpa);
  j["elementwise"] = std::move(ew);
  j["adamw"] = std::move(adamw);
  return j;
}

}  // namespace baton::bench
