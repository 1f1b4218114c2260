// The simulate program's work (examples/simulate_run.h): flags in, the
// printed report and its JSON out, every refusal a Status.
#include <cstdio>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "baton/examples/simulate_run.h"
#include "baton/cli/flags.h"
#include "baton/examples/technique_flags.h"
#include "baton/runtime/input_file.h"
#include "baton/runtime/json_input.h"
#include "baton/runtime/output_file.h"
#include "baton/runtime/status.h"
#include "baton/runtime/version.h"
#include "nlohmann/json.hpp"
#include "baton/scheduler/limits.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/policy_file.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/sim/cluster.h"
#include "baton/sim/host_cost.h"
#include "baton/sim/memory_report.h"
#include "baton/sim/parallel_sim.h"
#include "baton/sim/report.h"
#include "baton/sim/simulator.h"
#include "baton/sim/tune.h"

namespace baton {
namespace {

struct Flags {
  std::string model = "llama3-70b";
  bool model_given = false;
  std::string hf_config;
  std::string cluster = "h100";
  std::string cluster_file;
  std::vector<std::string> calibration;
  std::string kernel_table;
  std::string attention_kernel = "table";
  std::string kernel_stack = "eager";
  std::string gemm_dtype = "bf16";
  std::string pp_schedule;
  sim::Workload workload;
  std::string recompute = "auto";
  std::vector<std::string> policies;
  std::string trace, svg;
  bool json = false;
  // Policy files and the tuner.
  std::string policy_file, policy_out;
  bool tune = false;
  std::vector<std::string> allow;  // --allow: techniques --tune may choose
  bool memory = false;  // --memory: the W / A / G / O split per policy
  bool policies_given = false;  // --policy, --compare or --policy-file
  examples::TechniqueFlags tech{"simulate", /*adapters=*/true};
  bool micro_batch_given = false, recompute_given = false;
  bool parallel = false;  // --tp, --cp or --pp > 1
};

Status Bad(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

// The --help text; %s: the techniques' flags (TechniqueFlags::Usage).
const char kUsage[] =
    "usage: simulate [--model=NAME | --hf-config=PATH] [--cluster=h100|a100|h800]\n"
    "  [--cluster-file=JSON] [--gpus=N] [--seq=N] [--global-batch=N]\n"
    "  [--micro-batch=N] [--recompute-layers=N|all|auto]\n"
    "  [--shard-group=N] [--hpz-group=N] (hierarchical sharding: ranks per\n"
    "   shard group / hpZ group; 0 = full sharding / none; default: the\n"
    "   policy's, one node for hsdp and zeropp)\n"
    "  [--calibration=FILE[,FILE...]] (nccl-tests output, bench -J JSON,\n"
    "   or a kernel table)  [--kernel-table=PATH] (measured kernel times\n"
    "   replacing the shipped H100 table, sim/kernel_table.h)\n"
    "  [--attention-kernel=table|triton|triton-alibi] (the run's attention\n"
    "   kernel: the table's (default), or Triton FlashAttention as 2023\n"
    "   llm-foundry ran it, from published figures for h100 and a100;\n"
    "   triton-alibi: positions as ALiBi inside it, no RoPE; see\n"
    "   sim/compute_model.h AttentionKernelPreset)\n"
    "  [--kernel-stack=eager|compiled] [--gemm-dtype=bf16|fp8] (the rest of\n"
    "   the run's software stack: PyTorch eager as the table (default), or\n"
    "   torch.compile's fused memory-bound kernels; float8 linears at the\n"
    "   GPU's FP8 peak with their casts; sim/compute_model.h KernelStack)\n"
    "  [--tp=N [--sp] [--tp-overlap] [--tp-across-nodes]] [--cp=N]\n"
    "  [--pp=N [--pp-schedule=1f1b|interleaved|zb-h1] [--vpp=V]\n"
    "   [--pp-first-layers=N] [--pp-last-layers=N]] (tensor parallelism over\n"
    "   N GPUs of a node, with sequence parallelism, with its collectives\n"
    "   decomposed and overlapped with the GEMMs; context parallelism (ring\n"
    "   attention); pipeline parallelism with V virtual stages per GPU and\n"
    "   the first / last stages' blocks; the data ranks are --gpus / (tp x\n"
    "   cp x pp), --micro-batch is per data rank; prints each stage's\n"
    "   memory and the bubble; sim/parallel_sim.h)\n"
    "  [--ep=N [--etp=1|tp]] [--moe-dispatcher=alltoall|hierarchical|allgather]\n"
    "  [--moe-overlap] [--moe-shared-overlap] [--moe-capacity=C] [--moe-imbalance=X]\n"
    "   (mixtures of experts: expert parallelism over N ranks folded over a\n"
    "   stage's ranks, expert tensor parallelism; how tokens reach their experts\n"
    "   (DeepEP's hierarchical normal kernels, Megatron's all-gather); one\n"
    "   micro-batch's dispatch / combine under another's compute; shared\n"
    "   experts under the dispatch; a capacity factor (0: dropless); the\n"
    "   busiest expert rank's load over the mean (default 1); docs/moe.md)\n"
    "  [--policy=NAME | --compare=a,b,...] [--trace=PATH] [--svg=PATH] [--json]\n"
    "  [--policy-file=PATH] (a policy file, scheduler/policy_file.h: its\n"
    "   micro_steps sets the micro-batch and its recompute_blocks the\n"
    "   recompute unless --micro-batch / --recompute-layers are given)\n"
    "  [--tune [--policy-out=PATH]] (search bucket bytes, prefetch depths,\n"
    "   micro-batch, reduce dtype, shard and hpZ groups, with the fewest\n"
    "   recomputed layers that fit; print the best 5 and write the best as\n"
    "   a policy file that --policy-file runs)  [--allow=adamw8bit,lora,nf4]\n"
    "   (techniques --tune may also choose, since they change the training:\n"
    "   8-bit AdamW, LoRA adapters (--lora-rank, else rank 16), an NF4 base;\n"
    "   the techniques' flags given apply to every candidate)\n"
    "  [--memory] (per GPU: weights, activations, gradients, optimizer state,\n"
    "   communication buffers, reserve, and host memory; also in --json)\n"
    "%s"
    "Limits (scheduler/limits.h): --gpus <= 2^20, --seq <= 2^24, batches <=\n"
    "2^30, at most 4096 micro-steps (global batch / gpus / micro-batch) and\n"
    "32768 micro-steps x (layers + 3); a policy file's knobs have the same\n"
    "bounds (recompute_blocks <= the model's blocks). A flag may be given once.\n";

std::string SimulateUsage() {
  const examples::TechniqueFlags tech{"simulate", /*adapters=*/true};
  return absl::StrFormat(kUsage, tech.Usage());
}

// Flag bounds, documented in --help, from scheduler/limits.h (where they
// are explained): the same bounds whatever route a value takes.
constexpr int64_t kMaxGpus = scheduler::kMaxWorldSize;
constexpr int64_t kMaxSeq = scheduler::kMaxSeq;
constexpr int64_t kMaxBatch = scheduler::kMaxGlobalBatch;

namespace {

// An int-sized flag in [1, hi] (hi fits an int).
Status PositiveInt(const std::string& flag, const std::string& value, int64_t hi, int& out) {
  BATON_ASSIGN_OR_RETURN(const int64_t v, cli::ParsePositive(flag, value, hi));
  out = static_cast<int>(v);
  return absl::OkStatus();
}

// The schedule and the flags that only make sense together.
Status ParseParallel(Flags& f) {
  sim::Workload& w = f.workload;
  if (!f.pp_schedule.empty()) {
    auto s = scheduler::ParsePipelineSchedule(f.pp_schedule);
    if (!s.ok()) return Bad(absl::StrCat("--pp-schedule: ", s.status().message()));
    w.schedule = *s;
  } else if (w.vpp > 1) {
    w.schedule = scheduler::PipelineSchedule::kInterleaved;
  }
  if ((w.sp || w.tp_overlap) && w.tp < 2) return Bad("--sp and --tp-overlap need --tp=N with N > 1");
  if (w.schedule == scheduler::PipelineSchedule::kInterleaved && w.vpp < 2) {
    return Bad("--pp-schedule=interleaved needs --vpp=V with V >= 2 virtual stages per GPU");
  }
  if (w.vpp > 1 && w.schedule != scheduler::PipelineSchedule::kInterleaved) {
    return Bad("--vpp needs --pp-schedule=interleaved");
  }
  if ((!f.pp_schedule.empty() || w.vpp > 1 || w.pp_first_layers > 0 ||
       w.pp_last_layers > 0) && w.pp < 2) {
    return Bad("--pp-schedule, --vpp and --pp-first/last-layers need --pp=N with N > 1");
  }
  f.parallel = w.tp > 1 || w.cp > 1 || w.pp > 1 || w.ep > 1 || w.etp > 1;
  if (f.parallel && (!f.policy_file.empty())) {
    return Bad("--tp, --cp, --pp, --ep and --etp set the mesh; a policy file carries its own: "
               "give one");
  }
  return absl::OkStatus();
}

// Sets *help / *version and returns early for --help / --version, as the
// program prints them when it reaches them.
StatusOr<Flags> Parse(const std::vector<std::string>& args, bool* help, bool* version) {
  Flags f;
  f.workload.gpus = 256;
  f.workload.seq = 8192;
  f.workload.global_batch = 256;
  f.workload.micro_batch = 1;
  cli::FlagReader flags("simulate");
  for (const std::string& a : args) {
    if (a == "--version") {
      *version = true;
      return f;
    }
    if (a == "--help" || a == "-h") {
      *help = true;
      return f;
    }
    if (a == "--json") {
      BATON_RETURN_IF_ERROR(flags.TrySwitch(a));
      f.json = true;
      continue;
    }
    if (a == "--tune") {
      BATON_RETURN_IF_ERROR(flags.TrySwitch(a));
      f.tune = true;
      continue;
    }
    if (a == "--memory") {
      BATON_RETURN_IF_ERROR(flags.TrySwitch(a));
      f.memory = true;
      continue;
    }
    if (a == "--moe-overlap" || a == "--moe-shared-overlap") {
      BATON_RETURN_IF_ERROR(flags.TrySwitch(a));
      (a == "--moe-overlap" ? f.workload.moe_a2a_overlap : f.workload.moe_shared_overlap) = true;
      continue;
    }
    if (a == "--sp" || a == "--tp-overlap" || a == "--tp-across-nodes") {
      BATON_RETURN_IF_ERROR(flags.TrySwitch(a));
      (a == "--sp" ? f.workload.sp : a == "--tp-overlap" ? f.workload.tp_overlap
                                                         : f.workload.tp_across_nodes) = true;
      continue;
    }
    BATON_ASSIGN_OR_RETURN(const auto kv, flags.TrySplit(a));
    const std::string& key = kv.first;
    const std::string& v = kv.second;
    BATON_ASSIGN_OR_RETURN(const bool technique, f.tech.TryParse(key, v));
    if (technique) continue;  // --optimizer, --recompute, --lora-*, ...
    if (key == "--model") { f.model = v; f.model_given = true; }
    else if (key == "--hf-config") f.hf_config = v;
    else if (key == "--cluster") f.cluster = v;
    else if (key == "--cluster-file") f.cluster_file = v;
    else if (key == "--calibration") { BATON_ASSIGN_OR_RETURN(f.calibration, cli::ParseList(key, v)); }
    else if (key == "--kernel-table") f.kernel_table = v;
    else if (key == "--attention-kernel") f.attention_kernel = v;
    else if (key == "--kernel-stack") f.kernel_stack = v;
    else if (key == "--gemm-dtype") f.gemm_dtype = v;
    else if (key == "--tp") { BATON_RETURN_IF_ERROR(PositiveInt(key, v, kMaxGpus, f.workload.tp)); }
    else if (key == "--cp") { BATON_RETURN_IF_ERROR(PositiveInt(key, v, kMaxGpus, f.workload.cp)); }
    else if (key == "--pp") { BATON_RETURN_IF_ERROR(PositiveInt(key, v, kMaxGpus, f.workload.pp)); }
    else if (key == "--vpp") { BATON_RETURN_IF_ERROR(PositiveInt(key, v, kMaxGpus, f.workload.vpp)); }
    else if (key == "--pp-schedule") f.pp_schedule = v;
    else if (key == "--ep") { BATON_RETURN_IF_ERROR(PositiveInt(key, v, kMaxGpus, f.workload.ep)); }
    else if (key == "--etp") { BATON_RETURN_IF_ERROR(PositiveInt(key, v, kMaxGpus, f.workload.etp)); }
    else if (key == "--moe-dispatcher") {
      auto d = scheduler::ParseMoeDispatcher(v);
      if (!d.ok()) return Bad(absl::StrCat("--moe-dispatcher: ", d.status().message()));
      f.workload.moe_dispatcher = *d;
    } else if (key == "--moe-capacity") {
      BATON_ASSIGN_OR_RETURN(f.workload.moe_capacity_factor, cli::ParseNumber(key, v, 0, 1024));
    } else if (key == "--moe-imbalance") {
      BATON_ASSIGN_OR_RETURN(f.workload.moe_imbalance, cli::ParseNumber(key, v, 1, 64));
    }
    else if (key == "--pp-first-layers") {
      { BATON_RETURN_IF_ERROR(PositiveInt(key, v, kMaxGpus, f.workload.pp_first_layers)); }
    } else if (key == "--pp-last-layers") {
      { BATON_RETURN_IF_ERROR(PositiveInt(key, v, kMaxGpus, f.workload.pp_last_layers)); }
    }
    else if (key == "--gpus") { BATON_RETURN_IF_ERROR(PositiveInt(key, v, kMaxGpus, f.workload.gpus)); }
    else if (key == "--seq") { BATON_ASSIGN_OR_RETURN(f.workload.seq, cli::ParsePositive(key, v, kMaxSeq)); }
    else if (key == "--global-batch") {
      BATON_ASSIGN_OR_RETURN(f.workload.global_batch, cli::ParsePositive(key, v, kMaxBatch));
    }
    else if (key == "--micro-batch") {
      BATON_ASSIGN_OR_RETURN(f.workload.micro_batch, cli::ParsePositive(key, v, kMaxBatch));
      f.micro_batch_given = true;
    }
    else if (key == "--shard-group") {
      BATON_ASSIGN_OR_RETURN(const int64_t n, cli::ParseInt(key, v, 0, kMaxGpus));
      f.workload.shard_group = static_cast<int>(n);
    } else if (key == "--hpz-group") {
      BATON_ASSIGN_OR_RETURN(const int64_t n, cli::ParseInt(key, v, 0, kMaxGpus));
      f.workload.hpz_group = static_cast<int>(n);
    }
    else if (key == "--recompute-layers") { f.recompute = v; f.recompute_given = true; }
    else if (key == "--policy-file") f.policy_file = v;
    else if (key == "--policy-out") f.policy_out = v;
    else if (key == "--allow") {
      BATON_ASSIGN_OR_RETURN(f.allow, cli::ParseList(key, v));
      for (const std::string& t : f.allow) {
        if (t != "adamw8bit" && t != "lora" && t != "nf4") {
          return Bad(absl::StrCat("--allow: unknown technique \"", t,
                                  "\" (--tune may choose adamw8bit, lora, nf4)"));
        }
      }
    }
    else if (key == "--policy" || key == "--compare") {
      if (!f.policies.empty()) return Bad("--policy and --compare both choose the policies; give one");
      if (key == "--policy") {
        f.policies = {v};
      } else {
        BATON_ASSIGN_OR_RETURN(f.policies, cli::ParseList(key, v));
      }
    }
    else if (key == "--trace") f.trace = v;
    else if (key == "--svg") f.svg = v;
    else return Bad(absl::StrCat("unknown flag ", key, " (see --help)"));
  }
  if (!f.hf_config.empty() && f.model_given) {
    return Bad("--model and --hf-config name two models; give one");
  }
  BATON_RETURN_IF_ERROR(f.tech.TryCheck());
  const bool chosen = !f.policies.empty();
  if (f.tune && (chosen || !f.policy_file.empty())) {
    return Bad("--tune searches the policy; drop --policy, --compare and --policy-file");
  }
  if (!f.policy_file.empty() && chosen) {
    return Bad("--policy-file and --policy / --compare both choose the policy; give one");
  }
  if (f.tune && (f.workload.tp > 1 || f.workload.cp > 1 || f.workload.pp > 1 ||
                 f.workload.sp || f.workload.tp_overlap || f.workload.vpp > 1 ||
                 !f.pp_schedule.empty() || f.workload.ep > 1 || f.workload.etp > 1)) {
    return Bad("--tune searches the mesh (tensor, context, pipeline, expert and data "
               "dimensions); drop --tp, --sp, --tp-overlap, --cp, --pp, --vpp, --pp-schedule, "
               "--ep and --etp");
  }
  if (f.tune && (f.recompute_given || f.workload.shard_group >= 0 ||
                 f.workload.hpz_group >= 0 || !f.trace.empty() || !f.svg.empty())) {
    return Bad("--tune chooses recompute, shard and hpZ groups and draws no pictures; "
         "drop --recompute-layers, --shard-group, --hpz-group, --trace and --svg");
  }
  if (!f.policy_out.empty() && !f.tune) return Bad("--policy-out needs --tune");
  if (!f.allow.empty() && !f.tune) {
    return Bad("--allow names techniques --tune may choose; it needs --tune");
  }
  if (f.tune && f.tech.offload) {
    return Bad("--tune chooses the offload (none or optimizer); drop --offload");
  }
  f.policies_given = !f.policies.empty() || !f.policy_file.empty();
  BATON_RETURN_IF_ERROR(ParseParallel(f));
  if (f.parallel && (f.memory || f.tech.any())) {
    return Bad("--memory and the techniques' flags (--optimizer, --recompute, --lora-*, "
               "--base-dtype, --offload) cover the data-parallel step; drop --tp, --cp and --pp");
  }
  if (f.policies.empty()) {
    // Tensor, context and pipeline parallelism run Megatron's distributed
    // optimizer (scheduler/policy.h): the baton preset's knobs.
    f.policies = f.parallel ? std::vector<std::string>{"baton"}
                            : scheduler::PolicyPresetNames();
  }
  return f;
}

StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  return ReadInputFile(path, what, kMaxJsonInputBytes);
}

Status WriteFile(const std::string& path, const std::string& text, const char* what) {
  return WriteOutputFile(path, text, what);
}

// The policy of --policy-file, with the flags given explicitly applied to
// it: --micro-batch sets micro_steps (else micro_steps sets the
// micro-batch), --shard-group / --hpz-group the groups.
StatusOr<scheduler::Policy> PolicyFromFile(const Flags& f, const scheduler::ModelSpec& model,
                                 sim::Workload& w) {
  auto p = scheduler::ReadPolicyFile(f.policy_file);
  if (!p.ok()) return Bad(std::string(p.status().message()));
  // The file's mesh: the data ranks are what tp x cp x pp leave.
  w.tp = p->tensor_parallel;
  w.sp = p->sequence_parallel;
  w.tp_overlap = p->tp_comm_overlap;
  w.cp = p->context_parallel;
  w.pp = p->pipeline_parallel;
  w.vpp = p->virtual_stages;
  w.schedule = p->pipeline_schedule;
  w.ep = p->expert_parallel;
  w.etp = p->expert_tensor_parallel;
  w.moe_dispatcher = p->moe_dispatcher;
  w.moe_a2a_overlap = p->moe_a2a_overlap;
  w.moe_shared_overlap = p->moe_shared_overlap;
  w.moe_capacity_factor = p->moe_capacity_factor;
  if (Status s = sim::ValidateWorkload(w); !s.ok()) {
    return Bad(absl::StrCat("policy file ", f.policy_file, ": ", s.message()));
  }
  const int64_t local = w.global_batch / w.data_ranks();
  if (f.micro_batch_given) {
    p->micro_steps = static_cast<int>(local / w.micro_batch);
  } else if (local % p->micro_steps != 0) {
    return Bad(absl::StrCat("policy file ", f.policy_file, ": field \"micro_steps\" = ",
                      p->micro_steps, " does not divide the local batch ", local,
                      " (global batch / data ranks)"));
  } else {
    w.micro_batch = local / p->micro_steps;
  }
  if (w.shard_group >= 0) p->shard_group = w.shard_group;
  if (w.hpz_group >= 0) p->hpz_group = w.hpz_group;
  // The model's bounds on the file's knobs (train_tiny checks the same).
  scheduler::Policy checked = *p;
  if (f.recompute_given) checked.recompute_blocks = 0;  // replaced by the flag
  if (Status s = scheduler::CheckPolicyForModel(checked, model,
                                                absl::StrCat("policy file ", f.policy_file));
      !s.ok()) {
    return Bad(std::string(s.message()));
  }
  if (auto g = scheduler::ResolveMesh(*p, w.gpus); !g.ok()) {
    return Bad(absl::StrCat("policy file ", f.policy_file, ": ", g.status().message()));
  }
  return *std::move(p);
}

// A mixture of experts: its layout and what its all-to-all left exposed.
std::string MoeLine(const scheduler::ModelSpec& model, const scheduler::Policy& p,
                    const sim::Workload& w, const sim::SimResult& r) {
  auto mesh = scheduler::ResolveMesh(p, w.gpus);
  const int edp = mesh.ok() ? mesh->size(scheduler::kExpertDataGroup) : 0;
  return absl::StrFormat(
      "        experts: ep=%d etp=%d edp=%d, %lld per rank, dispatcher %s%s%s; exposed "
      "all-to-all %.3f s; MFU on %.2fB active parameters; dispatch buffers %.2f GiB\n",
      p.expert_parallel, p.expert_tensor_parallel, edp,
      static_cast<long long>(model.moe.experts / p.expert_parallel),
      scheduler::MoeDispatcherName(p.moe_dispatcher),
      p.moe_a2a_overlap ? ", a2a overlapped across micro-batches" : "",
      p.moe_shared_overlap ? ", shared experts under the dispatch" : "", r.exposed_a2a_s,
      scheduler::ActiveParameterCount(model) / 1e9, r.memory.dispatch / 1073741824.0);
}

// --memory: one line per policy, bytes per GPU by what holds them.
void PrintMemory(const sim::MemoryReport& m, const sim::ClusterSpec& c, bool fits,
                 std::string& out) {
  const double gib = 1073741824.0;
  absl::StrAppendFormat(&out, "        memory per GPU (GiB): weights %.2f, activations %.2f, "
              "gradients %.2f, optimizer %.2f, comm buffers %.2f, reserve %.2f = %.2f of %.0f (%s)",
              m.weights / gib, m.activations / gib, m.gradients / gib, m.optimizer / gib,
              m.comm_buffers / gib, m.reserve / gib, m.total() / gib, c.memory_gib,
              fits ? "fits" : "does NOT fit");
  if (m.host() > 0) {
    absl::StrAppendFormat(&out, "; host %.2f (weights %.2f, gradients %.2f, optimizer %.2f)",
                          m.host() / gib, m.host_weights / gib, m.host_gradients / gib,
                          m.host_optimizer / gib);
  }
  absl::StrAppendFormat(&out, "; %.3gB of %.3gB parameters trained\n", m.trainable / 1e9,
                        m.parameters / 1e9);
}

nlohmann::json MemoryJson(const sim::MemoryReport& m) {
  return {{"weights_bytes", m.weights},
          {"activations_bytes", m.activations},
          {"gradients_bytes", m.gradients},
          {"optimizer_bytes", m.optimizer},
          {"comm_buffers_bytes", m.comm_buffers},
          {"reserve_bytes", m.reserve},
          {"total_bytes", m.total()},
          {"host_weights_bytes", m.host_weights},
          {"host_gradients_bytes", m.host_gradients},
          {"host_optimizer_bytes", m.host_optimizer},
          {"parameters", m.parameters},
          {"trainable_parameters", m.trainable}};
}

// --tune: the search, its best candidates, and --policy-out.
Status TuneMain(const Flags& f, const scheduler::ModelSpec& model,
             const sim::ClusterSpec& cluster, const sim::Workload& w,
             const sim::Calibration& calibration,
             const sim::AttentionKernel& attention, const sim::KernelStack& stack,
             SimulateRun& run) {
  std::string& out = run.text;
  sim::TuneOptions o;
  if (!calibration.tables.empty()) o.sim.calibration = &calibration;
  if (calibration.kernels) o.sim.kernels = &*calibration.kernels;
  o.sim.attention = attention;
  o.sim.stack = stack;
  o.max_step_units = scheduler::kMaxStepUnits;
  sim::TuneTechniques& tt = o.techniques;
  if (f.tech.optimizer) tt.optimizer = *f.tech.optimizer;
  if (f.tech.recompute) tt.recompute = *f.tech.recompute;
  if (f.tech.lora_rank) tt.lora_rank = *f.tech.lora_rank;
  if (f.tech.lora_alpha) tt.lora_alpha = *f.tech.lora_alpha;
  if (f.tech.lora_targets) tt.lora_targets = *f.tech.lora_targets;
  if (f.tech.base_dtype) tt.base_dtype = *f.tech.base_dtype;
  for (const std::string& a : f.allow) {
    (a == "adamw8bit" ? tt.allow_adamw8bit : a == "lora" ? tt.allow_lora : tt.allow_nf4) = true;
  }
  const auto start = std::chrono::steady_clock::now();
  auto t = sim::Tune(model, cluster, w, o);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!t.ok()) return Bad(std::string(t.status().message()));
  absl::StrAppendFormat(&out, "# tune: %d configurations simulated, %d skipped by the memory bound, "
              "%d refused, in %.2f s\n",
              t->simulated, t->pruned, t->refused, elapsed);
  absl::StrAppendFormat(&out, "%-4s %8s %6s %8s %5s  %s\n", "rank", "step_s", "MFU", "peak_GiB",
              "fits", "knobs");
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < t->best.size(); ++i) {
    const sim::TuneCandidate& c = t->best[i];
    absl::StrAppendFormat(&out, "%-4zu %8.3f %5.1f%% %8.1f %5s  %s\n", i + 1, c.result.step_s,
                100 * c.result.mfu, c.result.memory.peak() / 1073741824.0,
                c.result.fits ? "yes" : "NO", sim::DescribeKnobs(c).c_str());
    rows.push_back({{"step_time_s", c.result.step_s},
                    {"mfu", c.result.mfu},
                    {"peak_memory_bytes", c.result.memory.peak()},
                    {"fits", c.result.fits},
                    {"micro_batch", c.workload.micro_batch},
                    {"knobs", sim::DescribeKnobs(c)}});
  }
  if (!t->best[0].result.fits) {
    absl::StrAppendFormat(&out, "# nothing fits in %.0f GiB: the rows are the configurations "
                "closest to fitting\n", cluster.memory_gib);
    if (!f.policy_out.empty()) {
      return Bad(absl::StrCat("no configuration fits in device memory (",
                        cluster.memory_gib, " GiB); no policy file written"));
    }
  }
  if (!f.policy_out.empty()) {
    if (Status s = scheduler::WritePolicyFile(f.policy_out, t->best[0].policy); !s.ok()) {
      return Bad(std::string(s.message()));
    }
    absl::StrAppendFormat(&out, "# wrote the best to %s: simulate --policy-file=%s (same model, "
                "cluster, --gpus, --seq, --global-batch) runs it\n",
                f.policy_out.c_str(), f.policy_out.c_str());
  }
  const nlohmann::json json = {{"model", model.name},
                               {"cluster", cluster.name},
                               {"gpus", w.gpus},
                               {"tune_seconds", elapsed},
                               {"simulated", t->simulated},
                               {"best", rows}};
  run.json = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (f.json) absl::StrAppend(&out, run.json, "\n");
  return absl::OkStatus();
}

}  // namespace

StatusOr<SimulateRun> RunSimulate(const std::vector<std::string>& args) {
  SimulateRun run;
  bool help = false, version = false;
  BATON_ASSIGN_OR_RETURN(const Flags f, Parse(args, &help, &version));
  if (help) {
    run.text = SimulateUsage();
    return run;
  }
  if (version) {
    run.text = absl::StrCat("simulate (baton ", BATON_VERSION, ")\n");
    return run;
  }
  std::string& out = run.text;
  sim::Calibration calibration;
  for (const std::string& p : f.calibration) {
    BATON_ASSIGN_OR_RETURN(const std::string text, ReadFile(p, "calibration file"));
    const Status s = sim::AddCalibration(text, p, calibration);
    if (!s.ok()) return Bad(std::string(s.message()));
  }
  if (!f.kernel_table.empty()) {
    BATON_ASSIGN_OR_RETURN(const std::string text, ReadFile(f.kernel_table, "kernel table"));
    auto t = sim::ParseKernelTable(text, f.kernel_table);
    if (!t.ok()) return Bad(std::string(t.status().message()));
    calibration.kernels = *std::move(t);
  }
  auto model = f.hf_config.empty() ? scheduler::ModelPreset(f.model)
                                   : scheduler::ModelFromHfConfigFile(f.hf_config);
  if (!model.ok()) return Bad(std::string(model.status().message()));
  auto cluster = sim::ClusterPreset(f.cluster);
  if (!cluster.ok()) return Bad(std::string(cluster.status().message()));
  if (!f.cluster_file.empty()) {
    BATON_ASSIGN_OR_RETURN(const std::string text, ReadFile(f.cluster_file, "cluster file"));
    const Status s = sim::ApplyClusterJson(text, *cluster);
    if (!s.ok()) return Bad(std::string(s.message()));
  }
  auto attention_kernel = sim::AttentionKernelPreset(f.attention_kernel, cluster->name);
  if (!attention_kernel.ok()) {
    return Bad(absl::StrCat("--attention-kernel: ", attention_kernel.status().message()));
  }
  const sim::AttentionKernel attention = *attention_kernel;
  if (auto d = sim::KernelHeadDim(attention, model->head_dim); !d.ok()) {
    return Bad(absl::StrCat("--attention-kernel=", f.attention_kernel, ": ", d.status().message()));
  }
  const auto stack = sim::KernelStackFor(f.kernel_stack, f.gemm_dtype, *cluster);
  if (!stack.ok()) return Bad(std::string(stack.status().message()));
  // --tune splits the batch per mesh and a policy file carries its own
  // mesh: they check the batch themselves.
  if (Status s = sim::ValidateWorkload(f.workload);
      !s.ok() && !f.tune && f.policy_file.empty()) {
    return Bad(std::string(s.message()));
  }
  sim::Workload w = f.workload;
  std::optional<scheduler::Policy> file_policy;
  if (!f.policy_file.empty()) {
    BATON_ASSIGN_OR_RETURN(file_policy, PolicyFromFile(f, *model, w));
  }
  const int64_t micro_steps = w.global_batch / w.data_ranks() / w.micro_batch;
  if (Status s = scheduler::CheckStepUnits(micro_steps, model->layers); !s.ok()) {
    return Bad(absl::StrCat(s.message(), ": raise --micro-batch or --gpus"));
  }
  int recompute = sim::kAutoRecompute;
  if (file_policy && !f.recompute_given) {
    recompute = file_policy->recompute_blocks;
  } else if (f.recompute == "all") {
    recompute = -1;
  } else if (f.recompute != "auto") {
    int64_t n = -1;
    if (!absl::SimpleAtoi(f.recompute, &n) || n < 0 || n > model->layers) {
      return Bad(absl::StrCat("--recompute-layers must be 0..", model->layers,
                        ", all or auto; got \"", f.recompute, "\""));
    }
    recompute = static_cast<int>(n);
  }
  for (const std::string& p : f.policies) {
    if (file_policy) break;
    if (!scheduler::PolicyPreset(p).ok()) {
      return Bad(std::string(scheduler::PolicyPreset(p).status().message()));
    }
  }
  const std::string active =
      model->moe.enabled()
          ? absl::StrFormat(", %.2fB active", scheduler::ActiveParameterCount(*model) / 1e9)
          : std::string();
  absl::StrAppendFormat(&out, "# %s (%.2fB parameters%s) on %d x %s (%d per node), seq %lld, "
              "global batch %lld, micro-batch %lld\n",
              model->name.c_str(), scheduler::ParameterCount(*model) / 1e9, active.c_str(),
              w.gpus, cluster->name.c_str(), cluster->gpus_per_node,
              static_cast<long long>(w.seq),
              static_cast<long long>(w.global_batch),
              static_cast<long long>(w.micro_batch));
  for (const auto& [name, table] : calibration.tables) {
    absl::StrAppendFormat(&out, "# calibration: %s from %zu measured sizes (busbw %.1f..%.1f GB/s)\n",
                name.c_str(), table.points.size(), table.points.front().second,
                table.points.back().second);
  }
  if (calibration.kernels) {
    absl::StrAppendFormat(&out, "# kernel table: %s (%zu GEMM shapes, launch %.1f us)\n",
                calibration.kernels->gpu.c_str(), calibration.kernels->gemm.size(),
                calibration.kernels->launch_us);
  }
  if (attention.active()) {
    absl::StrAppendFormat(&out, "# attention kernel: %s (forward %.1f%%, backward %.1f%% of peak%s%s)\n",
                f.attention_kernel.c_str(), 100 * attention.fwd_utilization,
                100 * attention.bwd_utilization,
                attention.pad_head_dim ? ", head dim padded to a power of two" : "",
                attention.no_rope ? ", ALiBi: no RoPE kernels" : "");
  }
  if (stack->compiled || stack->fp8) {
    absl::StrAppendFormat(&out, "# kernel stack: %s, %s GEMMs (sim/compute_model.h KernelStack)\n",
                f.kernel_stack.c_str(), f.gemm_dtype.c_str());
  }
  // A mixture of experts always runs as parallel graphs (its expert nodes).
  const bool parallel = f.parallel || (file_policy && scheduler::IsParallel(*file_policy)) ||
                        model->moe.enabled();
  if (parallel && (f.memory || f.tech.any())) {
    return Bad(model->moe.enabled()
                   ? "--memory and the techniques' flags cover the data-parallel step; a "
                     "mixture of experts runs as parallel graphs (its stages' memory is printed)"
                   : "--memory and the techniques' flags cover the data-parallel step; the "
                     "policy file sets tensor, context or pipeline parallelism");
  }
  if (parallel && !f.tune) {
    auto p = file_policy ? StatusOr<scheduler::Policy>(*file_policy)
                         : sim::SimPolicy(f.policies[0], w, cluster->gpus_per_node);
    auto mesh = p.ok() ? scheduler::ResolveMesh(*p, w.gpus)
                       : StatusOr<scheduler::DeviceMesh>(p.status());
    if (!mesh.ok()) return Bad(std::string(mesh.status().message()));
    absl::StrAppendFormat(&out, "# mesh: %s; %lld micro-batches per step per pipeline\n",
                mesh->ToString().c_str(), static_cast<long long>(micro_steps));
  }
  if (f.tune) {
    BATON_RETURN_IF_ERROR(TuneMain(f, *model, *cluster, w, calibration, attention, *stack, run));
    return run;
  }
  const std::vector<std::string> names =
      file_policy                                  ? std::vector<std::string>{file_policy->name}
      : model->moe.enabled() && !f.policies_given ? std::vector<std::string>{"baton"}
                                                   : f.policies;
  int name_width = 7;  // the policy column fits the longest name printed
  for (const std::string& name : names) {
    name_width = std::max(name_width, static_cast<int>(name.size()));
  }
  absl::StrAppendFormat(&out, "%-*s %8s %8s %8s %8s %6s %9s %8s %30s %6s %5s\n", name_width, "policy",
              "step_s", "compute", "exp_AG", "exp_RS", "MFU", "tok/s/GPU",
              "peak_GiB", "(states+arena+act+logits+rsv)", "a/lb", "fits");
  nlohmann::json json;
  json["model"] = model->name;
  json["cluster"] = cluster->name;
  json["gpus"] = w.gpus;
  nlohmann::json rows = nlohmann::json::array();
  const double gib = 1073741824.0;
  bool first = true;
  for (const std::string& name : names) {
    sim::SimOptions o;
    if (!calibration.tables.empty()) o.calibration = &calibration;
    if (calibration.kernels) o.kernels = &*calibration.kernels;
    o.attention = attention;
    o.stack = *stack;
    o.timeline = first && (!f.trace.empty() || !f.svg.empty());
    scheduler::StepGraph graph;
    StatusOr<scheduler::Policy> policy =
        file_policy ? StatusOr<scheduler::Policy>(*file_policy)
                    : sim::SimPolicy(name, w, cluster->gpus_per_node);
    if (!policy.ok()) return Bad(absl::StrCat(name, ": ", policy.status().message()));
    f.tech.Apply(*policy);  // the techniques' flags
    if (Status st = scheduler::ValidatePolicy(*policy); !st.ok()) {
      // A preset the techniques do not combine with, when none was chosen.
      if (f.policies_given) return Bad(std::string(st.message()));
      absl::StrAppendFormat(&out, "# %s: skipped (%s)\n", name.c_str(),
                            std::string(st.message()).c_str());
      continue;
    }
    scheduler::ParallelStep step;
    StatusOr<sim::SimResult> r =
        parallel ? sim::SimulateParallel(*model, *cluster, w, *policy, recompute, o, &step, &graph)
                 : sim::SimulatePolicy(*model, *cluster, w, *policy, recompute, o, &graph);
    if (!r.ok()) return Bad(absl::StrCat(name, ": ", r.status().message()));
    if (Status s = sim::ValidateResult(*r); !s.ok()) return Bad(std::string(s.message()));
    const sim::MemoryBreakdown& m = r->memory;
    const std::string parts = absl::StrFormat(
        "(%.1f+%.1f+%.1f+%.1f+%.1f)", m.states / gib, m.arena / gib,
        (m.activations + m.dispatch) / gib, m.logits / gib, m.reserved / gib);
    absl::StrAppendFormat(&out, "%-*s %8.3f %8.3f %8.3f %8.3f %5.1f%% %9.0f %8.1f %30s %6.2f %5s\n",
                name_width, name.c_str(), r->step_s, r->compute_s, r->exposed_ag_s,
                r->exposed_rs_s, 100 * r->mfu, r->tokens_per_s_per_gpu,
                m.peak() / gib, parts.c_str(),
                static_cast<double>(r->arena_bytes) /
                    std::max<size_t>(r->lower_bound_bytes, 1),
                r->fits ? "yes" : "NO");
    if (recompute == sim::kAutoRecompute) {
      absl::StrAppendFormat(&out, "        recompute-layers=auto chose %d of %lld blocks%s%s\n",
                  r->recompute_blocks, static_cast<long long>(model->layers),
                  parallel ? " per virtual stage" : "",
                  r->fits ? "" : " (does not fit even with all recomputed)");
    }
    if (graph.offload()) {  // the host side of the step (sim/host_cost.h)
      const sim::HostRates h = sim::ResolveHostRates(*cluster, w.gpus);
      absl::StrAppendFormat(&out, "        offload: %s's executor; per GPU %.1f GB/s host link, host "
                  "optimizer %.2fe9 params/s (%s-bound, %d ranks share the host)\n",
                  sim::OffloadExecutorName(cluster->offload_executor), h.link_gbps,
                  h.opt_gparams, h.opt_memory_bound ? "memory" : "core",
                  h.ranks_on_node);
    }
    std::optional<sim::MemoryReport> mr;  // the data-parallel step's
    if (!parallel) mr = sim::ReportMemory(graph, *cluster, w);
    if (f.memory) PrintMemory(*mr, *cluster, r->fits, out);
    if (model->moe.enabled()) out += MoeLine(*model, *policy, w, *r);
    if (!r->stages.empty()) out += sim::StagesText(*r);
    rows.push_back({{"policy", name},
                    {"step_time_s", r->step_s},
                    {"mfu", r->mfu},
                    {"exposed_comm_s", r->exposed_comm_s()},
                    {"peak_memory_bytes", m.peak()},
                    {"fits", r->fits},
                    {"recompute_blocks", r->recompute_blocks},
                    {"recompute", scheduler::RecomputeName(graph.policy.recompute)},
                    {"tokens_per_s_per_gpu", r->tokens_per_s_per_gpu}});
    if (model->moe.enabled()) {
      rows.back()["experts"] = {{"ep", policy->expert_parallel},
                                {"etp", policy->expert_tensor_parallel},
                                {"dispatcher", scheduler::MoeDispatcherName(policy->moe_dispatcher)},
                                {"exposed_all_to_all_s", r->exposed_a2a_s},
                                {"dispatch_buffers_bytes", r->memory.dispatch},
                                {"active_parameters", scheduler::ActiveParameterCount(*model)}};
    }
    if (mr) rows.back()["memory"] = MemoryJson(*mr);
    if (!r->stages.empty()) rows.back()["pipeline"] = sim::StagesJson(*r);
    if (o.timeline) {
      const std::string title =
          absl::StrCat(model->name, " on ", w.gpus, " x ", cluster->name, ", policy ", name);
      if (!f.trace.empty()) {
        BATON_RETURN_IF_ERROR(WriteFile(f.trace, parallel ? sim::PipelineTraceJson(step, *r) : sim::TraceJson(graph, *r),
                  "the trace"));
      }
      if (!f.svg.empty()) {
        BATON_RETURN_IF_ERROR(WriteFile(f.svg,
                  parallel ? sim::PipelineSvg(step, *r, title) : sim::StepSvg(graph, *r, title),
                  "the SVG"));
      }
    }
    first = false;
  }
  json["policies"] = rows;
  absl::StrAppendFormat(&out, "# exp_AG / exp_RS: compute-stream idle time waiting on all-gathers"
              " / reductions; a/lb: arena over its lower bound\n");
  run.json = json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (f.json) absl::StrAppend(&out, run.json, "\n");
  return run;
}

}  // namespace baton
