#include "baton/bench/op_timing.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/bench/op_cases.h"

namespace baton::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds for `calls` back-to-back calls, synchronized at both ends.
StatusOr<double> Batch(Stream& stream, const EnqueueFn& enqueue, int64_t calls) {
  BATON_RETURN_IF_ERROR(stream.Synchronize());
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < calls; ++i) BATON_RETURN_IF_ERROR(enqueue());
  BATON_RETURN_IF_ERROR(stream.Synchronize());
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

StatusOr<double> TimePerCall(Stream& stream, const EnqueueFn& enqueue,
                             const TimingOptions& o) {
  if (!(o.min_seconds > 0) || o.reps < 1 || o.min_reps < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TimePerCall: min_seconds, reps and min_reps must be positive, got ",
        o.min_seconds, ", ", o.reps, ", ", o.min_reps));
  }
  BATON_RETURN_IF_ERROR(Batch(stream, enqueue, 1).status());  // warm-up
  BATON_ASSIGN_OR_RETURN(const double one, Batch(stream, enqueue, 1));
  int reps = o.reps;
  int64_t calls = 1;
  if (one >= o.min_seconds) {
    reps = o.min_reps;
  } else {
    const double per_rep = o.min_seconds / reps;
    calls = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(per_rep / std::max(one, 1e-9))));
    calls = std::min<int64_t>(calls, 1 << 20);
  }
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    BATON_ASSIGN_OR_RETURN(const double s, Batch(stream, enqueue, calls));
    t.push_back(s / static_cast<double>(calls));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

StatusOr<double> MeasureCopyGbps(Device& device, Stream& stream, size_t bytes,
                                 const TimingOptions& options) {
  Filler f(device, stream);
  BATON_ASSIGN_OR_RETURN(DeviceBuffer src, f.Zeros(bytes));
  BATON_ASSIGN_OR_RETURN(DeviceBuffer dst, f.Zeros(bytes));
  BATON_ASSIGN_OR_RETURN(
      const double s,
      TimePerCall(stream, [&] { return stream.MemcpyAsync(dst.data(), src.data(), bytes); },
                  options));
  return 2.0 * static_cast<double>(bytes) / s / 1e9;
}

StatusOr<double> MeasureGemmTflops(Device& device, Stream& stream, int64_t n,
                                   DataType dtype, const TimingOptions& options) {
  Filler f(device, stream);
  BATON_ASSIGN_OR_RETURN(std::vector<OpCase> c, LinearCases(f, n, n, n, dtype, false));
  BATON_ASSIGN_OR_RETURN(const double s, TimePerCall(stream, c[0].run, options));
  return c[0].flops / s / 1e12;
}

StatusOr<double> MeasureLaunchSeconds(Device& device, Stream& stream,
                                      const TimingOptions& options) {
  Filler f(device, stream);
  BATON_ASSIGN_OR_RETURN(std::vector<OpCase> c, SwiGluCases(f, 1, 1, DataType::kF32));
  return TimePerCall(stream, c[0].run, options);
}

StatusOr<Limits> MeasureLimits(Device& device, Stream& stream, size_t copy_bytes,
                               int64_t gemm_n, DataType gemm_dtype,
                               const TimingOptions& options) {
  Limits l;
  l.copy_bytes = copy_bytes;
  l.gemm_n = gemm_n;
  l.gemm_dtype = gemm_dtype;
  BATON_ASSIGN_OR_RETURN(l.copy_gbps, MeasureCopyGbps(device, stream, copy_bytes, options));
  BATON_ASSIGN_OR_RETURN(l.gemm_tflops,
                         MeasureGemmTflops(device, stream, gemm_n, gemm_dtype, options));
  BATON_ASSIGN_OR_RETURN(l.launch_s, MeasureLaunchSeconds(device, stream, options));
  return l;
}

std::string DeviceLabel(const Device& device) {
  if (device.kind() == DeviceKind::kHost) return "host CPU";
  const std::string n = device.name();
  const auto open = n.find('('), close = n.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return n;
  return n.substr(open + 1, close - open - 1);
}

}  // namespace baton::bench
