// train_tiny: a small Llama-style model trained through baton's layout,
// memory plan, executor and a communication backend, optionally checked
// against the same model trained unsharded on one rank.
//
//   train_tiny [--model=tiny | --hf-config=PATH] [--layers=N --hidden=N
//     --heads=N --kv-heads=N --ffn=N --vocab=N] [--seq=128] [--batch=2]
//     [--micro-steps=N] [--steps=20] [--lr=1e-3] [--seed=1]
//     [--policy=baton] [--backend=inproc|ucx|nccl] [--nranks=N]
//     [--device=cpu|cuda] [--dtype=f32|bf16] [--data=PATH]
//     [--check-reference] [--json] [--timeout=SECONDS] [--trace=PATH]
//     [--recompute-layers=N|all] and the techniques'
//     flags (examples/technique_flags.h: --optimizer, --recompute,
//     --offload, --lora-rank / --lora-alpha / --lora-targets, --base-dtype)
//     [--save-dir=DIR --save-every=N] [--resume=DIR]
//     [--pp=P --pp-schedule=1f1b|interleaved|zb-h1 --vpp=V --pp-layers=even|flops|N,N,...]
//     [--tp=T [--tp-overlap] [--sp]]
//
// --tp=T runs tensor parallelism over T ranks (scheduler/tensor_parallel.h:
// column-parallel QKV and gate / up, row-parallel output and down
// projections, heads, KV heads and FFN split T ways, all-reduces in the
// blocks; norms replicated; the embedding and the head split by vocabulary
// rows, with the parallel cross-entropy); --nranks is then data x T
// ranks, each tensor rank's slice sharded over its data ranks by the policy.
// The step graph is BuildParallelStep's with the layout of tensor slices: a
// block runs as two compute nodes each way, the forward's all-reduces are
// nodes on the tensor stream (--trace shows its track), the backward's run
// inside the compute nodes (scheduler/executor.h). --tp-overlap
// (Policy::tp_comm_overlap) drops the all-reduce nodes: each block part
// all-reduces its row-parallel output in T row chunks on the tensor
// stream, each beside the next chunk's GEMM (the same sums). --sp
// (Policy::sequence_parallel) runs Megatron's sequence parallelism: the
// residual stream, norms, embedding and loss on each tensor rank's T-th of
// the tokens, an all-gather node before each column-parallel part and a
// reduce-scatter node after each row-parallel one (all-gathers of the
// output gradients backward), the input gradients' reduce-scatters and
// the replicated parameters' gradient all-reduces over the tensor group in
// the compute nodes (examples/llama_trainer.h). With --tp-overlap the
// nodes do the gathers and reduce-scatters themselves, decomposed around
// the GEMMs (each rank's block of the gathered input computed on as it
// arrives, the row-parallel output reduce-scattered in T chunks beside the
// next chunk's GEMMs; the same sums).
//
// --pp=P splits the model into P pipeline stages (scheduler/parallel_graph.h:
// the embedding and the first blocks on the first, the last blocks, final
// norm and head on the last; blocks split evenly, by the units' training
// FLOPs with --pp-layers=flops, or as --pp-layers=N,N,... gives) run as 1F1B over
// --micro-steps micro-batches; --nranks is then data x P ranks, each stage's
// parameters sharded over its data ranks by the policy. docs/parallel.md.
// --pp-gather=micro re-gathers them before each micro-batch's passes
// (Policy::gather_per_micro_batch) instead of once per step.
//
// --save-dir=DIR --save-every=N saves a checkpoint (scheduler/checkpoint.h)
// to DIR/step-S after every N-th step, in the background; --resume=DIR
// starts from the newest complete checkpoint in DIR (or that checkpoint
// directory) and trains up to --steps, on any rank count, policy or mesh
// (with or without --pp / --tp / --sp) with the same global batch (--batch
// x data ranks x micro-steps). docs/checkpoints.md.
//
// --trace=PATH writes a Perfetto / Chrome trace of every step: one process
// per rank (inproc: all ranks; ucx/nccl: rank 0's), one track per stream,
// slices for compute, copies (collectives) and waits (scheduler/step_trace.h).
// With --tp on inproc it also prints the tensor communication exposed on
// the compute stream in the last step, measured, and beside it the
// simulator's figure for the same stage graphs (sim/tensor_exposure.h) on
// the h100 preset's costs, or on --sim-calibration's tables (what
// simulate --calibration takes: busbw per collective, a kernel table).
//
// Hangs and stragglers (docs/hangs.md): --check-schedule compares every
// rank's schedule of collectives before the first step (and their
// positions at every collective on inproc and ucx). --arrivals measures
// each rank's arrival at each collective: rank 0 prints per step the
// arrival skew and the slowest rank per collective, and at the end the
// measured straggler_cv (sim/cluster.h); --arrivals-out=PATH also writes it
// as a cluster file for `simulate --cluster-file=PATH`.
//
// ucx and nccl run one process per rank: started under a launcher (RANK,
// WORLD_SIZE, ... set) each process is one rank; started without one,
// train_tiny launches --nranks copies of itself. Rank 0 prints.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "baton/comm/factory.h"
#include "baton/comm/bootstrap/launch_env.h"
#include "baton/comm/bootstrap/launcher.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/examples/final_params.h"
#include "baton/examples/llama_trainer.h"
#include "baton/examples/train_tiny_flags.h"
#include "baton/optim/zenflow_driver.h"
#include "baton/runtime/device.h"
#include "baton/runtime/input_file.h"
#include "baton/runtime/json_input.h"
#include "baton/runtime/output_file.h"
#include "baton/scheduler/arrivals.h"
#include "baton/scheduler/checkpoint.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/layout.h"
#include "baton/scheduler/limits.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/step_graph.h"
#include "baton/scheduler/step_trace.h"
#include "baton/scheduler/tensor_parallel.h"
#include "baton/sim/parallel_sim.h"
#include "baton/sim/simulator.h"
#include "baton/sim/tensor_exposure.h"
#include "nlohmann/json.hpp"

namespace baton {
namespace {

using examples::Corpus;
using examples::LlamaRank;
using examples::TrainConfig;
using train_tiny::Fail;
using train_tiny::Flags;

// What one rank's training produced (rank 0's is reported).
struct RunResult {
  int64_t first_step = 0;      // 0, or the step resumed from
  std::vector<double> losses;  // mean loss over the global batch, per step
  std::vector<double> step_end_ms;  // per step: when it ended (from the first step's start)
  // Checkpoints saved (this rank's figures) and the wait for the last one
  // at the end of the run.
  struct Save {
    double at_ms = 0;    // when the save began (as step_end_ms)
    double wait_ms = 0;  // the host's wait for the previous save first
    scheduler::SaveStats stats;
  };
  std::vector<Save> saves;
  double final_save_wait_ms = 0;
  double ms_per_step = 0;      // steps after the first (of one step: that step)
  double tokens_per_s = 0;
  size_t arena_bytes = 0, lower_bound_bytes = 0, persistent_bytes = 0;
  size_t host_bytes = 0;  // offload: master and moments in host memory
  std::string plan_strategy;
  std::string trace_json;  // --trace: the step trace (scheduler/step_trace.h)
  // Job::final_params: this rank's final master values
  // (examples/final_params.h); RunInproc merges every rank's.
  std::vector<examples::ParamPiece> params;
  examples::WholeParams whole_params;  // RunInproc: merged
  // --pp --trace on inproc: per stage, the last step's compute idle time in
  // the pipeline's span (StepTrace::ComputeIdleFraction), mean over the
  // stage's ranks.
  std::vector<double> stage_bubble;
  std::vector<double> sim_stage_bubble;  // sim::ScheduleBubble on the stage graphs
  // --pp: per stage, the plan's saved activations of the
  // blocks (scheduler::SavedActivationPeak), one micro-batch's, and the
  // stage's arena.
  std::vector<int64_t> stage_saved_peak, stage_saved_micro;
  std::vector<size_t> stage_arena_bytes;
  // --tp --trace on inproc: per rank, the last step's tensor all-reduces
  // exposed on the compute stream (StepTrace::ExposedWaitMs), ms.
  std::vector<double> tp_exposed_ms;
  // --sp --trace on inproc: this rank's last step's time of the compute
  // stream in the tensor collectives inside the nodes
  // (LlamaRank::MeasureTensorWaits); RunInproc: per rank in tp_inner_ms_all.
  double tp_inner_ms = 0;
  std::vector<double> tp_inner_ms_all;
  // Beside tp_exposed_ms: per stage graph, the simulator's exposed tensor
  // communication on the same graphs (sim/tensor_exposure.h, the h100
  // preset's costs), or why it was not simulated.
  std::vector<sim::TensorExposure> sim_tp_exposure;
  std::string sim_tp_refused;
  // --arrivals: means over the steps after the first.
  double straggler_ms = 0;  // the mean rank's wait for later ranks per step
  double max_skew_ms = 0;   // the step's largest arrival skew
};

struct Job {
  scheduler::ModelSpec spec;
  // --tp: tensor ranks, and the model one of them computes (its slice:
  // scheduler/tensor_parallel.h, which BuildParallelStep's tensor_slices
  // lays out).
  int tp = 1;
  scheduler::ModelSpec slice;
  std::vector<int> stage_layers;  // --pp: blocks per stage (empty: none)
  scheduler::Policy policy;
  TrainConfig config;
  int64_t steps = 0;
  bool progress = false;  // rank 0 prints a line per step
  bool check_schedule = false;
  bool arrivals = false;
  bool final_params = false;  // fill RunResult::params (inproc --check-reference)
  std::string save_dir, resume;
  int64_t save_every = 0;
  // --sim-calibration's tables (empty: the h100 preset's costs).
  std::shared_ptr<const sim::Calibration> sim_calibration;
};

// The parameters the job trains (LoRA: its adapters only).
int64_t TrainableParams(const Job& job) {
  auto layout = scheduler::BuildLayout(job.spec, job.policy.layout, scheduler::Sharding{});
  return layout.ok() ? layout->trainable_params() : -1;
}

// Fills the executor's state: from the checkpoint (returns the step it
// holds) or from the initial values (0). The data position saved is the
// sequences consumed, so a global batch other than this run's is refused.
StatusOr<int64_t> StartState(const Job& job, scheduler::Executor& executor,
                             int64_t global_batch, int tp_rank) {
  if (job.resume.empty()) {
    const uint64_t seed = job.config.seed;
    const int tp = job.tp;
    // Each element's value is the whole parameter's (a tensor rank's slice
    // takes its elements' values), so every layout starts the same.
    BATON_RETURN_IF_ERROR(executor.InitParameters([seed, tp, tp_rank](
                                                      const scheduler::ParamSlot& slot,
                                                      float* values) {
      const scheduler::TensorSplit split =
          scheduler::TensorSplitOf(slot.name, /*vocab_parallel=*/true);
      for (int64_t i = 0; i < slot.numel; ++i) {
        values[i] = examples::InitialParameter(
            slot.name, scheduler::TensorWholeIndex(split, slot.shape, tp, tp_rank, i), seed);
      }
    }, examples::Nf4Packer()));
    return 0;
  }
  BATON_ASSIGN_OR_RETURN(const scheduler::CheckpointInfo info, executor.Load(job.resume));
  if (info.data_position != info.step * global_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint ", info.dir, " was saved after ", info.step, " steps at data position ",
        info.data_position, " (sequences); this run's global batch is ", global_batch,
        " sequences per step: resume with the same global batch (--batch is per rank)"));
  }
  if (info.step >= job.steps) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint ", info.dir, " is at step ",
                                                   info.step, "; --steps=", job.steps,
                                                   " leaves nothing to train"));
  }
  return info.step;
}

// The model's bounds on the policy (scheduler/limits.h), named by the route
// each knob came from, as simulate names them: --micro-steps, else the
// policy file's fields, else the preset.
void CheckPolicyRoutes(const Flags& f, const Job& job) {
  if (f.micro_steps > 0) {
    if (Status s = scheduler::CheckStepUnits(f.micro_steps, job.spec.layers); !s.ok()) {
      Fail(absl::StrCat("--micro-steps=", f.micro_steps, ": ", s.message()));
    }
  }
  const std::string file = f.file_policy ? absl::StrCat("policy file ", f.policy_file) : "";
  if (Status s = scheduler::CheckPolicyForModel(job.policy, job.spec, file); !s.ok()) {
    Fail(std::string(s.message()));
  }
  // What the layout refuses for this model (a LoRA rank above a targeted
  // matrix's), before any rank starts.
  auto layout = scheduler::BuildLayout(job.spec, job.policy.layout, scheduler::Sharding{});
  if (!layout.ok()) Fail(std::string(layout.status().message()));
}

// Trains on one rank through the executor; every rank calls it. `observer`
// (may be null): the rank's step trace recorder.
Status TrainRank(const Job& job, std::shared_ptr<const scheduler::StepGraph> graph,
                 const Corpus& corpus, Device& device, Communicator& comm, RunResult* out,
                 scheduler::NodeObserver* observer = nullptr) {
  // The data ranks (a pipeline's stages each see the whole batch's share of
  // their data coordinate): the corpus split and the loss's mean.
  const int rank = comm.rank();
  const scheduler::MeshGroup data{scheduler::MeshDim::kReplicate, scheduler::MeshDim::kShard,
                                  scheduler::MeshDim::kHpz};
  // --tp: this rank's coordinate along the mesh's tensor dimension (its
  // slice of the blocks; tensor ranks share their data).
  const int tp_rank = graph->mesh.coord(rank, scheduler::MeshDim::kTensor);
  const int ranks = graph->mesh.size(data);
  BATON_ASSIGN_OR_RETURN(auto model,
                         LlamaRank::Create(*graph, job.config, corpus, device, ranks,
                                           graph->mesh.position(rank, data), tp_rank));
  if (observer != nullptr && graph->policy.sequence_parallel && device.kind() == DeviceKind::kHost) {
    // --sp --trace: the tensor collectives inside the nodes, timed too.
    BATON_RETURN_IF_ERROR(model->MeasureTensorWaits(true));
  }
  scheduler::ExecutorOptions options;
  options.observer = observer;
  options.check_schedule = job.check_schedule;
  if (graph->policy.zenflow) {
    // ZenFlow's optimizer runs its own nodes (optim/zenflow_driver.h).
    options.optimizer_driver = optim::ZenFlowDriverFactory(job.config.adamw);
  }
  BATON_ASSIGN_OR_RETURN(auto executor,
                         scheduler::Executor::Create(graph, device, comm, options));
  std::optional<scheduler::ArrivalMonitor> monitor;
  if (job.arrivals) monitor.emplace(*graph, comm, device);
  double monitor_ms = 0, straggler_ms = 0, skew_ms = 0;
  const int64_t global_batch = job.config.batch * graph->policy.micro_steps * ranks;
  BATON_ASSIGN_OR_RETURN(const int64_t first,
                         StartState(job, *executor, global_batch, tp_rank));
  out->first_step = first;
  // The loss all-reduce runs on the compute stream after the step: a stream
  // of its own would be one more thread per in-process rank.
  Stream& loss_stream = executor->compute_stream();
  BATON_ASSIGN_OR_RETURN(DeviceBuffer scalar, device.Allocate(sizeof(float)));
  const scheduler::StepCallbacks callbacks = model->Callbacks();
  const double global_tokens = static_cast<double>(model->tokens_per_step()) * ranks;
  const auto t_start = std::chrono::steady_clock::now();
  auto since_start = [&t_start]() {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t_start)
        .count();
  };
  auto t_first = t_start;
  for (int64_t step = first; step < job.steps; ++step) {
    if (step == first + 1) t_first = std::chrono::steady_clock::now();
    const auto t0 = std::chrono::steady_clock::now();
    BATON_RETURN_IF_ERROR(model->LoadBatch(executor->compute_stream(), step));
    BATON_RETURN_IF_ERROR(executor->Step(callbacks));
    BATON_RETURN_IF_ERROR(executor->Synchronize());
    out->tp_inner_ms = model->TakeTensorWaitMs();  // the last step's stays
    BATON_ASSIGN_OR_RETURN(double local, model->LossSum(executor->compute_stream()));
    // The global mean: sum the ranks' loss sums (a tag the step never uses).
    float sum = static_cast<float>(local);
    BATON_RETURN_IF_ERROR(loss_stream.MemcpyAsync(scalar.data(), &sum, sizeof(float)));
    CollectiveOptions opts;
    opts.tag = scheduler::kFirstTrainerTag;
    BATON_RETURN_IF_ERROR(comm.AllReduce(scalar.data(), scalar.data(), 1, DataType::kF32,
                                         ReduceOp::kSum, loss_stream, opts));
    BATON_RETURN_IF_ERROR(loss_stream.MemcpyAsync(&sum, scalar.data(), sizeof(float)));
    BATON_RETURN_IF_ERROR(loss_stream.Synchronize());
    const double loss = sum / global_tokens;
    if (!std::isfinite(loss)) {
      return absl::DataLossError(absl::StrCat("step ", step, ": the loss is ", loss));
    }
    out->losses.push_back(loss);
    if (job.save_every > 0 && (step + 1) % job.save_every == 0) {
      // In the background: the copies run on the checkpoint stream (the
      // next step's optimizer waits for them on the device), the writer
      // thread writes the files during the next steps.
      RunResult::Save save;
      save.at_ms = since_start();
      scheduler::SaveOptions so;
      so.root = job.save_dir;
      so.data_position = (step + 1) * global_batch;
      // One save at a time: the previous one's figures, and how long the
      // host waited for it (0 when it was done).
      BATON_RETURN_IF_ERROR(executor->WaitForSave(&save.stats));
      save.wait_ms = since_start() - save.at_ms;
      if (!out->saves.empty()) out->saves.back().stats = save.stats;
      BATON_RETURN_IF_ERROR(executor->Save(so));
      out->saves.push_back(save);
    }
    out->step_end_ms.push_back(since_start());
    if (job.progress && rank == 0) {
      const double ms = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - t0).count();
      std::fprintf(stderr, "step %3lld/%lld  loss %.6f  %.1f ms\n",
                   static_cast<long long>(step + 1), static_cast<long long>(job.steps), loss, ms);
    }
    if (monitor) {
      // Collective over the ranks; its own time is left out of the step's.
      const auto m0 = std::chrono::steady_clock::now();
      BATON_ASSIGN_OR_RETURN(scheduler::StepArrivals a, monitor->Collect(step));
      if (step > first) {
        monitor_ms += std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - m0).count();
        straggler_ms += a.straggler_ms;
        skew_ms += a.max_skew_ms;
      }
      if (job.progress && rank == 0) {
        std::fputs(scheduler::FormatStepArrivals(a).c_str(), stderr);
      }
    }
  }
  const double total_ms = std::chrono::duration<double, std::milli>(
                              std::chrono::steady_clock::now() - t_first).count() -
                          monitor_ms;
  if (!out->saves.empty()) {
    const double t = since_start();
    BATON_RETURN_IF_ERROR(executor->WaitForSave(&out->saves.back().stats));
    out->final_save_wait_ms = since_start() - t;
  }
  const int64_t timed = std::max<int64_t>(1, job.steps - first - 1);
  out->ms_per_step = total_ms / timed;
  out->straggler_ms = straggler_ms / timed;
  out->max_skew_ms = skew_ms / timed;
  out->tokens_per_s = global_tokens / (out->ms_per_step / 1e3);
  out->arena_bytes = graph->plan.arena_bytes;
  out->lower_bound_bytes = graph->plan.lower_bound_bytes;
  out->persistent_bytes = graph->persistent_bytes;
  out->host_bytes = graph->host_bytes;
  out->plan_strategy = graph->plan.strategy;
  if (job.final_params) {
    BATON_ASSIGN_OR_RETURN(out->params, examples::FinalParamPieces(graph->layout, *executor,
                                                                   job.tp, tp_rank));
  }
  return absl::OkStatus();
}

// --pp-layers: the blocks of each stage (the policy validated).
std::vector<int> StageLayers(const Flags& f, const Job& job) {
  StatusOr<std::vector<int>> layers = absl::InternalError("unset");
  if (f.pp_layers == "even") {
    layers = scheduler::VirtualStageLayers(job.spec, job.policy);
  } else if (f.pp_layers == "flops") {
    layers = scheduler::BalancedStageLayers(job.spec.layers, f.pp,
                                            scheduler::UnitTrainingFlops(job.spec, f.seq));
  } else {
    std::vector<int> given;
    int64_t sum = 0;
    for (absl::string_view part : absl::StrSplit(f.pp_layers, ',')) {
      int n = 0;
      if (!absl::SimpleAtoi(part, &n) || n < 1 || n > job.spec.layers) {
        Fail(absl::StrCat("--pp-layers: \"", part, "\" is not a block count in 1..",
                          job.spec.layers, " (or give even / flops)"));
      }
      given.push_back(n);
      sum += n;
    }
    if (static_cast<int>(given.size()) != f.pp * f.vpp || sum != job.spec.layers) {
      Fail(absl::StrCat("--pp-layers=", f.pp_layers, " gives ", given.size(), " stages of ",
                        sum, " blocks; want --pp",
                        f.vpp > 1 ? absl::StrCat(" x --vpp = ", f.pp * f.vpp)
                                  : absl::StrCat("=", f.pp),
                        " stages summing to the model's ", job.spec.layers, " blocks"));
    }
    layers = given;
  }
  if (!layers.ok()) Fail(std::string(layers.status().message()));
  return *layers;
}

// Every rank's step graph: one shared by all ranks, or with --pp one per
// pipeline stage (BuildParallelStep, memory planned for the executor; with
// --tp on the layout of tensor slices).
struct Graphs {
  std::vector<std::shared_ptr<const scheduler::StepGraph>> stages;
  scheduler::DeviceMesh mesh;
  std::vector<int64_t> saved_bytes;  // per unit: LlamaRank's saved activations (or empty)
  // RunResult's stage_saved_peak, stage_saved_micro, stage_arena_bytes.
  void Report(RunResult* out) const {
    if (saved_bytes.empty()) return;
    for (const auto& g : stages) {
      int64_t micro = 0;
      for (const std::vector<int>& units : g->chunk_units) {
        for (int u : units) micro += saved_bytes[u];
      }
      out->stage_saved_peak.push_back(scheduler::SavedActivationPeak(*g));
      out->stage_saved_micro.push_back(micro);
      out->stage_arena_bytes.push_back(g->plan.arena_bytes);
    }
  }
  std::shared_ptr<const scheduler::StepGraph> ForRank(int r) const {
    return stages.size() == 1 ? stages[0]
                              : stages[mesh.coord(r, scheduler::MeshDim::kPipeline)];
  }
};

StatusOr<Graphs> BuildGraphs(const Job& job, int world) {
  Graphs g;
  if (!scheduler::IsParallel(job.policy)) {
    BATON_ASSIGN_OR_RETURN(scheduler::StepGraph built,
                           scheduler::BuildStepGraph(job.spec, job.policy, world));
    g.mesh = built.mesh;
    g.stages.push_back(std::make_shared<const scheduler::StepGraph>(std::move(built)));
    return g;
  }
  // Pipeline stages plan the blocks' saved activations of the in-flight
  // micro-batches (the trainer uses them; --tp: the slice's, --sp: of the
  // sequence shard).
  if (job.policy.pipeline_parallel > 1) {
    g.saved_bytes = examples::SavedActivationBytes(
        job.tp > 1 ? job.slice : job.spec, job.config, job.policy.param_dtype,
        job.policy.sequence_parallel ? job.tp : 1);
  }
  BATON_ASSIGN_OR_RETURN(scheduler::ParallelStep step,
                         scheduler::BuildParallelStep(job.spec, job.policy, world,
                                                      job.config.seq, job.config.batch,
                                                      job.stage_layers, {},
                                                      /*plan_memory=*/true,
                                                      /*tensor_slices=*/true, g.saved_bytes));
  g.mesh = step.mesh;
  for (scheduler::StepGraph& s : step.stages) {
    g.stages.push_back(std::make_shared<const scheduler::StepGraph>(std::move(s)));
  }
  return g;
}

// " (pipeline stage s of p)" for rank r of a pipeline, else "".
std::string StageOf(const Graphs& graphs, int r) {
  if (graphs.stages.size() < 2) return "";
  return absl::StrCat(" (pipeline stage ", graphs.mesh.coord(r, scheduler::MeshDim::kPipeline),
                      " of ", graphs.stages.size(), ")");
}

StatusOr<std::unique_ptr<Device>> MakeDevice(const std::string& kind, int ordinal) {
  if (kind != "cuda") return CreateHostDevice();
  auto device = CreateCudaDevice(ordinal);  // Unavailable says why not
  if (!device.ok()) {
    return Status(device.status().code(),
                  absl::StrCat("--device=cuda: ", device.status().message()));
  }
  return device;
}

// n ranks as threads of this process (inproc backend).
// `trace`: record every rank's steps into RunResult::trace_json.
StatusOr<RunResult> RunInproc(const Job& job, const Corpus& corpus, const std::string& device_kind,
                              int n, const std::string& group, absl::Duration timeout,
                              bool trace = false) {
  // One graph (per stage) shared by the ranks' executors and models.
  BATON_ASSIGN_OR_RETURN(const Graphs graphs, BuildGraphs(job, n));
  BATON_ASSIGN_OR_RETURN(auto device, MakeDevice(device_kind, 0));
  CommConfig base;
  base.device = device.get();
  base.group = group;
  base.timeout = timeout;
  BATON_ASSIGN_OR_RETURN(auto comms, CreateInprocGroup(n, base));
  std::vector<RunResult> results(n);
  std::vector<Status> status(n);
  std::vector<std::thread> threads;
  scheduler::StepTrace step_trace;
  std::vector<scheduler::NodeObserver*> observers(n, nullptr);
  if (trace) {
    for (int r = 0; r < n; ++r) observers[r] = step_trace.ForRank(r, *graphs.ForRank(r));
  }
  // A rank that fails (a damaged checkpoint file, say) aborts its
  // communicator so that its peers fail at once instead of at the timeout;
  // the first to fail is the one reported.
  std::atomic<int> first_failed{-1};
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r]() {
      status[r] = TrainRank(job, graphs.ForRank(r), corpus, *device, *comms[r], &results[r],
                            observers[r]);
      if (!status[r].ok()) {
        int none = -1;
        first_failed.compare_exchange_strong(none, r);
        comms[r]->Abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  if (const int r = first_failed.load(); r >= 0) {
    return Status(status[r].code(), absl::StrCat("rank ", r, StageOf(graphs, r), ": ",
                                                 status[r].message()));
  }
  if (trace) results[0].trace_json = step_trace.Json();  // streams synced
  if (trace && graphs.stages.size() > 1 && !results[0].losses.empty()) {
    const int64_t last = results[0].first_step + results[0].losses.size() - 1;
    const int p = static_cast<int>(graphs.stages.size());
    std::vector<double> sum(p, 0);
    std::vector<int> count(p, 0);
    for (const auto& [r, idle] : step_trace.ComputeIdleFraction(last)) {
      const int s = graphs.mesh.coord(r, scheduler::MeshDim::kPipeline);
      sum[s] += idle;
      ++count[s];
    }
    for (int s = 0; s < p; ++s) {
      results[0].stage_bubble.push_back(count[s] > 0 ? sum[s] / count[s] : -1);
    }
    // The simulator on the same stage graphs, every block pass equal.
    std::vector<const scheduler::StepGraph*> stages;
    for (const auto& g : graphs.stages) stages.push_back(g.get());
    BATON_ASSIGN_OR_RETURN(results[0].sim_stage_bubble, sim::ScheduleBubble(stages, {}));
  }
  const bool sp = job.policy.sequence_parallel;
  if (trace && job.tp > 1 && (sp || !job.policy.tp_comm_overlap) && !results[0].losses.empty()) {
    const int64_t last = results[0].first_step + results[0].losses.size() - 1;
    for (const auto& [r, ms] : step_trace.ExposedWaitMs(last, scheduler::StreamClass::kTensor)) {
      results[0].tp_exposed_ms.push_back(ms);
      if (sp) results[0].tp_inner_ms_all.push_back(results[r].tp_inner_ms);
    }
    // The simulator on the same stage graphs, on its H100 node's costs.
    std::vector<const scheduler::StepGraph*> stages;
    for (const auto& g : graphs.stages) stages.push_back(g.get());
    const StatusOr<sim::ClusterSpec> h100 = sim::ClusterPreset("h100");
    sim::SimOptions options;
    if (job.sim_calibration) {
      if (!job.sim_calibration->tables.empty()) options.calibration = job.sim_calibration.get();
      if (job.sim_calibration->kernels) options.kernels = &*job.sim_calibration->kernels;
    }
    StatusOr<std::vector<sim::TensorExposure>> e =
        h100.ok() ? sim::SimulateTensorExposure(stages, job.spec, *h100, job.config.seq,
                                                job.config.batch, options)
                  : StatusOr<std::vector<sim::TensorExposure>>(h100.status());
    if (e.ok()) {
      results[0].sim_tp_exposure = *std::move(e);
    } else {
      results[0].sim_tp_refused = std::string(e.status().message());
    }
  }
  if (job.final_params) {
    std::vector<std::vector<examples::ParamPiece>> pieces;
    for (RunResult& r : results) pieces.push_back(std::move(r.params));
    BATON_ASSIGN_OR_RETURN(results[0].whole_params, examples::MergeParamPieces(pieces));
  }
  graphs.Report(&results[0]);
  return results[0];
}

// The simulator's figure for the graphs whose measured exposure was just
// printed (sim/tensor_exposure.h): means over the stage graphs.
void PrintSimTensorExposure(const RunResult& res, const Job& job) {
  if (res.sim_tp_exposure.empty()) {
    std::printf("simulator, same graph: not simulated (%s)\n", res.sim_tp_refused.c_str());
    return;
  }
  double total = 0, nodes = 0, inside = 0, step = 0, largest = 0;
  for (const sim::TensorExposure& e : res.sim_tp_exposure) {
    total += e.total_s();
    nodes += e.nodes_s;
    inside += e.inside_s;
    step += e.step_s;
    largest = std::max(largest, e.total_s());
  }
  const double n = static_cast<double>(res.sim_tp_exposure.size());
  const std::string stages =
      n > 1 ? absl::StrFormat("means over %d stage graphs, largest %.3f ms; ",
                              static_cast<int>(n), largest * 1e3)
            : std::string();
  // Whose costs: the h100 preset's unless --sim-calibration replaced them.
  const sim::Calibration* c = job.sim_calibration.get();
  std::string costs;
  if (c == nullptr) {
    costs = "the simulator's h100 node costs, not this host's";
  } else {
    std::vector<std::string> measured;
    for (const auto& [name, table] : c->tables) measured.push_back(name);
    costs = absl::StrCat(
        "compute from the ", c->kernels ? c->kernels->gpu : std::string("h100"),
        " kernel table, ",
        measured.empty() ? std::string("collectives h100 NVLink's")
                         : absl::StrCat("measured busbw for ", absl::StrJoin(measured, ", "),
                                        measured.size() < 3 ? " (h100 NVLink's otherwise)" : ""),
        " (--sim-calibration)");
  }
  std::printf("simulator, same graph: exposed tensor communication %.3f ms per step (%swaiting "
              "on tensor nodes %.3f ms, inside the nodes %.3f ms, of a %.3f ms simulated step; "
              "%s)\n",
              total / n * 1e3, stages.c_str(), nodes / n * 1e3, inside / n * 1e3,
              step / n * 1e3, costs.c_str());
}

// "train_tiny: rank r (pipeline stage s of p): <status>" on stderr.
void PrintRankFailure(int rank, const std::string& stage, const Status& s) {
  std::fprintf(stderr, "train_tiny: rank %d%s: %s\n", rank, stage.c_str(), s.ToString().c_str());
}

// This process is one rank of a ucx / nccl job started by a launcher. A
// failure of the training is printed here at once (*printed = true), before
// rank 0's store waits for the other ranks to leave.
StatusOr<RunResult> RunProcessRank(const Job& job, const Corpus& corpus, const Flags& f,
                                   const LaunchInfo& info, bool* printed) {
  BATON_ASSIGN_OR_RETURN(const Graphs graphs, BuildGraphs(job, info.world_size));
  const std::shared_ptr<const scheduler::StepGraph> graph = graphs.ForRank(info.rank);
  const absl::Duration timeout = absl::Seconds(f.timeout_s);
  BATON_ASSIGN_OR_RETURN(auto store, TcpStore::Create(info, timeout));
  BATON_ASSIGN_OR_RETURN(auto device, MakeDevice(f.device, f.device == "cuda" ? info.local_rank : 0));
  CommConfig cfg;
  cfg.backend = f.backend;
  cfg.rank = info.rank;
  cfg.size = info.world_size;
  cfg.device = device.get();
  cfg.store = store.get();
  cfg.group = "train_tiny";
  cfg.timeout = timeout;
  cfg.device_arrivals = f.arrivals;  // nccl: the GPU's arrival, not the host's
  if (graphs.stages.size() > 1) {  // ucx names a failed rank with its stage
    cfg.rank_name = [mesh = graphs.mesh](int r) {
      return absl::StrCat("rank ", r, " (pipeline stage ",
                          mesh.coord(r, scheduler::MeshDim::kPipeline), ")");
    };
  }
  BATON_ASSIGN_OR_RETURN(auto comm, CreateCommunicator(cfg));
  RunResult result;
  scheduler::StepTrace step_trace;  // rank 0's tracks only
  const bool traced = !f.trace.empty() && info.rank == 0;
  if (Status s = TrainRank(job, graph, corpus, *device, *comm, &result,
                           traced ? step_trace.ForRank(0, *graph) : nullptr);
      !s.ok()) {
    PrintRankFailure(info.rank, StageOf(graphs, info.rank), s);
    *printed = true;
    return s;
  }
  if (traced) result.trace_json = step_trace.Json();
  graphs.Report(&result);
  BATON_RETURN_IF_ERROR(store->Barrier("train_tiny_done", timeout));
  return result;
}

std::string MiB(size_t bytes) { return absl::StrFormat("%.2f MiB", bytes / 1048576.0); }

int Main(int argc, char** argv) {
  const Flags f = train_tiny::Parse(argc, argv);
  const bool multi_process = f.backend != "inproc";
  // NotFound: no launcher set this process up (contradictory variables are
  // other errors, reported below).
  const StatusOr<LaunchInfo> info = LaunchInfoFromEnv();
  // The ranks this process starts itself (threads, or processes launched
  // here) are bounded by what the host runs (scheduler/limits.h); a
  // launcher's ranks are one per process.
  const bool starts_ranks = !multi_process || absl::IsNotFound(info.status());
  if (starts_ranks) {
    if (Status s = scheduler::CheckLocalRanks(std::max(f.nranks, 1), "--nranks"); !s.ok()) {
      Fail(std::string(s.message()));
    }
  }
  Job job;
  job.spec = train_tiny::ModelFromFlags(f);
  job.policy = train_tiny::PolicyFromFlags(f);
  CheckPolicyRoutes(f, job);
  if (!f.save_dir.empty() || !f.resume.empty()) {
    if (Status s = scheduler::CheckCheckpointable(job.policy); !s.ok()) {
      Fail(absl::StrCat(f.save_dir.empty() ? "--resume: " : "--save-dir: ", s.message()));
    }
  }
  {
    // Groups that do not fit the ranks (shard_group, hpz_group): bad input.
    const int world = multi_process && info.ok() ? info->world_size
                                                 : std::max(f.nranks, 1);
    if (world % f.pp != 0) {
      Fail(absl::StrCat("--nranks=", world, " is not a multiple of --pp=", f.pp,
                        " (the ranks are data ranks x pipeline stages)"));
    }
    if (f.tp > world) {
      Fail(absl::StrCat("--tp=", f.tp, " is more than the ", world, " ranks (--nranks)"));
    }
    if (world % (f.tp * f.pp) != 0) {
      Fail(absl::StrCat("--nranks=", world, " is not a multiple of --tp=", f.tp,
                        f.pp > 1 ? absl::StrCat(" x --pp=", f.pp) : std::string(),
                        " (the ranks are data ranks x tensor ranks",
                        f.pp > 1 ? " x pipeline stages)" : ")"));
    }
    if (f.tp > 1) {
      auto slice = scheduler::TensorParallelSlice(job.spec, f.tp);
      if (!slice.ok()) Fail(std::string(slice.status().message()));
      job.tp = f.tp;
      job.slice = *slice;
    }
    const auto groups = scheduler::ResolveMesh(job.policy, world);
    if (!groups.ok()) Fail(std::string(groups.status().message()));
    if (scheduler::IsParallel(job.policy)) {
      if (job.policy.optimizer == scheduler::OptimizerKind::kAdamW8bit) {
        // The stage graphs keep fp32 moments: the run would not be adamw8bit.
        Fail("--optimizer=adamw8bit is not run with --tp or --pp yet");
      }
      // More stages than blocks, and the schedules' own needs.
      if (Status s = scheduler::ValidateParallel(job.spec, job.policy); !s.ok()) {
        Fail(std::string(s.message()));
      }
      job.stage_layers = StageLayers(f, job);
    }
    if (f.arrivals && world < 2) {
      Fail("--arrivals measures skew between ranks: it needs --nranks >= 2");
    }
    if (f.arrivals && f.steps < 2) {
      Fail("--arrivals needs --steps >= 2 (the first step is not measured)");
    }
  }
  if (!f.arrivals_out.empty() && !std::ofstream(f.arrivals_out, std::ios::app)) {
    Fail(absl::StrCat("--arrivals-out: cannot write ", f.arrivals_out));
  }
  if (!f.trace.empty() && !std::ofstream(f.trace, std::ios::app)) {
    Fail(absl::StrCat("--trace: cannot write ", f.trace));
  }
  if (multi_process && starts_ranks) {
    // Start --nranks copies of this program as the ranks of one job.
    LaunchOptions lo;
    lo.nproc = f.nranks > 0 ? f.nranks : 1;
    lo.argv.push_back("/proc/self/exe");
    for (int i = 1; i < argc; ++i) lo.argv.push_back(argv[i]);
    lo.prefix_output = false;
    auto r = LaunchLocal(lo);
    if (!r.ok()) Fail(std::string(r.status().message()));
    if (r->exit_code != 0) std::fprintf(stderr, "train_tiny: %s\n", r->summary.c_str());
    return r->exit_code;
  }

  job.config.seq = f.seq;
  job.config.batch = f.batch;
  job.config.adamw.lr = static_cast<float>(f.lr);
  job.config.seed = f.seed;
  job.steps = f.steps;
  job.progress = true;  // a progress line per step on stderr (rank 0)
  job.check_schedule = f.check_schedule;
  job.arrivals = f.arrivals;
  job.save_dir = f.save_dir;
  job.save_every = f.save_every;
  job.resume = f.resume;
  if (!f.sim_calibration.empty()) {
    auto calibration = std::make_shared<sim::Calibration>();
    for (const std::string& path : f.sim_calibration) {
      StatusOr<std::string> text = ReadInputFile(path, "--sim-calibration file", kMaxJsonInputBytes);
      if (!text.ok()) Fail(std::string(text.status().message()));
      if (Status s = sim::AddCalibration(*text, path, *calibration); !s.ok()) {
        Fail(absl::StrCat("--sim-calibration: ", s.message()));
      }
    }
    job.sim_calibration = std::move(calibration);
  }
  auto corpus = f.data.empty() ? Corpus::Synthetic(job.spec.vocab, f.seed)
                               : Corpus::FromFile(f.data, job.spec.vocab, f.seed);
  if (!corpus.ok()) Fail(std::string(corpus.status().message()));
  if (!f.data.empty()) {
    std::vector<int32_t> probe(f.seq + 1);
    if (Status s = corpus->Sequence(0, f.seq, probe.data()); !s.ok()) Fail(std::string(s.message()));
  }

  int rank = 0, nranks = f.nranks > 0 ? f.nranks : 1;
  StatusOr<RunResult> result = absl::UnknownError("not run");
  if (multi_process) {
    if (!info.ok()) Fail(std::string(info.status().message()));
    if (f.nranks > 0 && f.nranks != info->world_size) {
      Fail(absl::StrCat("--nranks=", f.nranks, " but the launcher started ", info->world_size,
                        " ranks"));
    }
    rank = info->rank;
    nranks = info->world_size;
    bool printed = false;
    result = RunProcessRank(job, *corpus, f, *info, &printed);
    if (printed) return 1;
  } else {
    // Final parameters against the reference's: every rank's are at hand.
    job.final_params = f.check_reference;
    result = RunInproc(job, *corpus, f.device, nranks, "train_tiny", absl::Seconds(f.timeout_s),
                       !f.trace.empty());
  }
  if (!result.ok()) {
    // Under --pp the rank's stage too (its peers' stage is their rank in
    // the pipeline group, which the communicator's messages name).
    std::string stage;
    if (f.pp > 1) {
      if (auto mesh = scheduler::ResolveMesh(job.policy, nranks); mesh.ok()) {
        stage = absl::StrCat(" (pipeline stage ", mesh->coord(rank, scheduler::MeshDim::kPipeline),
                             " of ", f.pp, ")");
      }
    }
    PrintRankFailure(rank, stage, result.status());
    return 1;
  }
  if (rank != 0) return 0;
  if (!f.trace.empty()) {  // every rank's tracks (inproc) or rank 0's
    if (Status s = WriteOutputFile(f.trace, result->trace_json + "\n", "the trace");
        !s.ok()) {
      std::fprintf(stderr, "train_tiny: %s\n", std::string(s.message()).c_str());
      return kOutputErrorExitCode;
    }
  }

  // The unsharded reference: one rank, the whole global batch.
  double max_rel = -1;
  std::optional<double> param_rel;  // inproc: the final parameters' difference
  std::vector<double> ref_losses;
  if (f.check_reference) {
    Job ref = job;
    ref.policy.pipeline_parallel = 1;  // the whole model on one rank
    ref.policy.virtual_stages = 1;
    ref.policy.pipeline_schedule = scheduler::PipelineSchedule::k1F1B;
    ref.policy.gather_per_micro_batch = false;
    ref.tp = 1;
    ref.policy.tensor_parallel = 1;
    ref.policy.tp_comm_overlap = false;
    ref.policy.sequence_parallel = false;
    ref.config.batch = job.config.batch * (nranks / f.pp / f.tp);
    ref.progress = false;
    auto r = RunInproc(ref, *corpus, f.device, 1, "train_tiny_reference",
                       absl::Seconds(f.timeout_s));
    if (!r.ok()) {
      std::fprintf(stderr, "train_tiny: reference run: %s\n", r.status().ToString().c_str());
      return 1;
    }
    ref_losses = r->losses;
    if (job.final_params) {
      auto d = examples::MaxParamDifference(result->whole_params, r->whole_params);
      if (!d.ok()) {
        std::fprintf(stderr, "train_tiny: %s\n", std::string(d.status().message()).c_str());
        return 1;
      }
      param_rel = *d;
    }
    max_rel = 0;
    for (size_t i = 0; i < ref_losses.size(); ++i) {
      max_rel = std::max(max_rel, std::abs(result->losses[i] - ref_losses[i]) /
                                      std::abs(ref_losses[i]));
    }
  }

  const RunResult& res = *result;
  std::printf("model %s: %lld blocks, hidden %lld, %lld/%lld heads, vocab %lld, %lld parameters\n",
              job.spec.name.c_str(), static_cast<long long>(job.spec.layers),
              static_cast<long long>(job.spec.hidden), static_cast<long long>(job.spec.heads),
              static_cast<long long>(job.spec.kv_heads), static_cast<long long>(job.spec.vocab),
              static_cast<long long>(scheduler::ParameterCount(job.spec)));
  std::printf("policy %s, backend %s, %d ranks, device %s, dtype %s, %lld micro-steps of %lld x %lld tokens per rank\n",
              job.policy.name.c_str(), f.backend.c_str(), nranks, f.device.c_str(), f.dtype.c_str(),
              static_cast<long long>(job.policy.micro_steps), static_cast<long long>(f.batch),
              static_cast<long long>(f.seq));
  std::printf("optimizer %s\n", scheduler::OptimizerName(job.policy.optimizer));
  const scheduler::LayoutOptions& lo = job.policy.layout;
  const int64_t trainable = TrainableParams(job);
  if (lo.lora_rank > 0) {
    std::printf("lora: rank %d, alpha %g, targets %s, base %s: %lld of %lld parameters trained\n",
                lo.lora_rank, lo.lora_alpha, scheduler::LoraTargetsName(lo.lora_targets).c_str(),
                lo.base_dtype == scheduler::BaseDtype::kNf4 ? "nf4" : f.dtype.c_str(),
                static_cast<long long>(trainable),
                static_cast<long long>(scheduler::ParameterCount(job.spec)));
  }
  if (f.pp > 1) {
    std::printf("pipeline: %d %sstages of %s blocks (--pp-layers=%s), %s, %lld micro-batches, "
                "%d data ranks per stage, buckets gathered %s\n",
                f.pp * f.vpp, f.vpp > 1 ? "virtual " : "",
                absl::StrJoin(job.stage_layers, ", ").c_str(), f.pp_layers.c_str(),
                scheduler::PipelineScheduleName(job.policy.pipeline_schedule),
                static_cast<long long>(job.policy.micro_steps), nranks / f.pp / f.tp,
                job.policy.gather_per_micro_batch ? "per micro-batch pass (--pp-gather=micro)"
                                                  : "once per step");
  }
  if (job.tp > 1) {
    const int64_t tokens = job.config.seq * job.config.batch;
    const std::string rest =
        absl::StrCat("vocabulary ", job.slice.vocab, " of ", job.spec.vocab, "; norms replicated",
                     f.sp ? absl::StrCat(", run on sequence shards of ", tokens / job.tp, " of ",
                                         tokens, " tokens")
                          : std::string());
    std::printf("tensor parallel: %d ranks (per rank %lld of %lld heads, %lld of %lld KV heads, "
                "FFN %lld of %lld; %s), %d data ranks\n",
                job.tp, static_cast<long long>(job.slice.heads),
                static_cast<long long>(job.spec.heads), static_cast<long long>(job.slice.kv_heads),
                static_cast<long long>(job.spec.kv_heads),
                static_cast<long long>(job.slice.intermediate),
                static_cast<long long>(job.spec.intermediate), rest.c_str(),
                nranks / job.tp / f.pp);
  }
  std::printf("loss: first %.6f, last %.6f (%.1f%% lower)\n", res.losses.front(),
              res.losses.back(), 100 * (1 - res.losses.back() / res.losses.front()));
  std::printf("memory plan: arena %s vs lower bound %s (ratio %.3f, %s); persistent state %s\n",
              MiB(res.arena_bytes).c_str(), MiB(res.lower_bound_bytes).c_str(),
              res.lower_bound_bytes ? double(res.arena_bytes) / res.lower_bound_bytes : 1.0,
              res.plan_strategy.c_str(), MiB(res.persistent_bytes).c_str());
  if (!res.stage_saved_peak.empty()) {
    std::string stages;
    for (size_t s = 0; s < res.stage_saved_peak.size(); ++s) {
      const int64_t micro = std::max<int64_t>(res.stage_saved_micro[s], 1);
      absl::StrAppend(&stages, s ? ", " : "", "stage ", s, " ",
                      MiB(res.stage_saved_peak[s]), absl::StrFormat(" (%.2f", double(res.stage_saved_peak[s]) / micro),
                      " x ", MiB(res.stage_saved_micro[s]), "; arena ",
                      MiB(res.stage_arena_bytes[s]), ")");
    }
    std::printf("pipeline saved activations in the plan (blocks, in-flight micro-batches x "
                "one's): %s\n", stages.c_str());
  }
  if (res.host_bytes > 0) {
    std::printf("offload: master shards and moments in host memory, %s\n",
                MiB(res.host_bytes).c_str());
  }
  // The first step (allocation, first touches) is left out of the timing
  // when there is a second one.
  const int64_t run = f.steps - res.first_step;  // the steps this run trained
  const std::string timed = run > 1 ? absl::StrCat("steps ", res.first_step + 2, "..", f.steps)
                                    : std::string("the only step, set-up included");
  std::printf("time per step: %.1f ms (%s), %.0f tokens/s\n", res.ms_per_step,
              timed.c_str(), res.tokens_per_s);
  if (res.first_step > 0) {
    std::printf("resumed from %s at step %lld\n", f.resume.c_str(),
                static_cast<long long>(res.first_step));
  }
  for (const RunResult::Save& sv : res.saves) {
    std::printf("checkpoint %s: %s on rank 0, copied after %.1f ms, written %.1f ms, done %.1f ms "
                "(host %.2f ms in Save)\n",
                sv.stats.dir.c_str(), MiB(sv.stats.bytes).c_str(), sv.stats.copied_ms,
                sv.stats.written_ms, sv.stats.done_ms, sv.stats.issue_ms);
  }
  if (!res.stage_bubble.empty()) {
    std::string stages;
    for (size_t s = 0; s < res.stage_bubble.size(); ++s) {
      absl::StrAppend(&stages, s ? ", " : "", absl::StrFormat("%.1f%%", 100 * res.stage_bubble[s]));
    }
    const double p = f.pp, m = static_cast<double>(job.policy.micro_steps);
    // ZB-H1 (Qi et al. 2023): (p-1)(F+B-W) idle of a span 3m + that with
    // equal passes F = B = W.
    const std::string zb =
        job.policy.pipeline_schedule == scheduler::PipelineSchedule::kZbH1
            ? absl::StrFormat("; ZB-H1 with F = B = W (p-1)/(3m+p-1) = %.1f%%",
                              100 * (p - 1) / (3 * m + p - 1))
            : std::string();
    std::string simulated;
    for (size_t s = 0; s < res.sim_stage_bubble.size(); ++s) {
      absl::StrAppend(&simulated, s ? ", " : "",
                      absl::StrFormat("%.1f%%", 100 * res.sim_stage_bubble[s]));
    }
    std::printf("pipeline bubble (step %lld, from the trace: compute idle in the pipeline's "
                "span): stages %s; 1F1B with equal stages (p-1)/(m+p-1) = %.1f%%%s; the "
                "simulator on these stage graphs, block passes F = B = W: stages %s\n",
                static_cast<long long>(f.steps), stages.c_str(), 100 * (p - 1) / (m + p - 1),
                zb.c_str(), simulated.c_str());
  }
  if (!res.tp_exposed_ms.empty() && !f.sp) {
    const auto& ms = res.tp_exposed_ms;
    double sum = 0;
    for (double x : ms) sum += x;
    std::printf("tensor all-reduces exposed (step %lld, from the trace: compute waiting on "
                "AR-TP): mean %.2f ms, largest %.2f ms per rank; the backward's run inside "
                "its compute nodes\n",
                static_cast<long long>(f.steps), sum / ms.size(),
                *std::max_element(ms.begin(), ms.end()));
  }
  if (!res.tp_exposed_ms.empty() && f.sp &&
      res.tp_inner_ms_all.size() == res.tp_exposed_ms.size()) {
    // Sequence parallelism: the graph's AG-TP / RS-TP nodes (none under
    // --tp-overlap) and the collectives inside the nodes.
    const size_t n = res.tp_exposed_ms.size();
    double nodes = 0, inner = 0, largest = 0;
    for (size_t i = 0; i < n; ++i) {
      nodes += res.tp_exposed_ms[i];
      inner += res.tp_inner_ms_all[i];
      largest = std::max(largest, res.tp_exposed_ms[i] + res.tp_inner_ms_all[i]);
    }
    std::printf("tensor collectives exposed (step %lld, compute stream): waiting on AG-TP / "
                "RS-TP nodes mean %.2f ms (from the trace), inside the nodes mean %.2f ms (%s); "
                "total mean %.2f ms, largest %.2f ms per rank\n",
                static_cast<long long>(f.steps), nodes / n, inner / n,
                f.tp_overlap ? "waits for the decomposed gathers / reduce-scatters, the "
                               "gradient all-reduces"
                             : "the input gradients' reduce-scatters, the gradient all-reduces",
                (nodes + inner) / n, largest);
  }
  if (!res.tp_exposed_ms.empty()) PrintSimTensorExposure(res, job);
  if (f.check_reference) {
    std::printf("unsharded 1-rank reference: largest relative loss difference %.3g over %zu steps\n",
                max_rel, ref_losses.size());
    if (param_rel && (f.pp > 1 || f.tp > 1)) {
      std::printf("final parameters: largest relative difference %.3g (L2, per parameter)\n",
                  *param_rel);
    }
  }
  // Stragglers (scheduler/arrivals.h): the simulator adds straggler_cv x
  // compute x E[max of N normals] per step; the measured wait gives cv, with
  // the rest of the step taken as compute (train_tiny is compute-bound).
  double straggler_cv = 0;
  if (f.arrivals) {
    const double e = sim::ExpectedMaxOfNormals(nranks);
    const double compute_ms = std::max(res.ms_per_step - res.straggler_ms, 1e-6);
    straggler_cv = std::min(1.0, res.straggler_ms / (compute_ms * e));
    std::printf("stragglers: wait %.3f ms per step for later ranks, largest arrival skew %.3f ms "
                "(means over steps 2..%lld); straggler_cv %.4f = wait / ((step - wait) x "
                "E[max of %d normals] %.3f)\n",
                res.straggler_ms, res.max_skew_ms, static_cast<long long>(f.steps), straggler_cv,
                nranks, e);
    const std::string cluster = absl::StrFormat("{\"straggler_cv\": %.6f}\n", straggler_cv);
    if (!f.arrivals_out.empty()) {
      if (Status s = WriteOutputFile(f.arrivals_out, cluster, "the arrivals' cluster file");
          !s.ok()) {
        std::fprintf(stderr, "train_tiny: %s\n", std::string(s.message()).c_str());
        return kOutputErrorExitCode;
      }
      std::printf("wrote %s: simulate --cluster-file=%s takes it\n", f.arrivals_out.c_str(),
                  f.arrivals_out.c_str());
    } else {
      std::printf("for simulate: a cluster file holding %s", cluster.c_str());
    }
  }
  if (f.json) {
    nlohmann::json j;
    j["model"] = job.spec.name;
    j["parameters"] = scheduler::ParameterCount(job.spec);
    j["policy"] = job.policy.name;
    j["backend"] = f.backend;
    j["nranks"] = nranks;
    j["tensor_parallel"] = job.tp;
    j["sequence_parallel"] = job.policy.sequence_parallel;
    j["device"] = f.device;
    j["dtype"] = f.dtype;
    j["optimizer"] = scheduler::OptimizerName(job.policy.optimizer);
    j["recompute"] = scheduler::RecomputeName(job.policy.recompute);
    j["recompute_blocks"] = job.policy.recompute_blocks;
    j["lora_rank"] = lo.lora_rank;
    j["base_dtype"] = scheduler::BaseDtypeName(lo.base_dtype);
    j["trainable_parameters"] = trainable;
    j["steps"] = f.steps;
    j["losses"] = res.losses;
    j["loss_first"] = res.losses.front();
    j["loss_last"] = res.losses.back();
    j["max_rel_diff_vs_reference"] = f.check_reference ? nlohmann::json(max_rel) : nlohmann::json();
    if (f.check_reference) j["reference_losses"] = ref_losses;
    if (param_rel) j["max_param_rel_diff_vs_reference"] = *param_rel;
    if (!res.stage_bubble.empty()) j["stage_bubble"] = res.stage_bubble;
    if (!res.stage_saved_peak.empty()) {
      j["stage_saved_activation_bytes"] = res.stage_saved_peak;
      j["stage_arena_bytes"] = res.stage_arena_bytes;
    }
    if (!res.sim_stage_bubble.empty()) j["sim_stage_bubble"] = res.sim_stage_bubble;
    if (!res.tp_exposed_ms.empty()) j["tp_exposed_ms"] = res.tp_exposed_ms;
    if (!res.tp_inner_ms_all.empty()) j["tp_inner_ms"] = res.tp_inner_ms_all;
    if (!res.sim_tp_exposure.empty()) {
      nlohmann::json stages = nlohmann::json::array();
      for (const sim::TensorExposure& e : res.sim_tp_exposure) {
        stages.push_back({{"total_ms", e.total_s() * 1e3}, {"nodes_ms", e.nodes_s * 1e3},
                          {"inside_ms", e.inside_s * 1e3}, {"step_ms", e.step_s * 1e3}});
      }
      j["sim_tp_exposure"] = stages;
    }
    j["arena_bytes"] = res.arena_bytes;
    j["lower_bound_bytes"] = res.lower_bound_bytes;
    j["persistent_bytes"] = res.persistent_bytes;
    j["host_bytes"] = res.host_bytes;
    j["ms_per_step"] = res.ms_per_step;
    j["first_step"] = res.first_step;
    j["step_end_ms"] = res.step_end_ms;
    nlohmann::json saves = nlohmann::json::array();
    for (const RunResult::Save& sv : res.saves) {
      saves.push_back({{"step", sv.stats.step}, {"dir", sv.stats.dir}, {"at_ms", sv.at_ms}, {"wait_ms", sv.wait_ms},
                       {"issue_ms", sv.stats.issue_ms}, {"copied_ms", sv.stats.copied_ms},
                       {"written_ms", sv.stats.written_ms}, {"done_ms", sv.stats.done_ms},
                       {"writer_cpu_ms", sv.stats.writer_cpu_ms}, {"bytes", sv.stats.bytes}});
    }
    j["saves"] = saves;
    j["final_save_wait_ms"] = res.final_save_wait_ms;
    j["tokens_per_s"] = res.tokens_per_s;
    if (f.arrivals) {
      j["straggler_ms"] = res.straggler_ms;
      j["max_arrival_skew_ms"] = res.max_skew_ms;
      j["straggler_cv"] = straggler_cv;
    }
    std::printf("%s\n",
                j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
  }
  return 0;
}

}  // namespace
}  // namespace baton

int main(int argc, char** argv) {
  baton::CheckStdoutAtExit("train_tiny");
  return baton::Main(argc, argv);
}
