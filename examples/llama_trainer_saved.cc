// Saved activations in the executor's planned arena (pipeline stages built
// with SavedActivationBytes): the layout of one block's saved activations
// in ComputeContext::pipeline.saved and its binding to BlockActs (with
// tensor parallelism the slice's, bound at each of the block's part nodes).
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "baton/examples/llama_trainer.h"

namespace baton::examples {
namespace {

constexpr size_t kAlign = 256;

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Bytes of each saved field of a block, in BlockActs' order: n1, q, k, v,
// o, x1, n2, g, u, s (dtype) and rstd1, lse, rstd2 (fp32). Sequence
// parallelism (sequence_shards > 1): x1 and the norms' statistics are of
// this rank's rows (T / shards, rounded up); the normed inputs stay whole
// (gathered for the GEMMs).
std::vector<size_t> FieldBytes(const scheduler::ModelSpec& spec, const TrainConfig& config,
                               DataType dtype, int sequence_shards) {
  const size_t e = DataTypeSize(dtype);
  const size_t T = static_cast<size_t>(config.batch * config.seq);
  const size_t shards = static_cast<size_t>(std::max(sequence_shards, 1));
  const size_t R = (T + shards - 1) / shards;
  const size_t H = spec.hidden, Q = spec.heads * spec.head_dim;
  const size_t KV = spec.kv_heads * spec.head_dim, F = spec.intermediate;
  const size_t heads_rows = static_cast<size_t>(config.batch * spec.heads * config.seq);
  return {T * H * e, T * Q * e, T * KV * e, T * KV * e, T * Q * e, R * H * e, T * H * e,
          T * F * e, T * F * e, T * F * e, R * 4, heads_rows * 4, R * 4};
}

}  // namespace

std::vector<int64_t> SavedActivationBytes(const scheduler::ModelSpec& spec,
                                          const TrainConfig& config, DataType dtype,
                                          int sequence_shards) {
  size_t block = 0;
  for (size_t b : FieldBytes(spec, config, dtype, sequence_shards)) block += AlignUp(b);
  std::vector<int64_t> saved(spec.layers + 3, 0);  // embedding, blocks, norm, head
  for (int64_t b = 1; b <= spec.layers; ++b) saved[b] = static_cast<int64_t>(block);
  return saved;
}

Status LlamaRank::CheckPlannedSaved() {
  const int64_t need = SavedActivationBytes(spec_, config_, dtype_, SequenceShards())[1];
  for (const scheduler::GraphBuffer& b : graph_.buffers) {
    if (b.role != scheduler::BufferRole::kSavedActivation) continue;
    planned_saved_ = true;
    if (static_cast<int64_t>(b.bytes()) < need) {
      return absl::InvalidArgumentError(absl::StrCat(
          "saved activation buffer ", b.name, " holds ", b.bytes(), " bytes; a block saves ",
          need, " (SavedActivationBytes)"));
    }
  }
  return absl::OkStatus();
}

Status LlamaRank::BindSaved(const scheduler::ComputeContext& ctx) {
  if (!planned_saved_ || ctx.spec->kind != scheduler::UnitKind::kBlock) {
    return absl::OkStatus();
  }
  if (ctx.pipeline.saved == nullptr) {
    return absl::InternalError(absl::StrCat(ctx.spec->name, " m", ctx.micro_step,
                                            ": no saved activation buffer in a graph that "
                                            "plans them"));
  }
  const int64_t b = ctx.spec->block;
  BlockActs& a = ActsOf(ctx.micro_step).blocks[b];
  char* p = static_cast<char*>(ctx.pipeline.saved);
  const std::vector<size_t> bytes = FieldBytes(spec_, config_, dtype_, SequenceShards());
  void** fields[] = {&a.n1, &a.q, &a.k, &a.v, &a.o, &a.x1, &a.n2, &a.g, &a.u, &a.s};
  void* stats[3];
  size_t i = 0;
  for (; i < 10; ++i) {
    *fields[i] = p;
    p += AlignUp(bytes[i]);
  }
  for (; i < 13; ++i) {
    stats[i - 10] = p;
    p += AlignUp(bytes[i]);
  }
  a.rstd1 = static_cast<float*>(stats[0]);
  a.lse = static_cast<float*>(stats[1]);
  a.rstd2 = static_cast<float*>(stats[2]);
  if (SelectiveRecompute(b)) {
    // The recompute refills the shared scratch (as AllocateActs does:
    // under zb-h1 the weight pass reads the block's own attention output).
    if (!zb_) a.o = shared_o_;
    a.lse = shared_lse_;
  }
  return absl::OkStatus();
}

}  // namespace baton::examples
