// A Llama-style decoder trained through baton: the compute callbacks of the
// executor (forward, recompute and backward of each unit, built from ops/),
// the optimizer callback (AdamW on the fp32 master shards, fused with the
// cast into the next all-gather's input), and the
// data (a deterministic synthetic corpus or a text file as byte tokens).
//
// One LlamaRank per rank. It owns the activations of one micro-step (the
// scheduler runs micro-steps one after another) and per-micro-step token
// buffers, all allocated on the rank's device; gathered parameters and
// gradients belong to the executor. Under selective recompute the blocks it
// covers keep no attention output or softmax statistics of their own: one
// scratch serves them all, and each recompute node refills it for its
// block's backward (under zb-h1 the attention output stays per block: the
// deferred weight pass reads it).
//
// Data: sequence number n = ((step * micro_steps + m) * ranks + rank) * batch
// + j (for sequence j of micro-step m on `rank`), so any split of the same
// global batch over ranks and micro-steps sees the same sequences; a
// one-rank run with ranks * batch sequences is the unsharded reference.
//
// LoRA (Policy::layout.lora_rank > 0; scheduler/layout.h): each targeted
// matrix w of a block runs as ops/lora.h's adapted linear with its unit's
// "<w>.lora_a" / "<w>.lora_b" and scale lora_alpha / lora_rank; frozen
// parameters get no gradient (the executor passes null: the embedding's
// backward is skipped, a frozen norm weight's gradient goes to a scratch
// that is never read). The rank keeps each adapted linear's x a^T of the
// micro-step for the backward. NF4 base weights (base_dtype nf4): the
// dequantize callback runs ops/nf4.h's kernel on each gathered packing;
// Nf4Packer() packs the initial values.
//
// Loss: each rank's cross-entropy gradient is scaled by 1 / (its tokens);
// the executor sums gradients over ranks and micro-steps and the optimizer
// applies 1 / (ranks * micro_steps), which is the gradient of the mean loss
// over the global batch.
#ifndef BATON_EXAMPLES_LLAMA_TRAINER_H_
#define BATON_EXAMPLES_LLAMA_TRAINER_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "baton/comm/communicator.h"
#include "baton/ops/adamw.h"
#include "baton/ops/attention.h"
#include "baton/ops/linear.h"
#include "baton/ops/rmsnorm.h"
#include "baton/ops/rotary.h"
#include "baton/ops/vocab_parallel.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/step_graph.h"

namespace baton::examples {

// Token sequences of length seq + 1 (inputs and shifted targets).
class Corpus {
 public:
  // Synthetic: each sequence repeats one of `phrases` random phrases of 8
  // tokens (drawn from vocab by `seed`) from a random offset: learnable
  // (unigram and bigram structure) and deterministic.
  static StatusOr<Corpus> Synthetic(int64_t vocab, uint64_t seed,
                                    int phrases = 8);
  // A text file as bytes (tokens 0..255; vocab must be >= 256); sequence n
  // starts at a deterministic pseudo-random offset. InvalidArgument if the
  // file is shorter than seq + 1 bytes (checked by Sequence) or vocab < 256;
  // NotFound for a path that cannot be opened; InvalidArgument for a
  // directory or other non-regular file, or one over kMaxCorpusBytes.
  static constexpr size_t kMaxCorpusBytes = size_t{1} << 30;
  static StatusOr<Corpus> FromFile(const std::string& path, int64_t vocab,
                                   uint64_t seed);

  // Sequence n: seq + 1 tokens into out.
  Status Sequence(int64_t n, int64_t seq, int32_t* out) const;

 private:
  uint64_t seed_ = 0;
  int64_t vocab_ = 0;
  std::vector<std::vector<int32_t>> phrases_;  // synthetic
  std::vector<uint8_t> text_;                  // file
};

struct TrainConfig {
  int64_t seq = 128;
  int64_t batch = 2;  // sequences per rank per micro-step
  ops::AdamWConfig adamw{1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f};
  uint64_t seed = 1;
};

// Deterministic initial value of element i of a parameter (the same on
// every rank and in every layout): norm weights 1, LoRA's "*.lora_b" 0
// (the adapted model starts as its base), others (LoRA's a too)
// N(0, 0.02).
float InitialParameter(const std::string& name, int64_t i, uint64_t seed);

// The executor's NF4 packer (Executor::InitParameters): ops/nf4.h's host
// packing, after checking that its layout is scheduler/nf4_layout.h's
// (Internal otherwise).
scheduler::Nf4Packer Nf4Packer();

// Per unit of the layout's order (embedding, blocks, final norm, head), the
// bytes a LlamaRank's forward saves per micro-step for the backward that a
// pipeline stage's graph may plan (BuildParallelStep's saved_bytes): each
// block's normed inputs, q, k, v, attention output, x1, gate, up and
// SwiGLU output in `dtype` and its three fp32 statistics (rstd1, lse,
// rstd2), each 256-byte aligned; 0 for the other units (the block inputs,
// final norm and logits stay the rank's own). For micro-steps of
// config.batch sequences of config.seq tokens. With tensor parallelism
// `spec` is this rank's slice (scheduler::TensorParallelSlice: its heads,
// KV heads and FFN width); with sequence parallelism `sequence_shards` is
// the tensor group's size, and x1, rstd1 and rstd2 are of the rank's
// sequence shard (T / sequence_shards rows; the gathered normed inputs and
// the attention and MLP activations stay whole).
std::vector<int64_t> SavedActivationBytes(const scheduler::ModelSpec& spec,
                                          const TrainConfig& config, DataType dtype,
                                          int sequence_shards = 1);

class LlamaRank {
 public:
  // `graph` is the rank's step graph (its layout and policy); `ranks` the
  // data-parallel world size; `rank` this rank's position among them. A
  // pipeline stage's graph (scheduler/parallel_graph.h, any schedule): the rank
  // computes its stage's units, takes its input activation from and hands
  // its output to ComputeContext::pipeline (and their gradients), and
  // LossSum is 0 except on the last stage; `ranks` / `rank` are then the
  // stage's data ranks and this rank's position in them. A stage graph
  // built with SavedActivationBytes: the blocks' saved activations of each
  // micro-step live in the executor's planned arena
  // (ComputeContext::pipeline.saved, with tensor parallelism handed to each
  // of the block's part nodes; the slice's and, under sequence parallelism,
  // the shard's sizes) instead of the rank's allocations
  // (InvalidArgument at Create for a buffer smaller than a block needs). Under zb-h1 each
  // unit's backward is the input-gradient call (weight_deferred), which
  // keeps the gradients at its weights' outputs per micro-step, and the
  // later kBackwardWeight call, which turns them into the weight gradients
  // (every micro-step's activations and those gradients are kept; not with
  // LoRA: Unimplemented). With tensor parallelism each of a block's
  // backward parts is split so (its weight pass runs no tensor collective;
  // with sequence parallelism it keeps the gathered output gradient and
  // the norm's reduce-scattered input gradient, and the last micro-step's
  // weight pass sums the norms' partial weight gradients over the tensor
  // group).
  //
  // Tensor parallelism (a graph of BuildParallelStep with tensor_slices:
  // its model is this rank's slice, scheduler/tensor_parallel.h):
  // `tensor_rank` is this rank's position in its tensor group. The blocks
  // are Megatron's: column-parallel QKV and gate / up, row-parallel output
  // and down projections. Forward, each block part ends in its partial
  // output (ComputeContext::tensor.output; tensor rank 0's holds the
  // residual too), which the graph's all-reduce node sums into the part's
  // output, the next part's tensor.input (so a pipeline stage sends whole
  // block outputs).
  // Backward, the column-parallel GEMMs' input gradients are all-reduced
  // on ctx.tensor.comm inside the node (the graph's fused collectives),
  // and so are a whole-block recompute's forward outputs. Norms are
  // replicated. The embedding and the head
  // are vocabulary-parallel (llama_trainer_vocab.cc): the embedding looks
  // up this rank's vocabulary rows and all-reduces its output, the head
  // computes its slice's logits and the parallel cross-entropy
  // (all-reduces MAX of the row maxima, SUM of the sums of exp and of the
  // target logits), and its input gradient is all-reduced; these run on
  // ctx.tensor.stream with events both ways. LossSum is 0 on tensor ranks
  // other than 0 (every tensor rank computes the same loss). With
  // sequence_parallel the blocks and norms run as "Sequence parallelism"
  // below says, and the vocabulary-parallel embedding reduce-scatters its
  // sum to the shards instead (its backward all-gathers the output
  // gradient) and the head all-gathers the final norm's shards into
  // acts.nf and reduce-scatters its input gradient, both on ctx.stream
  // (kFirstTrainerTag); full recompute and LoRA adapters are then
  // Unimplemented.
  static StatusOr<std::unique_ptr<LlamaRank>> Create(
      const scheduler::StepGraph& graph, const TrainConfig& config,
      const Corpus& corpus, Device& device, int ranks, int rank,
      int tensor_rank = 0);

  // Uploads this rank's tokens of step `step` (enqueued on `stream`, which
  // must be ordered before the step's compute: the executor's compute
  // stream). The host staging stays valid until the next call.
  Status LoadBatch(Stream& stream, int64_t step);

  // The executor's callbacks for this rank.
  scheduler::StepCallbacks Callbacks();

  // After the step has completed (the compute stream synchronized): the
  // sum of the token losses of all micro-steps of this rank, and the number
  // of tokens.
  StatusOr<double> LossSum(Stream& stream);
  int64_t tokens_per_step() const;

  // Sequence parallelism on the host device: when on, the compute
  // stream's time in the tensor collectives inside the nodes (its own
  // reduce-scatters and gradient all-reduces, and under tp_comm_overlap
  // its waits for the tensor stream's gathers and reduce-scatters) is
  // timed by host work around them. TakeTensorWaitMs (after the step has
  // completed): that time since the last call, ms. Off by default; Unimplemented
  // on other devices.
  Status MeasureTensorWaits(bool on);
  double TakeTensorWaitMs();

 private:
  LlamaRank(const scheduler::StepGraph& graph, const TrainConfig& config,
            const Corpus& corpus, Device& device, int ranks, int rank,
            int tensor_rank);
  // Tensor parallelism: one [T, H] activation summed over the tensor group
  // in place (ctx.tensor.comm, on ctx.stream); nothing without it.
  Status TensorAllReduce(const scheduler::ComputeContext& ctx, void* x);
  // A row-parallel projection's partial output through matrix `w`
  // (Project), the residual added on tensor rank 0 only (so the sum over
  // the tensor group is res + x w^T): out = res + x w^T on rank 0 (and
  // without tensor parallelism), x w^T on the others.
  Status RowParallelPartial(const scheduler::ComputeContext& ctx, const char* w,
                            const ops::LinearShape& shape, const void* res, const void* x,
                            void* out);
  // The same, all-reduced over the tensor group: out = res + x w^T.
  // RowParallelOverlapped decomposes it (ComputeContext::Tensor::chunks,
  // tp_comm_overlap): per chunk of rows the GEMM on ctx.stream, then its
  // all-reduce on ctx.tensor.stream while the next chunk's GEMM runs;
  // ctx.stream waits for the last. The same sums as RowParallelResidual.
  Status RowParallelOverlapped(const scheduler::ComputeContext& ctx, const char* w,
                               const ops::LinearShape& shape, const void* res, const void* x,
                               void* out);
  Status RowParallelResidual(const scheduler::ComputeContext& ctx, const char* w,
                             const ops::LinearShape& shape, const void* res, const void* x,
                             void* out);
  // Sequence parallelism (Policy::sequence_parallel with tensor_slices;
  // llama_trainer_sp.cc): the residual stream and norms run on this
  // tensor rank's sequence shard (the embedding and head on all rows,
  // vocabulary-parallel, above), rows [rank T / tp, (rank + 1)
  // T / tp) of the micro-step's [T, H] tokens (sp_rows_ of them). Forward,
  // a norm node writes its normed shard to ctx.tensor.output (the graph's
  // AG-TP gathers it); the attention / MLP node reads the gathered input
  // from ctx.tensor.input and writes its row-parallel partial output, this
  // rank's residual shard added on its own rows, to ctx.tensor.output (the
  // graph's RS-TP sums and scatters it into the next part's input).
  // Backward, the node reads the gathered output gradient from
  // ctx.tensor.input, reduce-scatters the column-parallel input gradient
  // on ctx.stream over ctx.tensor.comm (kFirstTrainerTag) and writes its
  // input gradient's shard to ctx.tensor.output (or keeps it in gres_ for
  // the embedding / a pipeline send). The replicated parameters'
  // gradients (the norms) are then partial per
  // tensor rank: SpGradAllReduce sums each over the tensor group in place
  // after the last micro-step's backward (under zb-h1 its weight pass) has
  // written it (on ctx.stream, in the gradient's dtype), before the
  // data-parallel reduction.
  Status SpComputeUnit(const scheduler::ComputeContext& ctx);
  Status SpBlockForward(const scheduler::ComputeContext& ctx);
  Status SpMlpBackward(const scheduler::ComputeContext& ctx);
  Status SpAttentionBackward(const scheduler::ComputeContext& ctx);
  // Their norms' backward on the shard, after the normed input's gradient
  // is reduce-scattered into sp_dn_: the other gres_ = this rank's rows of
  // dy (the gathered output gradient) + the path through norm `norm`
  // (input x, statistics rstd; weight gradient g); then the norm weight's
  // SpGradAllReduce and the copy to ctx.tensor.output (when a gather reads
  // it).
  struct NormGrad;
  Status SpNormBackward(const scheduler::ComputeContext& ctx, const char* dy, const char* norm,
                        const void* x, const float* rstd, const NormGrad& g);
  // out [T, H] = x w^T with `res` (this rank's [T / tp, H] shard) added on
  // this rank's rows: the tensor group's sum is the whole res + x w^T.
  Status SpRowParallel(const scheduler::ComputeContext& ctx, const char* w,
                       const ops::LinearShape& shape, const void* res, const void* x, void* out);
  // dn [T, H] (a column-parallel input gradient, partial per tensor rank)
  // reduce-scattered into sp_dn_ [T / tp, H].
  Status SpReduceScatter(const scheduler::ComputeContext& ctx, const void* dn);
  Status SpGradAllReduce(const scheduler::ComputeContext& ctx, int param);
  // f() (enqueueing on `cs`), timed on cs when MeasureTensorWaits is on.
  Status SpTimed(Stream& cs, const std::function<Status()>& f);
  bool measure_tp_ = false;
  int64_t tp_mark_ns_ = 0;                 // cs's worker thread only
  std::atomic<int64_t> tp_wait_ns_{0};
  // Under tp_comm_overlap (llama_trainer_sp_overlap.cc; no AG-TP / RS-TP
  // nodes: each node does its own, on ctx.tensor.stream, ordered against
  // ctx.stream by events both ways; the node ends with ctx.stream waiting
  // for them). SpGatherRows: this rank's block of `buf` ([T, width], rows
  // rank T / tp..) is already written; each rank's block is broadcast from
  // it into `buf` (tp broadcasts), and rows_fn(first row, rows) runs on
  // ctx.stream for this rank's block at once and for each other block as
  // it arrives. SpScatterRows: `out` [T / tp, H] = this rank's shard of
  // the tensor group's sum of the [T, H] rows rows_fn(first row, rows,
  // dst) computes (res, if not null, added on this rank's rows), in tp
  // chunks (rows j T / tp^2.. of every block), each chunk's reduce-scatter
  // beside the next chunk's GEMMs. The same sums as the graph's nodes.
  Status SpEnsureEvents(int n);
  Status SpGatherRows(const scheduler::ComputeContext& ctx, void* buf, int64_t width,
                      const std::function<Status(int64_t, int64_t)>& rows_fn);
  Status SpScatterRows(const scheduler::ComputeContext& ctx, void* out, const void* res,
                       const std::function<Status(int64_t, int64_t, void*)>& rows_fn);
  Status SpOverlapForward(const scheduler::ComputeContext& ctx);
  Status SpOverlapMlpBackward(const scheduler::ComputeContext& ctx);
  Status SpOverlapAttentionBackward(const scheduler::ComputeContext& ctx);
  void* sp_dy_ = nullptr;     // [T, H]: the gathered output gradient
  void* sp_stage_ = nullptr;  // [T, H]: the reduce-scatters' chunks
  std::vector<std::unique_ptr<Event>> sp_events_;
  bool sp_ = false;
  int64_t sp_rows_ = 0;          // T / tp
  ops::RmsNormShape sp_norm_;    // [T / tp, H]
  void* sp_dn_ = nullptr;        // [T / tp, H]
  // The activation bytes a pipeline stage sends and receives (a shard's
  // under sequence parallelism).
  size_t io_bytes_ = 0;
  // A norm weight's gradient slot: pointer, dtype, = or += (a frozen one's
  // goes to the scratch frozen_dw_).
  struct NormGrad {
    void* data;
    DataType dtype;
    bool acc;
  };
  NormGrad NormGradOf(const scheduler::ComputeContext& ctx, const char* name);
  // Tensor parallelism: the block part a compute node runs (forward), its
  // partial output to ctx.tensor.output.
  Status BlockForwardPart(const scheduler::ComputeContext& ctx);
  // The halves of a block's backward (each ends where a tensor all-reduce
  // of an input gradient sits).
  Status MlpBackward(const scheduler::ComputeContext& ctx);
  Status AttentionBackward(const scheduler::ComputeContext& ctx);
  struct BlockActs;
  // Their bodies, shared with sequence parallelism's: from dy [T, H] (the
  // gradient at w_down's / wo's output) through the block's saved
  // activations `a` to dn [T, H], the normed input's gradient (this rank's
  // partial under tensor parallelism), writing the matrices' weight
  // gradients as ProjectBackward does; dg / du and dq / dk / dv receive the
  // intermediate gradients (zb-h1 keeps them), ds_ and do_ are scratch.
  Status MlpBodyBackward(const scheduler::ComputeContext& ctx, const BlockActs& a,
                         const void* dy, void* dg, void* du, void* dn);
  Status AttentionBodyBackward(const scheduler::ComputeContext& ctx, const BlockActs& a,
                               const void* dy, void* dq, void* dk, void* dv, void* dn);
  Status Allocate();
  // Vocabulary parallelism (llama_trainer_vocab.cc): its scratch and
  // events; this rank's rows; the embedding and head units; an in-place
  // all-reduce over the tensor group on ctx.tensor.stream (ctx.stream
  // waits for it).
  Status AllocateVocabParallel();
  ops::VocabShard Shard() const;
  Status VocabEmbedding(const scheduler::ComputeContext& ctx);
  Status VocabHead(const scheduler::ComputeContext& ctx);
  Status TensorReduce(const scheduler::ComputeContext& ctx, void* x, size_t count, DataType type,
                      ReduceOp op);
  struct Acts;
  void AllocateActs(Acts& acts);
  void* Buf(size_t bytes);
  // Compute: the pipeline's activations in and out around ComputeUnit.
  Status Compute(const scheduler::ComputeContext& ctx);
  Status ComputeUnit(const scheduler::ComputeContext& ctx);
  Status Optimizer(const scheduler::OptimizerContext& ctx);
  Status BlockForward(const scheduler::ComputeContext& ctx);
  // Selective recompute: the attention core's output and statistics again.
  Status AttentionCore(const scheduler::ComputeContext& ctx);
  // Whether block b's attention core is recomputed (Policy::recompute =
  // selective over it): then its output and statistics live in one scratch
  // shared by all such blocks, which the recompute refills.
  bool SelectiveRecompute(int64_t block) const;
  Status BlockBackward(const scheduler::ComputeContext& ctx);
  // Index of the parameter named "<unit>.<suffix>" in a compute context, or -1.
  static int Find(const scheduler::ComputeContext& ctx, const char* suffix);
  // zb-h1 (llama_trainer_zb.cc): the deferred weight-gradient pass of a
  // unit (ComputeContext::kind kBackwardWeight) from the activations and
  // the input-gradient pass's saved gradients of its micro-step.
  Status WeightUnit(const scheduler::ComputeContext& ctx);
  Status BlockWeight(const scheduler::ComputeContext& ctx);
  // One matrix's weight gradient (dx not computed); nothing for a frozen w.
  Status ProjectWeight(const scheduler::ComputeContext& ctx, const char* w,
                       const ops::LinearShape& s, const void* dy, const void* x);
  // A norm weight's gradient alone (its dx into the scratch wdx_).
  Status NormWeight(const scheduler::ComputeContext& ctx, const char* name, const void* dy,
                    const void* x, const float* rstd);
  void AllocateDeferred();
  Status Dequantize(const scheduler::DequantizeContext& ctx);
  // The block's linear through matrix `w` ("wq", ...): ops/linear.h, or
  // ops/lora.h when the unit has w's adapters.
  Status Project(const scheduler::ComputeContext& ctx, const char* w,
                 const ops::LinearShape& s, const void* x, void* y, bool accumulate_y);
  Status ProjectBackward(const scheduler::ComputeContext& ctx, const char* w,
                         const ops::LinearShape& s, const void* dy, const void* x, void* dx,
                         bool accumulate_dx);

  const scheduler::StepGraph& graph_;
  const scheduler::ModelSpec& spec_;
  TrainConfig config_;
  const Corpus& corpus_;
  Device& device_;
  int ranks_ = 1;
  int rank_ = 0;
  int tensor_rank_ = 0;  // position in the tensor group (0 without one)
  // tp_comm_overlap: one event per chunk and one for the last all-reduce.
  std::vector<std::unique_ptr<Event>> chunk_events_;
  int micro_steps_ = 1;
  DataType dtype_ = DataType::kF32;
  // Sizes and op shapes of one micro-step, derived once from the spec and
  // the config.
  struct Dims {
    int64_t T = 0, H = 0, Q = 0, KV = 0, F = 0, V = 0;  // tokens, hidden,
                                   // q and kv widths, ffn width, vocab
    size_t act_bytes = 0;          // one [T, H] activation in dtype_
    ops::RmsNormShape norm;        // [T, H]
    ops::RotaryShape rope_q, rope_k;
    ops::AttentionShape attn;
  };
  static Dims MakeDims(const scheduler::ModelSpec& spec, const TrainConfig& config,
                       DataType dtype);
  const Dims d_;

  std::vector<DeviceBuffer> owned_;
  Status alloc_status_;  // the first failed allocation
  // Per micro-step: input ids, target ids, token losses.
  std::vector<int32_t*> ids_, targets_;
  std::vector<float*> loss_;
  std::vector<int32_t> staging_;  // host: ids then targets per micro-step
  // Activations of one micro-step. h[u]: input of block u (h[0] is the
  // embedding's output; h[layers] the final norm's input).
  struct BlockActs {
    void *n1, *q, *k, *v, *o, *x1, *n2, *g, *u, *s;
    float *rstd1, *lse, *rstd2;
  };
  struct Acts {
    std::vector<void*> h;
    std::vector<BlockActs> blocks;
    void* nf = nullptr;  // final norm output
    float* rstdf = nullptr;
    void* logits = nullptr;  // then the logits' gradient, in place
  };
  // One set per micro-step in flight: one without a pipeline (the
  // scheduler runs micro-steps one after another), min(micro_steps, p) on
  // a 1F1B pipeline stage (micro-step m uses set m mod that: at most p
  // consecutive ones are between their forward and backward), every
  // micro-step's with interleaved stages or zb-h1.
  std::vector<Acts> acts_;
  Acts& ActsOf(int micro_step) { return acts_[micro_step % acts_.size()]; }
  void* shared_o_ = nullptr;  // selective recompute: o and lse of every
  float* shared_lse_ = nullptr;  // recomputed block
  // Whether this rank computes the loss (holds the head: always without a
  // pipeline, the last stage with one).
  bool has_head_ = true;
  // Gradient scratch: the residual stream's gradient (two buffers) and the
  // branch gradients, reused by every block (one compute stream orders it).
  void* gres_[2] = {nullptr, nullptr};
  int cur_ = 0;  // which gres_ holds the current gradient
  void *dn_, *dq_, *dk_, *dv_, *do_, *ds_, *dg_, *du_;
  // A frozen norm weight's gradient (computed, never read); under zb-h1
  // also the input-gradient pass's norm weight gradients.
  void* frozen_dw_ = nullptr;
  // zb-h1 (Policy::pipeline_schedule): per micro-step, what the input
  // gradient pass keeps for the deferred weight pass: the gradients at the
  // outputs of the block's matrices (d x2 for w_down, d gate / d up, d n2
  // for mlp_norm, d x1 for wo, d q / k / v after the rotary's backward,
  // d n1 for attn_norm), the embedding's output gradient and d nf of the
  // final norm (the head's is the logits' gradient, kept in place). Every
  // micro-step's activations are kept too. wdx_: the weight pass's norm dx
  // (computed, never read).
  struct BlockDeferred {
    void *dx2, *dg, *du, *dn2, *dx1, *dq, *dk, *dv, *dn1;
  };
  struct Deferred {
    std::vector<BlockDeferred> blocks;
    void* emb = nullptr;
    void* nf = nullptr;
  };
  bool zb_ = false;
  // The graph plans the blocks' saved activations (kSavedActivation
  // buffers): BlockActs' fields point into ComputeContext::pipeline.saved,
  // bound at each of the block's nodes (llama_trainer_saved.cc).
  bool planned_saved_ = false;
  Status CheckPlannedSaved();
  Status BindSaved(const scheduler::ComputeContext& ctx);
  // SavedActivationBytes' sequence_shards for this rank: the tensor group
  // under sequence parallelism, else 1.
  int SequenceShards() const { return sp_ ? graph_.policy.tensor_parallel : 1; }
  std::vector<Deferred> deferred_;
  void* wdx_ = nullptr;
  // Vocabulary parallelism: the per-token row maxima, sums of exp and
  // target logits of the parallel cross-entropy (one micro-step at a
  // time), and the events between the compute and tensor streams.
  bool vocab_parallel_ = false;
  float* vp_max_ = nullptr;
  float* vp_sum_ = nullptr;
  float* vp_target_ = nullptr;
  std::unique_ptr<Event> vp_events_[2];
  // LoRA: per kept micro-batch (as acts_) and block, per target
  // (scheduler::LoraTarget), the forward's s (x a^T) [T, rank]; and one
  // [T, rank] scratch for the backward.
  std::vector<std::vector<void*>> lora_xa_;
  void* LoraXa(const scheduler::ComputeContext& ctx, const char* w) const;
  void* lora_u_ = nullptr;
};

}  // namespace baton::examples

#endif  // BATON_EXAMPLES_LLAMA_TRAINER_H_
