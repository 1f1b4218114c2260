#include "baton/runtime/json_input.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace baton {
namespace {

// The deepest bracket nesting outside string literals, or -1 for a closing
// bracket without an opening one. Stops counting past `limit`.
int NestingDepth(absl::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      if (--depth < 0) return -1;
    }
  }
  return deepest;
}

}  // namespace

StatusOr<nlohmann::json> ParseJsonInput(absl::string_view text,
                                        absl::string_view what) {
  if (text.size() > kMaxJsonInputBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", text.size(), " bytes is over the limit of ",
                     kMaxJsonInputBytes, " for a JSON input"));
  }
  if (NestingDepth(text, kMaxJsonDepth) > kMaxJsonDepth) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": JSON nested deeper than ", kMaxJsonDepth,
                     " levels"));
  }
  nlohmann::json j = nlohmann::json::parse(text.begin(), text.end(), nullptr,
                                           /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not valid JSON"));
  }
  return j;
}

std::string JsonBrief(const nlohmann::json& v) {
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 40) s = absl::StrCat(s.substr(0, 37), "...");
  return s;
}

StatusOr<int64_t> JsonInt(const nlohmann::json& v, absl::string_view what,
                          int64_t lo, int64_t hi) {
  bool ok = false;
  int64_t out = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    ok = u <= static_cast<uint64_t>(INT64_MAX);
    out = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    out = v.get<int64_t>();
    ok = true;
  }
  if (!ok || out < lo || out > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be an integer in [", lo, ", ", hi,
                     "], got ", JsonBrief(v)));
  }
  return out;
}

StatusOr<double> JsonNumber(const nlohmann::json& v, absl::string_view what,
                            double lo, double hi) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) ||
      v.get<double>() < lo || v.get<double>() > hi) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " must be a number in [", lo, ", ", hi, "], got ", JsonBrief(v)));
  }
  return v.get<double>();
}

}  // namespace baton
