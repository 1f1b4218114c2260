// Measured collective bandwidth for the simulator (--calibration): busbw by
// message size, per collective, read from nccl-tests output or from the
// JSON that baton's //bench:collectives writes with -J.
//
// With a table for a collective, the simulator takes that collective's time
// as bytes x f(n) / busbw(bytes) (f = (n-1)/n for all-gather and
// reduce-scatter, 2(n-1)/n for all-reduce: the nccl-tests busbw
// definition), interpolating busbw log-linearly in size and clamping at the
// table's ends; the measurement already holds the latency. Collectives
// without a table keep the alpha-beta model. A table measured on another
// rank count or topology is applied as is: calibrate on the shape you plan
// to run.
#ifndef BATON_SIM_CALIBRATION_H_
#define BATON_SIM_CALIBRATION_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"
#include "baton/sim/kernel_table.h"

namespace baton::sim {

struct BusbwTable {
  std::vector<std::pair<double, double>> points;  // (bytes, GB/s), by size
  double Busbw(double bytes) const;               // GB/s
};

struct Calibration {
  // "all_gather", "reduce_scatter", "all_reduce".
  std::map<std::string, BusbwTable> tables;
  // A measured kernel table (a JSON object with "gemm"), when one was given.
  std::optional<KernelTable> kernels;
};

// What a calibration may hold: every size and busbw finite and in range.
inline constexpr double kMaxCalibrationBytes = 1e15;
inline constexpr double kMinBusbwGbps = 1e-6;
inline constexpr double kMaxBusbwGbps = 1e6;
inline constexpr size_t kMaxCalibrationRows = 100000;

// Adds the tables found in `text` (one nccl-tests log, one baton JSON, or
// one kernel table: a JSON object with a "gemm" field, ParseKernelTable;
// JSON under runtime/json_input.h's bounds). InvalidArgument naming the
// problem: no data rows, an unknown collective, a size or bandwidth that is
// not a finite number in the range above (naming the row, e.g.
// "results[3].size"), an out_of_place that is not an object, or nccl-tests
// output that does not say which collective it measured ("# Collective
// test starting: <name>_perf"). Never throws.
Status AddCalibration(absl::string_view text, const std::string& source,
                      Calibration& calibration);

}  // namespace baton::sim

#endif  // BATON_SIM_CALIBRATION_H_
