// ./bazelw run //bench:kernels -- --out=PATH [--device=host|cuda]
//     [--model=NAME[,NAME...]] [--tokens=N[,N...]] [--seqs=N[,N...]]
//     [--attention-tokens=N] [--adamw-params=N[,N...]] [--min-time=S]
//
// Measures the simulator's kernel table on this machine and writes it to
// PATH (format: sim/kernel_table.h; mapping: bench/kernel_table_json.h), for
// `simulate --kernel-table=PATH` or `--calibration=PATH`: the model's GEMMs
// through ops::LinearForward (cuBLAS on CUDA), baton's memory-bound ops by
// bytes, attention forward and backward through ops::Attention* by (seq,
// heads, KV heads, head dim), AdamW by parameters, the per-kernel cost, and
// the device copy rate. Shapes: bench/op_suite.h (KernelTableSpecs);
// defaults below, per device. Prints each pass as it is measured (the
// //bench:ops columns), then one JSON line: what was written.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "nlohmann/json.hpp"
#include "baton/bench/bench_cli.h"
#include "baton/bench/kernel_table_json.h"
#include "baton/bench/op_suite.h"
#include "baton/runtime/output_file.h"
#include "baton/runtime/version.h"
#include "baton/scheduler/model.h"

namespace baton::bench {
namespace {

constexpr const char* kProgram = "kernels";

struct Flags {
  CommonFlags common;
  std::string out;
  std::vector<std::string> models;
  std::vector<int64_t> tokens, seqs, adamw_params;
  int64_t attention_tokens = 0;
};

std::vector<int64_t> IntList(const std::string& key, const std::string& value, int64_t hi) {
  std::vector<int64_t> v;
  for (const std::string& item : cli::ListFlag(kProgram, key, value)) {
    v.push_back(cli::PositiveFlag(kProgram, key, item, hi));
  }
  return v;
}

Flags Parse(int argc, char** argv) {
  Flags f;
  cli::FlagReader reader(kProgram);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    cli::VersionFlag(kProgram, arg);
    if (arg == "--help") {
      std::printf("usage: %s --out=PATH [--device=host|cuda] [--model=NAME[,NAME...]]"
                  " [--tokens=N,...] [--seqs=N,...] [--attention-tokens=N]"
                  " [--adamw-params=N,...] [--min-time=S]\n", kProgram);
      std::exit(0);
    }
    const auto [key, value] = reader.Split(arg);
    if (CommonFlag(kProgram, key, value, f.common)) continue;
    if (key == "--out") {
      f.out = value;
    } else if (key == "--model") {
      f.models = cli::ListFlag(kProgram, key, value);
    } else if (key == "--tokens") {
      f.tokens = IntList(key, value, int64_t{1} << 20);
    } else if (key == "--seqs") {
      f.seqs = IntList(key, value, int64_t{1} << 20);
    } else if (key == "--attention-tokens") {
      f.attention_tokens = cli::PositiveFlag(kProgram, key, value, int64_t{1} << 20);
    } else if (key == "--adamw-params") {
      f.adamw_params = IntList(key, value, int64_t{1} << 34);
    } else {
      cli::FailUsage(kProgram, absl::StrCat("unknown flag ", key, " (see --help)"));
    }
  }
  if (f.out.empty()) cli::FailUsage(kProgram, "--out=PATH is required (see --help)");
  const bool cuda = f.common.device == DeviceKind::kCuda;
  // Defaults: on CUDA the GEMMs of two Llama 3 sizes at 2k and 8k tokens;
  // on the host the test model, small enough for seconds.
  if (f.models.empty()) {
    f.models = cuda ? std::vector<std::string>{"llama3-8b", "llama3-70b"}
                    : std::vector<std::string>{"tiny"};
  }
  if (f.tokens.empty()) f.tokens = cuda ? std::vector<int64_t>{2048, 8192} : std::vector<int64_t>{128, 512};
  if (f.seqs.empty()) {
    f.seqs = cuda ? std::vector<int64_t>{1024, 2048, 4096, 8192} : std::vector<int64_t>{64, 128, 256};
  }
  if (f.attention_tokens == 0) f.attention_tokens = cuda ? 8192 : 512;
  if (f.adamw_params.empty()) {
    f.adamw_params = cuda ? std::vector<int64_t>{1 << 24, 1 << 26, 1 << 28}
                          : std::vector<int64_t>{1 << 16, 1 << 18, 1 << 20};
  }
  for (int64_t s : f.seqs) {
    if (f.attention_tokens % s != 0 || s > f.attention_tokens) {
      cli::FailUsage(kProgram, absl::StrCat("--seqs: ", s, " does not divide --attention-tokens=",
                                                 f.attention_tokens));
    }
  }
  return f;
}

std::string Today() {
  char buf[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  return buf;
}

int Main(int argc, char** argv) {
  const auto t0 = std::chrono::steady_clock::now();
  const Flags f = Parse(argc, argv);
  KernelTableShapes shapes;
  for (const std::string& name : f.models) {
    StatusOr<scheduler::ModelSpec> m = scheduler::ModelPreset(name);
    if (!m.ok()) cli::FailUsage(kProgram, absl::StrCat("--model: ", m.status().message()));
    shapes.models.push_back(*m);
  }
  shapes.tokens = f.tokens;
  shapes.seqs = f.seqs;
  shapes.attention_tokens = f.attention_tokens;
  shapes.adamw_params = f.adamw_params;
  // The output must be writable before minutes of measuring.
  if (!std::ofstream(f.out)) {
    std::fprintf(stderr, "%s: cannot write %s\n", kProgram, f.out.c_str());
    return 2;
  }

  Opened dev = OpenDevice(kProgram, f.common);
  const bool cuda = f.common.device == DeviceKind::kCuda;
  const TimingOptions timing = Timing(f.common);
  const Limits limits = RunLimits(kProgram, dev, DataType::kBF16, timing);
  std::printf("# baton %s //bench:kernels on %s (models %s), bf16\n", BATON_VERSION,
              dev.device->name().c_str(), absl::StrJoin(f.models, ", ").c_str());
  PrintLimits(limits, dev);
  PrintHeader();
  Report report;
  StatusOr<std::vector<Measured>> rows =
      RunSpecs(*dev.device, *dev.stream, KernelTableSpecs(shapes), limits, timing,
               report.OnRow(), report.OnSkip());
  if (!rows.ok()) Die(kProgram, rows.status());

  const std::string gpu = DeviceLabel(*dev.device);
  const std::string provenance = absl::StrCat(
      "Measured ", Today(), " by baton ", BATON_VERSION, " //bench:kernels on ",
      dev.device->name(), " (models ", absl::StrJoin(f.models, ", "), "; tokens ",
      absl::StrJoin(f.tokens, ", "), "). bf16. GEMMs: ops::LinearForward (",
      cuda ? "cuBLAS cublasGemmEx, fp32 accumulation" : "the host's blocked fp32 GEMM",
      "); attention: ops::AttentionForward/Backward, causal; rmsnorm, swiglu, rotary, "
      "embedding, cross_entropy, AdamW (fp32 master and moments, fused bf16 cast): "
      "baton's ops. Times: median over batches of back-to-back calls, wall clock "
      "between stream synchronizations, >= ", timing.min_seconds, " s per pass. "
      "cross_entropy bwd_s: the fused pass minus the loss-only pass (at least 1% of the "
      "fused pass). launch_overhead_us: "
      "one SwiGLU on one element, back to back. Copy rate in the same run: ",
      limits.copy_gbps, " GB/s counting read + write (", limits.copy_bytes >> 20,
      " MiB copy); bf16 GEMM ", limits.gemm_n, "^3: ", limits.gemm_tflops, " TFLOP/s.");
  StatusOr<nlohmann::json> table = KernelTableJson(gpu, provenance, limits, *rows);
  if (!table.ok()) Die(kProgram, table.status());
  if (Status s = WriteOutputFile(f.out, table->dump(1) + "\n", "the kernel table");
      !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", kProgram, std::string(s.message()).c_str());
    return kOutputErrorExitCode;
  }
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json summary = {{"bench", "kernels"},
                            {"out", f.out},
                            {"gpu", gpu},
                            {"gemm", (*table)["gemm"].size()},
                            {"sdpa", (*table)["sdpa"].size()},
                            {"elementwise", (*table)["elementwise"].size()},
                            {"adamw", (*table)["adamw"].size()},
                            {"launch_overhead_us", limits.launch_s * 1e6},
                            {"copy_gbps", limits.copy_gbps},
                            {"skipped", report.skipped.size()},
                            {"wall_s", wall}};
  std::printf("# wrote %s\n%s\n", f.out.c_str(), summary.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace baton::bench

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit(baton::bench::kProgram);
  return baton::bench::Main(argc, argv);
}
