// MemoryPlan's printable forms: a table for people, JSON for tools.
#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/memory/planner.h"
#include "nlohmann/json.hpp"

namespace baton::memory {

double MemoryPlan::ratio() const {
  if (lower_bound_bytes == 0) return arena_bytes == 0 ? 1.0 : 0.0;
  return static_cast<double>(arena_bytes) /
         static_cast<double>(lower_bound_bytes);
}

std::string MemoryPlan::ToTable(size_t max_rows) const {
  std::string out = absl::StrFormat(
      "arena %d B (%.3f GiB), lower bound %d B, ratio %.4f, %d buffers, "
      "%d added edges, strategy %s, planned in %.2f ms\n",
      arena_bytes, arena_bytes / double(1ull << 30), lower_bound_bytes,
      ratio(), buffers.size(), added_edges.size(), strategy, plan_ms);
  absl::StrAppendFormat(&out, "%-32s %16s %16s %8s %8s\n", "buffer", "offset",
                        "bytes", "first", "last");
  const size_t rows = max_rows == 0 ? buffers.size()
                                    : std::min(max_rows, buffers.size());
  for (size_t i = 0; i < rows; ++i) {
    const PlannedBuffer& b = buffers[i];
    absl::StrAppendFormat(&out, "%-32s %16d %16d %8d %8d\n", b.name, b.offset,
                          b.bytes, b.first, b.last);
  }
  if (rows < buffers.size()) {
    absl::StrAppend(&out, "... ", buffers.size() - rows, " more buffers\n");
  }
  return out;
}

std::string MemoryPlan::ToJson() const {
  nlohmann::json j;
  j["arena_bytes"] = arena_bytes;
  j["lower_bound_bytes"] = lower_bound_bytes;
  j["ratio"] = ratio();
  j["strategy"] = strategy;
  j["plan_ms"] = plan_ms;
  nlohmann::json edges = nlohmann::json::array();
  for (const DagEdge& e : added_edges) edges.push_back({e.from, e.to});
  j["added_edges"] = std::move(edges);
  nlohmann::json bufs = nlohmann::json::array();
  for (const PlannedBuffer& b : buffers) {
    bufs.push_back({{"name", b.name},
                    {"bytes", b.bytes},
                    {"offset", b.offset},
                    {"alignment", b.alignment},
                    {"first", b.first},
                    {"last", b.last}});
  }
  j["buffers"] = std::move(bufs);
  return j.dump();
}

}  // namespace baton::memory
