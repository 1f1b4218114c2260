// ./bazelw run //bench:memory_planner
//
// Plans the memory of synthetic step graphs (1,000 and 10,000 buffers) and
// of the training steps of llama2-7b, llama3-8b, llama3-70b and llama3-405b
// sharded over 64 ranks, and compares each plan with its lower bound and,
// for the models, with what YaFSDP's rule would allocate for the same step:
// 2 bf16 weight buffers + 2 bf16 gradient buffers sized for the largest unit,
// plus one fp32 staging buffer of that size.
//
// The model step graphs are built here from model dimensions until the
// scheduler builds the real one. Step: units = embedding, N blocks, final
// norm, LM head; one compute and one comm stream; prefetch depth 1; reshard
// after forward; bf16 gathered weights; fp32 gradients written by backward
// and reduce-scattered from there (fp32 reduce, no staging copy). The
// reduce-scatter of unit i+1 is issued after the backward of unit i, where
// it actually runs, so the issue order reflects the overlap.
//
// Prints a table, then as its last line one JSON object:
// {"cases":[{"name","buffers","arena_bytes","lower_bound_bytes",
//            "yafsdp_bytes","ratio","added_edges","plan_ms"},...]}
// yafsdp_bytes is null for the synthetic cases.
#include <algorithm>
#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "baton/memory/planner.h"
#include "baton/runtime/output_file.h"
#include "nlohmann/json.hpp"

namespace baton::memory {
namespace {

struct ModelDims {
  const char* name;
  int64_t hidden, layers, ffn, heads, kv_heads, vocab;
};

constexpr ModelDims kModels[] = {
    {"llama2-7b", 4096, 32, 11008, 32, 32, 32000},
    {"llama3-8b", 4096, 32, 14336, 32, 8, 128256},
    {"llama3-70b", 8192, 80, 28672, 64, 8, 128256},
    {"llama3-405b", 16384, 126, 53248, 128, 8, 128256},
};

constexpr int kCompute = 0;
constexpr int kComm = 1;
constexpr int64_t kRanks = 64;

int64_t PadToShards(int64_t numel) {
  const int64_t q = kRanks * 8;  // 16-byte (8 x bf16) aligned equal shards
  return (numel + q - 1) / q * q;
}

std::vector<int64_t> UnitNumels(const ModelDims& m) {
  const int64_t head_dim = m.hidden / m.heads;
  const int64_t kv = m.kv_heads * head_dim;
  const int64_t block = m.hidden * m.hidden * 2 + m.hidden * kv * 2 +
                        3 * m.hidden * m.ffn + 2 * m.hidden;
  std::vector<int64_t> units;
  units.push_back(m.vocab * m.hidden);  // embedding
  for (int64_t i = 0; i < m.layers; ++i) units.push_back(block);
  units.push_back(m.hidden);            // final norm
  units.push_back(m.vocab * m.hidden);  // LM head
  for (int64_t& u : units) u = PadToShards(u);
  return units;
}

struct Case {
  std::string name;
  PlanInput input;
  PlanOptions options;
  std::optional<size_t> yafsdp_bytes;
};

Case ModelCase(const ModelDims& m) {
  Case c;
  c.name = absl::StrFormat("%s/%d", m.name, kRanks);
  const std::vector<int64_t> units = UnitNumels(m);
  const int U = static_cast<int>(units.size());
  StepDag& g = c.input.dag;
  std::vector<NodeId> ag_f(U), fwd(U), ag_b(U), bwd(U), rs(U);
  // Forward, prefetch depth 1.
  ag_f[0] = g.AddNode("ag_fwd/0", kComm);
  for (int i = 0; i < U; ++i) {
    if (i + 1 < U) ag_f[i + 1] = g.AddNode(absl::StrFormat("ag_fwd/%d", i + 1), kComm);
    fwd[i] = g.AddNode(absl::StrFormat("fwd/%d", i), kCompute);
    g.AddEdge(ag_f[i], fwd[i]);
  }
  // Backward, prefetch depth 1; RS of unit i+1 issued after bwd of unit i.
  ag_b[U - 1] = g.AddNode(absl::StrFormat("ag_bwd/%d", U - 1), kComm);
  for (int i = U - 1; i >= 0; --i) {
    if (i > 0) ag_b[i - 1] = g.AddNode(absl::StrFormat("ag_bwd/%d", i - 1), kComm);
    bwd[i] = g.AddNode(absl::StrFormat("bwd/%d", i), kCompute);
    g.AddEdge(ag_b[i], bwd[i]);
    if (i + 1 < U) {
      rs[i + 1] = g.AddNode(absl::StrFormat("rs/%d", i + 1), kComm);
      g.AddEdge(bwd[i + 1], rs[i + 1]);
    }
  }
  rs[0] = g.AddNode("rs/0", kComm);
  g.AddEdge(bwd[0], rs[0]);

  int64_t max_unit = 0;
  for (int i = 0; i < U; ++i) {
    max_unit = std::max(max_unit, units[i]);
    c.input.AddBuffer(absl::StrFormat("w_fwd/%d", i), units[i] * 2, ag_f[i],
                      {fwd[i]});
    c.input.AddBuffer(absl::StrFormat("w_bwd/%d", i), units[i] * 2, ag_b[i],
                      {bwd[i]});
    c.input.AddBuffer(absl::StrFormat("grad/%d", i), units[i] * 4, bwd[i],
                      {rs[i]});
  }
  c.options.allow_reuse_edges = true;
  c.yafsdp_bytes = static_cast<size_t>(2 * 2 * max_unit + 2 * 2 * max_unit +
                                       4 * max_unit);
  return c;
}

// Random step-like graphs: 3 streams, short-lived buffers of log-uniform
// sizes (4 KiB .. 64 MiB), cross-stream event edges every few nodes.
Case SyntheticCase(int buffers, uint32_t seed) {
  Case c;
  c.name = absl::StrFormat("synthetic/%d", buffers);
  std::mt19937 rng(seed);
  const int n = buffers * 2;
  StepDag& g = c.input.dag;
  for (int v = 0; v < n; ++v) {
    g.AddNode(absl::StrFormat("n%d", v), static_cast<int>(rng() % 3));
  }
  for (int v = 1; v < n; ++v) {
    if (rng() % 3 == 0) {
      const int back = 1 + static_cast<int>(rng() % 8);
      if (v - back >= 0) g.AddEdge(v - back, v);
    }
  }
  StatusOr<HappensBefore> hb = HappensBefore::Build(g);
  std::uniform_real_distribution<double> log_size(12.0, 26.0);
  for (int b = 0; b < buffers; ++b) {
    const NodeId w = static_cast<NodeId>(rng() % (n - 1));
    std::vector<NodeId> users;
    for (int t = 0; t < 3; ++t) {
      const NodeId u = std::min<NodeId>(n - 1, w + 1 + rng() % 40);
      if (hb.ok() && hb->Before(w, u)) users.push_back(u);
    }
    c.input.AddBuffer(absl::StrFormat("buf%d", b),
                      static_cast<size_t>(std::exp2(log_size(rng))), w, users);
  }
  c.options.allow_reuse_edges = true;
  return c;
}

int Main() {
  std::vector<Case> cases;
  cases.push_back(SyntheticCase(1000, 1));
  cases.push_back(SyntheticCase(10000, 2));
  for (const ModelDims& m : kModels) cases.push_back(ModelCase(m));

  nlohmann::json out;
  out["cases"] = nlohmann::json::array();
  std::printf("%-18s %8s %14s %14s %8s %14s %9s %6s %9s\n", "case", "buffers",
              "arena_bytes", "lower_bound", "ratio", "yafsdp_bytes",
              "vs_yafsdp", "edges", "plan_ms");
  bool ok = true;
  for (Case& c : cases) {
    // Best of 3 runs for the timing; the plan itself is deterministic.
    StatusOr<MemoryPlan> plan;
    double best_ms = 1e300;
    for (int rep = 0; rep < 3; ++rep) {
      plan = PlanMemory(c.input, c.options);
      if (!plan.ok()) break;
      best_ms = std::min(best_ms, plan->plan_ms);
    }
    if (!plan.ok()) {
      std::fprintf(stderr, "%s: %s\n", c.name.c_str(),
                   plan.status().ToString().c_str());
      ok = false;
      continue;
    }
    const std::string yaf =
        c.yafsdp_bytes ? absl::StrFormat("%d", *c.yafsdp_bytes) : "-";
    const std::string vs =
        c.yafsdp_bytes
            ? absl::StrFormat("%.3f", double(plan->arena_bytes) / *c.yafsdp_bytes)
            : "-";
    std::printf("%-18s %8zu %14zu %14zu %8.4f %14s %9s %6zu %9.2f\n",
                c.name.c_str(), c.input.buffers.size(), plan->arena_bytes,
                plan->lower_bound_bytes, plan->ratio(), yaf.c_str(), vs.c_str(),
                plan->added_edges.size(), best_ms);
    nlohmann::json j = {{"name", c.name},
                        {"buffers", c.input.buffers.size()},
                        {"arena_bytes", plan->arena_bytes},
                        {"lower_bound_bytes", plan->lower_bound_bytes},
                        {"ratio", plan->ratio()},
                        {"added_edges", plan->added_edges.size()},
                        {"strategy", plan->strategy},
                        {"plan_ms", best_ms}};
    j["yafsdp_bytes"] = c.yafsdp_bytes ? nlohmann::json(*c.yafsdp_bytes)
                                       : nlohmann::json(nullptr);
    out["cases"].push_back(std::move(j));
  }
  std::printf("%s\n", out.dump().c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace baton::memory

int main() {
  baton::CheckStdoutAtExit("memory_planner");
  return baton::memory::Main();
}
