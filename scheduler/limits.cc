#include "baton/scheduler/limits.h"

#include "absl/strings/str_cat.h"

namespace baton::scheduler {

Status CheckRange(int64_t v, int64_t lo, int64_t hi, absl::string_view what) {
  if (v >= lo && v <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(what, " = ", v, " is outside [", lo, ", ", hi, "]"));
}

Status CheckRecomputeBlocks(int64_t blocks, int64_t layers, absl::string_view what) {
  if (blocks < -1) {
    return absl::InvalidArgumentError(absl::StrCat(what, " = ", blocks, " is out of range"));
  }
  if (blocks > layers) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " = ", blocks, " is more than the model's ", layers, " blocks"));
  }
  return absl::OkStatus();
}

int64_t StepUnits(int64_t micro_steps, int64_t layers) {
  int64_t units = 0;
  if (__builtin_add_overflow(layers, 3, &units) ||
      __builtin_mul_overflow(micro_steps, units, &units)) {
    return INT64_MAX;
  }
  return units;
}

Status CheckStepUnits(int64_t micro_steps, int64_t layers) {
  const int64_t units = StepUnits(micro_steps, layers);
  if (units <= kMaxStepUnits) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "the step would run ", micro_steps, " micro-steps of ", layers + 3, " units (",
      units, "); the limit is ", kMaxStepUnits, " unit-micro-steps"));
}

}  // namespace baton::scheduler
