#include "baton/sim/kernel_table.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "baton/runtime/json_input.h"
#include "nlohmann/json.hpp"

namespace baton::sim {

// Defined in the generated h100_kernels_data.cc (sim/BUILD).
extern const char kH100KernelsJson[];

namespace {

using Json = nlohmann::json;

// Deepest nesting of objects and arrays in `text`, outside strings.
int NestingDepth(absl::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (ch == '\\') {
        escaped = true;
      } else if (ch == '"') {
        in_string = false;
      }
      continue;
    }
    if (ch == '"') in_string = true;
    if (ch == '{' || ch == '[') deepest = std::max(deepest, ++depth);
    if (ch == '}' || ch == ']') --depth;
  }
  return deepest;
}

class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}

  Status Error(const std::string& where, const std::string& what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel table ", source_, ": ", where, " ", what));
  }

  // A required positive finite number (or >= 0 with may_be_zero).
  StatusOr<double> Number(const Json& obj, const char* key,
                          const std::string& where, bool may_be_zero = false) const {
    auto it = obj.find(key);
    if (it == obj.end()) {
      return Error(absl::StrCat(where, "\"", key, "\""), "is missing");
    }
    if (!it->is_number()) {
      return Error(absl::StrCat(where, "\"", key, "\""),
                   absl::StrCat("must be a number, got ", it->type_name()));
    }
    const double v = it->get<double>();
    if (!std::isfinite(v) || v < 0 || (v == 0 && !may_be_zero)) {
      return Error(absl::StrCat(where, "\"", key, "\""),
                   absl::StrCat("must be ", may_be_zero ? "non-negative" : "positive",
                                " and finite, got ", v));
    }
    return v;
  }

  StatusOr<double> OptionalNumber(const Json& obj, const char* key) const {
    if (!obj.contains(key)) return 0.0;
    return Number(obj, key, "");
  }

  // The array `key` of objects, each passed to `row(object, where)`.
  template <typename F>
  Status Rows(const Json& obj, const char* key, F row) const {
    auto it = obj.find(key);
    if (it == obj.end()) return Error(absl::StrCat("\"", key, "\""), "is missing");
    if (!it->is_array()) {
      return Error(absl::StrCat("\"", key, "\""),
                   absl::StrCat("must be an array, got ", it->type_name()));
    }
    if (it->empty()) return Error(absl::StrCat("\"", key, "\""), "has no rows");
    for (size_t i = 0; i < it->size(); ++i) {
      const Json& r = (*it)[i];
      const std::string where = absl::StrCat(key, "[", i, "].");
      if (!r.is_object()) {
        return Error(absl::StrCat(key, "[", i, "]"),
                     absl::StrCat("must be an object, got ", r.type_name()));
      }
      BATON_RETURN_IF_ERROR(row(r, where));
    }
    return absl::OkStatus();
  }

 private:
  std::string source_;
};

// Sorts by size, averages equal sizes, and drops points slower than a
// larger size's (measurement noise: time never falls as the size grows).
TimeCurve MakeCurve(std::vector<std::pair<double, double>> points) {
  std::sort(points.begin(), points.end());
  std::vector<std::pair<double, double>> merged;
  for (size_t i = 0; i < points.size();) {
    size_t j = i;
    double sum = 0;
    for (; j < points.size() && points[j].first == points[i].first; ++j) {
      sum += points[j].second;
    }
    merged.push_back({points[i].first, sum / static_cast<double>(j - i)});
    i = j;
  }
  TimeCurve c;
  double fastest_above = INFINITY;
  for (auto it = merged.rbegin(); it != merged.rend(); ++it) {
    if (it->second <= fastest_above) {
      c.points.push_back(*it);
      fastest_above = it->second;
    }
  }
  std::reverse(c.points.begin(), c.points.end());
  return c;
}

// The (squared distance, index) pairs of the 4 keys nearest to `query`,
// nearest first (fewer when there are fewer keys).
std::vector<std::pair<double, size_t>> NearestKeys(const std::vector<std::vector<double>>& keys,
                                                   const std::vector<double>& query) {
  constexpr size_t kNearest = 4;
  std::vector<std::pair<double, size_t>> d(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    double s = 0;
    for (size_t j = 0; j < query.size(); ++j) {
      const double x = keys[i][j] - query[j];
      s += x * x;
    }
    d[i] = {s, i};
  }
  const size_t n = std::min(kNearest, d.size());
  std::partial_sort(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(n), d.end());
  d.resize(n);
  return d;
}

// The fastest (largest) log rate among the keys nearest to `query`
// (KernelTable::GemmSeconds says why the fastest, not a mean).
double FastestNearbyLogRate(const std::vector<std::vector<double>>& keys,
                            const std::vector<double>& log_rates,
                            const std::vector<double>& query) {
  const std::vector<std::pair<double, size_t>> d = NearestKeys(keys, query);
  double best = log_rates[d[0].second];
  for (size_t i = 1; i < d.size(); ++i) best = std::max(best, log_rates[d[i].second]);
  return best;
}

// Inverse-distance weighting of log rates over the 4 nearest keys.
double IdwLogRate(const std::vector<std::vector<double>>& keys,
                  const std::vector<double>& log_rates,
                  const std::vector<double>& query) {
  const std::vector<std::pair<double, size_t>> d = NearestKeys(keys, query);
  if (d[0].first < 1e-12) return log_rates[d[0].second];
  double wsum = 0, vsum = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    const double w = 1 / d[i].first;
    wsum += w;
    vsum += w * log_rates[d[i].second];
  }
  return vsum / wsum;
}

}  // namespace

double TimeCurve::Seconds(double size) const {
  if (points.empty() || !(size > 0)) return 0;
  if (size <= points.front().first) {
    return points.front().second * size / points.front().first;
  }
  if (size >= points.back().first) {
    return points.back().second * size / points.back().first;
  }
  auto hi = std::lower_bound(points.begin(), points.end(),
                             std::make_pair(size, 0.0));
  auto lo = hi - 1;
  const double f = (std::log(size) - std::log(lo->first)) /
                   (std::log(hi->first) - std::log(lo->first));
  return std::exp(std::log(lo->second) +
                  f * (std::log(hi->second) - std::log(lo->second)));
}

double KernelTable::GemmSeconds(double m, double n, double k) const {
  if (gemm.empty() || m <= 0 || n <= 0 || k <= 0) return 0;
  std::vector<std::vector<double>> keys;
  std::vector<double> rates;
  keys.reserve(gemm.size());
  for (const Gemm& g : gemm) {
    keys.push_back({std::log(g.m), std::log(g.n), std::log(g.k)});
    rates.push_back(std::log(2 * g.m * g.n * g.k / g.s));
  }
  const double rate =
      std::exp(FastestNearbyLogRate(keys, rates, {std::log(m), std::log(n), std::log(k)}));
  return 2 * m * n * k / rate;
}

double KernelTable::AttentionSeconds(double batch, double heads, double kv_heads,
                                     double seq, double head_dim,
                                     bool backward) const {
  if (attention.empty() || !(batch > 0) || !(heads > 0) || !(kv_heads > 0) ||
      !(seq > 0) || !(head_dim > 0)) {
    return 0;
  }
  auto key = [](double b, double h, double kv, double s, double d) {
    return std::vector<double>{std::log(s), std::log(b * h), std::log(h / kv),
                               std::log(d)};
  };
  std::vector<std::vector<double>> keys;
  std::vector<double> rates;
  for (const Attention& a : attention) {
    keys.push_back(key(a.batch, a.heads, a.kv_heads, a.seq, a.head_dim));
    const double flops = 2 * a.batch * a.heads * a.seq * a.seq * a.head_dim;
    rates.push_back(std::log(backward ? 2.5 * flops / a.bwd_s : flops / a.fwd_s));
  }
  const double rate = std::exp(
      IdwLogRate(keys, rates, key(batch, heads, kv_heads, seq, head_dim)));
  const double flops = 2 * batch * heads * seq * seq * head_dim;
  return (backward ? 2.5 : 1.0) * flops / rate;
}

StatusOr<double> KernelTable::ElementwiseSeconds(const std::string& op,
                                                 double bytes,
                                                 bool backward) const {
  auto it = elementwise.find(op);
  if (it == elementwise.end()) {
    std::vector<std::string> names;
    for (const auto& [name, curves] : elementwise) names.push_back(name);
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel table ", gpu, " has no \"", op, "\" rows (it has ",
        absl::StrJoin(names, ", "), ")"));
  }
  return (backward ? it->second.second : it->second.first).Seconds(bytes);
}

StatusOr<KernelTable> ParseKernelTable(absl::string_view text,
                                       const std::string& source) {
  Reader r(source);
  if (NestingDepth(text) > kMaxKernelTableDepth) {
    return r.Error("JSON", absl::StrCat("nests deeper than ",
                                        kMaxKernelTableDepth, " levels"));
  }
  // Bounded, and a key given twice is refused (runtime/json_input.h).
  BATON_ASSIGN_OR_RETURN(Json j, ParseJsonInput(text, absl::StrCat("kernel table ", source)));
  if (!j.is_object()) {
    return r.Error("JSON", absl::StrCat("must be an object, got ", j.type_name()));
  }
  KernelTable t;
  auto gpu = j.find("gpu");
  if (gpu == j.end() || !gpu->is_string()) {
    return r.Error("\"gpu\"", "must be a string naming the GPU");
  }
  t.gpu = gpu->get<std::string>();
  if (auto p = j.find("provenance"); p != j.end()) {
    if (!p->is_string()) return r.Error("\"provenance\"", "must be a string");
    t.provenance = p->get<std::string>();
  }
  BATON_ASSIGN_OR_RETURN(t.launch_us, r.Number(j, "launch_overhead_us", "", true));
  BATON_ASSIGN_OR_RETURN(t.peak_tflops, r.OptionalNumber(j, "peak_tflops"));
  BATON_ASSIGN_OR_RETURN(t.hbm_gbps, r.OptionalNumber(j, "hbm_gbps"));
  BATON_ASSIGN_OR_RETURN(t.copy_gbps, r.OptionalNumber(j, "copy_gbps"));
  double entry_gap_us = 0;
  if (j.contains("entry_gap_us")) {
    BATON_ASSIGN_OR_RETURN(entry_gap_us, r.Number(j, "entry_gap_us", "", true));
  }
  BATON_RETURN_IF_ERROR(r.Rows(j, "gemm", [&](const Json& o, const std::string& w) -> Status {
    KernelTable::Gemm g;
    BATON_ASSIGN_OR_RETURN(g.m, r.Number(o, "m", w));
    BATON_ASSIGN_OR_RETURN(g.n, r.Number(o, "n", w));
    BATON_ASSIGN_OR_RETURN(g.k, r.Number(o, "k", w));
    BATON_ASSIGN_OR_RETURN(g.s, r.Number(o, "s", w));
    t.gemm.push_back(g);
    return absl::OkStatus();
  }));
  BATON_RETURN_IF_ERROR(r.Rows(j, "sdpa", [&](const Json& o, const std::string& w) -> Status {
    KernelTable::Attention a;
    BATON_ASSIGN_OR_RETURN(a.batch, r.Number(o, "batch", w));
    BATON_ASSIGN_OR_RETURN(a.heads, r.Number(o, "heads", w));
    BATON_ASSIGN_OR_RETURN(a.kv_heads, r.Number(o, "kv_heads", w));
    BATON_ASSIGN_OR_RETURN(a.seq, r.Number(o, "seq", w));
    BATON_ASSIGN_OR_RETURN(a.head_dim, r.Number(o, "head_dim", w));
    BATON_ASSIGN_OR_RETURN(a.fwd_s, r.Number(o, "fwd_s", w));
    BATON_ASSIGN_OR_RETURN(a.bwd_s, r.Number(o, "bwd_s", w));
    if (a.kv_heads > a.heads) {
      return r.Error(absl::StrCat(w, "\"kv_heads\""), "exceeds \"heads\"");
    }
    t.attention.push_back(a);
    return absl::OkStatus();
  }));
  std::map<std::string, std::pair<std::vector<std::pair<double, double>>,
                                  std::vector<std::pair<double, double>>>>
      ew;
  BATON_RETURN_IF_ERROR(r.Rows(j, "elementwise", [&](const Json& o, const std::string& w) -> Status {
    auto op = o.find("op");
    if (op == o.end() || !op->is_string()) {
      return r.Error(absl::StrCat(w, "\"op\""), "must be a string");
    }
    BATON_ASSIGN_OR_RETURN(const double bytes, r.Number(o, "bytes_fwd", w));
    BATON_ASSIGN_OR_RETURN(const double fwd, r.Number(o, "fwd_s", w));
    BATON_ASSIGN_OR_RETURN(const double bwd, r.Number(o, "bwd_s", w));
    auto& curves = ew[op->get<std::string>()];
    curves.first.push_back({bytes, fwd});
    curves.second.push_back({bytes, bwd});
    return absl::OkStatus();
  }));
  for (auto& [op, c] : ew) {
    t.elementwise[op] = {MakeCurve(std::move(c.first)), MakeCurve(std::move(c.second))};
  }
  std::vector<std::pair<double, double>> adam;
  BATON_RETURN_IF_ERROR(r.Rows(j, "adamw", [&](const Json& o, const std::string& w) -> Status {
    BATON_ASSIGN_OR_RETURN(const double p, r.Number(o, "params", w));
    BATON_ASSIGN_OR_RETURN(const double s, r.Number(o, "s", w));
    adam.push_back({p, s});
    return absl::OkStatus();
  }));
  t.adamw = MakeCurve(std::move(adam));
  if (entry_gap_us > 0) {
    BATON_RETURN_IF_ERROR(SubtractEntryGap(t, entry_gap_us, source));
  }
  return t;
}

Status SubtractEntryGap(KernelTable& t, double gap_us, const std::string& source) {
  const double gap = gap_us * 1e-6;
  std::string bad;
  auto sub = [&](double& s, const char* what) {
    if (s <= gap && bad.empty()) bad = what;
    s -= gap;
  };
  for (KernelTable::Gemm& g : t.gemm) sub(g.s, "a gemm row");
  for (KernelTable::Attention& a : t.attention) {
    sub(a.fwd_s, "an sdpa row's fwd_s");
    sub(a.bwd_s, "an sdpa row's bwd_s");
  }
  for (auto& [op, curves] : t.elementwise) {
    for (auto& p : curves.first.points) sub(p.second, "an elementwise row's fwd_s");
    for (auto& p : curves.second.points) sub(p.second, "an elementwise row's bwd_s");
  }
  for (auto& p : t.adamw.points) sub(p.second, "an adamw row");
  if (!bad.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "kernel table ", source, ": \"entry_gap_us\" = ", gap_us, " is not shorter than ",
        bad, " (each entry is a kernel time plus that gap)"));
  }
  t.entry_gap_us += gap_us;
  return absl::OkStatus();
}

StatusOr<KernelTable> ReadKernelTable(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read kernel table ", path));
  }
  std::stringstream s;
  s << in.rdbuf();
  return ParseKernelTable(s.str(), path);
}

absl::string_view H100KernelTableJson() { return kH100KernelsJson; }

StatusOr<const KernelTable*> KernelTableOrH100(const KernelTable* given) {
  if (given != nullptr) return given;
  const StatusOr<KernelTable>& preset = H100KernelTable();
  BATON_RETURN_IF_ERROR(preset.status());
  return &*preset;
}

const StatusOr<KernelTable>& H100KernelTable() {
  static const StatusOr<KernelTable>* table = [] {
    auto* t = new StatusOr<KernelTable>(
        ParseKernelTable(kH100KernelsJson, "sim/data/h100_kernels.json"));
    if (t->ok()) {
      KernelTable& k = **t;
      if (k.peak_tflops == 0) k.peak_tflops = 989;  // H100 SXM dense bf16
      if (k.hbm_gbps == 0) k.hbm_gbps = 3000;       // the h100 preset's
      if (k.copy_gbps == 0) k.copy_gbps = 2947;     // provenance: 1 GiB copy
      // Each op was timed alone between two CUDA events after a
      // synchronize (provenance), so each entry holds the host's time from
      // the start event to the op's first launch: one eager launch
      // (launch_overhead_us, which the RMSNorm forward rows' intercept,
      // 8.4 us over 67-1074 MB, confirms). An eager step launches ahead of
      // the GPU and hides it.
      if (k.entry_gap_us == 0) {
        const Status s = SubtractEntryGap(k, k.launch_us, "sim/data/h100_kernels.json");
        if (!s.ok()) *t = s;
      }
    }
    return t;
  }();
  return *table;
}

}  // namespace baton::sim
