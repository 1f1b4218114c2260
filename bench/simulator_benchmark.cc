// ./bazelw run //bench:simulator
//
// Wall time to simulate one step of llama3-405b on 16,384 H100s (seq 8192,
// global batch 16,384) for every policy, graph construction and memory
// planning included, with --recompute-layers=auto (which plans once and
// simulates once per policy). Ranks are symmetric, so one rank is simulated
// whatever the GPU count. Then the same model with tensor and pipeline
// parallelism (TP 8, PP 16, global batch 2048: 16 micro-batches per
// pipeline; 126 blocks, the first and last stages one fewer), 1F1B and
// ZB-H1, every stage's graph built and simulated (targets < 2 s each), and
// simulate --tune's search of the mesh for it (target < 30 s). Best of 3
// runs each (the tune: 1). Last line: one JSON object.
//
// Flags: --reps=N (runs of every policy, the best counted; default 3, at
// most 100), --version.
#include <chrono>
#include <cstdio>
#include <string>

#include "nlohmann/json.hpp"
#include "baton/cli/flags.h"
#include "baton/runtime/output_file.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/sim/cluster.h"
#include "baton/sim/parallel_sim.h"
#include "baton/sim/simulator.h"
#include "baton/sim/tune.h"

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit("simulator");
  using Clock = std::chrono::steady_clock;
  constexpr char kProgram[] = "simulator";
  int reps = 3;
  baton::cli::FlagReader reader(kProgram);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    baton::cli::VersionFlag(kProgram, arg);
    const auto [key, value] = reader.Split(arg);
    if (key != "--reps") baton::cli::FailUsage(kProgram, "unknown flag " + key + " (--reps)");
    reps = static_cast<int>(baton::cli::PositiveFlag(kProgram, key, value, 100));
  }
  const auto model = *baton::scheduler::ModelPreset("llama3-405b");
  const auto cluster = *baton::sim::ClusterPreset("h100");
  baton::sim::Workload w;
  w.gpus = 16384;
  w.seq = 8192;
  w.global_batch = 16384;
  nlohmann::json rows = nlohmann::json::array();
  double best_total = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = Clock::now();
    nlohmann::json these = nlohmann::json::array();
    for (const std::string& name : baton::scheduler::PolicyPresetNames()) {
      const auto p0 = Clock::now();
      auto r = baton::sim::Simulate(model, cluster, w, name);
      const double ms =
          std::chrono::duration<double, std::milli>(Clock::now() - p0).count();
      if (!r.ok()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(),
                     r.status().ToString().c_str());
        return 1;
      }
      these.push_back({{"policy", name}, {"ms", ms}, {"step_time_s", r->step_s},
                       {"mfu", r->mfu}, {"fits", r->fits}});
    }
    const double total =
        std::chrono::duration<double>(Clock::now() - t0).count();
    if (total < best_total) {
      best_total = total;
      rows = these;
    }
  }
  std::printf("# llama3-405b on 16384 x h100, every policy, %s\n",
              reps == 1 ? "one run" : ("best of " + std::to_string(reps) + " runs").c_str());
  std::printf("%-12s %10s %10s %8s %5s\n", "policy", "sim_ms", "step_s", "MFU",
              "fits");
  for (const auto& r : rows) {
    std::printf("%-12s %10.1f %10.3f %7.1f%% %5s\n",
                r["policy"].get<std::string>().c_str(), r["ms"].get<double>(),
                r["step_time_s"].get<double>(), 100 * r["mfu"].get<double>(),
                r["fits"].get<bool>() ? "yes" : "NO");
  }
  std::printf("# all policies: %.3f s (target < 1 s)\n", best_total);
  // Tensor and pipeline parallelism.
  baton::sim::Workload pw;
  pw.gpus = 16384;
  pw.seq = 8192;
  pw.global_batch = 2048;
  pw.tp = 8;
  pw.pp = 16;
  nlohmann::json parallel = nlohmann::json::array();
  std::printf("%-30s %10s %10s %8s %8s\n", "tp8 pp16 (sp off)", "sim_ms", "step_s", "MFU",
              "bubble");
  for (auto schedule : {baton::scheduler::PipelineSchedule::k1F1B,
                        baton::scheduler::PipelineSchedule::kZbH1}) {
    pw.schedule = schedule;
    double best_ms = 1e30;
    baton::sim::SimResult res;
    for (int rep = 0; rep < 3; ++rep) {
      const auto p0 = Clock::now();
      auto p = baton::sim::SimPolicy("baton", pw, cluster.gpus_per_node);
      auto r = p.ok() ? baton::sim::SimulateParallel(model, cluster, pw, *p,
                                                     baton::sim::kAutoRecompute, {})
                      : baton::StatusOr<baton::sim::SimResult>(p.status());
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - p0).count();
      if (!r.ok()) {
        std::fprintf(stderr, "parallel: %s\n", r.status().ToString().c_str());
        return 1;
      }
      if (ms < best_ms) best_ms = ms;
      res = *r;
    }
    const char* name = baton::scheduler::PipelineScheduleName(schedule);
    std::printf("%-30s %10.1f %10.3f %7.1f%% %7.1f%%  (target < 2000 ms)\n", name, best_ms,
                res.step_s, 100 * res.mfu, 100 * res.bubble);
    parallel.push_back({{"schedule", name}, {"ms", best_ms}, {"step_time_s", res.step_s},
                        {"mfu", res.mfu}, {"bubble", res.bubble}});
  }
  baton::sim::Workload tw = pw;
  tw.tp = tw.pp = 1;
  tw.schedule = baton::scheduler::PipelineSchedule::k1F1B;
  const auto t0 = Clock::now();
  auto tuned = baton::sim::Tune(model, cluster, tw);
  const double tune_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (!tuned.ok()) {
    std::fprintf(stderr, "tune: %s\n", tuned.status().ToString().c_str());
    return 1;
  }
  std::printf("# tune (mesh searched): %.2f s for %d configurations (target < 30 s); best "
              "%.3f s: %s\n",
              tune_s, tuned->simulated, tuned->best[0].result.step_s,
              baton::sim::DescribeKnobs(tuned->best[0]).c_str());
  nlohmann::json out;
  out["parallel"] = parallel;
  out["tune_s"] = tune_s;
  out["tune_simulated"] = tuned->simulated;
  out["model"] = "llama3-405b";
  out["gpus"] = w.gpus;
  out["all_policies_s"] = best_total;
  out["policies"] = rows;
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
