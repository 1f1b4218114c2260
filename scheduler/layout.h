// How a model's parameters are laid out for sharding: units -> buckets ->
// one flat padded buffer per bucket -> one equal shard per rank.
//
// A bucket's parameters are concatenated in declaration order into a flat
// buffer; each parameter starts on a 16-byte boundary (in the parameter
// dtype) and on a multiple of Sharding::block elements, and the total is
// padded so that it divides into `Sharding::ranks` equal shards, each a
// multiple of 16 bytes and of the block. Rank r owns elements
// [r * shard_numel, (r + 1) * shard_numel) of every bucket.
//
// Bucket policies:
//   kPerUnit  one bucket per unit (YaFSDP, FSDP wrapping each block);
//   kMerge    consecutive units merged while the bucket stays at most
//             merge_target_bytes (a unit larger than the target is alone);
// and, with either, a resident bucket: small parameters (1-D norm weights,
// or any parameter of at most resident_max_numel elements) and a tied
// embedding weight live in one extra bucket that is gathered once per step
// and reduced once at its end. A unit whose parameters are all resident has
// no bucket of its own.
//
// LoRA (LayoutOptions::lora_rank > 0; Hu et al. 2021): every targeted
// matrix W [out, in] of each block gets two adapter parameters,
// "<W>.lora_a" [rank, in] and "<W>.lora_b" [out, rank], appended to its
// unit's parameters, and the model's own parameters (all of them) are
// frozen. A bucket then holds frozen parameters or adapters, never both:
// each frozen bucket of blocks has a companion adapter bucket (Bucket::
// adapters, placed right after it) holding its units' adapters, gathered
// with it, reduced and trained; frozen buckets (and a frozen resident
// bucket) are gathered for compute and never reduced, with no master,
// gradient or optimizer state. Adapters are never resident. With
// base_dtype nf4 the frozen buckets of blocks store their parameters as
// NF4 (scheduler/nf4_layout.h): 4.13 bits a parameter, gathered packed.
//
// Mixtures of experts: a bucket's routed-expert parameters ("experts.*" of
// a MoE block) move to a bucket of their own right after it
// (Bucket::expert), since they are sharded over other groups.
//
// Plain data; copyable.
#ifndef BATON_SCHEDULER_LAYOUT_H_
#define BATON_SCHEDULER_LAYOUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/limits.h"
#include "baton/scheduler/model.h"

namespace baton::scheduler {

enum class BucketPolicy { kPerUnit, kMerge };

// The block matrices LoRA may adapt (LayoutOptions::lora_targets, a bit per
// target), named q, k, v, o, gate, up, down (parameters wq, wk, wv, wo,
// w_gate, w_up, w_down).
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;
inline constexpr uint32_t kAllLoraTargets = (1u << kNumLoraTargets) - 1;
const char* LoraTargetName(LoraTarget t);   // "q", ..., "down"
const char* LoraTargetParam(LoraTarget t);  // "wq", ..., "w_down"
// "q,k,v,o,gate,up,down" for every bit set, in that order ("" for none).
std::string LoraTargetsName(uint32_t targets);
// A comma-separated list of target names, or "all". InvalidArgument naming
// an unknown target (listing the names), or for an empty list.
StatusOr<uint32_t> ParseLoraTargets(absl::string_view list);

// How frozen base weights are stored (LayoutOptions::base_dtype): in the
// parameter dtype, or as NF4 (QLoRA's 4-bit NormalFloat, block 64, with
// double-quantized scales).
enum class BaseDtype { kParam, kNf4 };
const char* BaseDtypeName(BaseDtype d);  // "param", "nf4"
StatusOr<BaseDtype> ParseBaseDtype(absl::string_view name);

// The layout knobs of a schedule policy (Policy::layout).
struct LayoutOptions {
  BucketPolicy bucket_policy = BucketPolicy::kPerUnit;
  int64_t merge_target_bytes = 0;  // kMerge; in parameter-dtype bytes; > 0
  bool resident_small_params = true;
  int64_t resident_max_numel = 0;  // 0: only 1-D parameters are small
  // LoRA: adapters of this rank on the targeted matrices, base frozen (0:
  // off); the forward adds (alpha / rank) x B A x to W x.
  int lora_rank = 0;
  double lora_alpha = 16;
  uint32_t lora_targets = kAllLoraTargets;
  BaseDtype base_dtype = BaseDtype::kParam;  // of frozen block weights

  friend bool operator==(const LayoutOptions& a, const LayoutOptions& b) {
    return a.bucket_policy == b.bucket_policy &&
           a.merge_target_bytes == b.merge_target_bytes &&
           a.resident_small_params == b.resident_small_params &&
           a.resident_max_numel == b.resident_max_numel &&
           a.lora_rank == b.lora_rank && a.lora_alpha == b.lora_alpha &&
           a.lora_targets == b.lora_targets && a.base_dtype == b.base_dtype;
  }
};

// How the flat buffers are split: what the policy and the device mesh
// decide (ShardingFor in scheduler/policy.h).
struct Sharding {
  int ranks = 1;  // ranks sharing each bucket (the data-shard group)
  // false: every rank holds whole buckets (DDP); shard_numel = padded_numel,
  // and only a tied embedding is resident.
  bool shard = true;
  DataType dtype = DataType::kBF16;  // the parameter dtype: sets the 16-byte granule
  // Elements (in [1, kMaxShardingBlock]): every parameter's offset and every
  // shard a multiple of it as well as of the 16-byte granule (the 8-bit
  // optimizer's blocks, scheduler/optimizer_state.h; 1: none).
  int64_t block = 1;

  friend bool operator==(const Sharding& a, const Sharding& b) {
    return a.ranks == b.ranks && a.shard == b.shard && a.dtype == b.dtype &&
           a.block == b.block;
  }
};

inline constexpr int64_t kMaxShardingBlock = int64_t{1} << 20;

struct ParamSlot {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int unit = 0;         // owning unit
  int64_t offset = 0;   // first element in the bucket's flat buffer
  bool frozen = false;  // never trained (LoRA's base)
};

struct Bucket {
  int id = 0;
  std::string name;        // "embedding", "block3", "block0-3", "resident"
  bool resident = false;
  std::vector<int> units;  // units whose parameters it holds, forward order
  std::vector<ParamSlot> params;
  int64_t numel = 0;         // end of the last parameter (gaps included)
  int64_t padded_numel = 0;  // shard_numel * shard count
  int64_t shard_numel = 0;
  // Every parameter frozen: gathered, never reduced; no master, gradient or
  // optimizer state.
  bool frozen = false;
  bool nf4 = false;   // frozen, stored as NF4 (LayoutOptions::base_dtype)
  // A MoE block's routed experts ("<unit>.experts"), split from its unit's
  // bucket: sharded over the expert-parallel and expert-data groups, not
  // the data ranks (scheduler/mesh.h, scheduler/parallel_graph.h).
  bool expert = false;
  int adapters = -1;  // a frozen bucket's companion holding its units' adapters
};

// A parameter a unit reads: where it lives.
struct ParamRef {
  int bucket = 0;
  int slot = 0;  // index into buckets[bucket].params
};

struct ModelLayout {
  ModelSpec spec;
  std::vector<UnitSpec> units;
  LayoutOptions options;
  Sharding sharding;
  std::vector<Bucket> buckets;  // forward order of first use; resident last
  std::vector<int> unit_bucket;  // units.size(); its own bucket or -1
  int resident_bucket = -1;
  // units.size(); every parameter the unit reads (the lm_head of a tied
  // model reads the embedding weight).
  std::vector<std::vector<ParamRef>> unit_params;

  int64_t total_params() const;  // sum of parameter numels (each once)
  int64_t trainable_params() const;  // those not frozen
  // Bytes of one shard of every bucket in `dtype`.
  int64_t shard_bytes(DataType dtype) const;
};

// InvalidArgument naming the option for a sharding over fewer than 1 rank,
// a block outside [1, kMaxShardingBlock], an integer dtype, a non-positive
// merge target, a LoRA rank outside [0, kMaxLoraRank] or larger than a
// targeted matrix (naming it), no targets, a non-positive or non-finite
// alpha, NF4 without LoRA (a trainable base), or an invalid spec.
StatusOr<ModelLayout> BuildLayout(const ModelSpec& spec,
                                  const LayoutOptions& options,
                                  const Sharding& sharding = {});

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_LAYOUT_H_
