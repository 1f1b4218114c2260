// A schedule policy as a JSON file: what `simulate --tune --policy-out`
// writes and `simulate`, `train_tiny` (--policy-file=PATH) and a trainer's
// Session (scheduler/session.h) read, so a tuned schedule is the one that
// runs.
//
// Format: one JSON object. Every key is optional:
//   "preset": "baton"         the base (PolicyPreset); default: Policy{}
//   "name": "tuned"           default: the preset's name, else "baton"
//   and one key per knob of Policy (scheduler/policy.h), named as the
//   struct member: "forward_prefetch": 2, "reshard_after_forward": true,
//   "param_dtype": "bfloat16", "reduce_dtype": "float",
//   "bucket_policy": "per_unit" | "merge", "merge_target_bytes": 104857600,
//   ... (PolicyFileFields() lists them). The knobs given override the base.
// Integers must be JSON integers in the knob's range (scheduler/limits.h:
// micro_steps at most 4096 as through any other route), booleans JSON
// booleans, dtypes one of ParseDataType's names other than int32.
//
// Reading refuses, with InvalidArgument naming the field, an unknown key, a
// value of the wrong JSON type or out of range, an unknown preset or dtype,
// and a policy that ValidatePolicy refuses; the result always passes
// ValidatePolicy. Group sizes are checked against a world size only when
// one is known (ResolveMesh). Writing emits "name" and every knob, so
// PolicyFromJson(PolicyToJson(p)) == p for every policy that passes
// ValidatePolicy (floats are not involved: the round trip is exact).
//
// Stateless; thread-safe.
#ifndef BATON_SCHEDULER_POLICY_FILE_H_
#define BATON_SCHEDULER_POLICY_FILE_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/policy.h"

namespace baton::scheduler {

// The largest policy file read, in bytes.
inline constexpr size_t kMaxPolicyFileBytes = size_t{1} << 20;

// `what` labels the input in messages (a path, "policy file").
StatusOr<Policy> PolicyFromJson(absl::string_view text,
                                absl::string_view what = "policy file");

// Reads `path` (a regular file of at most kMaxPolicyFileBytes; NotFound for
// a path that cannot be opened) and parses it as above.
StatusOr<Policy> ReadPolicyFile(const std::string& path);

// "name" and every knob, one per line, in PolicyFileFields() order.
std::string PolicyToJson(const Policy& policy);

// Writes PolicyToJson(policy) to `path`; InvalidArgument for a policy that
// ValidatePolicy refuses, Unavailable when the file cannot be written.
Status WritePolicyFile(const std::string& path, const Policy& policy);

// The knob keys a policy file accepts (besides "preset" and "name").
std::vector<std::string> PolicyFileFields();

// True when every knob and the name are equal.
bool SamePolicy(const Policy& a, const Policy& b);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_POLICY_FILE_H_
