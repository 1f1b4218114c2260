#include "baton/runtime/json_input.h"

#include <cmath>
#include <set>
#include <vector>

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

// Follows the parser's events to find the first key that appears twice in
// one object, and where (nlohmann keeps the last value and says nothing).
class DuplicateKeyFinder {
 public:
  bool Event(nlohmann::json::parse_event_t event, const nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        NextElement();
        frames_.push_back({event == E::object_start, -1, {}, {}});
        break;
      case E::object_end:
      case E::array_end:
        if (!frames_.empty()) frames_.pop_back();
        break;
      case E::key:
        if (!frames_.empty() && found_.empty()) {
          Frame& f = frames_.back();
          f.key = parsed.get<std::string>();
          if (!f.keys.insert(f.key).second) found_ = Describe();
        }
        break;
      case E::value:
        NextElement();
        break;
    }
    return true;  // keep everything: the caller refuses the whole text
  }

  // "" when every key was unique.
  const std::string& found() const { return found_; }

 private:
  struct Frame {
    bool object;
    int64_t index;             // arrays: the element being read
    std::string key;           // objects: the key being read
    std::set<std::string> keys;
  };

  void NextElement() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }

  // `"key"`, or `"key" at a.b[2]` for a key inside nested values.
  std::string Describe() const {
    std::string where;
    for (size_t i = 0; i + 1 < frames_.size(); ++i) {
      const Frame& f = frames_[i];
      if (f.object) {
        absl::StrAppend(&where, where.empty() ? "" : ".", f.key);
      } else {
        absl::StrAppend(&where, "[", f.index, "]");
      }
    }
    const std::string key = JsonBrief(nlohmann::json(frames_.back().key));
    return where.empty() ? key : absl::StrCat(key, " at ", where);
  }

  std::vector<Frame> frames_;
  std::string found_;
};

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
  DuplicateKeyFinder duplicates;
  nlohmann::json j = nlohmann::json::parse(
      text.begin(), text.end(),
      [&duplicates](int, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        return duplicates.Event(event, parsed);
      },
      /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": not valid JSON"));
  }
  if (!duplicates.found().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": duplicate key ", duplicates.found()));
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
