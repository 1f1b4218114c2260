// ./bazelw run //bench:host_adamw [-- --n=16777216 --threads=N --reps=5
//                                      --grad=bf16|f32 --param=bf16|f32|none]
//
// The host optimizer of optimizer offload (ops/host_adamw.h) against this
// machine's memory bandwidth, measured in the same run.
//
// For each thread count 1..--threads (default: all hardware threads):
//   triad   a[i] = b[i] + s * c[i] over three fp32 arrays of n elements,
//           split over the same pool (STREAM's triad; 12 bytes per element
//           counted, as STREAM counts them: the read-for-ownership of a,
//           4 more bytes, is not)
//   update  a[i] = a[i] + s * b[i], in place (12 bytes per element, all of
//           them real traffic): the access pattern of an in-place optimizer,
//           which reads every array it writes except the param output
//   adamw   HostAdamW over n parameters: params/s, and bytes/s counting
//           what the update must move (read master, m, v, grad; write
//           master, m, v, param: 24 + grad + param bytes per parameter)
//   frac    adamw bytes/s over the same thread count's update bytes/s (the
//           memory bandwidth the optimizer can reach; near 1 = memory-bound)
// After one untimed run of each (which also faults the pages in), the three
// run interleaved --reps times, so that they see the same moments of a
// shared machine, and each figure is its best run. Also the scalar
// reference (AdamWStep on a host stream, one thread) at the same size, and
// the speedup over it.
//
// Prints one line per thread count, then as its last line one JSON object:
// {"n","grad","param","simd","bytes_per_param","scalar_params_per_s",
//  "rows":[{"threads","triad_bytes_per_s","update_bytes_per_s",
//           "params_per_s","bytes_per_s","fraction_of_bandwidth"}],
//  "best":{...the row with the most params_per_s...},
//  "host_optimizer_params_per_s","speedup_vs_scalar"}
// host_optimizer_params_per_s is the best row's figure: the simulator's
// "host optimizer throughput" cluster constant comes from it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "baton/cli/flags.h"
#include "baton/ops/adamw.h"
#include "baton/ops/host_adamw.h"
#include "baton/ops/host_pool.h"
#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/output_file.h"
#include "nlohmann/json.hpp"

namespace baton::ops {
namespace {

struct Flags {
  int64_t n = int64_t{1} << 24;  // 470 MB of optimizer traffic: past the caches
  int threads = HostPool::HardwareThreads();
  int reps = 5;
  DataType grad = DataType::kBF16;
  bool has_param = true;
  DataType param = DataType::kBF16;
};

[[noreturn]] void Usage(const std::string& why) { cli::FailUsage("host_adamw", why); }

constexpr char kProgram[] = "host_adamw";

// Flags through the project's shared parser (cli/flags.h): --name=value,
// each at most once, --version.
Flags ParseFlags(int argc, char** argv) {
  Flags f;
  cli::FlagReader reader(kProgram);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    cli::VersionFlag(kProgram, arg);
    const auto [key, value] = reader.Split(arg);
    if (key == "--n") {
      f.n = cli::PositiveFlag(kProgram, key, value, int64_t{1} << 32);
    } else if (key == "--threads") {
      f.threads = static_cast<int>(cli::PositiveFlag(kProgram, key, value, 1024));
    } else if (key == "--reps") {
      f.reps = static_cast<int>(cli::PositiveFlag(kProgram, key, value, 1024));
    } else if (key == "--grad" || key == "--param") {
      if (key == "--param" && value == "none") {
        f.has_param = false;
        continue;
      }
      auto t = ParseDataType(value);
      if (!t.ok() || (*t != DataType::kF32 && *t != DataType::kBF16)) {
        Usage(key + " must be bf16 or f32" + (key == "--param" ? " or none" : "") +
              ", got '" + value + "'");
      }
      (key == "--grad" ? f.grad : f.param) = *t;
    } else {
      Usage("unknown flag " + key + " (--n --threads --reps --grad --param)");
    }
  }
  return f;
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <typename Fn>
double Time(Fn&& fn) {
  const double t0 = Seconds();
  fn();
  return Seconds() - t0;
}

// Best time of `reps` runs of fn after one untimed run.
template <typename Fn>
double Best(int reps, Fn&& fn) {
  fn();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) best = std::min(best, Time(fn));
  return best;
}

int Main(int argc, char** argv) {
  const Flags f = ParseFlags(argc, argv);
  const int64_t n = f.n;
  const size_t gs = DataTypeSize(f.grad), ps = f.has_param ? DataTypeSize(f.param) : 0;
  const double bytes_per_param = 24.0 + gs + ps;

  std::vector<float> master(n), m1(n, 0.0f), m2(n, 0.0f);
  std::vector<uint8_t> grad(n * gs), param(std::max<size_t>(1, n * ps));
  for (int64_t i = 0; i < n; ++i) {
    master[i] = 0.01f * static_cast<float>(i % 997) - 5.0f;
    const float g = 1e-3f * static_cast<float>(i % 61) - 0.03f;
    if (f.grad == DataType::kBF16) {
      reinterpret_cast<uint16_t*>(grad.data())[i] = FloatToBf16(g);
    } else {
      reinterpret_cast<float*>(grad.data())[i] = g;
    }
  }
  AdamWConfig config{1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
  AdamWArgs a;
  a.n = n;
  a.master = master.data();
  a.moment1 = m1.data();
  a.moment2 = m2.data();
  a.grad = grad.data();
  a.grad_dtype = f.grad;
  a.param = f.has_param ? param.data() : nullptr;
  a.param_dtype = f.param;

  // The scalar reference, one thread.
  auto device = *CreateHostDevice();
  auto stream = *device->CreateStream();
  const double scalar_s = Best(std::max(1, f.reps / 2), [&] {
    if (!AdamWStep(*stream, config, a).ok() || !stream->Synchronize().ok()) Usage("AdamWStep failed");
  });
  const double scalar_pps = n / scalar_s;

  std::vector<float> ta(n, 0.0f), tb(n, 1.0f), tc(n, 2.0f);
  constexpr int64_t kTriadChunk = 1 << 16;
  const int64_t triad_tasks = (n + kTriadChunk - 1) / kTriadChunk;

  std::printf("# host AdamW, n %lld, grad %s, param %s, %s, %.0f bytes/param; scalar reference %.3g params/s\n",
              static_cast<long long>(n), DataTypeName(f.grad),
              f.has_param ? DataTypeName(f.param) : "none", HostSimdName(), bytes_per_param,
              scalar_pps);
  std::printf("%8s %12s %12s %14s %12s %8s\n", "threads", "triad_GB/s", "update_GB/s",
              "params/s", "adamw_GB/s", "frac");
  nlohmann::json rows = nlohmann::json::array();
  nlohmann::json best;
  double best_pps = 0;
  for (int t = 1; t <= f.threads; ++t) {
    HostPool pool(t);
    auto triad = [&] {
      pool.ParallelFor(triad_tasks, [&](int64_t k) {
        const int64_t b = k * kTriadChunk, e = std::min(n, b + kTriadChunk);
        float* __restrict__ x = ta.data();
        const float* __restrict__ y = tb.data();
        const float* __restrict__ z = tc.data();
        for (int64_t i = b; i < e; ++i) x[i] = y[i] + 3.0f * z[i];
      });
    };
    auto update = [&] {
      pool.ParallelFor(triad_tasks, [&](int64_t k) {
        const int64_t b = k * kTriadChunk, e = std::min(n, b + kTriadChunk);
        float* __restrict__ x = tb.data();
        const float* __restrict__ y = tc.data();
        for (int64_t i = b; i < e; ++i) x[i] = x[i] + 0.0f * y[i];
      });
    };
    int64_t step = 1;
    auto adamw = [&] {
      a.step = step++;
      if (!HostAdamW(config, a, &pool).ok()) Usage("HostAdamW failed");
    };
    // Interleaved, so that the three see the same moments of a shared
    // machine; best of reps each.
    triad();
    update();
    adamw();
    double triad_s = 1e30, update_s = 1e30, adamw_s = 1e30;
    for (int r = 0; r < f.reps; ++r) {
      triad_s = std::min(triad_s, Time(triad));
      update_s = std::min(update_s, Time(update));
      adamw_s = std::min(adamw_s, Time(adamw));
    }
    const double triad_bw = 12.0 * n / triad_s, update_bw = 12.0 * n / update_s,
                 pps = n / adamw_s, bw = bytes_per_param * pps;
    std::printf("%8d %12.2f %12.2f %14.4g %12.2f %8.3f\n", t, triad_bw / 1e9, update_bw / 1e9,
                pps, bw / 1e9, bw / update_bw);
    nlohmann::json row = {{"threads", t},
                          {"triad_bytes_per_s", triad_bw},
                          {"update_bytes_per_s", update_bw},
                          {"params_per_s", pps},
                          {"bytes_per_s", bw},
                          {"fraction_of_bandwidth", bw / update_bw}};
    if (pps > best_pps) {
      best_pps = pps;
      best = row;
    }
    rows.push_back(row);
  }
  if (ta[n / 2] != 7.0f || tb[n / 2] != 1.0f) Usage("triad/update computed a wrong value");
  nlohmann::json out = {{"n", n},
                        {"grad", DataTypeName(f.grad)},
                        {"param", f.has_param ? DataTypeName(f.param) : "none"},
                        {"simd", HostSimdName()},
                        {"bytes_per_param", bytes_per_param},
                        {"scalar_params_per_s", scalar_pps},
                        {"rows", rows},
                        {"best", best},
                        {"host_optimizer_params_per_s", best_pps},
                        {"speedup_vs_scalar", best_pps / scalar_pps}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace baton::ops

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit("host_adamw");
  return baton::ops::Main(argc, argv);
}
