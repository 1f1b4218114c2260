// The command-line flags //bench:ops and //bench:kernels share, on top of
// cli/flags.h's FlagReader (bad input: one line on stderr, exit 2):
//   --device=host|cuda   the runtime to time on (default host)
//   --min-time=S         seconds of timed batches per pass, in [1e-6, 60]
//                        (default 0.1 on CUDA, 0.05 on the host)
// opening the device (a missing GPU: one line, exit 1), and the rows both
// print.
#ifndef BATON_BENCH_BENCH_CLI_H_
#define BATON_BENCH_BENCH_CLI_H_

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "baton/bench/op_suite.h"
#include "baton/bench/op_timing.h"
#include "baton/cli/flags.h"
#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"

namespace baton::bench {

struct CommonFlags {
  DeviceKind device = DeviceKind::kHost;
  double min_time = 0;  // 0: the device's default
};

// Takes --device and --min-time; false for any other key.
inline bool CommonFlag(const char* program, const std::string& key,
                       const std::string& value, CommonFlags& f) {
  if (key == "--device") {
    if (value == "host") {
      f.device = DeviceKind::kHost;
    } else if (value == "cuda") {
      f.device = DeviceKind::kCuda;
    } else {
      cli::FailUsage(program, absl::StrCat("--device must be host or cuda, got \"",
                                                value, "\""));
    }
    return true;
  }
  if (key == "--min-time") {
    f.min_time = cli::NumberFlag(program, key, value, 1e-6, 60);
    return true;
  }
  return false;
}

inline TimingOptions Timing(const CommonFlags& f) {
  TimingOptions o;
  o.min_seconds = f.min_time > 0 ? f.min_time
                  : f.device == DeviceKind::kCuda ? 0.1 : 0.05;
  return o;
}

// A failure after the flags were read: one line on stderr, exit 1.
[[noreturn]] inline void Die(const char* program, const Status& s) {
  std::fprintf(stderr, "%s: %s\n", program, s.ToString().c_str());
  std::exit(1);
}

// The device and a stream on it; one line on stderr and exit 1 if either
// cannot be had (no GPU, a build without CUDA).
struct Opened {
  std::unique_ptr<Device> device;
  std::unique_ptr<Stream> stream;
};
inline Opened OpenDevice(const char* program, const CommonFlags& f) {
  StatusOr<std::unique_ptr<Device>> d =
      f.device == DeviceKind::kCuda ? CreateCudaDevice(0) : CreateHostDevice();
  if (!d.ok()) Die(program, d.status());
  StatusOr<std::unique_ptr<Stream>> s = (*d)->CreateStream({0, "bench"});
  if (!s.ok()) Die(program, s.status());
  return {*std::move(d), *std::move(s)};
}

// The run's limits (op_timing.h): a 1 GiB copy and a bf16 (or `t`) 8192^3
// GEMM on CUDA; 64 MiB and 512^3 on the host. Exits 1 on failure.
inline Limits RunLimits(const char* program, Opened& dev, DataType t,
                        const TimingOptions& timing) {
  const bool cuda = dev.device->kind() == DeviceKind::kCuda;
  StatusOr<Limits> l = MeasureLimits(*dev.device, *dev.stream,
                                     cuda ? size_t{1} << 30 : size_t{64} << 20,
                                     cuda ? 8192 : 512, t, timing);
  if (!l.ok()) Die(program, l.status());
  return *l;
}

inline void PrintLimits(const Limits& l, const Opened& dev) {
  std::printf("# limits (this run): copy %.2f GB/s (%zu MiB, read + write); GEMM %lld^3 %s "
              "%.4g TFLOP/s (%s); one tiny op %.2f us\n",
              l.copy_gbps, l.copy_bytes >> 20, static_cast<long long>(l.gemm_n),
              DataTypeName(l.gemm_dtype), l.gemm_tflops,
              dev.device->kind() == DeviceKind::kCuda ? "cuBLAS" : "host GEMM",
              l.launch_s * 1e6);
}

// The rows both benches print as they measure, and collect as JSON:
// op, pass, shape, time_us (median per call), rate (GB/s or TFLOP/s),
// ratio (rate / the run's copy or GEMM limit), torch_h100_us (PyTorch on
// one H100 at that shape where the shipped table has it, else "-").
inline void PrintHeader() {
  std::printf("%-14s %-5s %-24s %12s %14s %7s %14s\n", "op", "pass", "shape", "time_us",
              "rate", "ratio", "torch_h100_us");
}

struct Report {
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json skipped = nlohmann::json::array();

  std::function<void(const Measured&)> OnRow() {
    return [this](const Measured& m) {
      const bool mem = m.bound == Bound::kMemory;
      char ref[32] = "-";
      if (m.reference_s > 0) std::snprintf(ref, sizeof(ref), "%.1f", m.reference_s * 1e6);
      std::printf("%-14s %-5s %-24s %12.1f %9.4g %-4s %7.3f %14s\n", m.op.c_str(),
                  m.pass.c_str(), m.shape.c_str(), m.seconds * 1e6, m.rate,
                  mem ? "GB/s" : "TF/s", m.ratio, ref);
      std::fflush(stdout);
      nlohmann::json r = {{"op", m.op},       {"pass", m.pass},
                          {"shape", m.shape}, {"seconds", m.seconds},
                          {"limit", mem ? "copy" : "gemm"}, {"ratio", m.ratio}};
      r[mem ? "gbps" : "tflops"] = m.rate;
      if (m.reference_s > 0) r["torch_h100_s"] = m.reference_s;
      rows.push_back(std::move(r));
    };
  }
  std::function<void(const CaseSpec&, const Status&)> OnSkip() {
    return [this](const CaseSpec& s, const Status& st) {
      const std::string why(st.message());
      std::printf("%-14s skipped: %s\n", s.op.c_str(), why.c_str());
      std::fflush(stdout);
      skipped.push_back({{"op", s.op}, {"dims", s.dims}, {"reason", why}});
    };
  }
};

}  // namespace baton::bench

#endif  // BATON_BENCH_BENCH_CLI_H_
