// Reading JSON that comes from a user's file (a model's config.json, a
// cluster file, a calibration): bounded parsing and typed field reads that
// refuse instead of throwing, truncating or wrapping.
//
// ParseJsonInput refuses text longer than kMaxJsonInputBytes or nested
// deeper than kMaxJsonDepth before nlohmann sees it (a scan outside string
// literals), so no later recursive walk (dump, compare) can exhaust the
// stack; and an object with a key given twice (JSON leaves it undefined and
// nlohmann keeps the last silently), naming the key and where it is, as a
// flag given twice is refused. JsonInt / JsonNumber never throw: a wrong type, a non-integer, a
// non-finite number or one outside [lo, hi] is InvalidArgument naming
// `what` and the allowed range. JsonBrief describes a value for an error
// message in at most ~40 characters (containers by type, not by content).
//
// Stateless; thread-safe.
#ifndef BATON_RUNTIME_JSON_INPUT_H_
#define BATON_RUNTIME_JSON_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"
#include "nlohmann/json.hpp"

namespace baton {

inline constexpr int kMaxJsonDepth = 64;
inline constexpr size_t kMaxJsonInputBytes = size_t{64} << 20;  // 64 MiB

// `what` labels the input in messages ("config.json", "cluster file ...").
// InvalidArgument for text over the size or depth bound, not JSON, or with
// a duplicate key: "<what>: duplicate key "k"" for a key of the top-level
// object, "<what>: duplicate key "k" at a.b[2]" for one nested deeper.
StatusOr<nlohmann::json> ParseJsonInput(absl::string_view text,
                                        absl::string_view what);

// A short description of `v`: a scalar as JSON (cut at 40 characters), an
// array or object as "an array" / "an object".
std::string JsonBrief(const nlohmann::json& v);

// `v` as an int64 in [lo, hi]; InvalidArgument "<what> must be an integer
// in [lo, hi], got <brief>" otherwise (strings, floats such as 8.0 or
// 1e3, booleans and out-of-range integers included).
StatusOr<int64_t> JsonInt(const nlohmann::json& v, absl::string_view what,
                          int64_t lo, int64_t hi);

// `v` as a finite double in [lo, hi]; InvalidArgument naming `what` and
// the range otherwise.
StatusOr<double> JsonNumber(const nlohmann::json& v, absl::string_view what,
                            double lo, double hi);

}  // namespace baton

#endif  // BATON_RUNTIME_JSON_INPUT_H_
