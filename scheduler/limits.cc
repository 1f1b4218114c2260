#include "baton/scheduler/limits.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "absl/strings/str_cat.h"

namespace baton::scheduler {
namespace {

// The CPUs this process may run on (taskset, cgroup cpusets), at least 1.
int64_t UsableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max<int64_t>(1, std::thread::hardware_concurrency());
}

}  // namespace

int64_t MaxLocalRanks() {
  return std::min(kMaxLocalRanks, kLocalRanksPerCpu * UsableCpus());
}

Status CheckLocalRanks(int64_t ranks, absl::string_view what) {
  const int64_t cpus = UsableCpus();
  const int64_t most = MaxLocalRanks();
  if (ranks <= most) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      what, " asks for ", ranks, " ranks on this host; it runs at most ", most,
      " at once (", kLocalRanksPerCpu, " per CPU, ", cpus, cpus == 1 ? " CPU" : " CPUs",
      "; scheduler/limits.h)"));
}

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
