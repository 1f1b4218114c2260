#include "baton/scheduler/policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "baton/scheduler/nf4_layout.h"
#include "baton/scheduler/optimizer_state.h"
#include "baton/scheduler/limits.h"

namespace baton::scheduler {

std::vector<std::string> PolicyPresetNames() {
  return {"baton", "yafsdp", "fsdp1", "fsdp2", "zero3", "ddp", "hsdp",
          "zeropp", "zero_offload", "zenflow"};
}

const char* OffloadName(Offload offload) {
  switch (offload) {
    case Offload::kNone: return "none";
    case Offload::kOptimizer: return "optimizer";
    case Offload::kParams: return "params";
  }
  return "?";
}

StatusOr<Offload> ParseOffload(absl::string_view name) {
  if (name == "none") return Offload::kNone;
  if (name == "optimizer") return Offload::kOptimizer;
  if (name == "params") return Offload::kParams;
  return absl::InvalidArgumentError(absl::StrCat(
      "offload must be none, optimizer or params, got \"", name, "\""));
}

const char* RecomputeName(Recompute r) {
  return r == Recompute::kSelective ? "selective" : "full";
}

StatusOr<Recompute> ParseRecompute(absl::string_view name) {
  if (name == "full") return Recompute::kFull;
  if (name == "selective") return Recompute::kSelective;
  return absl::InvalidArgumentError(absl::StrCat(
      "recompute must be full or selective, got \"", name, "\""));
}

const char* OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kAdamW: return "adamw";
    case OptimizerKind::kAdamW8bit: return "adamw8bit";
  }
  return "?";
}

StatusOr<OptimizerKind> ParseOptimizer(absl::string_view name) {
  if (name == "adamw") return OptimizerKind::kAdamW;
  if (name == "adamw8bit") return OptimizerKind::kAdamW8bit;
  return absl::InvalidArgumentError(absl::StrCat(
      "optimizer must be adamw or adamw8bit, got \"", name, "\""));
}

const char* PipelineScheduleName(PipelineSchedule schedule) {
  switch (schedule) {
    case PipelineSchedule::k1F1B: return "1f1b";
    case PipelineSchedule::kInterleaved: return "interleaved";
    case PipelineSchedule::kZbH1: return "zb-h1";
  }
  return "?";
}

StatusOr<PipelineSchedule> ParsePipelineSchedule(absl::string_view name) {
  for (PipelineSchedule s : {PipelineSchedule::k1F1B, PipelineSchedule::kInterleaved,
                             PipelineSchedule::kZbH1}) {
    if (name == PipelineScheduleName(s)) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "pipeline schedule must be 1f1b, interleaved or zb-h1, got \"", name, "\""));
}

ZenFlowIntervals ResolveZenFlow(const Policy& p) {
  ZenFlowIntervals z;
  z.update = p.zenflow_update_interval == kAutoInterval ? kAutoUpdateInterval
                                                        : p.zenflow_update_interval;
  z.select = p.zenflow_select_interval == kAutoInterval ? z.update
                                                        : p.zenflow_select_interval;
  z.staleness = p.zenflow_staleness == kAutoInterval ? z.update - 1
                                                      : p.zenflow_staleness;
  return z;
}

const char* MoeDispatcherName(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::kAllToAll: return "alltoall";
    case MoeDispatcher::kHierarchical: return "hierarchical";
    case MoeDispatcher::kAllGather: return "allgather";
  }
  return "?";
}

StatusOr<MoeDispatcher> ParseMoeDispatcher(absl::string_view name) {
  for (MoeDispatcher d :
       {MoeDispatcher::kAllToAll, MoeDispatcher::kHierarchical, MoeDispatcher::kAllGather}) {
    if (name == MoeDispatcherName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown MoE dispatcher \"", name, "\" (alltoall, hierarchical, allgather)"));
}

StatusOr<Policy> PolicyPreset(absl::string_view name) {
  Policy p;
  p.name = std::string(name);
  if (name == "baton") {
    p.forward_prefetch = 1;
    p.backward_prefetch = 1;
    p.reduce_window = 2;
  } else if (name == "yafsdp") {
    p.forward_prefetch = 1;
    p.backward_prefetch = 1;
    p.shared_comm_stream = true;
    p.reduce_window = 2;
  } else if (name == "fsdp1") {
    p.forward_prefetch = 0;
    p.backward_prefetch = 1;
    p.host_limit = 2;
    p.layout.resident_small_params = false;
    p.reuse_edges = false;
  } else if (name == "fsdp2") {
    p.forward_prefetch = 1;
    p.backward_prefetch = 1;
    p.copy_in_out = true;
    p.layout.resident_small_params = false;
    p.reuse_edges = false;
  } else if (name == "zero3") {
    p.forward_prefetch = 1;
    p.backward_prefetch = 1;
    p.host_limit = 2;
    p.layout.bucket_policy = BucketPolicy::kMerge;
    p.layout.merge_target_bytes = 50'000'000LL * 2;  // 5e7 bf16 elements
    p.layout.resident_max_numel = 100'000;
    p.reuse_edges = false;
  } else if (name == "ddp") {
    p.all_reduce = true;
    p.forward_prefetch = 0;
    p.backward_prefetch = 0;
    p.reshard_after_forward = false;
    p.layout.bucket_policy = BucketPolicy::kMerge;
    p.layout.merge_target_bytes = 25LL << 20;
    p.layout.resident_small_params = false;
    p.reduce_window = 2;
    p.reuse_edges = false;
  } else if (name == "hsdp") {
    p.forward_prefetch = 1;
    p.backward_prefetch = 1;
    p.reduce_window = 2;
    p.shard_group = 4;
  } else if (name == "zeropp") {
    p.forward_prefetch = 1;
    p.backward_prefetch = 1;
    p.reduce_window = 2;
    p.hpz_group = 4;
  } else if (name == "zero_offload" || name == "zenflow") {
    p.forward_prefetch = 1;
    p.backward_prefetch = 1;
    p.reduce_window = 2;
    p.offload = Offload::kOptimizer;
    p.zenflow = name == "zenflow";
    if (p.zenflow) p.zenflow_staleness = kAutoInterval;
  } else {
    return absl::NotFoundError(
        absl::StrCat("unknown policy \"", name, "\"; presets: ",
                     absl::StrJoin(PolicyPresetNames(), ", ")));
  }
  return p;
}

namespace {

// The tensor / context / pipeline knobs of ValidatePolicy.
Status ValidateParallelKnobs(const Policy& p) {
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("policy ", p.name, ": ", parts...));
  };
  for (auto [knob, v] : {std::pair<const char*, int>{"tensor_parallel", p.tensor_parallel},
                         {"context_parallel", p.context_parallel},
                         {"pipeline_parallel", p.pipeline_parallel},
                         {"virtual_stages", p.virtual_stages}}) {
    if (v < 1) return bad(knob, " = ", v, " must be >= 1");
  }
  if (p.sequence_parallel && p.tensor_parallel < 2) {
    return bad("sequence_parallel needs tensor_parallel > 1 (it shards over the "
               "tensor-parallel ranks)");
  }
  if (p.tp_comm_overlap && p.tensor_parallel < 2) {
    return bad("tp_comm_overlap needs tensor_parallel > 1");
  }
  const bool interleaved = p.pipeline_schedule == PipelineSchedule::kInterleaved;
  if (interleaved != (p.virtual_stages > 1)) {
    return bad("virtual_stages = ", p.virtual_stages, " with pipeline_schedule ",
               PipelineScheduleName(p.pipeline_schedule),
               ": the interleaved schedule takes virtual_stages >= 2, the others 1");
  }
  if (p.pipeline_schedule != PipelineSchedule::k1F1B && p.pipeline_parallel < 2) {
    return bad("pipeline_schedule ", PipelineScheduleName(p.pipeline_schedule),
               " needs pipeline_parallel > 1");
  }
  if (p.pipeline_first_layers < 0 || p.pipeline_last_layers < 0) {
    return bad("pipeline_first_layers / pipeline_last_layers must be >= 0");
  }
  if ((p.pipeline_first_layers > 0 || p.pipeline_last_layers > 0) &&
      p.pipeline_parallel < 2) {
    return bad("pipeline_first_layers / pipeline_last_layers need pipeline_parallel > 1");
  }
  if (p.gather_per_micro_batch && p.pipeline_parallel < 2) {
    return bad("gather_per_micro_batch needs pipeline_parallel > 1 (data-parallel graphs "
               "gather per micro-step under reshard_after_forward)");
  }
  if (p.expert_parallel < 1) return bad("expert_parallel = ", p.expert_parallel, " must be >= 1");
  if (p.expert_tensor_parallel != 1 && p.expert_tensor_parallel != p.tensor_parallel) {
    return bad("expert_tensor_parallel = ", p.expert_tensor_parallel, " must be 1 or ",
               "tensor_parallel = ", p.tensor_parallel,
               " (the expert-tensor group is the tensor group)");
  }
  if (!std::isfinite(p.moe_capacity_factor) || p.moe_capacity_factor < 0 ||
      (p.moe_capacity_factor > 0 && p.moe_capacity_factor < 1) ||
      p.moe_capacity_factor > 1024) {
    return bad("moe_capacity_factor = ", p.moe_capacity_factor,
               " must be 0 (dropless) or in [1, 1024]");
  }
  if (IsParallel(p) && (p.offload != Offload::kNone || p.zenflow || p.hpz_group > 0)) {
    return bad("tensor, context and pipeline parallelism are not modelled with ",
               p.offload != Offload::kNone ? "offload" : "hpz_group");
  }
  return absl::OkStatus();
}

}  // namespace

Status ValidatePolicy(const Policy& p) {
  auto bad = [&](const char* knob, auto value) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": ", knob, " = ", value, " is out of range"));
  };
  // The integer knobs' bounds (scheduler/limits.h): checked here, the step
  // every route to a policy goes through (flags, files, presets, the API).
  const std::string prefix = absl::StrCat("policy ", p.name, ": ");
  const struct {
    const char* knob;
    int64_t value, lo, hi;
  } ranged[] = {
      {"forward_prefetch", p.forward_prefetch, 0, kMaxPrefetchDepth},
      {"backward_prefetch", p.backward_prefetch, 0, kMaxPrefetchDepth},
      {"micro_steps", p.micro_steps, 1, kMaxMicroSteps},
      {"recompute_blocks", p.recompute_blocks, -1, kMaxModelLayers},
      {"reduce_window", p.reduce_window, 1, kMaxPrefetchDepth},
      {"host_limit", p.host_limit, 0, kMaxPrefetchDepth},
      {"shard_group", p.shard_group, 0, kMaxWorldSize},
      {"hpz_group", p.hpz_group, 0, kMaxWorldSize},
      {"merge_target_bytes", p.layout.merge_target_bytes, 0, kMaxPolicyBytes},
      {"resident_max_numel", p.layout.resident_max_numel, 0, kMaxPolicyBytes},
  };
  for (const auto& r : ranged) {
    BATON_RETURN_IF_ERROR(CheckRange(r.value, r.lo, r.hi, absl::StrCat(prefix, r.knob)));
  }
  for (auto [knob, v] : {std::pair<const char*, int>{"zenflow_select_interval",
                                                     p.zenflow_select_interval},
                         {"zenflow_update_interval", p.zenflow_update_interval},
                         {"zenflow_staleness", p.zenflow_staleness}}) {
    if (v > kMaxZenFlowInterval) {
      return CheckRange(v, kAutoInterval, kMaxZenFlowInterval, absl::StrCat(prefix, knob));
    }
  }
  if (p.host_limit > 0 &&
      p.host_limit <= std::max(p.forward_prefetch, p.backward_prefetch)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": host_limit (", p.host_limit,
        ") must exceed the prefetch depth, or the host would wait for "
        "compute it has not issued yet"));
  }
  if (p.param_dtype == DataType::kI32) return bad("param_dtype", "int32");
  if (p.reduce_dtype == DataType::kI32) return bad("reduce_dtype", "int32");
  if (p.layout.bucket_policy == BucketPolicy::kMerge && p.layout.merge_target_bytes <= 0) {
    return bad("merge_target_bytes", p.layout.merge_target_bytes);
  }
  if (p.offload != Offload::kNone && p.all_reduce) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": offload = ", OffloadName(p.offload),
        " needs sharded optimizer state, but all_reduce (DDP) is set"));
  }
  if (!(p.zenflow_topk_ratio > 0 && p.zenflow_topk_ratio <= 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": zenflow_topk_ratio = ", p.zenflow_topk_ratio,
        " must be in (0, 1]"));
  }
  for (auto [knob, v] : {std::pair<const char*, int>{"zenflow_select_interval",
                                                     p.zenflow_select_interval},
                         {"zenflow_update_interval", p.zenflow_update_interval}}) {
    if (v < 1 && v != kAutoInterval) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy ", p.name, ": ", knob, " = ", v,
          " must be >= 1 or auto (kAutoInterval)"));
    }
  }
  if (p.zenflow_staleness != kAutoInterval &&
      (p.zenflow_staleness < 0 ||
       p.zenflow_staleness >= ResolveZenFlow(p).update)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": zenflow_staleness = ", p.zenflow_staleness,
        " must be auto or in [0, zenflow_update_interval = ",
        ResolveZenFlow(p).update, ")"));
  }
  if (p.zenflow && p.offload != Offload::kOptimizer) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": zenflow needs offload = optimizer, got offload = ",
        OffloadName(p.offload)));
  }
  if (p.optimizer == OptimizerKind::kAdamW8bit) {
    if (p.param_dtype != DataType::kF32 && p.param_dtype != DataType::kBF16) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy ", p.name, ": optimizer = adamw8bit keeps an fp32 master and casts it "
          "into the parameter dtype, which must be float or bfloat16, got param_dtype = ",
          DataTypeName(p.param_dtype)));
    }
    if (p.zenflow) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy ", p.name, ": optimizer = adamw8bit does not combine with zenflow "
          "(its device and host updates keep fp32 moments)"));
    }
  }
  if (p.layout.lora_rank < 0 || p.layout.lora_rank > kMaxLoraRank) {
    return bad("lora_rank", p.layout.lora_rank);
  }
  if (!(p.layout.lora_alpha > 0) || !std::isfinite(p.layout.lora_alpha)) {
    return bad("lora_alpha", p.layout.lora_alpha);
  }
  if (p.layout.lora_rank > 0 && (p.layout.lora_targets & kAllLoraTargets) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": lora_targets names no matrix (", LoraTargetsName(kAllLoraTargets),
        ")"));
  }
  if (p.layout.base_dtype == BaseDtype::kNf4 && p.layout.lora_rank == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": base_dtype = nf4 stores the base weights frozen in 4 bits, so "
        "the base cannot be trained: set lora_rank > 0 (the adapters train)"));
  }
  if (p.layout.base_dtype == BaseDtype::kNf4 && p.all_reduce) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": base_dtype = nf4 gathers packed shards, but all_reduce (DDP) "
        "keeps whole parameters and gathers nothing"));
  }
  if (p.layout.lora_rank > 0 && p.zenflow) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": lora_rank > 0 does not combine with zenflow (its column "
        "selection is over trained matrices; LoRA's adapters are small)"));
  }
  if (p.zenflow) {
    // A selection may not fall inside an accumulation window (ops/zenflow.h
    // checks the same of its config): select a multiple of update, once
    // "auto" is resolved.
    const ZenFlowIntervals z = ResolveZenFlow(p);
    if (z.select % z.update != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "policy ", p.name, ": zenflow_select_interval = ", z.select,
          ", zenflow_update_interval = ", z.update,
          " (auto resolved): zenflow select_interval (", z.select,
          ") must be a multiple of update_interval (", z.update,
          "): a selection may not fall inside an accumulation window"));
    }
  }
  return ValidateParallelKnobs(p);
}

Status CheckPolicyForModel(const Policy& p, const ModelSpec& model,
                           absl::string_view file) {
  // "policy NAME: knob" from the API, "<file>: field "knob"" from a file.
  auto knob = [&](const char* name) {
    return file.empty() ? absl::StrCat("policy ", p.name, ": ", name)
                        : absl::StrCat(file, ": field \"", name, "\"");
  };
  BATON_RETURN_IF_ERROR(
      CheckRecomputeBlocks(p.recompute_blocks, model.layers, knob("recompute_blocks")));
  if (Status s = CheckStepUnits(p.micro_steps, model.layers); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(knob("micro_steps"), " = ", p.micro_steps, ": ", s.message()));
  }
  return absl::OkStatus();
}

StatusOr<DeviceMesh> ResolveMesh(const Policy& p, int world_size) {
  if (world_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("world size ", world_size, " must be >= 1"));
  }
  const int64_t model_ranks = int64_t{std::max(p.tensor_parallel, 1)} *
                              std::max(p.context_parallel, 1) *
                              std::max(p.pipeline_parallel, 1);
  if (world_size % model_ranks != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", p.name, ": the mesh does not fill the ", world_size,
        " GPUs: tp ", p.tensor_parallel, " x cp ", p.context_parallel, " x pp ",
        p.pipeline_parallel, " = ", model_ranks, " does not divide them"));
  }
  world_size = static_cast<int>(world_size / model_ranks);  // the data ranks
  auto bad = [&](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat("policy ", p.name, ": ", parts...));
  };
  if (p.shard_group < 0) return bad("shard_group = ", p.shard_group, " is negative");
  if (p.hpz_group < 0) return bad("hpz_group = ", p.hpz_group, " is negative");
  // Groups larger than the world are the world (a preset's 4-rank group on
  // 2 ranks shards over both).
  const int shard = p.shard_group == 0 ? world_size : std::min(p.shard_group, world_size);
  const int hpz = std::min(p.hpz_group, world_size);
  if (world_size % shard != 0) {
    return bad("shard_group = ", p.shard_group,
               " does not divide the world size ", world_size);
  }
  if (p.all_reduce && shard < world_size) {
    return bad("shard_group = ", p.shard_group,
               " needs sharding, but all_reduce (DDP) is set");
  }
  if (hpz > 0) {
    if (hpz > shard) {
      return bad("hpz_group = ", p.hpz_group, " is larger than the shard group (",
                 shard, " ranks)");
    }
    if (shard % hpz != 0) {
      return bad("hpz_group = ", p.hpz_group, " does not divide the shard group (",
                 shard, " ranks)");
    }
    if (p.all_reduce) {
      return bad("hpz_group = ", p.hpz_group,
                 " needs sharding, but all_reduce (DDP) is set");
    }
    if (!p.reshard_after_forward) {
      return bad("hpz_group = ", p.hpz_group,
                 " needs reshard_after_forward (no backward gathers without it)");
    }
    // h == shard group: the secondary shards would be the whole bucket's
    // shards again; still valid (the backward gathers read them).
  }
  MeshSizes sizes;
  sizes[MeshDim::kPipeline] = std::max(p.pipeline_parallel, 1);
  sizes[MeshDim::kContext] = std::max(p.context_parallel, 1);
  sizes[MeshDim::kTensor] = std::max(p.tensor_parallel, 1);
  sizes[MeshDim::kExpert] = std::max(p.expert_parallel, 1);
  sizes.expert_tensor = std::max(p.expert_tensor_parallel, 1);
  sizes[MeshDim::kReplicate] = world_size / shard;
  sizes[MeshDim::kHpz] = std::max(hpz, 1);
  sizes[MeshDim::kShard] = shard / sizes[MeshDim::kHpz];
  return DeviceMesh::Create(sizes);
}

Sharding ShardingFor(const Policy& p, const DeviceMesh& mesh) {
  Sharding s;
  s.ranks = mesh.size(kDataShardGroup);
  s.shard = !p.all_reduce;
  s.dtype = p.param_dtype;
  s.block = p.optimizer == OptimizerKind::kAdamW8bit ? kQuantBlockNumel : 1;
  if (p.layout.base_dtype == BaseDtype::kNf4) s.block = std::lcm(s.block, kNf4AlignNumel);
  return s;
}

StatusOr<ModelLayout> LayoutFor(const ModelSpec& spec, const Policy& p,
                                const DeviceMesh& mesh) {
  return BuildLayout(spec, p.layout, ShardingFor(p, mesh));
}

}  // namespace baton::scheduler
