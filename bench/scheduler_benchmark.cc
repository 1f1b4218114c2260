// ./bazelw run //bench:scheduler
//
// Prints, per policy, what it costs to build the step graph and plan its
// memory for a large model on many ranks, and what the executor costs the
// host per issued node on the host runtime (inproc, 2 ranks, callbacks that
// enqueue nothing: the scheduler's own overhead). The last line is one JSON
// object; build_and_plan_ms and issue_us_per_node are baton's own policy.
//
// Flags: --model=llama3-405b --ranks=16384 --issue-model=tiny
//        --issue-steps=200 [--cuda [--cuda-steps=20]]
// --cuda: also eager vs CUDA-graph replay of baton's policy on one GPU, nccl
// with 1 rank, for `tiny` and the 8-block shape (bench/cuda_graph_step.h):
// host and GPU time per step, into the JSON's "cuda_graph" (otherwise
// null; "not_measured" with the reason where no GPU or NCCL is).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/comm/factory.h"
#include "nlohmann/json.hpp"
#include "baton/ops/adamw.h"
#include "baton/optim/zenflow_driver.h"
#include "baton/runtime/device.h"
#include "baton/runtime/output_file.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/step_graph.h"
#include "bench/cuda_graph_step.h"

namespace baton::scheduler {
namespace {

using Clock = std::chrono::steady_clock;

double Ms(Clock::duration d) {
  return std::chrono::duration<double, std::milli>(d).count();
}

struct Flags {
  std::string model = "llama3-405b";
  int ranks = 16384;
  std::string issue_model = "tiny";
  int issue_steps = 200;
  bool cuda = false;
  int cuda_steps = 20;
};

[[noreturn]] void Usage(const std::string& error) {
  std::fprintf(stderr, "bench/scheduler: %s\n", error.c_str());
  std::fprintf(stderr,
               "usage: scheduler [--model=NAME] [--ranks=N] "
               "[--issue-model=NAME] [--issue-steps=N] [--cuda] [--cuda-steps=N]\n");
  std::exit(2);
}

Flags Parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto eq = a.find('=');
    const std::string key = a.substr(0, eq);
    const std::string value = eq == std::string::npos ? "" : a.substr(eq + 1);
    auto number = [&](int lo) {
      char* end = nullptr;
      const long v = std::strtol(value.c_str(), &end, 10);
      if (value.empty() || *end != '\0' || v < lo || v > (1 << 30)) {
        Usage(absl::StrCat(key, " needs an integer >= ", lo, ", got \"",
                           value, "\""));
      }
      return static_cast<int>(v);
    };
    if (key == "--model") f.model = value;
    else if (key == "--ranks") f.ranks = number(1);
    else if (key == "--issue-model") f.issue_model = value;
    else if (key == "--issue-steps") f.issue_steps = number(1);
    else if (a == "--cuda") f.cuda = true;
    else if (key == "--cuda-steps") f.cuda_steps = number(1);
    else Usage(absl::StrCat("unknown flag ", a));
  }
  return f;
}

struct IssueCost {
  double us_per_node = 0;  // median over steps
  int nodes = 0;
};

// Median host time of Executor::Step per node, 2 inproc ranks.
StatusOr<IssueCost> MeasureIssue(const ModelSpec& spec, const Policy& policy,
                                 int steps) {
  const int ranks = 2;
  BATON_ASSIGN_OR_RETURN(auto device, CreateHostDevice());
  CommConfig base;
  base.device = device.get();
  base.group = absl::StrCat("bench-", policy.name);
  BATON_ASSIGN_OR_RETURN(auto comms, CreateInprocGroup(ranks, base));
  std::vector<Status> status(ranks);
  std::vector<std::vector<double>> samples(ranks);
  BATON_ASSIGN_OR_RETURN(StepGraph built, BuildStepGraph(spec, policy, ranks));
  auto graph = std::make_shared<const StepGraph>(std::move(built));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      // ZenFlow's optimizer runs its own nodes: its driver (with AdamW's
      // defaults) is part of what issuing its step costs.
      ExecutorOptions options;
      if (policy.zenflow) {
        options.optimizer_driver = optim::ZenFlowDriverFactory(ops::AdamWConfig{});
      }
      auto exec = Executor::Create(graph, *device, *comms[r], options);
      if (!exec.ok()) {
        status[r] = exec.status();
        return;
      }
      StepCallbacks cb;
      cb.compute = [](const ComputeContext&) { return absl::OkStatus(); };
      for (int s = 0; s < steps + 5; ++s) {
        const auto t0 = Clock::now();
        Status st = (*exec)->Step(cb);
        const auto t1 = Clock::now();
        if (st.ok()) st = (*exec)->Synchronize();
        if (!st.ok()) {
          status[r] = st;
          comms[r]->Abort();
          return;
        }
        if (s >= 5) samples[r].push_back(Ms(t1 - t0) * 1e3 / graph->nodes.size());
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const Status& s : status) BATON_RETURN_IF_ERROR(s);
  std::vector<double> all;
  for (const auto& v : samples) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  return IssueCost{all[all.size() / 2], static_cast<int>(graph->nodes.size())};
}

// --cuda: eager vs replay for tiny and the 8-block shape (issue 13).
nlohmann::json MeasureCudaGraph(const Flags& f) {
  ModelSpec eight = *ModelPreset("tiny");
  eight.name = "8-block";
  eight.layers = 8;
  eight.hidden = 1024;
  eight.heads = 16;
  eight.kv_heads = 4;
  eight.head_dim = 64;
  eight.intermediate = 2816;
  eight.vocab = 32000;
  Policy policy = *PolicyPreset("baton");
  policy.param_dtype = DataType::kBF16;
  nlohmann::json models = nlohmann::json::array();
  std::printf("# CUDA graph: baton policy, nccl 1 rank, bf16 parameters, compute callbacks "
              "empty; median of %d steps\n", f.cuda_steps);
  std::printf("%-8s %6s %14s %13s %15s %14s\n", "model", "nodes", "eager_host_us",
              "eager_gpu_us", "replay_host_us", "replay_gpu_us");
  for (const ModelSpec& spec : {*ModelPreset("tiny"), eight}) {
    auto r = bench::MeasureCudaGraphStep(spec.name, spec, policy, f.cuda_steps);
    if (!r.ok()) {
      std::printf("%-8s %s\n", spec.name.c_str(), std::string(r.status().message()).c_str());
      return {{"not_measured", std::string(r.status().message())}};
    }
    std::printf("%-8s %6d %14.1f %13.1f %15.1f %14.1f\n", spec.name.c_str(),
                (*r)["nodes"].get<int>(), (*r)["eager_host_us"].get<double>(),
                (*r)["eager_gpu_us"].get<double>(), (*r)["replay_host_us"].get<double>(),
                (*r)["replay_gpu_us"].get<double>());
    models.push_back(*r);
  }
  return {{"backend", "nccl"}, {"ranks", 1}, {"policy", "baton"}, {"models", models}};
}

int Main(int argc, char** argv) {
  const Flags f = Parse(argc, argv);
  auto spec = ModelPreset(f.model);
  if (!spec.ok()) Usage(std::string(spec.status().message()));
  auto issue_spec = ModelPreset(f.issue_model);
  if (!issue_spec.ok()) Usage(std::string(issue_spec.status().message()));

  std::printf("# step graph + memory plan: %s on %d ranks\n", f.model.c_str(),
              f.ranks);
  std::printf("# issue cost: %s, inproc, 2 ranks, host streams, %d steps "
              "(median per node of Executor::Step's host time)\n",
              f.issue_model.c_str(), f.issue_steps);
  std::printf("%-8s %7s %7s %9s %9s %9s %12s %12s %7s %10s\n", "policy",
              "nodes", "edges", "build_ms", "plan_ms", "total_ms",
              "arena_GiB", "bound_GiB", "ratio", "issue_us");
  nlohmann::json out;
  out["model"] = f.model;
  out["ranks"] = f.ranks;
  out["issue_model"] = f.issue_model;
  nlohmann::json rows = nlohmann::json::array();
  for (const std::string& name : PolicyPresetNames()) {
    const Policy policy = *PolicyPreset(name);
    const auto t0 = Clock::now();
    auto graph = BuildStepGraph(*spec, policy, f.ranks);
    const double total_ms = Ms(Clock::now() - t0);
    if (!graph.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(),
                   graph.status().ToString().c_str());
      return 1;
    }
    auto issue = MeasureIssue(*issue_spec, policy, f.issue_steps);
    if (!issue.ok()) {
      std::fprintf(stderr, "%s: %s\n", name.c_str(),
                   issue.status().ToString().c_str());
      return 1;
    }
    const double gib = 1024.0 * 1024 * 1024;
    std::printf("%-8s %7zu %7zu %9.1f %9.1f %9.1f %12.3f %12.3f %7.3f %10.2f\n",
                name.c_str(), graph->nodes.size(), graph->edges.size(),
                graph->build_ms, graph->plan.plan_ms, total_ms,
                graph->plan.arena_bytes / gib,
                graph->plan.lower_bound_bytes / gib, graph->plan.ratio(),
                issue->us_per_node);
    rows.push_back({{"policy", name},
                    {"nodes", graph->nodes.size()},
                    {"build_and_plan_ms", total_ms},
                    {"arena_bytes", graph->plan.arena_bytes},
                    {"lower_bound_bytes", graph->plan.lower_bound_bytes},
                    {"issue_us_per_node", issue->us_per_node}});
    if (name == "baton") {
      out["build_and_plan_ms"] = total_ms;
      out["issue_us_per_node"] = issue->us_per_node;
    }
  }
  out["policies"] = rows;
  out["cuda_graph"] = f.cuda ? MeasureCudaGraph(f) : nlohmann::json();
  std::printf("# targets: build_and_plan_ms <= 1000, issue_us_per_node <= 5\n");
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

}  // namespace
}  // namespace baton::scheduler

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit("scheduler");
  return baton::scheduler::Main(argc, argv);
}
