#include "baton/examples/train_tiny_flags.h"

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "baton/cli/flags.h"
#include "baton/scheduler/limits.h"
#include "baton/scheduler/policy_file.h"

namespace baton::train_tiny {

[[noreturn]] void Fail(const std::string& message) {
  cli::FailUsage("train_tiny", message);
}

namespace {

const char kUsage[] =
    "usage: train_tiny [--model=tiny | --hf-config=PATH] [--layers=N] [--hidden=N]\n"
    "  [--heads=N] [--kv-heads=N] [--ffn=N] [--vocab=N] [--seq=128] [--batch=2]\n"
    "  [--micro-steps=N] [--steps=20] [--lr=1e-3] [--seed=1] [--policy=NAME]\n"
    "  [--backend=inproc|ucx|nccl] [--nranks=N] [--device=cpu|cuda]\n"
    "  [--dtype=f32|bf16] [--data=PATH] [--check-reference] [--json]\n"
    "  [--timeout=SECONDS] [--policy-file=PATH] (a policy file, e.g. from\n"
    "   simulate --tune --policy-out: its knobs as written, except that\n"
    "   --dtype and --micro-steps override its param_dtype and micro_steps)\n"
    "  [--trace=PATH] (Perfetto / Chrome JSON, one track per stream)\n"
    "  [--recompute-layers=N|all] (activation recompute of the first N blocks;\n"
    "   default: the policy's, none)\n"
    "%s"
    "  [--check-schedule] (every rank's schedule of collectives compared first)\n"
    "  [--arrivals] (per step: arrival skew and slowest rank per collective;\n"
    "   at the end the measured straggler_cv) [--arrivals-out=PATH] (also\n"
    "   writes it as a cluster file for simulate --cluster-file=PATH)\n"
    "  [--save-dir=DIR --save-every=N] (a checkpoint after every N-th step)\n"
    "  [--resume=DIR] (from the newest complete checkpoint in DIR; same global batch)\n"
    "  [--pp=P] (pipeline stages; --nranks = data ranks x P)\n"
    "  [--pp-schedule=1f1b|interleaved|zb-h1] [--vpp=V] (interleaved: V model chunks\n"
    "   per stage; zb-h1: each backward split into input- and weight-gradient passes)\n"
    "  [--pp-layers=even|flops|N,N,...] (blocks per stage: even, balancing each\n"
    "   unit's training FLOPs, or given)\n"
    "  [--pp-gather=step|micro] (a stage gathers its buckets once per step and keeps\n"
    "   them, or before each micro-batch's passes, unit by unit, and frees them)\n"
    "  [--tp=T] (tensor parallelism; --nranks = data ranks x T; T divides the\n"
    "   heads, KV heads, FFN width and, without --sp, the vocabulary) [--tp-overlap]\n"
    "   (the forward's all-reduces in T row chunks, each beside the next chunk's\n"
    "   GEMM) [--sp] (sequence\n"
    "   parallelism: norms, residual stream and loss on each tensor rank's T-th\n"
    "   of the tokens; all-gathers and reduce-scatters instead of all-reduces;\n"
    "   with --tp-overlap decomposed around the GEMMs)\n"
    "  [--sim-calibration=FILE[,FILE...]] (with --tp --trace on inproc: the\n"
    "   simulator's exposed tensor communication beside the measured one is\n"
    "   priced from these, as simulate --calibration takes them: nccl-tests\n"
    "   output or //bench:collectives -J JSON per collective, a kernel table\n"
    "   from //bench:kernels; default the h100 preset's costs)\n"
    "Limits (scheduler/limits.h): --nranks <= 4096, and for the ranks this\n"
    "process starts itself (inproc threads, or ucx/nccl without a launcher)\n"
    "at most 16 per CPU of this host; --seq and --batch <= 65536,\n"
    "--micro-steps <= 4096 (a policy file's micro_steps too), --lr <= 10,\n"
    "--timeout <= 604800, --layers <= 16384, other model sizes <= 2^24, at\n"
    "most 2^31 parameters; a policy file's recompute_blocks <= the model's\n"
    "blocks. A flag may be given once.\n";

// Flag bounds (stated in --help). Ranks, micro-steps and model sizes come
// from scheduler/limits.h (the same bounds through a policy file or
// config.json; the ranks this process starts are bounded again by the
// host, MaxLocalRanks); the model is bounded again by ValidateModelSpec and
// the 2^31-parameter check below.
constexpr int64_t kMaxRanks = scheduler::kMaxLocalRanks;
constexpr int64_t kMaxSeq = 1 << 16;
constexpr int64_t kMaxBatch = 1 << 16;
constexpr int64_t kMaxMicroSteps = scheduler::kMaxMicroSteps;
constexpr int64_t kMaxSteps = int64_t{1} << 30;
constexpr int64_t kMaxTimeoutS = 7 * 86400;
constexpr double kMaxLr = 10;
constexpr int64_t kMaxVirtualStages = 100;  // the executor's pipeline tags

int64_t Positive(const std::string& flag, const std::string& value, int64_t hi) {
  return cli::PositiveFlag("train_tiny", flag, value, hi);
}

}  // namespace

Flags Parse(int argc, char** argv) {
  Flags f;
  cli::FlagReader flags("train_tiny");
  const int64_t dim = scheduler::kMaxModelDim;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    cli::VersionFlag("train_tiny", a);
    if (a == "--help" || a == "-h") {
      std::printf(kUsage, f.tech.Usage());
      std::exit(0);
    }
    if (a == "--json") { flags.Switch(a); f.json = true; continue; }
    if (a == "--check-reference") { flags.Switch(a); f.check_reference = true; continue; }
    if (a == "--check-schedule") { flags.Switch(a); f.check_schedule = true; continue; }
    if (a == "--arrivals") { flags.Switch(a); f.arrivals = true; continue; }
    if (a == "--sp") { flags.Switch(a); f.sp = true; continue; }
    if (a == "--tp-overlap") { flags.Switch(a); f.tp_overlap = true; continue; }
    const auto [key, v] = flags.Split(a);
    if (key == "--model") { f.model = v; f.model_given = true; }
    else if (key == "--hf-config") f.hf_config = v;
    else if (key == "--layers") f.layers = Positive(key, v, scheduler::kMaxModelLayers);
    else if (key == "--hidden") f.hidden = Positive(key, v, dim);
    else if (key == "--heads") f.heads = Positive(key, v, dim);
    else if (key == "--kv-heads") f.kv_heads = Positive(key, v, dim);
    else if (key == "--ffn") f.ffn = Positive(key, v, dim);
    else if (key == "--vocab") f.vocab = Positive(key, v, dim);
    else if (key == "--seq") f.seq = Positive(key, v, kMaxSeq);
    else if (key == "--batch") f.batch = Positive(key, v, kMaxBatch);
    else if (key == "--micro-steps") f.micro_steps = Positive(key, v, kMaxMicroSteps);
    else if (key == "--steps") f.steps = Positive(key, v, kMaxSteps);
    else if (key == "--seed") f.seed = static_cast<uint64_t>(Positive(key, v, INT64_MAX));
    else if (key == "--nranks") f.nranks = static_cast<int>(Positive(key, v, kMaxRanks));
    else if (key == "--timeout") f.timeout_s = Positive(key, v, kMaxTimeoutS);
    else if (key == "--lr") {
      if (!absl::SimpleAtod(v, &f.lr) || !(f.lr > 0) || !(f.lr <= kMaxLr)) {
        Fail(absl::StrCat("--lr needs a positive number at most ", kMaxLr, ", got \"", v,
                          "\""));
      }
    }
    else if (key == "--policy") { f.policy = v; f.policy_given = true; }
    else if (key == "--policy-file") f.policy_file = v;
    else if (key == "--backend") f.backend = v;
    else if (key == "--device") f.device = v;
    else if (key == "--dtype") { f.dtype = v; f.dtype_given = true; }
    else if (key == "--data") f.data = v;
    else if (f.tech.Parse(key, v)) {}
    else if (key == "--recompute-layers") {
      f.recompute_layers = v == "all" ? -1 : cli::IntFlag("train_tiny", key, v, 0, dim);
    }
    else if (key == "--save-dir") {
      if (v.empty()) Fail("--save-dir needs a directory");
      f.save_dir = v;
    }
    else if (key == "--save-every") f.save_every = Positive(key, v, kMaxSteps);
    else if (key == "--pp") f.pp = static_cast<int>(Positive(key, v, kMaxRanks));
    else if (key == "--vpp") f.vpp = static_cast<int>(Positive(key, v, kMaxVirtualStages));
    else if (key == "--tp") f.tp = static_cast<int>(Positive(key, v, kMaxRanks));
    else if (key == "--pp-layers") {
      if (v.empty()) Fail("--pp-layers needs even, flops or blocks per stage (e.g. 3,5)");
      f.pp_layers = v;
    }
    else if (key == "--pp-gather") {
      if (v != "step" && v != "micro") Fail("--pp-gather must be step or micro, got '" + v + "'");
      f.pp_gather_micro = v == "micro";
    }
    else if (key == "--pp-schedule") {
      auto sched = scheduler::ParsePipelineSchedule(v);
      if (!sched.ok()) Fail(absl::StrCat("--pp-schedule: ", sched.status().message()));
      f.pp_schedule = *sched;
    }
    else if (key == "--resume") {
      if (v.empty()) Fail("--resume needs a checkpoint directory");
      f.resume = v;
    }
    else if (key == "--trace") {
      if (v.empty()) Fail("--trace needs a file path");
      f.trace = v;
    }
    else if (key == "--sim-calibration") f.sim_calibration = cli::ListFlag("train_tiny", key, v);
    else if (key == "--arrivals-out") {
      if (v.empty()) Fail("--arrivals-out needs a file path");
      f.arrivals_out = v;
      f.arrivals = true;
    }
    else Fail(absl::StrCat("unknown flag ", key, " (see --help)"));
  }
  if (f.save_dir.empty() != (f.save_every == 0)) {
    Fail("--save-dir and --save-every go together: where and how often to save");
  }
  if (!f.resume.empty() && f.check_reference) {
    Fail("--check-reference trains from step 0; it cannot follow --resume");
  }
  if (f.model_given && !f.hf_config.empty()) {
    Fail("--model and --hf-config name two models; give one");
  }
  f.tech.Check();
  if (!f.sim_calibration.empty() &&
      (f.tp < 2 || f.trace.empty() || f.backend != "inproc" || (f.tp_overlap && !f.sp))) {
    Fail("--sim-calibration prices the simulator's figure printed beside the measured "
         "tensor exposure: it needs --tp, --trace and inproc (and --sp with --tp-overlap)");
  }
  if (f.backend != "inproc" && f.backend != "ucx" && f.backend != "nccl") {
    Fail(absl::StrCat("--backend must be inproc, ucx or nccl, got \"", f.backend, "\""));
  }
  if (f.device != "cpu" && f.device != "cuda") {
    Fail(absl::StrCat("--device must be cpu or cuda, got \"", f.device, "\""));
  }
  if (f.dtype != "f32" && f.dtype != "bf16") {
    Fail(absl::StrCat("--dtype must be f32 or bf16, got \"", f.dtype, "\""));
  }
  if (!f.policy_file.empty()) {
    if (f.policy_given) Fail("--policy and --policy-file both choose the policy; give one");
    auto p = scheduler::ReadPolicyFile(f.policy_file);
    if (!p.ok()) Fail(std::string(p.status().message()));
    if (!f.dtype_given) {
      if (p->param_dtype != DataType::kF32 && p->param_dtype != DataType::kBF16) {
        Fail(absl::StrCat("policy file ", f.policy_file, ": field \"param_dtype\" = ",
                          DataTypeName(p->param_dtype),
                          ": train_tiny trains in float or bfloat16"));
      }
      f.dtype = p->param_dtype == DataType::kBF16 ? "bf16" : "f32";
    }
    f.file_policy = *std::move(p);
  }
  if (f.backend == "ucx" && f.device == "cuda") {
    Fail("--backend=ucx moves host memory: use --device=cpu (or --backend=nccl)");
  }
  if (f.backend == "nccl" && f.device != "cuda") {
    Fail("--backend=nccl needs --device=cuda");
  }
  if (f.pp == 1 && f.pp_layers != "even") Fail("--pp-layers splits the stages of --pp > 1");
  if ((f.vpp > 1) != (f.pp_schedule == scheduler::PipelineSchedule::kInterleaved)) {
    Fail("--vpp=V > 1 and --pp-schedule=interleaved go together");
  }
  if (f.pp_schedule != scheduler::PipelineSchedule::k1F1B && f.pp == 1) {
    Fail("--pp-schedule needs --pp > 1");
  }
  if (f.pp_gather_micro && f.pp == 1) {
    Fail("--pp-gather needs --pp > 1 (the data-parallel graphs gather per micro-step)");
  }
  if (f.vpp > 1 && f.pp_layers == "flops") {
    Fail("--pp-layers=flops balances stages without virtual stages; give even or N,N,...");
  }
  if (f.pp > 1) {
    // What pipeline stages do not run with yet, one line each.
    if (f.backend == "nccl") Fail("--pp runs on --backend=inproc or ucx (nccl not yet)");
    if (f.check_schedule) Fail("--check-schedule compares one schedule; --pp stages differ");
    if (f.arrivals) Fail("--arrivals measures data-parallel collectives; not with --pp");
  }
  if (f.sp && f.tp == 1) Fail("--sp (sequence parallelism) needs --tp > 1");
  if (f.tp_overlap && f.tp == 1) Fail("--tp-overlap needs --tp > 1");
  if (f.tp > 1) {
    // What tensor parallelism does not run with yet, one line each.
    if (f.sp && (f.seq * f.batch) % f.tp != 0) {
      Fail(absl::StrCat("--sp shards each rank's --seq x --batch = ", f.seq * f.batch,
                        " tokens over --tp=", f.tp, ", which does not divide them"));
    }
    if (f.backend == "nccl") Fail("--tp runs on --backend=inproc or ucx (nccl not yet)");
    if (f.check_schedule) Fail("--check-schedule is not run with --tp yet");
    if (f.arrivals) Fail("--arrivals measures data-parallel collectives; not with --tp");
  }
  return f;
}

scheduler::ModelSpec ModelFromFlags(const Flags& f) {
  auto spec = f.hf_config.empty() ? scheduler::ModelPreset(f.model)
                                  : scheduler::ModelFromHfConfigFile(f.hf_config);
  if (!spec.ok()) Fail(std::string(spec.status().message()));
  scheduler::ModelSpec s = *spec;
  if (f.layers) s.layers = f.layers;
  if (f.hidden) {
    s.hidden = f.hidden;
    s.head_dim = 0;
  }
  if (f.heads) {
    s.heads = f.heads;
    s.head_dim = 0;
  }
  if (f.kv_heads) s.kv_heads = f.kv_heads;
  if (f.ffn) s.intermediate = f.ffn;
  if (f.vocab) s.vocab = f.vocab;
  if (s.head_dim == 0) {
    if (s.hidden % s.heads != 0) {
      Fail(absl::StrCat("--heads ", s.heads, " does not divide --hidden ", s.hidden));
    }
    s.head_dim = s.hidden / s.heads;
  }
  if (Status st = scheduler::ValidateModelSpec(s); !st.ok()) Fail(std::string(st.message()));
  if (s.head_dim % 2 != 0) {
    Fail(absl::StrCat("rotary embeddings need an even head_dim, got ", s.head_dim));
  }
  if (scheduler::ParameterCount(s) > (int64_t{1} << 31)) {
    Fail(absl::StrCat(s.name, " has ", scheduler::ParameterCount(s),
                      " parameters; train_tiny is for small models"));
  }
  return s;
}

namespace {

// The techniques flags (examples/technique_flags.h, --recompute-layers)
// applied to a policy.
void ApplyTechniques(const Flags& f, scheduler::Policy& p) {
  f.tech.Apply(p);
  if (f.pp > 1) {
    p.pipeline_parallel = f.pp;
    p.pipeline_schedule = f.pp_schedule;
    p.virtual_stages = f.vpp;
    if (f.pp_gather_micro) p.gather_per_micro_batch = true;
  }
  p.tensor_parallel = f.tp;
  p.tp_comm_overlap = f.tp_overlap;
  p.sequence_parallel = f.sp;
  if (f.tp > 1 &&
      (p.layout.lora_rank > 0 || p.layout.base_dtype == scheduler::BaseDtype::kNf4)) {
    // The stage graphs keep no frozen buckets apart, and the adapters have
    // no tensor split (scheduler/tensor_parallel.h).
    Fail("--tp with LoRA adapters or NF4 base weights does not run yet");
  }
  if (f.recompute_layers >= -1) p.recompute_blocks = static_cast<int>(f.recompute_layers);
  if (f.sp && p.recompute == scheduler::Recompute::kFull && p.recompute_blocks != 0) {
    Fail("--sp with full recompute does not run yet (--recompute=selective does)");
  }
  if (p.pipeline_schedule == scheduler::PipelineSchedule::kZbH1 &&
      p.layout.lora_rank > 0) {
    // The weight pass runs the base GEMMs' dw, not the adapters'.
    Fail("--pp-schedule=zb-h1 with LoRA adapters does not run yet (1f1b and interleaved do)");
  }
}

}  // namespace

scheduler::Policy PolicyFromFlags(const Flags& f) {
  if (f.file_policy) {
    scheduler::Policy p = *f.file_policy;
    p.param_dtype = f.dtype == "bf16" ? DataType::kBF16 : DataType::kF32;
    if (f.micro_steps) p.micro_steps = static_cast<int>(f.micro_steps);
    ApplyTechniques(f, p);
    if (Status st = scheduler::ValidatePolicy(p); !st.ok()) Fail(std::string(st.message()));
    return p;
  }
  auto p = scheduler::PolicyPreset(f.policy);
  if (!p.ok()) Fail(std::string(p.status().message()));
  p->param_dtype = f.dtype == "bf16" ? DataType::kBF16 : DataType::kF32;
  p->reduce_dtype = DataType::kF32;
  if (f.micro_steps) p->micro_steps = static_cast<int>(f.micro_steps);
  ApplyTechniques(f, *p);
  if (Status st = scheduler::ValidatePolicy(*p); !st.ok()) Fail(std::string(st.message()));
  return *p;
}

}  // namespace baton::train_tiny
