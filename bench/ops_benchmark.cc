// ./bazelw run //bench:ops -- [--device=host|cuda] [--dtype=bf16|f32]
//     [--op=NAME[,NAME...]] [--min-time=S]
//
// Every op of ops/ at Llama shapes (bench/op_suite.h: the shapes of
// sim/data/h100_kernels.json on CUDA, small ones on the host), each pass
// timed (bench/op_timing.h) and rated against a limit measured in the same
// run: the device copy rate (one large copy, read + write) for memory-bound
// ops, a square GEMM through ops::LinearForward (cuBLAS on CUDA, the host
// GEMM on the host runtime) for matmul-bound ones. Columns: op, pass,
// shape, time_us (median per call), rate (GB/s or TFLOP/s), ratio (rate /
// limit), torch_h100_us (PyTorch 2.11 on one H100 at the same shape, from
// the shipped table; "-" where it has none). The last line is one JSON
// object. Shapes an op refuses (e.g. baton's CUDA attention past seq 4096)
// are listed as skipped.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "baton/bench/bench_cli.h"
#include "baton/bench/op_suite.h"
#include "baton/runtime/output_file.h"
#include "baton/runtime/version.h"

namespace baton::bench {
namespace {

constexpr const char* kProgram = "ops";
const char* const kOps[] = {"rmsnorm", "swiglu",    "rotary", "embedding", "cross_entropy",
                            "attention", "linear", "adamw"};

struct Flags {
  CommonFlags common;
  DataType dtype = DataType::kBF16;
  std::set<std::string> ops;  // empty: all
};

Flags Parse(int argc, char** argv) {
  Flags f;
  cli::FlagReader reader(kProgram);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    cli::VersionFlag(kProgram, arg);
    if (arg == "--help") {
      std::printf("usage: %s [--device=host|cuda] [--dtype=bf16|f32] [--op=NAME[,NAME...]]"
                  " [--min-time=S]\n", kProgram);
      std::exit(0);
    }
    const auto [key, value] = reader.Split(arg);
    if (CommonFlag(kProgram, key, value, f.common)) continue;
    if (key == "--dtype") {
      if (value != "bf16" && value != "f32") {
        cli::FailUsage(kProgram, absl::StrCat("--dtype must be bf16 or f32, got \"", value, "\""));
      }
      f.dtype = value == "bf16" ? DataType::kBF16 : DataType::kF32;
    } else if (key == "--op") {
      for (const std::string& op : cli::ListFlag(kProgram, key, value)) {
        if (std::find(std::begin(kOps), std::end(kOps), op) == std::end(kOps)) {
          cli::FailUsage(kProgram, absl::StrCat("--op: unknown op \"", op,
                                                     "\" (rmsnorm, swiglu, rotary, embedding, "
                                                     "cross_entropy, attention, linear, adamw)"));
        }
        f.ops.insert(op);
      }
    } else {
      cli::FailUsage(kProgram, absl::StrCat("unknown flag ", key, " (see --help)"));
    }
  }
  return f;
}

int Main(int argc, char** argv) {
  const Flags f = Parse(argc, argv);
  Opened dev = OpenDevice(kProgram, f.common);
  const TimingOptions timing = Timing(f.common);
  StatusOr<std::vector<CaseSpec>> all = OpsBenchSpecs(f.common.device, f.dtype);
  if (!all.ok()) Die(kProgram, all.status());
  std::vector<CaseSpec> specs;
  for (CaseSpec& s : *all) {
    if (f.ops.empty() || f.ops.count(s.op)) specs.push_back(std::move(s));
  }
  const Limits limits = RunLimits(kProgram, dev, f.dtype, timing);
  const char* dtype = f.dtype == DataType::kBF16 ? "bf16" : "f32";
  std::printf("# baton %s //bench:ops on %s, %s, median of timed batches (>= %.3g s per pass)\n",
              BATON_VERSION, dev.device->name().c_str(), dtype, timing.min_seconds);
  PrintLimits(limits, dev);
  PrintHeader();
  Report report;
  StatusOr<std::vector<Measured>> done =
      RunSpecs(*dev.device, *dev.stream, specs, limits, timing, report.OnRow(), report.OnSkip());
  if (!done.ok()) Die(kProgram, done.status());
  nlohmann::json out = {{"bench", "ops"},
                        {"device", dev.device->name()},
                        {"dtype", dtype},
                        {"copy_gbps", limits.copy_gbps},
                        {"gemm_tflops", limits.gemm_tflops},
                        {"launch_us", limits.launch_s * 1e6},
                        {"ops", report.rows},
                        {"skipped", report.skipped}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit(baton::bench::kProgram);
  return baton::bench::Main(argc, argv);
}
