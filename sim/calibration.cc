#include "baton/sim/calibration.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "baton/runtime/json_input.h"
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
  if (table.points.size() > kMaxCalibrationRows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "calibration ", source, ": more than ", kMaxCalibrationRows, " rows"));
  }
  for (const auto& [bytes, bw] : table.points) {
    // Written so that NaN fails too.
    if (!(bytes >= 1 && bytes <= kMaxCalibrationBytes) ||
        !(bw >= kMinBusbwGbps && bw <= kMaxBusbwGbps)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration ", source, ": size ", bytes, " has busbw ", bw,
          "; sizes must be in [1, ", kMaxCalibrationBytes,
          "] bytes and bandwidths in [", kMinBusbwGbps, ", ", kMaxBusbwGbps,
          "] GB/s"));
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
    BATON_ASSIGN_OR_RETURN(const nlohmann::json j,
                           ParseJsonInput(text, absl::StrCat("calibration ", source)));
    if (j.is_object() && j.contains("gemm")) {
      BATON_ASSIGN_OR_RETURN(c.kernels, ParseKernelTable(text, source));
      return absl::OkStatus();
    }
    auto collective = j.find("collective");
    auto results = j.find("results");
    if (!j.is_object() || collective == j.end() || !collective->is_string() ||
        results == j.end() || !results->is_array()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "calibration ", source,
          ": not a //bench:collectives -J file (collective, results)"));
    }
    if (results->size() > kMaxCalibrationRows) {
      return absl::InvalidArgumentError(
          absl::StrCat("calibration ", source, ": more than ",
                       kMaxCalibrationRows, " results"));
    }
    BusbwTable t;
    for (size_t i = 0; i < results->size(); ++i) {
      const nlohmann::json& row = (*results)[i];
      const std::string where = absl::StrCat("calibration ", source, ": results[", i, "]");
      if (!row.is_object()) {
        return absl::InvalidArgumentError(absl::StrCat(where, " must be an object"));
      }
      auto size = row.find("size");
      auto oop = row.find("out_of_place");
      if (size == row.end() || oop == row.end()) continue;  // not a data row
      if (!oop->is_object() || !oop->contains("busbw_gbps")) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ".out_of_place must be an object with busbw_gbps"));
      }
      BATON_ASSIGN_OR_RETURN(
          const double bytes,
          JsonNumber(*size, absl::StrCat(where, ".size"), 1, kMaxCalibrationBytes));
      BATON_ASSIGN_OR_RETURN(
          const double busbw,
          JsonNumber((*oop)["busbw_gbps"],
                     absl::StrCat(where, ".out_of_place.busbw_gbps"),
                     kMinBusbwGbps, kMaxBusbwGbps));
      t.points.push_back({bytes, busbw});
    }
    return Finish(source, collective->get<std::string>(), std::move(t), c);
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
