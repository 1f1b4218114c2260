#include "baton/sim/calibration.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace baton::sim {
namespace {

bool KnownCollective(const std::string& name) {
  return name == "all_gather" || name == "reduce_scatter" || name == "all_reduce";
}

Status Finish(const std::string& source, const std::string& collective,
              BusbwTable table, Calibration& c) {
  if (!KnownCollective(collective)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration ", source, ": unsupported collective \"", collective,
        "\" (all_gather, reduce_scatter, all_reduce)"));
  }
  if (table.points.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("calibration ", source, ": no data rows"));
  }
  for (const auto& [bytes, bw] : table.points) {
    if (!(bytes > 0) || !(bw > 0)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration ", source, ": size ", bytes, " has busbw ", bw,
          "; sizes and bandwidths must be positive"));
    }
  }
  std::sort(table.points.begin(), table.points.end());
  c.tables[collective] = std::move(table);
  return absl::OkStatus();
}

}  // namespace

double BusbwTable::Busbw(double bytes) const {
  if (points.empty()) return 0;
  if (bytes <= points.front().first) return points.front().second;
  if (bytes >= points.back().first) return points.back().second;
  auto hi = std::lower_bound(points.begin(), points.end(),
                             std::make_pair(bytes, 0.0));
  auto lo = hi - 1;
  const double f = (std::log(bytes) - std::log(lo->first)) /
                   (std::log(hi->first) - std::log(lo->first));
  return lo->second + f * (hi->second - lo->second);
}

Status AddCalibration(absl::string_view text, const std::string& source,
                      Calibration& c) {
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != absl::string_view::npos && text[first] == '{') {
    nlohmann::json j =
        nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
    if (j.is_object() && j.contains("gemm")) {
      BATON_ASSIGN_OR_RETURN(c.kernels, ParseKernelTable(text, source));
      return absl::OkStatus();
    }
    if (j.is_discarded() || !j.contains("collective") ||
        !j["collective"].is_string() || !j.contains("results") ||
        !j["results"].is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration ", source,
          ": not a //bench:collectives -J file (collective, results)"));
    }
    BusbwTable t;
    for (const auto& row : j["results"]) {
      if (!row.contains("size") || !row.contains("out_of_place")) continue;
      t.points.push_back({row["size"].get<double>(),
                          row["out_of_place"].value("busbw_gbps", 0.0)});
    }
    return Finish(source, j["collective"].get<std::string>(), std::move(t), c);
  }
  std::string collective;
  BusbwTable t;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    const std::string marker = "Collective test starting:";
    if (auto at = line.find(marker); at != absl::string_view::npos) {
      std::string name(absl::StripAsciiWhitespace(line.substr(at + marker.size())));
      if (name.size() > 5 && name.substr(name.size() - 5) == "_perf") {
        name = name.substr(0, name.size() - 5);
      }
      collective = name;
      continue;
    }
    std::vector<absl::string_view> tok =
        absl::StrSplit(line, ' ', absl::SkipWhitespace());
    double size = 0, busbw = 0;
    if (tok.size() < 9 || !absl::SimpleAtod(tok[0], &size) ||
        !absl::SimpleAtod(tok[7], &busbw)) {
      continue;
    }
    t.points.push_back({size, busbw});
  }
  if (collective.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration ", source,
        ": nccl-tests output must name its collective (\"# Collective test "
        "starting: all_gather_perf\")"));
  }
  return Finish(source, collective, std::move(t), c);
}

}  // namespace baton::sim
