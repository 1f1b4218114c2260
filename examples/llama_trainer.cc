#include "baton/examples/llama_trainer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "baton/ops/attention.h"
#include "baton/ops/cross_entropy.h"
#include "baton/ops/embedding.h"
#include "baton/ops/linear.h"
#include "baton/ops/lora.h"
#include "baton/ops/nf4.h"
#include "baton/ops/rmsnorm.h"
#include "baton/ops/rotary.h"
#include "baton/ops/swiglu.h"
#include "baton/optim/adamw_hook.h"
#include "baton/runtime/input_file.h"
#include "baton/scheduler/nf4_layout.h"

namespace baton::examples {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

double Uniform(uint64_t h) { return (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0; }

}  // namespace

int LlamaRank::Find(const scheduler::ComputeContext& ctx, const char* suffix) {
  for (size_t i = 0; i < ctx.params.size(); ++i) {
    const std::string& n = ctx.params[i].param->name;
    const size_t dot = n.find('.');
    if (dot != std::string::npos && n.compare(dot + 1, std::string::npos, suffix) == 0) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

StatusOr<Corpus> Corpus::Synthetic(int64_t vocab, uint64_t seed, int phrases) {
  if (vocab < 2) return absl::InvalidArgumentError("corpus: vocab must be at least 2");
  Corpus c;
  c.seed_ = seed;
  c.vocab_ = vocab;
  c.phrases_.resize(phrases);
  for (int p = 0; p < phrases; ++p) {
    for (int i = 0; i < 8; ++i) {
      c.phrases_[p].push_back(static_cast<int32_t>(Mix(seed * 1000003 + p * 8 + i) % vocab));
    }
  }
  return c;
}

StatusOr<Corpus> Corpus::FromFile(const std::string& path, int64_t vocab, uint64_t seed) {
  if (vocab < 256) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data uses byte tokens, which need vocab >= 256; the model has ", vocab));
  }
  BATON_ASSIGN_OR_RETURN(std::string text, ReadInputFile(path, "--data", kMaxCorpusBytes));
  Corpus c;
  c.seed_ = seed;
  c.vocab_ = vocab;
  c.text_.assign(text.begin(), text.end());
  return c;
}

Status Corpus::Sequence(int64_t n, int64_t seq, int32_t* out) const {
  const uint64_t h = Mix(seed_ ^ Mix(static_cast<uint64_t>(n)));
  if (phrases_.empty()) {
    if (static_cast<int64_t>(text_.size()) < seq + 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--data: the file has ", text_.size(), " bytes, fewer than seq + 1 = ", seq + 1));
    }
    const uint64_t start = h % (text_.size() - seq);
    for (int64_t i = 0; i <= seq; ++i) out[i] = text_[start + i];
    return absl::OkStatus();
  }
  const auto& phrase = phrases_[h % phrases_.size()];
  const uint64_t offset = (h >> 32) % phrase.size();
  for (int64_t i = 0; i <= seq; ++i) out[i] = phrase[(offset + i) % phrase.size()];
  return absl::OkStatus();
}

float InitialParameter(const std::string& name, int64_t i, uint64_t seed) {
  if (name.find("norm") != std::string::npos) return 1.0f;
  // LoRA: b starts at zero, so the adapted model starts as its base.
  const size_t n = name.size();
  if (n > 7 && name.compare(n - 7, 7, ".lora_b") == 0) return 0.0f;
  uint64_t h = seed * 0x100000001b3ull;
  for (char c : name) h = Mix(h ^ static_cast<uint8_t>(c));
  h = Mix(h ^ static_cast<uint64_t>(i));
  const double u1 = Uniform(h), u2 = Uniform(Mix(h));
  return static_cast<float>(0.02 * std::sqrt(-2 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

namespace {

// Internal unless ops/nf4.h's packing of n elements is scheduler/
// nf4_layout.h's (ops/ may not include scheduler/, so each has its own).
Status CheckNf4Layouts(int64_t n) {
  const ops::Nf4Layout o = ops::Nf4LayoutFor(n);
  const scheduler::Nf4Packing p = scheduler::Nf4PackingFor(n);
  if (o.codes != p.codes || o.absmax != p.absmax || o.scales != p.scales || o.bytes != p.bytes ||
      ops::kNf4Block != scheduler::kNf4BlockNumel || ops::kNf4Group != scheduler::kNf4GroupBlocks) {
    return absl::InternalError(absl::StrCat(
        "the NF4 packing of ops/nf4.h and scheduler/nf4_layout.h differ for ", n, " elements"));
  }
  return absl::OkStatus();
}

}  // namespace

scheduler::Nf4Packer Nf4Packer() {
  return [](const float* values, int64_t n, void* packed) {
    BATON_RETURN_IF_ERROR(CheckNf4Layouts(n));
    return ops::Nf4PackHost(values, n, packed);
  };
}

LlamaRank::LlamaRank(const scheduler::StepGraph& graph, const TrainConfig& config,
                     const Corpus& corpus, Device& device, int ranks, int rank,
                     int tensor_rank)
    : graph_(graph),
      spec_(graph.layout.spec),
      config_(config),
      corpus_(corpus),
      device_(device),
      ranks_(ranks),
      rank_(rank),
      tensor_rank_(tensor_rank),
      micro_steps_(graph.policy.micro_steps),
      dtype_(graph.policy.param_dtype),
      d_(MakeDims(spec_, config, dtype_)) {
  const scheduler::Policy& p = graph.policy;
  sp_ = p.sequence_parallel && p.tensor_parallel > 1;
  sp_rows_ = sp_ ? d_.T / p.tensor_parallel : d_.T;
  sp_norm_ = d_.norm;
  sp_norm_.tokens = sp_rows_;
  io_bytes_ = static_cast<size_t>(sp_rows_ * d_.H) * DataTypeSize(dtype_);
}

LlamaRank::Dims LlamaRank::MakeDims(const scheduler::ModelSpec& spec, const TrainConfig& config,
                                    DataType dtype) {
  Dims d;
  d.T = config.batch * config.seq;
  d.H = spec.hidden;
  d.Q = spec.heads * spec.head_dim;
  d.KV = spec.kv_heads * spec.head_dim;
  d.F = spec.intermediate;
  d.V = spec.vocab;
  d.act_bytes = static_cast<size_t>(d.T * d.H) * DataTypeSize(dtype);
  d.norm = {d.T, d.H, dtype, static_cast<float>(spec.norm_eps)};
  d.rope_q = {config.batch, config.seq, spec.heads, spec.head_dim, spec.rope_theta, dtype};
  d.rope_k = d.rope_q;
  d.rope_k.heads = spec.kv_heads;
  d.attn = {config.batch, config.seq, spec.heads, spec.kv_heads, spec.head_dim, dtype};
  return d;
}

StatusOr<std::unique_ptr<LlamaRank>> LlamaRank::Create(const scheduler::StepGraph& graph,
                                                       const TrainConfig& config,
                                                       const Corpus& corpus, Device& device,
                                                       int ranks, int rank,
                                                       int tensor_rank) {
  if (config.seq < 1 || config.batch < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "seq and batch must be positive, got ", config.seq, " and ", config.batch));
  }
  if (graph.layout.spec.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rotary embeddings need an even head_dim, got ", graph.layout.spec.head_dim));
  }
  if (graph.policy.param_dtype != DataType::kF32 && graph.policy.param_dtype != DataType::kBF16) {
    return absl::InvalidArgumentError("the parameter dtype must be float or bfloat16");
  }
  std::unique_ptr<LlamaRank> r(
      new LlamaRank(graph, config, corpus, device, ranks, rank, tensor_rank));
  BATON_RETURN_IF_ERROR(r->Allocate());
  return r;
}

void* LlamaRank::Buf(size_t bytes) {
  auto b = device_.Allocate(bytes == 0 ? 1 : bytes);
  if (!b.ok()) {
    if (alloc_status_.ok()) alloc_status_ = b.status();
    return nullptr;
  }
  void* p = b->data();
  owned_.push_back(std::move(*b));
  return p;
}

void LlamaRank::AllocateActs(Acts& acts) {
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV, F = d_.F, V = d_.V;
  const size_t e = DataTypeSize(dtype_);
  const size_t heads_rows = static_cast<size_t>(config_.batch * spec_.heads * config_.seq);
  for (int64_t u = 0; u <= spec_.layers; ++u) acts.h.push_back(Buf(T * H * e));
  for (int64_t b = 0; b < spec_.layers; ++b) {
    BlockActs a;
    if (planned_saved_) {
      // In the executor's arena, bound at each node (BindSaved); the
      // selective recompute's shared scratch stays the rank's.
      a = BlockActs{};
      if (SelectiveRecompute(b) && shared_o_ == nullptr) {
        shared_o_ = Buf(T * Q * e);
        shared_lse_ = static_cast<float*>(Buf(heads_rows * 4));
      }
      acts.blocks.push_back(a);
      continue;
    }
    a.n1 = Buf(T * H * e);
    a.q = Buf(T * Q * e);
    a.k = Buf(T * KV * e);
    a.v = Buf(T * KV * e);
    if (SelectiveRecompute(b) && shared_o_ == nullptr) {
      shared_o_ = Buf(T * Q * e);
      shared_lse_ = static_cast<float*>(Buf(heads_rows * 4));
    }
    // zb-h1: the deferred weight pass reads the attention output (wo's
    // input), so each block keeps its own; the recompute still rebuilds it
    // and the softmax statistics (shared) before the input-gradient pass.
    if (SelectiveRecompute(b) && !zb_) {
      a.o = shared_o_;
    } else {
      a.o = Buf(T * Q * e);
    }
    a.x1 = Buf(T * H * e);
    a.n2 = Buf(T * H * e);
    a.g = Buf(T * F * e);
    a.u = Buf(T * F * e);
    a.s = Buf(T * F * e);
    a.rstd1 = static_cast<float*>(Buf(T * 4));
    a.lse = SelectiveRecompute(b) ? shared_lse_ : static_cast<float*>(Buf(heads_rows * 4));
    a.rstd2 = static_cast<float*>(Buf(T * 4));
    acts.blocks.push_back(a);
  }
  acts.nf = Buf(T * H * e);
  acts.rstdf = static_cast<float*>(Buf(T * 4));
  acts.logits = Buf(T * V * e);
}

Status LlamaRank::Allocate() {
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV, F = d_.F;
  const size_t e = DataTypeSize(dtype_);
  for (int m = 0; m < micro_steps_; ++m) {
    ids_.push_back(static_cast<int32_t*>(Buf(T * 4)));
    targets_.push_back(static_cast<int32_t*>(Buf(T * 4)));
    loss_.push_back(static_cast<float*>(Buf(T * 4)));
  }
  const scheduler::Policy& policy = graph_.policy;
  BATON_RETURN_IF_ERROR(CheckPlannedSaved());
  if (policy.pipeline_parallel > 1) {
    has_head_ = graph_.stage == policy.pipeline_parallel - 1;
    zb_ = policy.pipeline_schedule == scheduler::PipelineSchedule::kZbH1;
    // Interleaved: a chunk's warm-up runs ahead of 1F1B's; zb-h1: the
    // weight passes run after later forwards. Keep every micro-batch's.
    acts_.resize(policy.virtual_stages > 1 || zb_
                     ? micro_steps_
                     : std::min(micro_steps_, policy.pipeline_parallel));
  } else {
    acts_.resize(1);
  }
  for (Acts& acts : acts_) AllocateActs(acts);
  gres_[0] = Buf(T * H * e);
  gres_[1] = Buf(T * H * e);
  dn_ = Buf(T * H * e);
  dq_ = Buf(T * Q * e);
  dk_ = Buf(T * KV * e);
  dv_ = Buf(T * KV * e);
  do_ = Buf(T * Q * e);
  ds_ = Buf(T * F * e);
  dg_ = Buf(T * F * e);
  du_ = Buf(T * F * e);
  frozen_dw_ = Buf(H * 4);
  if (zb_ && policy.layout.lora_rank > 0) {
    // The weight pass reads each block's matrices' inputs unadapted.
    return absl::UnimplementedError("llama trainer: zb-h1 with LoRA adapters");
  }
  if (zb_) AllocateDeferred();
  if (sp_) {
    if (d_.T % policy.tensor_parallel != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "sequence parallelism: ", d_.T, " tokens per micro-step do not divide by tp=",
          policy.tensor_parallel));
    }
    if (policy.recompute == scheduler::Recompute::kFull && policy.recompute_blocks != 0) {
      return absl::UnimplementedError(
          "llama trainer: sequence parallelism with full recompute (the recompute's "
          "gathers are not run)");
    }
    if (policy.layout.lora_rank > 0) {
      // The adapters' kept x a^T is whole-tensor (the overlap's row blocks).
      return absl::UnimplementedError("llama trainer: sequence parallelism with LoRA adapters");
    }
    sp_dn_ = Buf(sp_rows_ * H * e);
    if (policy.tp_comm_overlap) {
      sp_dy_ = Buf(T * H * e);
      sp_stage_ = Buf(T * H * e);
    }
  }
  BATON_RETURN_IF_ERROR(AllocateVocabParallel());
  const scheduler::LayoutOptions& lo = graph_.policy.layout;
  if (lo.lora_rank > 0) {
    // Per micro-batch whose activations are kept (pipeline stages hold
    // several in flight), block and target.
    lora_xa_.assign(acts_.size() * spec_.layers,
                    std::vector<void*>(scheduler::kNumLoraTargets, nullptr));
    for (auto& block : lora_xa_) {
      for (int t = 0; t < scheduler::kNumLoraTargets; ++t) {
        if (lo.lora_targets & (1u << t)) block[t] = Buf(T * lo.lora_rank * e);
      }
    }
    lora_u_ = Buf(T * lo.lora_rank * e);
  }
  BATON_RETURN_IF_ERROR(alloc_status_);
  staging_.resize(2 * micro_steps_ * T);
  return absl::OkStatus();
}

int64_t LlamaRank::tokens_per_step() const { return d_.T * micro_steps_; }

Status LlamaRank::LoadBatch(Stream& stream, int64_t step) {
  const int64_t seq = config_.seq, T = d_.T;
  std::vector<int32_t> one(seq + 1);
  for (int m = 0; m < micro_steps_; ++m) {
    int32_t* ids = staging_.data() + 2 * m * T;
    int32_t* tgt = ids + T;
    for (int64_t j = 0; j < config_.batch; ++j) {
      const int64_t n = ((step * micro_steps_ + m) * ranks_ + rank_) * config_.batch + j;
      BATON_RETURN_IF_ERROR(corpus_.Sequence(n, seq, one.data()));
      std::memcpy(ids + j * seq, one.data(), seq * 4);
      std::memcpy(tgt + j * seq, one.data() + 1, seq * 4);
    }
    BATON_RETURN_IF_ERROR(stream.MemcpyAsync(ids_[m], ids, T * 4));
    BATON_RETURN_IF_ERROR(stream.MemcpyAsync(targets_[m], tgt, T * 4));
  }
  return absl::OkStatus();
}

StatusOr<double> LlamaRank::LossSum(Stream& stream) {
  if (!has_head_) return 0.0;  // a pipeline stage before the last
  // Tensor rank 0 counts it (the parallel cross-entropy gives every tensor
  // rank the whole loss).
  if (tensor_rank_ != 0) return 0.0;
  const int64_t n = d_.T;
  std::vector<float> host(micro_steps_ * n);
  for (int m = 0; m < micro_steps_; ++m) {
    BATON_RETURN_IF_ERROR(stream.MemcpyAsync(host.data() + m * n, loss_[m], n * 4));
  }
  BATON_RETURN_IF_ERROR(stream.Synchronize());
  double sum = 0;
  for (float l : host) sum += l;
  return sum;
}

scheduler::StepCallbacks LlamaRank::Callbacks() {
  scheduler::StepCallbacks cb;
  cb.compute = [this](const scheduler::ComputeContext& ctx) { return Compute(ctx); };
  cb.optimizer = [this](const scheduler::OptimizerContext& ctx) { return Optimizer(ctx); };
  cb.dequantize = [this](const scheduler::DequantizeContext& ctx) { return Dequantize(ctx); };
  // AdamW writes the updated master straight into the next gather's input.
  cb.optimizer_writes_shard = true;
  return cb;
}

Status LlamaRank::Compute(const scheduler::ComputeContext& ctx) {
  BATON_RETURN_IF_ERROR(BindSaved(ctx));  // planned saved activations, if any
  const scheduler::ComputeContext::Pipeline& pipe = ctx.pipeline;
  if (pipe.input == nullptr && pipe.output == nullptr && pipe.output_grad == nullptr &&
      pipe.input_grad == nullptr) {
    return ComputeUnit(ctx);
  }
  // A pipeline stage's first or last block: the activation (gradient)
  // crosses to or from the neighbouring stage through the executor's
  // buffers.
  if (ctx.spec->kind != scheduler::UnitKind::kBlock) {
    return absl::InternalError(absl::StrCat("pipeline activations at unit ", ctx.spec->name,
                                            ", which is not a block"));
  }
  Stream& st = *ctx.stream;
  Acts& acts = ActsOf(ctx.micro_step);
  const int b = ctx.spec->block;
  const bool backward = ctx.kind == scheduler::NodeKind::kBackward;
  if (!backward && pipe.input != nullptr) {
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(acts.h[b], pipe.input, io_bytes_));
  }
  if (backward && pipe.output_grad != nullptr) {
    cur_ = 0;
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(gres_[cur_], pipe.output_grad, io_bytes_));
  }
  BATON_RETURN_IF_ERROR(ComputeUnit(ctx));
  if (!backward && pipe.output != nullptr) {
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(pipe.output, acts.h[b + 1], io_bytes_));
  }
  if (backward && pipe.input_grad != nullptr) {
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(pipe.input_grad, gres_[cur_], io_bytes_));
  }
  return absl::OkStatus();
}

Status LlamaRank::ComputeUnit(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  const int64_t T = d_.T, H = d_.H, V = d_.V;
  const int m = ctx.micro_step;
  Acts& acts = ActsOf(m);
  const bool backward = ctx.kind == scheduler::NodeKind::kBackward;
  const ops::RmsNormShape& norm = d_.norm;
  if (ctx.kind == scheduler::NodeKind::kBackwardWeight) return WeightUnit(ctx);
  if (sp_) return SpComputeUnit(ctx);  // llama_trainer_sp.cc
  if (ctx.weight_deferred && !zb_) {
    return absl::InternalError("a deferred weight gradient on a graph that is not zb-h1");
  }
  Deferred* keep = ctx.weight_deferred ? &deferred_[m] : nullptr;
  switch (ctx.spec->kind) {
    case scheduler::UnitKind::kEmbedding: {
      if (vocab_parallel_) return VocabEmbedding(ctx);
      const ops::EmbeddingShape s{T, V, H, dtype_};
      if (!backward) {
        return ops::EmbeddingForward(st, s, ids_[m], ctx.params[0].data, acts.h[0]);
      }
      // zb-h1: no input gradient; the weight pass reads the output's.
      if (keep) return st.MemcpyAsync(keep->emb, gres_[cur_], d_.act_bytes);
      if (ctx.grads[0].data == nullptr) return absl::OkStatus();  // frozen
      return ops::EmbeddingBackward(st, s, ids_[m], gres_[cur_], ctx.grads[0].data,
                                    ctx.grads[0].dtype, ctx.grad_accumulate[0]);
    }
    case scheduler::UnitKind::kBlock:
      if (ctx.kind == scheduler::NodeKind::kRecompute &&
          ctx.recompute == scheduler::Recompute::kSelective) {
        return AttentionCore(ctx);
      }
      if (ctx.tensor.segments != 0) {
        // zb-h1: MlpBackward / AttentionBackward keep the weight pass's
        // gradients (ctx.weight_deferred), as for a whole block.
        if (!backward) return BlockForwardPart(ctx);
        using scheduler::BlockSegment;
        using scheduler::SegmentBit;
        if (ctx.tensor.segments & SegmentBit(BlockSegment::kMlp)) {
          BATON_RETURN_IF_ERROR(MlpBackward(ctx));
        }
        if (ctx.tensor.segments & SegmentBit(BlockSegment::kAttention)) {
          BATON_RETURN_IF_ERROR(AttentionBackward(ctx));
        }
        return absl::OkStatus();
      }
      return backward ? BlockBackward(ctx) : BlockForward(ctx);
    case scheduler::UnitKind::kFinalNorm: {
      if (!backward) {
        if (ctx.tensor.input != nullptr) {  // the last block's output, all-reduced
          BATON_RETURN_IF_ERROR(
              st.MemcpyAsync(acts.h[spec_.layers], ctx.tensor.input, d_.act_bytes));
        }
        return ops::RmsNormForward(st, norm, acts.h[spec_.layers], ctx.params[0].data, acts.nf,
                                   acts.rstdf);
      }
      // gres_[cur_] holds d(nf); the input's gradient goes to the other one.
      const int next = 1 - cur_;
      if (keep) BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->nf, gres_[cur_], d_.act_bytes));
      const bool frozen = keep != nullptr || ctx.grads[0].data == nullptr;
      BATON_RETURN_IF_ERROR(ops::RmsNormBackward(
          st, norm, gres_[cur_], acts.h[spec_.layers], ctx.params[0].data, acts.rstdf,
          gres_[next], false, frozen ? frozen_dw_ : ctx.grads[0].data,
          frozen ? DataType::kF32 : ctx.grads[0].dtype, !frozen && ctx.grad_accumulate[0]));
      cur_ = next;
      return absl::OkStatus();
    }
    case scheduler::UnitKind::kLmHead: {
      if (vocab_parallel_) return VocabHead(ctx);
      const ops::LinearShape s{T, H, V, dtype_};
      if (!backward) {
        BATON_RETURN_IF_ERROR(ops::LinearForward(st, s, acts.nf, ctx.params[0].data, acts.logits));
        // Loss and the logits' gradient in one pass, in place.
        return ops::CrossEntropy(st, {T, V, dtype_}, acts.logits, targets_[m], loss_[m],
                                 acts.logits, 1.0f / static_cast<float>(T));
      }
      cur_ = 0;
      if (keep) {  // the weight pass reads the logits' gradient, kept in place
        return ops::LinearBackward(st, s, acts.logits, acts.nf, ctx.params[0].data, gres_[cur_],
                                   false, nullptr, DataType::kF32, false);
      }
      return ops::LinearBackward(st, s, acts.logits, acts.nf, ctx.params[0].data, gres_[cur_], false,
                                 ctx.grads[0].data, ctx.grads[0].dtype, ctx.grad_accumulate[0]);
    }
  }
  return absl::InternalError("unknown unit kind");
}

Status LlamaRank::BlockForward(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  const int b = ctx.spec->block;
  Acts& acts = ActsOf(ctx.micro_step);
  BlockActs& a = acts.blocks[b];
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV, F = d_.F;
  auto p = [&](const char* name) { return ctx.params[Find(ctx, name)].data; };
  const ops::RmsNormShape& norm = d_.norm;
  void* x = acts.h[b];
  BATON_RETURN_IF_ERROR(ops::RmsNormForward(st, norm, x, p("attn_norm.weight"), a.n1, a.rstd1));
  BATON_RETURN_IF_ERROR(Project(ctx, "wq", {T, H, Q, dtype_}, a.n1, a.q, false));
  BATON_RETURN_IF_ERROR(Project(ctx, "wk", {T, H, KV, dtype_}, a.n1, a.k, false));
  BATON_RETURN_IF_ERROR(Project(ctx, "wv", {T, H, KV, dtype_}, a.n1, a.v, false));
  BATON_RETURN_IF_ERROR(ops::RotaryForward(st, d_.rope_q, a.q));
  BATON_RETURN_IF_ERROR(ops::RotaryForward(st, d_.rope_k, a.k));
  BATON_RETURN_IF_ERROR(ops::AttentionForward(st, d_.attn, a.q, a.k, a.v, a.o, a.lse));
  // x1 = x + o wo^T (row-parallel: the partial products all-reduced).
  BATON_RETURN_IF_ERROR(RowParallelResidual(ctx, "wo", {T, Q, H, dtype_}, x, a.o, a.x1));
  BATON_RETURN_IF_ERROR(ops::RmsNormForward(st, norm, a.x1, p("mlp_norm.weight"), a.n2, a.rstd2));
  BATON_RETURN_IF_ERROR(Project(ctx, "w_gate", {T, H, F, dtype_}, a.n2, a.g, false));
  BATON_RETURN_IF_ERROR(Project(ctx, "w_up", {T, H, F, dtype_}, a.n2, a.u, false));
  BATON_RETURN_IF_ERROR(ops::SwiGluForward(st, {T, F, dtype_}, a.g, a.u, a.s));
  return RowParallelResidual(ctx, "w_down", {T, F, H, dtype_}, a.x1, a.s, acts.h[b + 1]);
}

Status LlamaRank::BlockForwardPart(const scheduler::ComputeContext& ctx) {
  using scheduler::BlockSegment;
  using scheduler::SegmentBit;
  Stream& st = *ctx.stream;
  const int b = ctx.spec->block;
  Acts& acts = ActsOf(ctx.micro_step);
  BlockActs& a = acts.blocks[b];
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV, F = d_.F;
  auto p = [&](const char* name) { return ctx.params[Find(ctx, name)].data; };
  // tp_comm_overlap: no all-reduce node; the part all-reduces its own
  // output in chunks (RowParallelOverlapped) into the model's buffers.
  const bool own = ctx.tensor.output == nullptr;
  if (own && ctx.tensor.chunks == 0) {
    return absl::InternalError(absl::StrCat(ctx.spec->name, ": a tensor-parallel block part "
                                            "with no output for its all-reduce"));
  }
  const ops::RmsNormShape& norm = d_.norm;
  if (ctx.tensor.segments & SegmentBit(BlockSegment::kAttention)) {
    // The previous block's output (all-reduced); the first block's (or a
    // pipeline stage's first, ComputeContext::pipeline) is already in h[b].
    if (ctx.tensor.input != nullptr) {
      BATON_RETURN_IF_ERROR(st.MemcpyAsync(acts.h[b], ctx.tensor.input, d_.act_bytes));
    }
    BATON_RETURN_IF_ERROR(
        ops::RmsNormForward(st, norm, acts.h[b], p("attn_norm.weight"), a.n1, a.rstd1));
    BATON_RETURN_IF_ERROR(Project(ctx, "wq", {T, H, Q, dtype_}, a.n1, a.q, false));
    BATON_RETURN_IF_ERROR(Project(ctx, "wk", {T, H, KV, dtype_}, a.n1, a.k, false));
    BATON_RETURN_IF_ERROR(Project(ctx, "wv", {T, H, KV, dtype_}, a.n1, a.v, false));
    BATON_RETURN_IF_ERROR(ops::RotaryForward(st, d_.rope_q, a.q));
    BATON_RETURN_IF_ERROR(ops::RotaryForward(st, d_.rope_k, a.k));
    BATON_RETURN_IF_ERROR(ops::AttentionForward(st, d_.attn, a.q, a.k, a.v, a.o, a.lse));
    if (own) return RowParallelOverlapped(ctx, "wo", {T, Q, H, dtype_}, acts.h[b], a.o, a.x1);
    return RowParallelPartial(ctx, "wo", {T, Q, H, dtype_}, acts.h[b], a.o, ctx.tensor.output);
  }
  if (!own) {
    if (ctx.tensor.input == nullptr) {
      return absl::InternalError(absl::StrCat(ctx.spec->name, ": the MLP part has no attention "
                                              "output"));
    }
    BATON_RETURN_IF_ERROR(st.MemcpyAsync(a.x1, ctx.tensor.input, d_.act_bytes));
  }
  BATON_RETURN_IF_ERROR(ops::RmsNormForward(st, norm, a.x1, p("mlp_norm.weight"), a.n2, a.rstd2));
  BATON_RETURN_IF_ERROR(Project(ctx, "w_gate", {T, H, F, dtype_}, a.n2, a.g, false));
  BATON_RETURN_IF_ERROR(Project(ctx, "w_up", {T, H, F, dtype_}, a.n2, a.u, false));
  BATON_RETURN_IF_ERROR(ops::SwiGluForward(st, {T, F, dtype_}, a.g, a.u, a.s));
  if (own) return RowParallelOverlapped(ctx, "w_down", {T, F, H, dtype_}, a.x1, a.s, acts.h[b + 1]);
  return RowParallelPartial(ctx, "w_down", {T, F, H, dtype_}, a.x1, a.s, ctx.tensor.output);
}

Status LlamaRank::RowParallelOverlapped(const scheduler::ComputeContext& ctx, const char* w,
                                        const ops::LinearShape& shape, const void* res,
                                        const void* x, void* out) {
  const int k = ctx.tensor.chunks;
  const bool adapters = Find(ctx, absl::StrCat(w, ".lora_a").c_str()) >= 0;
  if (k < 2 || shape.rows % k != 0 || adapters || ctx.tensor.stream == nullptr) {
    return RowParallelResidual(ctx, w, shape, res, x, out);  // one all-reduce
  }
  while (static_cast<int>(chunk_events_.size()) < k + 1) {
    BATON_ASSIGN_OR_RETURN(std::unique_ptr<Event> ev, device_.CreateEvent());
    chunk_events_.push_back(std::move(ev));
  }
  Stream& cs = *ctx.stream;
  Stream& ts = *ctx.tensor.stream;
  const int64_t rows = shape.rows / k;
  const size_t e = DataTypeSize(dtype_);
  ops::LinearShape part = shape;
  part.rows = rows;
  CollectiveOptions opts;
  opts.tag = scheduler::kFirstTrainerTag + 1;  // the tensor stream's own
  for (int c = 0; c < k; ++c) {
    // Chunk c's rows: its GEMM on the compute stream, then its all-reduce
    // on the tensor stream while the next chunk's GEMM runs.
    const size_t in_off = static_cast<size_t>(c * rows * shape.in) * e;
    const size_t out_off = static_cast<size_t>(c * rows * shape.out) * e;
    char* o = static_cast<char*>(out) + out_off;
    BATON_RETURN_IF_ERROR(scheduler::RecordSpan(
        ctx.spans, cs, scheduler::StreamClass::kCompute, "GEMM chunk", c, ctx.step, [&] {
          return RowParallelPartial(ctx, w, part, static_cast<const char*>(res) + out_off,
                                    static_cast<const char*>(x) + in_off, o);
        }));
    BATON_RETURN_IF_ERROR(chunk_events_[c]->Record(cs));
    BATON_RETURN_IF_ERROR(ts.Wait(*chunk_events_[c]));
    BATON_RETURN_IF_ERROR(scheduler::RecordSpan(
        ctx.spans, ts, scheduler::StreamClass::kTensor, "AR chunk", c, ctx.step, [&] {
          return ctx.tensor.comm->AllReduce(o, o, static_cast<size_t>(rows * shape.out), dtype_,
                                            ReduceOp::kSum, ts, opts);
        }));
  }
  BATON_RETURN_IF_ERROR(chunk_events_[k]->Record(ts));
  return cs.Wait(*chunk_events_[k]);
}

Status LlamaRank::TensorAllReduce(const scheduler::ComputeContext& ctx, void* x) {
  if (ctx.tensor.size < 2) return absl::OkStatus();
  CollectiveOptions opts;
  opts.tag = scheduler::kFirstTrainerTag;
  return ctx.tensor.comm->AllReduce(x, x, static_cast<size_t>(d_.T * d_.H), dtype_,
                                    ReduceOp::kSum, *ctx.stream, opts);
}

Status LlamaRank::RowParallelPartial(const scheduler::ComputeContext& ctx, const char* w,
                                     const ops::LinearShape& shape, const void* res,
                                     const void* x, void* out) {
  if (ctx.tensor.rank != 0) return Project(ctx, w, shape, x, out, false);
  // The residual is copied and the projection added onto it.
  const size_t bytes = static_cast<size_t>(shape.rows * shape.out) * DataTypeSize(dtype_);
  BATON_RETURN_IF_ERROR(ctx.stream->MemcpyAsync(out, res, bytes));
  return Project(ctx, w, shape, x, out, true);
}

Status LlamaRank::RowParallelResidual(const scheduler::ComputeContext& ctx, const char* w,
                                      const ops::LinearShape& shape, const void* res,
                                      const void* x, void* out) {
  BATON_RETURN_IF_ERROR(RowParallelPartial(ctx, w, shape, res, x, out));
  return TensorAllReduce(ctx, out);  // as the graph's all-reduce nodes do
}

namespace {

// The LoRA target of block matrix `w` ("wq", ...), or -1.
int TargetOf(const char* w) {
  for (int t = 0; t < scheduler::kNumLoraTargets; ++t) {
    if (std::strcmp(scheduler::LoraTargetParam(static_cast<scheduler::LoraTarget>(t)), w) == 0) {
      return t;
    }
  }
  return -1;
}

}  // namespace

void* LlamaRank::LoraXa(const scheduler::ComputeContext& ctx, const char* w) const {
  const size_t slot = static_cast<size_t>(ctx.micro_step) % acts_.size();
  return lora_xa_[slot * spec_.layers + ctx.spec->block][TargetOf(w)];
}

Status LlamaRank::Project(const scheduler::ComputeContext& ctx, const char* w,
                          const ops::LinearShape& s, const void* x, void* y, bool acc) {
  const int iw = Find(ctx, w);
  const int ia = Find(ctx, absl::StrCat(w, ".lora_a").c_str());
  if (ia < 0) return ops::LinearForward(*ctx.stream, s, x, ctx.params[iw].data, y, acc);
  const int ib = Find(ctx, absl::StrCat(w, ".lora_b").c_str());
  const scheduler::LayoutOptions& lo = graph_.policy.layout;
  const ops::LoraShape ls{s.rows, s.in, s.out, lo.lora_rank,
                          static_cast<float>(lo.lora_alpha / lo.lora_rank), s.dtype};
  void* xa = LoraXa(ctx, w);
  return ops::LoraForward(*ctx.stream, ls, x, ctx.params[iw].data, ctx.params[ia].data,
                          ctx.params[ib].data, xa, y, acc);
}

Status LlamaRank::ProjectBackward(const scheduler::ComputeContext& ctx, const char* w,
                                  const ops::LinearShape& s, const void* dy, const void* x,
                                  void* dx, bool acc_dx) {
  const int iw = Find(ctx, w);
  const int ia = Find(ctx, absl::StrCat(w, ".lora_a").c_str());
  if (ctx.weight_deferred) {  // zb-h1's B: dx alone, dw in the weight pass
    if (ia >= 0) return absl::InternalError(absl::StrCat(w, ": zb-h1 with LoRA adapters"));
    return ops::LinearBackward(*ctx.stream, s, dy, x, ctx.params[iw].data, dx, acc_dx, nullptr,
                               DataType::kF32, false);
  }
  const scheduler::TensorView& gw = ctx.grads[iw];
  if (ia < 0) {  // gw.data is null for a frozen w: dx alone
    return ops::LinearBackward(*ctx.stream, s, dy, x, ctx.params[iw].data, dx, acc_dx, gw.data,
                               gw.dtype, gw.data != nullptr && ctx.grad_accumulate[iw]);
  }
  const int ib = Find(ctx, absl::StrCat(w, ".lora_b").c_str());
  const scheduler::TensorView &ga = ctx.grads[ia], &gb = ctx.grads[ib];
  if (ga.dtype != gb.dtype) {
    return absl::InternalError(absl::StrCat("the gradients of ", w, "'s adapters differ in dtype"));
  }
  const scheduler::LayoutOptions& lo = graph_.policy.layout;
  const ops::LoraShape ls{s.rows, s.in, s.out, lo.lora_rank,
                          static_cast<float>(lo.lora_alpha / lo.lora_rank), s.dtype};
  ops::LoraGrads g{dx, acc_dx, ga.data, gb.data, ga.dtype,
                   static_cast<bool>(ctx.grad_accumulate[ia]),
                   static_cast<bool>(ctx.grad_accumulate[ib])};
  return ops::LoraBackward(*ctx.stream, ls, dy, x, ctx.params[iw].data, ctx.params[ia].data,
                           ctx.params[ib].data, LoraXa(ctx, w),
                           lora_u_, g);
}

bool LlamaRank::SelectiveRecompute(int64_t block) const {
  const scheduler::Policy& p = graph_.policy;
  return p.recompute == scheduler::Recompute::kSelective &&
         (p.recompute_blocks < 0 || block < p.recompute_blocks);
}

Status LlamaRank::AttentionCore(const scheduler::ComputeContext& ctx) {
  BlockActs& a = ActsOf(ctx.micro_step).blocks[ctx.spec->block];
  return ops::AttentionForward(*ctx.stream, d_.attn, a.q, a.k, a.v, a.o, a.lse);
}

Status LlamaRank::BlockBackward(const scheduler::ComputeContext& ctx) {
  BATON_RETURN_IF_ERROR(MlpBackward(ctx));
  return AttentionBackward(ctx);
}

LlamaRank::NormGrad LlamaRank::NormGradOf(const scheduler::ComputeContext& ctx,
                                          const char* name) {
  const int i = Find(ctx, name);
  // Frozen, or zb-h1's input-gradient pass (the weight pass computes it).
  if (ctx.weight_deferred || ctx.grads[i].data == nullptr) {
    return NormGrad{frozen_dw_, DataType::kF32, false};
  }
  return NormGrad{ctx.grads[i].data, ctx.grads[i].dtype,
                  static_cast<bool>(ctx.grad_accumulate[i])};
}

Status LlamaRank::MlpBodyBackward(const scheduler::ComputeContext& ctx, const BlockActs& a,
                                  const void* dy, void* dg, void* du, void* dn) {
  const int64_t T = d_.T, H = d_.H, F = d_.F;
  BATON_RETURN_IF_ERROR(ProjectBackward(ctx, "w_down", {T, F, H, dtype_}, dy, a.s, ds_, false));
  BATON_RETURN_IF_ERROR(ops::SwiGluBackward(*ctx.stream, {T, F, dtype_}, ds_, a.g, a.u, dg, du));
  BATON_RETURN_IF_ERROR(ProjectBackward(ctx, "w_gate", {T, H, F, dtype_}, dg, a.n2, dn, false));
  return ProjectBackward(ctx, "w_up", {T, H, F, dtype_}, du, a.n2, dn, true);
}

Status LlamaRank::AttentionBodyBackward(const scheduler::ComputeContext& ctx, const BlockActs& a,
                                        const void* dy, void* dq, void* dk, void* dv, void* dn) {
  Stream& st = *ctx.stream;
  const int64_t T = d_.T, H = d_.H, Q = d_.Q, KV = d_.KV;
  BATON_RETURN_IF_ERROR(ProjectBackward(ctx, "wo", {T, Q, H, dtype_}, dy, a.o, do_, false));
  BATON_RETURN_IF_ERROR(
      ops::AttentionBackward(st, d_.attn, do_, a.q, a.k, a.v, a.o, a.lse, dq, dk, dv));
  BATON_RETURN_IF_ERROR(ops::RotaryBackward(st, d_.rope_q, dq));
  BATON_RETURN_IF_ERROR(ops::RotaryBackward(st, d_.rope_k, dk));
  BATON_RETURN_IF_ERROR(ProjectBackward(ctx, "wq", {T, H, Q, dtype_}, dq, a.n1, dn, false));
  BATON_RETURN_IF_ERROR(ProjectBackward(ctx, "wk", {T, H, KV, dtype_}, dk, a.n1, dn, true));
  return ProjectBackward(ctx, "wv", {T, H, KV, dtype_}, dv, a.n1, dn, true);
}

// gres_[cur_] holds d(block output) = d(x2); on return gres_[cur_] (the
// other buffer) holds d(x1). x2 = x1 + s wd^T, so d(x1) = d(x2) + its path
// through n2.
Status LlamaRank::MlpBackward(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  BlockActs& a = ActsOf(ctx.micro_step).blocks[ctx.spec->block];
  void* A = gres_[cur_];
  void* B = gres_[1 - cur_];
  BATON_RETURN_IF_ERROR(st.MemcpyAsync(B, A, d_.act_bytes));
  // zb-h1: the gradients the weight pass needs go to the micro-step's set.
  BlockDeferred* keep =
      ctx.weight_deferred ? &deferred_[ctx.micro_step].blocks[ctx.spec->block] : nullptr;
  void* dg = keep ? keep->dg : dg_;
  void* du = keep ? keep->du : du_;
  void* dn = keep ? keep->dn2 : dn_;
  if (keep) BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dx2, A, d_.act_bytes));
  const NormGrad gm = NormGradOf(ctx, "mlp_norm.weight");
  BATON_RETURN_IF_ERROR(MlpBodyBackward(ctx, a, A, dg, du, dn));
  // Column-parallel: each tensor rank's input gradient is a partial sum.
  BATON_RETURN_IF_ERROR(TensorAllReduce(ctx, dn));
  BATON_RETURN_IF_ERROR(ops::RmsNormBackward(st, d_.norm, dn, a.x1,
                                             ctx.params[Find(ctx, "mlp_norm.weight")].data,
                                             a.rstd2, B, true, gm.data, gm.dtype, gm.acc));
  cur_ = 1 - cur_;
  return absl::OkStatus();
}

// gres_[cur_] holds d(x1); on return gres_[cur_] (the other buffer) holds
// d(block input). x1 = x + o wo^T.
Status LlamaRank::AttentionBackward(const scheduler::ComputeContext& ctx) {
  Stream& st = *ctx.stream;
  const int b = ctx.spec->block;
  Acts& acts = ActsOf(ctx.micro_step);
  BlockActs& a = acts.blocks[b];
  void* B = gres_[cur_];      // d(x1)
  void* A = gres_[1 - cur_];  // becomes d(block input)
  BATON_RETURN_IF_ERROR(st.MemcpyAsync(A, B, d_.act_bytes));
  // zb-h1: the gradients the weight pass needs go to the micro-step's set.
  BlockDeferred* keep = ctx.weight_deferred ? &deferred_[ctx.micro_step].blocks[b] : nullptr;
  void* dq = keep ? keep->dq : dq_;
  void* dk = keep ? keep->dk : dk_;
  void* dv = keep ? keep->dv : dv_;
  void* dn = keep ? keep->dn1 : dn_;
  if (keep) BATON_RETURN_IF_ERROR(st.MemcpyAsync(keep->dx1, B, d_.act_bytes));
  const NormGrad ga = NormGradOf(ctx, "attn_norm.weight");
  BATON_RETURN_IF_ERROR(AttentionBodyBackward(ctx, a, B, dq, dk, dv, dn));
  BATON_RETURN_IF_ERROR(TensorAllReduce(ctx, dn));
  BATON_RETURN_IF_ERROR(ops::RmsNormBackward(st, d_.norm, dn, acts.h[b],
                                             ctx.params[Find(ctx, "attn_norm.weight")].data,
                                             a.rstd1, A, true, ga.data, ga.dtype, ga.acc));
  cur_ = 1 - cur_;
  return absl::OkStatus();
}

Status LlamaRank::Dequantize(const scheduler::DequantizeContext& ctx) {
  BATON_RETURN_IF_ERROR(CheckNf4Layouts(ctx.segment_numel));
  const size_t stride = static_cast<size_t>(scheduler::Nf4PackedWords(ctx.segment_numel)) * 4;
  const size_t out_bytes = static_cast<size_t>(ctx.segment_numel) * DataTypeSize(ctx.out_dtype);
  for (int64_t i = 0; i < ctx.segments; ++i) {
    BATON_RETURN_IF_ERROR(ops::Nf4Dequantize(
        *ctx.stream, static_cast<const char*>(ctx.packed) + i * stride, ctx.segment_numel,
        static_cast<char*>(ctx.out) + i * out_bytes, ctx.out_dtype));
  }
  return absl::OkStatus();
}

Status LlamaRank::Optimizer(const scheduler::OptimizerContext& ctx) {
  return optim::AdamWOptimizerStep(config_.adamw, ctx);
}

}  // namespace baton::examples
