#include "baton/scheduler/parallel_graph.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/graph_edges.h"
#include "baton/scheduler/nf4_layout.h"
#include "baton/scheduler/tensor_parallel.h"

namespace baton::scheduler {
namespace {

using Pass = PipelinePass;

// The message of micro-batch `micro` arriving at virtual stage `vstage`:
// its activation (grad false) or its output's gradient (grad true).
int64_t MessageTag(int micro, int vstage, bool grad, int virtual_stages) {
  return (static_cast<int64_t>(micro) * virtual_stages + vstage) * 2 + (grad ? 1 : 0);
}

std::vector<std::vector<Pass>> OneFOneB(int p, int m) {
  std::vector<std::vector<Pass>> order(p);
  for (int s = 0; s < p; ++s) {
    const int warm = std::min(p - s - 1, m);
    for (int i = 0; i < warm; ++i) order[s].push_back({Pass::Kind::kForward, i, 0});
    for (int i = 0; i < m - warm; ++i) {
      order[s].push_back({Pass::Kind::kForward, warm + i, 0});
      order[s].push_back({Pass::Kind::kBackward, i, 0});
    }
    for (int i = m - warm; i < m; ++i) order[s].push_back({Pass::Kind::kBackward, i, 0});
  }
  return order;
}

std::vector<std::vector<Pass>> Interleaved(int p, int m, int v) {
  std::vector<std::vector<Pass>> order(p);
  const int total = m * v;
  auto pass = [&](Pass::Kind kind, int k) {
    const int group = k % (p * v);
    int chunk = group / p;
    if (kind == Pass::Kind::kBackward) chunk = v - 1 - chunk;
    return Pass{kind, (k / (p * v)) * p + k % p, chunk};
  };
  for (int s = 0; s < p; ++s) {
    const int warm = std::min(2 * (p - s - 1) + (v - 1) * p, total);
    for (int k = 0; k < warm; ++k) order[s].push_back(pass(Pass::Kind::kForward, k));
    for (int k = 0; k < total - warm; ++k) {
      order[s].push_back(pass(Pass::Kind::kForward, warm + k));
      order[s].push_back(pass(Pass::Kind::kBackward, k));
    }
    for (int k = total - warm; k < total; ++k) {
      order[s].push_back(pass(Pass::Kind::kBackward, k));
    }
  }
  return order;
}

// ZB-H1 as a list schedule of the passes with costs `c` (PipelineOrder).
std::vector<std::vector<Pass>> ZeroBubbleH1(int p, int m, const PassCosts& c) {
  constexpr double kNever = 1e300;
  std::vector<std::vector<double>> f(p, std::vector<double>(m, kNever));
  std::vector<std::vector<double>> b = f;
  std::vector<int> nf(p, 0), nb(p, 0), nw(p, 0);
  std::vector<double> free_at(p, 0);
  std::vector<std::vector<Pass>> order(p);
  const int64_t total = int64_t{3} * p * m;
  int64_t done = 0;
  double t = 0;
  while (done < total) {
    for (int s = 0; s < p; ++s) {
      if (free_at[s] > t) continue;
      const int i = nb[s], j = nf[s];
      const bool w_ready = nw[s] < nb[s];
      const bool force_w = nb[s] - nw[s] >= p;
      const bool b_ready = i < nf[s] && f[s][i] <= t && (s == p - 1 || b[s + 1][i] <= t);
      const bool f_ready = j < m && (s == 0 || f[s - 1][j] <= t) && nf[s] - nb[s] < p - s;
      if (force_w && w_ready) {
        free_at[s] = t + c.w;
        order[s].push_back({Pass::Kind::kWeight, nw[s]++, 0});
      } else if (b_ready) {
        free_at[s] = b[s][i] = t + c.b;
        order[s].push_back({Pass::Kind::kBackward, nb[s]++, 0});
      } else if (f_ready) {
        free_at[s] = f[s][j] = t + c.f;
        order[s].push_back({Pass::Kind::kForward, nf[s]++, 0});
      } else if (w_ready) {
        free_at[s] = t + c.w;
        order[s].push_back({Pass::Kind::kWeight, nw[s]++, 0});
      } else {
        continue;
      }
      ++done;
    }
    // The next time a stage frees up or a pass's input arrives.
    double next = kNever;
    for (int s = 0; s < p; ++s) {
      if (free_at[s] > t) next = std::min(next, free_at[s]);
      if (nb[s] < nf[s]) {
        const double ready = std::max(f[s][nb[s]], s == p - 1 ? 0.0 : b[s + 1][nb[s]]);
        if (ready > t) next = std::min(next, ready);
      }
      if (nf[s] < m && s > 0 && f[s - 1][nf[s]] > t) next = std::min(next, f[s - 1][nf[s]]);
    }
    if (next >= kNever) break;  // cannot happen: some stage always has work
    t = next;
  }
  return order;
}

}  // namespace

StatusOr<std::vector<std::vector<PipelinePass>>> PipelineOrder(
    PipelineSchedule schedule, int p, int m, int v, const PassCosts& costs) {
  if (p < 1 || m < 1 || v < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline schedule: stages ", p, ", micro-batches ", m, " and chunks ", v,
        " must be >= 1"));
  }
  if ((schedule == PipelineSchedule::kInterleaved) != (v > 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline schedule ", PipelineScheduleName(schedule), " with ", v,
        " chunks per stage: interleaved takes 2 or more, the others 1"));
  }
  switch (schedule) {
    case PipelineSchedule::k1F1B:
      return OneFOneB(p, m);
    case PipelineSchedule::kInterleaved:
      if (m % p != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the interleaved schedule needs the micro-batches per step (", m,
            ") to be a multiple of the pipeline stages (", p, ")"));
      }
      return Interleaved(p, m, v);
    case PipelineSchedule::kZbH1:
      if (!(costs.f > 0 && costs.b > 0 && costs.w > 0) ||
          !(costs.f + costs.b + costs.w < 1e30)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "zb-h1: pass costs must be positive and finite, got ", costs.f, ", ", costs.b,
            ", ", costs.w));
      }
      return ZeroBubbleH1(p, m, costs);
  }
  return absl::InternalError("pipeline schedule: unknown");
}

Status ValidateParallel(const ModelSpec& spec, const Policy& p) {
  auto bad = [](auto&&... parts) {
    return absl::InvalidArgumentError(absl::StrCat(parts...));
  };
  const int tp = p.tensor_parallel, pp = p.pipeline_parallel, v = p.virtual_stages;
  if (spec.heads % tp != 0 || spec.kv_heads % tp != 0) {
    return bad("--tp=", tp, " must divide the model's ", spec.heads, " heads and ",
               spec.kv_heads, " KV heads (", spec.name, ")");
  }
  if (!spec.moe.enabled() && (p.expert_parallel > 1 || p.expert_tensor_parallel > 1)) {
    return bad("--ep / --etp need a mixture-of-experts model; ", spec.name, " has no experts");
  }
  if (spec.moe.enabled()) {
    if (spec.moe.experts % p.expert_parallel != 0) {
      return bad("--ep=", p.expert_parallel, " must divide the model's ", spec.moe.experts,
                 " experts (", spec.name, ")");
    }
    if (tp > 1 && !p.sequence_parallel) {
      return bad("a mixture of experts with --tp=", tp, " needs --sp (its tokens are routed ",
                 "from sequence shards, as Megatron-Core requires)");
    }
    if (p.moe_a2a_overlap && p.gather_per_micro_batch) {
      return bad("moe_a2a_overlap with gather_per_micro_batch is not modelled");
    }
  }
  if (int64_t{pp} * v > spec.layers) {
    return bad("--pp=", pp, v > 1 ? absl::StrCat(" x --vpp=", v) : std::string(),
               " stages is more than the model's ", spec.layers, " blocks");
  }
  if (pp > 1 && spec.tie_embeddings) {
    return bad("pipeline parallelism with tied embeddings (the first and last stages "
               "would share a weight) is not modelled (", spec.name, ")");
  }
  const int64_t fixed = p.pipeline_first_layers + p.pipeline_last_layers;
  const int given = (p.pipeline_first_layers > 0) + (p.pipeline_last_layers > 0);
  if (p.pipeline_schedule == PipelineSchedule::kInterleaved) {
    if (given == 0 && spec.layers % (int64_t{pp} * v) != 0) {
      return bad("the interleaved schedule needs the model's ", spec.layers,
                 " blocks to be a multiple of --pp x --vpp = ", pp * v,
                 " (or --pp-first-layers / --pp-last-layers for the rest)");
    }
    if (p.micro_steps % pp != 0) {
      return bad("the interleaved schedule needs the micro-batches per step (",
                 p.micro_steps, ") to be a multiple of --pp=", pp);
    }
  }
  if (given > 0) {
    if (fixed > spec.layers) {
      return bad("pipeline first / last layers (", p.pipeline_first_layers, " / ",
                 p.pipeline_last_layers, ") are more than the model's ", spec.layers,
                 " blocks");
    }
    const int64_t rest = spec.layers - fixed;
    const int others = pp * v - given;  // the other virtual stages
    if (rest < others || (others == 0 && rest != 0) ||
        (others > 0 && rest % others != 0)) {
      return bad("pipeline first / last layers (", p.pipeline_first_layers, " / ",
                 p.pipeline_last_layers, ") leave ", rest, " of ", spec.layers,
                 " blocks, which do not split evenly over the other ", others,
                 v > 1 ? " virtual stages" : " stages");
    }
  }
  return absl::OkStatus();
}

StatusOr<std::vector<int>> VirtualStageLayers(const ModelSpec& spec, const Policy& p) {
  BATON_RETURN_IF_ERROR(ValidateParallel(spec, p));
  const int pp = p.pipeline_parallel, nv = pp * p.virtual_stages;
  const int layers = static_cast<int>(spec.layers);
  std::vector<int> n(nv, 0);
  if (p.pipeline_first_layers > 0 || p.pipeline_last_layers > 0) {
    const int given = (p.pipeline_first_layers > 0) + (p.pipeline_last_layers > 0);
    const int rest = layers - p.pipeline_first_layers - p.pipeline_last_layers;
    const int each = nv > given ? rest / (nv - given) : 0;
    for (int s = 0; s < nv; ++s) n[s] = each;
    if (p.pipeline_first_layers > 0) n[0] = p.pipeline_first_layers;
    if (p.pipeline_last_layers > 0) n[nv - 1] = p.pipeline_last_layers;
    return n;
  }
  // Even, the remainder to the inner virtual stages first: from the middle
  // outwards, the first and last taking one only when every inner one has.
  const int base = layers / nv;
  int rem = layers % nv;
  for (int& x : n) x = base;
  std::vector<int> by_distance;
  for (int i = 1; i + 1 < nv; ++i) by_distance.push_back(i);
  std::stable_sort(by_distance.begin(), by_distance.end(), [&](int a, int b) {
    const double mid = (nv - 1) / 2.0;
    return std::abs(a - mid) < std::abs(b - mid);
  });
  by_distance.push_back(0);
  if (nv > 1) by_distance.push_back(nv - 1);
  for (int i = 0; rem > 0; ++i, --rem) ++n[by_distance[i % by_distance.size()]];
  return n;
}

std::vector<double> UnitTrainingFlops(const ModelSpec& spec, int64_t seq) {
  std::vector<double> c(static_cast<size_t>(spec.layers) + 3, 0.0);
  for (int64_t b = 0; b < spec.layers; ++b) c[1 + b] = 3 * BlockForwardFlopsAt(spec, seq, b);
  c.back() = 6.0 * static_cast<double>(spec.hidden) * spec.vocab * seq;
  return c;
}

StatusOr<std::vector<int>> BalancedStageLayers(int64_t blocks, int stages,
                                               const std::vector<double>& unit_costs) {
  if (stages < 1 || stages > blocks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "balanced stages: ", stages, " stages of at least one of ", blocks, " blocks"));
  }
  if (static_cast<int64_t>(unit_costs.size()) != blocks + 3) {
    return absl::InvalidArgumentError(absl::StrCat("balanced stages: ", unit_costs.size(),
                                                   " unit costs for ", blocks + 3, " units"));
  }
  for (double c : unit_costs) {
    if (!std::isfinite(c) || c < 0) {
      return absl::InvalidArgumentError("balanced stages: unit costs must be finite and >= 0");
    }
  }
  const int n = static_cast<int>(blocks);
  // prefix[i]: the cost of the embedding and blocks 0..i-1; the last stage
  // adds the norm and the head.
  std::vector<double> prefix(n + 1, unit_costs[0]);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + unit_costs[1 + i];
  const double tail = unit_costs[n + 1] + unit_costs[n + 2];
  auto cost = [&](int lo, int hi) {  // blocks [lo, hi) as one stage
    return prefix[hi] - (lo == 0 ? 0.0 : prefix[lo]) + (hi == n ? tail : 0.0);
  };
  // best[s][i]: the least largest cost of blocks [0, i) on s stages; from
  // the split point of the last of them.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(n + 1, inf));
  std::vector<std::vector<int>> from(stages + 1, std::vector<int>(n + 1, -1));
  best[0][0] = 0;
  for (int s = 1; s <= stages; ++s) {
    for (int i = s; i <= n; ++i) {
      // The last stage holds [j, i); the first best j wins a tie (earlier
      // stages fewer blocks: they hold more micro-batches' activations).
      for (int j = s - 1; j < i; ++j) {
        const double v = std::max(best[s - 1][j], cost(j, i));
        if (v < best[s][i]) {
          best[s][i] = v;
          from[s][i] = j;
        }
      }
    }
  }
  std::vector<int> layers(stages);
  for (int s = stages, i = n; s > 0; --s) {
    layers[s - 1] = i - from[s][i];
    i = from[s][i];
  }
  return layers;
}

int64_t SavedActivationPeak(const StepGraph& g) {
  if (g.first_write.size() != g.buffers.size() || g.nodes.empty()) return 0;
  // Bytes coming alive / dying at each issue position.
  std::vector<int64_t> delta(g.nodes.size() + 1, 0);
  for (size_t i = 0; i < g.buffers.size(); ++i) {
    if (g.buffers[i].role != BufferRole::kSavedActivation || g.first_write[i] < 0) continue;
    const int64_t bytes = static_cast<int64_t>(g.buffers[i].bytes());
    delta[g.first_write[i]] += bytes;
    delta[g.last_use[i] + 1] -= bytes;
  }
  int64_t live = 0, peak = 0;
  for (int64_t d : delta) {
    live += d;
    peak = std::max(peak, live);
  }
  return peak;
}

MeshGroup ParallelDataGroup(const Policy& p) {
  return p.context_parallel > 1 ? MeshGroup{MeshDim::kShard, MeshDim::kHpz, MeshDim::kContext}
                                : kDataShardGroup;
}

namespace {

// A MoE block's first node without tensor parallelism (the attention and
// the router), and its MLP part's segments.
constexpr uint8_t kMoeHead = SegmentBit(BlockSegment::kAttnNorm) |
                             SegmentBit(BlockSegment::kAttention) |
                             SegmentBit(BlockSegment::kMlpNorm);
constexpr uint8_t kMoeMlp =
    SegmentBit(BlockSegment::kMlpNorm) | SegmentBit(BlockSegment::kRouter) |
    SegmentBit(BlockSegment::kShared) | SegmentBit(BlockSegment::kExperts) |
    SegmentBit(BlockSegment::kUnpermute);

// Builds one stage's graph (scheduler/parallel_graph.h lists its nodes).
class StageBuilder {
 public:
  StageBuilder(const ModelLayout& layout, const Policy& p, const DeviceMesh& mesh,
               int stage, const std::vector<std::vector<int>>& vs_units,
               const std::vector<Pass>& order, int64_t act_numel, bool plan_memory,
               bool sliced, const std::vector<int64_t>& saved_bytes)
      : layout_(layout), p_(p), stage_(stage), vs_units_(vs_units), order_(order),
        act_numel_(act_numel), plan_memory_(plan_memory), sliced_(sliced),
        saved_bytes_(saved_bytes) {
    g_.mesh = mesh;
  }

  StatusOr<StepGraph> Build();

 private:
  int Buffer(std::string name, BufferRole role, int bucket, int64_t numel, DataType dt,
             bool persistent) {
    GraphBuffer b;
    b.name = std::move(name);
    b.role = role;
    b.bucket = bucket;
    b.numel = std::max<int64_t>(numel, 1);
    b.dtype = dt;
    b.persistent = persistent;
    g_.buffers.push_back(std::move(b));
    return static_cast<int>(g_.buffers.size()) - 1;
  }
  Node& Add(NodeKind kind, StreamId stream, std::vector<int> reads, std::vector<int> writes,
            std::string name) {
    Node n;
    n.kind = kind;
    n.stream = stream;
    n.reads = std::move(reads);
    n.writes = std::move(writes);
    n.name = std::move(name);
    g_.nodes.push_back(std::move(n));
    return g_.nodes.back();
  }
  int Act(const std::string& name, bool sharded, bool grad) {
    const int64_t n = sharded ? act_numel_ / p_.tensor_parallel : act_numel_;
    return Buffer(name, grad ? BufferRole::kActivationGrad : BufferRole::kActivation, -1, n,
                  p_.param_dtype, false);
  }
  std::vector<int> Params(int u) const;
  // gather_per_micro_batch: before unit u's compute in a pass ("fwd",
  // "bwd", "wgt"), all-gathers of its buckets not gathered in this pass
  // yet into buffers of their own, which Params reads for the rest of the
  // pass; EndUnit after the unit's compute nodes.
  void GatherUnit(int u, int m, int c, const char* phase);
  void EndUnit();
  void BeginPass() {
    std::fill(pass_gathered_.begin(), pass_gathered_.end(), -1);
    std::fill(pass_dequantized_.begin(), pass_dequantized_.end(), -1);
  }
  // NF4 frozen buckets (base_dtype nf4): before unit u's compute in a pass,
  // a dequantize (compute stream) of each of its NF4 buckets not
  // dequantized in this pass yet, from the gathered packing (the step's or
  // this pass's gather) into weights of its own, which Params reads for the
  // rest of the pass; after GatherUnit.
  void DequantizeUnit(int u, int m, int c, const char* phase);
  // recompute_blocks N: the first N blocks of each virtual stage (-1: all).
  bool Recomputed(int u) const {
    return layout_.units[u].kind == UnitKind::kBlock &&
           (p_.recompute_blocks < 0 || position_[u] < p_.recompute_blocks);
  }
  void Persistent();
  void Forward(int m, int c);
  void Backward(int m, int c, bool split);
  void Weight(int m, int c);
  // A tensor-parallel block's parts; `saved` (-1: none) is its saved
  // activation of the micro-batch, which every forward part writes and
  // every backward part reads.
  int ForwardBlock(int u, int m, int c, int in, int saved,
                   NodeKind kind = NodeKind::kForward);
  // `input` (-1: none): the chunk's received input activation, which the
  // attention part reads (a stage's first block).
  int BackwardBlock(int u, int m, int c, int in, bool split, int saved, int input);
  void Compute(NodeKind kind, int u, int m, int c, uint8_t segments, std::vector<int> reads,
               std::vector<int> writes, bool grads, const std::string& tag);
  void AddRing(Node& n, bool backward);
  void TensorCollective(NodeKind kind, int in, int out, const std::string& name, int m);
  // Mixture-of-experts blocks (scheduler/parallel_graph.h): whether unit u
  // is one; its forward (or recompute) from the node covering `head`
  // (with the router) to the unpermute, and its backward from the
  // unpermute to the node covering `head`; the dispatch and combine nodes;
  // a token buffer of `numel` elements.
  bool Moe(int u) const {
    return layout_.units[u].kind == UnitKind::kBlock &&
           layout_.spec.moe_block(layout_.units[u].block);
  }
  int MoeForward(NodeKind kind, int u, int m, int c, int in, int saved, uint8_t head);
  int MoeBackward(int u, int m, int c, int in, bool split, int saved, int input, uint8_t head);
  void A2A(NodeKind kind, int in, int out, const std::string& name, int u, int m, int c);
  int MoeBuf(const std::string& name, int64_t numel, bool grad) {
    return Buffer(name, grad ? BufferRole::kActivationGrad : BufferRole::kActivation, -1, numel,
                  p_.param_dtype, false);
  }
  // The tokens this rank routes per micro-batch, and the elements of the
  // permuted copies it sends and of the dispatched tokens it receives.
  int64_t MoeTokens() const;
  int64_t MoeSentNumel() const;
  int64_t MoeReceivedNumel() const;
  // moe_a2a_overlap: issue the nodes [a, b) and [b, e) (two adjacent passes)
  // interleaved, each cut after its dispatch and combine nodes.
  void InterleavePasses(size_t a, size_t b, size_t e);
  void GradWritten(int u);
  void Reduce(int b);
  std::vector<FusedComm> TensorFused(bool backward) const;
  std::string Tag(int m, int c) const {
    return p_.virtual_stages > 1 ? absl::StrCat(" m", m, " c", c) : absl::StrCat(" m", m);
  }
  int VStage(int c) const { return c * p_.pipeline_parallel + stage_; }
  int NumVStages() const { return p_.pipeline_parallel * p_.virtual_stages; }

  const ModelLayout& layout_;
  const Policy& p_;
  const int stage_;
  const std::vector<std::vector<int>>& vs_units_;
  const std::vector<Pass>& order_;
  const int64_t act_numel_;
  const bool plan_memory_;
  const bool sliced_;  // the layout is of one tensor rank's slice
  const std::vector<int64_t>& saved_bytes_;  // per unit; empty: none declared
  StepGraph g_;
  // The saved activation of (micro-batch, unit): m x units entries, -1
  // where none is declared. The unit's forward writes it, its recompute
  // (if any) writes it again, its backward (and weight pass) read it.
  std::vector<int> saved_;
  int Saved(int m, int u) const {
    return saved_.empty() ? -1 : saved_[static_cast<size_t>(m) * layout_.units.size() + u];
  }
  // The received input activation of each (micro-batch, chunk): m x v
  // entries, -1 where the chunk has no previous stage. The backward of the
  // chunk's first unit reads it (the stage's input, kept for the backward:
  // the in-flight micro-batches' activations in the plan).
  std::vector<int> recv_act_;
  std::vector<int> buckets_;  // this stage's buckets, forward order of first use
  std::vector<int> shard_, master_, gshard_, m1_, m2_, gathered_, grad_;
  std::vector<int> writes_left_;  // bucket -> gradient writes still to come
  std::vector<std::vector<bool>> grad_written_;
  std::vector<int> position_;  // unit -> its index among its virtual stage's blocks
  // gather_per_micro_batch: bucket -> the gathered buffer the current pass
  // reads (-1: not gathered in it yet); the last compute node of each unit
  // pass, and the window edges: a unit's gathers wait for the compute of
  // the unit pass two before it, so at most two units' gathered buckets
  // are held (the one computing, the next one prefetched), as FSDP's
  // prefetch of 1.
  std::vector<int> pass_gathered_;
  // NF4: bucket -> the dequantized weights the current pass reads (-1: not
  // dequantized in it yet).
  std::vector<int> pass_dequantized_;
  std::vector<int> unit_ends_;
  std::vector<GraphEdge> window_edges_;
};

std::vector<int> StageBuilder::Params(int u) const {
  std::vector<int> reads;
  for (const ParamRef& r : layout_.unit_params[u]) {
    const int buf = p_.all_reduce                         ? shard_[r.bucket]
                    : layout_.buckets[r.bucket].nf4     ? pass_dequantized_[r.bucket]
                    : p_.gather_per_micro_batch         ? pass_gathered_[r.bucket]
                                                        : gathered_[r.bucket];
    if (std::find(reads.begin(), reads.end(), buf) == reads.end()) reads.push_back(buf);
  }
  return reads;
}

void StageBuilder::Persistent() {
  const int nb = static_cast<int>(layout_.buckets.size());
  for (auto* v : {&shard_, &master_, &gshard_, &m1_, &m2_, &gathered_, &grad_}) {
    v->assign(nb, -1);
  }
  writes_left_.assign(nb, 0);
  grad_written_.assign(nb, {});
  for (int c = 0; c < p_.virtual_stages; ++c) {
    for (int u : vs_units_[VStage(c)]) {
      std::vector<int> seen;
      for (const ParamRef& r : layout_.unit_params[u]) {
        if (std::find(seen.begin(), seen.end(), r.bucket) != seen.end()) continue;
        seen.push_back(r.bucket);
        if (std::find(buckets_.begin(), buckets_.end(), r.bucket) == buckets_.end()) {
          buckets_.push_back(r.bucket);
        }
        // A frozen bucket (LoRA's base weights) gets no gradient.
        if (!layout_.buckets[r.bucket].frozen) writes_left_[r.bucket] += p_.micro_steps;
      }
    }
  }
  const int tp = p_.tensor_parallel;
  const int data = g_.mesh.size(ParallelDataGroup(p_));
  const int64_t experts_split =
      int64_t{g_.mesh.size(kExpertGroup)} * g_.mesh.expert_tensor();
  const int edp = g_.mesh.size(kExpertDataGroup);
  for (int b : buckets_) {
    const Bucket& bk = layout_.buckets[b];
    // This rank's TP slice: the slice layout's bucket, or 1 / tp of the
    // whole model's; a MoE block's experts: 1 / (ep x etp) of them, sharded
    // over the expert-data group.
    const int64_t whole = bk.expert ? (bk.padded_numel + experts_split - 1) / experts_split
                          : sliced_ ? bk.padded_numel
                                    : (bk.padded_numel + tp - 1) / tp;
    const int group = bk.expert ? edp : data;
    const int64_t shard = p_.all_reduce ? whole : (whole + group - 1) / group;
    if (bk.nf4) {
      // NF4 base weights: the shard's packing (fp32 words), gathered packed
      // (the data group's packings one after another) and dequantized per
      // pass (DequantizeUnit). ValidatePolicy keeps all_reduce out.
      const int64_t words = Nf4PackedWords(shard);
      shard_[b] = Buffer(absl::StrCat("shard.", bk.name), BufferRole::kShard, b, words,
                         DataType::kF32, true);
      if (!p_.gather_per_micro_batch) {
        gathered_[b] = Buffer(absl::StrCat("packed.", bk.name), BufferRole::kPacked, b,
                              words * data, DataType::kF32, false);
      }
      continue;  // frozen
    }
    shard_[b] = Buffer(absl::StrCat("shard.", bk.name), BufferRole::kShard, b, shard,
                       p_.param_dtype, true);
    if (!p_.all_reduce && !p_.gather_per_micro_batch) {
      gathered_[b] = Buffer(absl::StrCat("gathered.", bk.name), BufferRole::kGathered, b,
                            whole, p_.param_dtype, false);
    }
    // A frozen bucket: the shard only, gathered for compute, never reduced
    // or updated.
    if (bk.frozen) continue;
    master_[b] = Buffer(absl::StrCat("master.", bk.name), BufferRole::kMaster, b, shard,
                        DataType::kF32, true);
    gshard_[b] = Buffer(absl::StrCat("grad_shard.", bk.name), BufferRole::kGradShard, b,
                        shard, p_.reduce_dtype, true);
    m1_[b] = Buffer(absl::StrCat("moment1.", bk.name), BufferRole::kMoment1, b, shard,
                    DataType::kF32, true);
    m2_[b] = Buffer(absl::StrCat("moment2.", bk.name), BufferRole::kMoment2, b, shard,
                    DataType::kF32, true);
    grad_[b] = Buffer(absl::StrCat("grad.", bk.name), BufferRole::kGradFull, b, whole,
                      p_.reduce_dtype, false);
    grad_written_[b].assign(bk.params.size(), false);
  }
}

// The tensor collectives a block segment holds under tp_comm_overlap, or
// (backward, without it) the ones Megatron overlaps with the dgrad / wgrad
// GEMMs: chunks 0 marks those (they run beside the segment's kernels).
std::vector<FusedComm> StageBuilder::TensorFused(bool backward) const {
  std::vector<FusedComm> f;
  if (p_.tensor_parallel < 2) return f;
  const int64_t bytes = act_numel_ * static_cast<int64_t>(DataTypeSize(p_.param_dtype));
  const int chunks = p_.tp_comm_overlap ? p_.tensor_parallel : 0;
  if (!p_.tp_comm_overlap && !backward) return f;
  using K = FusedComm::Kind;
  if (p_.sequence_parallel) {
    // Forward: gather the input, reduce-scatter the output. Backward: the
    // input re-gathered for the wgrad, the input gradient reduce-scattered
    // (with overlap also the output gradient's gather).
    f.push_back({K::kAllGather, kTensorGroup, bytes, chunks});
    f.push_back({K::kReduceScatter, kTensorGroup, bytes, chunks});
    if (backward && p_.tp_comm_overlap) f.push_back({K::kAllGather, kTensorGroup, bytes, chunks});
  } else {
    f.push_back({K::kAllReduce, kTensorGroup, bytes, chunks});
  }
  return f;
}

// The block segment a parameter of a block belongs to, by its name
// ("<unit>.<param>", LoRA adapters "<unit>.<param>.lora_*"): the norms'
// weights to their norm, gate / up / down to the MLP, the rest (q, k, v,
// o) to the attention.
BlockSegment ParamSegment(const std::string& name) {
  const size_t dot = name.find('.');
  const std::string p = dot == std::string::npos ? name : name.substr(dot + 1);
  auto starts = [&p](const char* s) { return p.rfind(s, 0) == 0; };
  if (starts("attn_norm")) return BlockSegment::kAttnNorm;
  if (starts("mlp_norm")) return BlockSegment::kMlpNorm;
  if (starts("w_gate") || starts("w_up") || starts("w_down")) return BlockSegment::kMlp;
  if (starts("router")) return BlockSegment::kRouter;
  if (starts("experts.")) return BlockSegment::kExperts;
  if (starts("shared")) return BlockSegment::kShared;
  return BlockSegment::kAttention;
}

void StageBuilder::Compute(NodeKind kind, int u, int m, int c, uint8_t segments,
                           std::vector<int> reads, std::vector<int> writes, bool grads,
                           const std::string& name) {
  std::vector<bool> acc;
  if (grads) {
    for (const ParamRef& r : layout_.unit_params[u]) {
      // A block part writes the gradients of its segments' parameters only.
      const ParamSlot& slot = layout_.buckets[r.bucket].params[r.slot];
      if (slot.frozen || (segments != 0 && !(segments & SegmentBit(ParamSegment(slot.name))))) {
        acc.push_back(false);
        continue;
      }
      acc.push_back(grad_written_[r.bucket][r.slot]);
      grad_written_[r.bucket][r.slot] = true;
      if (std::find(writes.begin(), writes.end(), grad_[r.bucket]) == writes.end()) {
        writes.push_back(grad_[r.bucket]);
      }
    }
  }
  Node& n = Add(kind, kComputeStream, std::move(reads), std::move(writes), name);
  n.unit = u;
  n.micro_step = m;
  n.chunk = c;
  n.segments = segments;
  n.grad_accumulate = std::move(acc);
}

void StageBuilder::TensorCollective(NodeKind kind, int in, int out, const std::string& name,
                                    int m) {
  Node& n = Add(kind, g_.stream_for(StreamClass::kTensor), {in}, {out}, name);
  n.group = kTensorGroup;
  n.micro_step = m;
}

int StageBuilder::ForwardBlock(int u, int m, int c, int in, int saved, NodeKind kind) {
  const std::string& un = layout_.units[u].name;
  const std::string t = Tag(m, c);
  const bool sp = p_.sequence_parallel, ov = p_.tp_comm_overlap;
  const char* f = kind == NodeKind::kRecompute ? "R " : "F ";
  auto reads = [&](int x) {
    std::vector<int> r = Params(u);
    if (x >= 0) r.push_back(x);
    return r;
  };
  auto writes = [&](int out) {
    std::vector<int> w = {out};
    if (saved >= 0) w.push_back(saved);
    return w;
  };
  int cur = in;
  for (int half = 0; half < 2; ++half) {
    if (half == 1 && Moe(u)) {  // the MoE part on the sequence shard
      return MoeForward(kind, u, m, c, cur, saved, SegmentBit(BlockSegment::kMlpNorm));
    }
    const uint8_t norm = SegmentBit(half == 0 ? BlockSegment::kAttnNorm : BlockSegment::kMlpNorm);
    const uint8_t body = SegmentBit(half == 0 ? BlockSegment::kAttention : BlockSegment::kMlp);
    const std::string what = half == 0 ? "attn" : "mlp";
    uint8_t covers = norm | body;
    if (sp && !ov) {
      // The norm on sequence shards, then the gather of its output.
      const int normed = Act(absl::StrCat("act.", un, ".", what, "_norm", t), true, false);
      Compute(kind, u, m, c, norm, reads(cur), writes(normed), false,
              absl::StrCat(f, un, ".", what, "_norm", t));
      cur = Act(absl::StrCat("act.", un, ".", what, "_in", t), false, false);
      TensorCollective(NodeKind::kAllGather, normed, cur,
                       absl::StrCat("AG-TP ", un, ".", what, t), m);
      covers = body;
    }
    // Under tp_comm_overlap the node's own reduce-scatter leaves the
    // sequence shard (sequence_parallel) of the part's output.
    const int partial =
        Act(absl::StrCat("act.", un, ".", what, "_partial", t), sp && ov, false);
    Compute(kind, u, m, c, covers, reads(cur), writes(partial), false,
            absl::StrCat(f, un, ".", what, t));
    Node& bn = g_.nodes.back();
    bn.fused = TensorFused(false);
    if (half == 0) AddRing(bn, false);
    cur = partial;
    if (!ov) {
      const int out = Act(absl::StrCat("act.", un, ".", what, "_out", t), sp, false);
      TensorCollective(sp ? NodeKind::kReduceScatter : NodeKind::kAllReduce, partial, out,
                       absl::StrCat(sp ? "RS-TP " : "AR-TP ", un, ".", what, t), m);
      cur = out;
    }
  }
  return cur;
}

int StageBuilder::BackwardBlock(int u, int m, int c, int in, bool split, int saved,
                                int input) {
  const std::string& un = layout_.units[u].name;
  const std::string t = Tag(m, c);
  const bool sp = p_.sequence_parallel, ov = p_.tp_comm_overlap;
  std::vector<int> reads = Params(u);
  if (saved >= 0) reads.push_back(saved);
  int cur = in;
  for (int half = 1; half >= 0; --half) {
    if (half == 1 && Moe(u)) {  // the MoE part on the sequence shard
      cur = MoeBackward(u, m, c, cur, split, saved, -1, SegmentBit(BlockSegment::kMlpNorm));
      continue;
    }
    const uint8_t covers =
        half == 0 ? SegmentBit(BlockSegment::kAttnNorm) | SegmentBit(BlockSegment::kAttention)
                  : SegmentBit(BlockSegment::kMlpNorm) | SegmentBit(BlockSegment::kMlp);
    const std::string what = half == 0 ? "attn" : "mlp";
    if (sp && !ov) {
      // The output gradient's gather (the reduce-scatter's backward).
      const int dy = Act(absl::StrCat("dact.", un, ".", what, "_out", t), false, true);
      TensorCollective(NodeKind::kAllGather, cur, dy,
                       absl::StrCat("AG-TP ", un, ".d", what, t), m);
      cur = dy;
    }
    const int dx = Act(absl::StrCat("dact.", un, ".", what, "_in", t), sp, true);
    std::vector<int> r = reads;
    if (cur >= 0) r.push_back(cur);
    if (half == 0 && input >= 0) r.push_back(input);
    Compute(NodeKind::kBackward, u, m, c, covers, std::move(r), {dx}, !split,
            absl::StrCat("B ", un, ".", what, t));
    Node& bn = g_.nodes.back();
    bn.fused = TensorFused(true);
    if (half == 0) AddRing(bn, true);
    cur = dx;
  }
  return cur;
}

int64_t StageBuilder::MoeTokens() const {
  const int64_t t = act_numel_ / layout_.spec.hidden;  // s x b / cp
  return p_.sequence_parallel ? t / p_.tensor_parallel : t;
}

int64_t StageBuilder::MoeSentNumel() const {
  return MoeTokens() * layout_.spec.moe.top_k * layout_.spec.hidden;
}

int64_t StageBuilder::MoeReceivedNumel() const {
  // Balanced: as many (token, expert) copies arrive as leave; the
  // all-gather dispatcher receives every token of the expert group.
  if (p_.moe_dispatcher == MoeDispatcher::kAllGather) {
    return MoeTokens() * g_.mesh.size(kExpertGroup) * layout_.spec.hidden;
  }
  return MoeSentNumel();
}

void StageBuilder::A2A(NodeKind kind, int in, int out, const std::string& name, int u, int m,
                       int c) {
  Node& n = Add(kind, g_.stream_for(StreamClass::kExpert), {in}, {out}, name);
  n.group = kExpertGroup;
  n.unit = u;
  n.micro_step = m;
  n.chunk = c;
}

int StageBuilder::MoeForward(NodeKind kind, int u, int m, int c, int in, int saved,
                             uint8_t head) {
  const std::string& un = layout_.units[u].name;
  const std::string t = Tag(m, c);
  const bool rc = kind == NodeKind::kRecompute;
  const std::string f = rc ? "R " : "F ";
  const std::string pre = rc ? "r." : "";  // a recompute's own buffers
  const bool sp = p_.sequence_parallel;
  const bool shared = layout_.spec.moe.shared_experts > 0;
  const int etp = g_.mesh.expert_tensor();
  auto reads = [&](std::initializer_list<int> xs) {
    std::vector<int> r = Params(u);
    for (int x : xs) {
      if (x >= 0) r.push_back(x);
    }
    return r;
  };
  auto writes = [&](std::initializer_list<int> ws) {
    std::vector<int> w(ws);
    if (saved >= 0) w.push_back(saved);
    return w;
  };
  // The attention (without tensor parallelism), the norm, the router and
  // the permute: the residual stream and the tokens in expert order.
  const int mid = Act(absl::StrCat(pre, "act.", un, ".moe_in", t), sp, false);
  const int perm = MoeBuf(absl::StrCat(pre, "moe.", un, ".permuted", t), MoeSentNumel(), false);
  Compute(kind, u, m, c, head | SegmentBit(BlockSegment::kRouter), reads({in}),
          writes({mid, perm}), false,
          absl::StrCat(f, un, head == kMoeHead ? ".attn_router" : ".router", t));
  if (head & SegmentBit(BlockSegment::kAttention)) AddRing(g_.nodes.back(), false);
  const int disp = MoeBuf(absl::StrCat(pre, "moe.", un, ".dispatched", t), MoeReceivedNumel(),
                          false);
  A2A(NodeKind::kDispatch, perm, disp, absl::StrCat(rc ? "R-" : "", "DISPATCH ", un, t), u, m, c);
  int shared_out = -1;
  if (shared && p_.moe_shared_overlap) {  // under the dispatch
    shared_out = Act(absl::StrCat(pre, "act.", un, ".shared", t), sp, false);
    Compute(kind, u, m, c, SegmentBit(BlockSegment::kShared), reads({mid}), writes({shared_out}),
            false, absl::StrCat(f, un, ".shared", t));
  }
  int ein = disp;
  if (etp > 1) {  // the expert-tensor group's tokens
    ein = MoeBuf(absl::StrCat(pre, "moe.", un, ".etp_in", t), MoeReceivedNumel() * etp, false);
    TensorCollective(NodeKind::kAllGather, disp, ein, absl::StrCat("AG-ETP ", un, t), m);
  }
  const int eout = MoeBuf(absl::StrCat(pre, "moe.", un, ".expert_out", t),
                          g_.buffers[ein].numel, false);
  Compute(kind, u, m, c, SegmentBit(BlockSegment::kExperts), reads({ein}), writes({eout}), false,
          absl::StrCat(f, un, ".experts", t));
  int cin = eout;
  if (etp > 1) {
    cin = MoeBuf(absl::StrCat(pre, "moe.", un, ".etp_out", t), MoeReceivedNumel(), false);
    TensorCollective(NodeKind::kReduceScatter, eout, cin, absl::StrCat("RS-ETP ", un, t), m);
  }
  const int comb = MoeBuf(absl::StrCat(pre, "moe.", un, ".combined", t), MoeSentNumel(), false);
  A2A(NodeKind::kCombine, cin, comb, absl::StrCat(rc ? "R-" : "", "COMBINE ", un, t), u, m, c);
  const uint8_t tail = SegmentBit(BlockSegment::kUnpermute) |
                       (shared && !p_.moe_shared_overlap ? SegmentBit(BlockSegment::kShared) : 0);
  const int out = Act(absl::StrCat(pre, "act.", un, t), sp, false);
  Compute(kind, u, m, c, tail, reads({comb, mid, shared_out}), writes({out}), false,
          absl::StrCat(f, un, ".unpermute", t));
  return out;
}

int StageBuilder::MoeBackward(int u, int m, int c, int in, bool split, int saved, int input,
                              uint8_t head) {
  const std::string& un = layout_.units[u].name;
  const std::string t = Tag(m, c);
  const bool sp = p_.sequence_parallel;
  const bool shared = layout_.spec.moe.shared_experts > 0;
  const bool ov = p_.moe_shared_overlap;
  const int etp = g_.mesh.expert_tensor();
  auto reads = [&](std::initializer_list<int> xs) {
    std::vector<int> r = Params(u);
    if (saved >= 0) r.push_back(saved);
    for (int x : xs) {
      if (x >= 0) r.push_back(x);
    }
    return r;
  };
  // The unpermute's backward: each copy's output gradient, and the
  // residual stream's.
  const int dcomb = MoeBuf(absl::StrCat("dmoe.", un, ".combined", t), MoeSentNumel(), true);
  const int dres = Act(absl::StrCat("dact.", un, ".moe_in", t), sp, true);
  Compute(NodeKind::kBackward, u, m, c,
          SegmentBit(BlockSegment::kUnpermute) |
              (shared && !ov ? SegmentBit(BlockSegment::kShared) : 0),
          reads({in}), {dcomb, dres}, !split, absl::StrCat("B ", un, ".unpermute", t));
  const int dexp = MoeBuf(absl::StrCat("dmoe.", un, ".dispatched", t), MoeReceivedNumel(), true);
  A2A(NodeKind::kDispatch, dcomb, dexp, absl::StrCat("DISPATCH-GRAD ", un, t), u, m, c);
  int dshared = -1;
  if (shared && ov) {
    dshared = Act(absl::StrCat("dact.", un, ".shared", t), sp, true);
    Compute(NodeKind::kBackward, u, m, c, SegmentBit(BlockSegment::kShared), reads({dres}),
            {dshared}, !split, absl::StrCat("B ", un, ".shared", t));
  }
  int ein = dexp;
  if (etp > 1) {
    ein = MoeBuf(absl::StrCat("dmoe.", un, ".etp_in", t), MoeReceivedNumel() * etp, true);
    TensorCollective(NodeKind::kAllGather, dexp, ein, absl::StrCat("AG-ETP ", un, ".d", t), m);
  }
  const int dein = MoeBuf(absl::StrCat("dmoe.", un, ".expert_in", t), g_.buffers[ein].numel, true);
  Compute(NodeKind::kBackward, u, m, c, SegmentBit(BlockSegment::kExperts), reads({ein}), {dein},
          !split, absl::StrCat("B ", un, ".experts", t));
  int cin = dein;
  if (etp > 1) {
    cin = MoeBuf(absl::StrCat("dmoe.", un, ".etp_out", t), MoeReceivedNumel(), true);
    TensorCollective(NodeKind::kReduceScatter, dein, cin, absl::StrCat("RS-ETP ", un, ".d", t), m);
  }
  const int dperm = MoeBuf(absl::StrCat("dmoe.", un, ".permuted", t), MoeSentNumel(), true);
  A2A(NodeKind::kCombine, cin, dperm, absl::StrCat("COMBINE-GRAD ", un, t), u, m, c);
  const int dx = Act(absl::StrCat("dact.", un, head == kMoeHead ? "" : ".mlp_in", t), sp, true);
  Compute(NodeKind::kBackward, u, m, c, head | SegmentBit(BlockSegment::kRouter),
          reads({dperm, dres, dshared, input}), {dx}, !split,
          absl::StrCat("B ", un, head == kMoeHead ? ".attn_router" : ".router", t));
  if (head & SegmentBit(BlockSegment::kAttention)) AddRing(g_.nodes.back(), true);
  return dx;
}

void StageBuilder::InterleavePasses(size_t a, size_t b, size_t e) {
  // Cut each pass after its dispatch and combine nodes; issue the pieces
  // alternately, the first pass's first.
  auto cut = [&](size_t lo, size_t hi) {
    std::vector<std::vector<Node>> pieces(1);
    for (size_t i = lo; i < hi; ++i) {
      pieces.back().push_back(std::move(g_.nodes[i]));
      const NodeKind k = pieces.back().back().kind;
      if (k == NodeKind::kDispatch || k == NodeKind::kCombine) pieces.emplace_back();
    }
    return pieces;
  };
  std::vector<std::vector<Node>> first = cut(a, b), second = cut(b, e);
  size_t at = a;
  for (size_t i = 0; i < std::max(first.size(), second.size()); ++i) {
    for (auto* list : {&first, &second}) {
      if (i >= list->size()) continue;
      for (Node& n : (*list)[i]) g_.nodes[at++] = std::move(n);
    }
  }
}

// Context parallelism's ring on a node holding the attention: K and V
// (and in the backward dK, dV) of this rank's tokens per step.
void StageBuilder::AddRing(Node& n, bool backward) {
  if (p_.context_parallel < 2) return;
  const ModelSpec& m = layout_.spec;
  const int64_t kv = 2 * act_numel_ / m.hidden * m.kv_heads * m.head_dim / p_.tensor_parallel;
  n.fused.push_back({FusedComm::Kind::kRing, kContextGroup,
                     (backward ? 2 : 1) * kv * static_cast<int64_t>(DataTypeSize(p_.param_dtype)),
                     p_.context_parallel});
}

void StageBuilder::GatherUnit(int u, int m, int c, const char* phase) {
  if (!p_.gather_per_micro_batch || p_.all_reduce) return;
  const std::string t = absl::StrCat(" ", phase, Tag(m, c));
  const int window_src = unit_ends_.size() >= 2 ? unit_ends_[unit_ends_.size() - 2] : -1;
  for (const ParamRef& r : layout_.unit_params[u]) {
    const int b = r.bucket;
    if (pass_gathered_[b] >= 0) continue;  // gathered for this pass already
    const Bucket& bk = layout_.buckets[b];
    const int64_t split = bk.expert ? int64_t{g_.mesh.size(kExpertGroup)} *
                                          g_.mesh.expert_tensor()
                                    : p_.tensor_parallel;
    const int64_t whole = sliced_ ? bk.padded_numel : (bk.padded_numel + split - 1) / split;
    // NF4: the packings (fp32 words: the shard's times the group's size).
    const int64_t words = g_.buffers[shard_[b]].numel * g_.mesh.size(ParallelDataGroup(p_));
    pass_gathered_[b] =
        bk.nf4 ? Buffer(absl::StrCat("packed.", bk.name, t), BufferRole::kPacked, b, words,
                        DataType::kF32, false)
               : Buffer(absl::StrCat("gathered.", bk.name, t), BufferRole::kGathered, b,
                        whole, p_.param_dtype, false);
    Node& n = Add(NodeKind::kAllGather, g_.stream_for(StreamClass::kAllGather), {shard_[b]},
                  {pass_gathered_[b]}, absl::StrCat("AG ", bk.name, t));
    n.bucket = b;
    n.group = bk.expert ? kExpertDataGroup : ParallelDataGroup(p_);
    n.micro_step = m;
    n.chunk = c;
    if (window_src >= 0) {
      window_edges_.push_back({window_src, static_cast<int>(g_.nodes.size()) - 1,
                               EdgeKind::kWindow});
    }
  }
}

void StageBuilder::DequantizeUnit(int u, int m, int c, const char* phase) {
  if (p_.all_reduce) return;
  const std::string t = absl::StrCat(" ", phase, Tag(m, c));
  for (const ParamRef& r : layout_.unit_params[u]) {
    const int b = r.bucket;
    const Bucket& bk = layout_.buckets[b];
    if (!bk.nf4 || pass_dequantized_[b] >= 0) continue;
    const int packed = p_.gather_per_micro_batch ? pass_gathered_[b] : gathered_[b];
    const int64_t split = bk.expert ? int64_t{g_.mesh.size(kExpertGroup)} *
                                          g_.mesh.expert_tensor()
                                    : p_.tensor_parallel;
    const int64_t whole = sliced_ ? bk.padded_numel : (bk.padded_numel + split - 1) / split;
    pass_dequantized_[b] = Buffer(absl::StrCat("gathered.", bk.name, t), BufferRole::kGathered,
                                  b, whole, p_.param_dtype, false);
    Node& n = Add(NodeKind::kDequantize, kComputeStream, {packed}, {pass_dequantized_[b]},
                  absl::StrCat("DQ ", bk.name, t));
    n.bucket = b;
    n.micro_step = m;
    n.chunk = c;
  }
}

void StageBuilder::EndUnit() {
  if (!p_.gather_per_micro_batch || p_.all_reduce) return;
  int last = static_cast<int>(g_.nodes.size()) - 1;
  while (last >= 0 && g_.nodes[last].stream != kComputeStream) --last;
  unit_ends_.push_back(last);
}

void StageBuilder::GradWritten(int u) {
  std::vector<int> done;
  for (const ParamRef& r : layout_.unit_params[u]) {
    if (std::find(done.begin(), done.end(), r.bucket) != done.end()) continue;
    done.push_back(r.bucket);
    if (layout_.buckets[r.bucket].frozen) continue;
    if (--writes_left_[r.bucket] == 0) Reduce(r.bucket);
  }
}

void StageBuilder::Reduce(int b) {
  const std::string& name = layout_.buckets[b].name;
  const StreamId rs = g_.stream_for(StreamClass::kReduceScatter);
  Node& n = Add(p_.all_reduce ? NodeKind::kAllReduce : NodeKind::kReduceScatter, rs,
                {grad_[b]}, {gshard_[b]}, absl::StrCat(p_.all_reduce ? "AR " : "RS ", name));
  n.bucket = b;
  n.group = layout_.buckets[b].expert ? kExpertDataGroup : ParallelDataGroup(p_);
  n.micro_step = p_.micro_steps - 1;
  if (!p_.all_reduce && g_.replicated() && !layout_.buckets[b].expert) {
    Node& r = Add(NodeKind::kAllReduce, rs, {gshard_[b]}, {gshard_[b]},
                  absl::StrCat("AR-R ", name));
    r.bucket = b;
    r.group = kReplicaGroup;
    r.micro_step = p_.micro_steps - 1;
  }
}

void StageBuilder::Forward(int m, int c) {
  const int vs = VStage(c), nv = NumVStages(), pp = p_.pipeline_parallel;
  const std::string t = Tag(m, c);
  const bool sp = p_.sequence_parallel;
  int cur = -1;
  BeginPass();
  if (vs > 0) {
    cur = Act(absl::StrCat("recv.act", t), sp, false);
    Node& r = Add(NodeKind::kRecv, g_.stream_for(StreamClass::kPipelineRecv), {}, {cur},
                  absl::StrCat("RECV act", t));
    r.peer = (vs - 1) % pp;
    r.group = kPipelineGroup;
    r.tag = MessageTag(m, vs, false, nv);
    r.micro_step = m;
    r.chunk = c;
    recv_act_[m * p_.virtual_stages + c] = cur;
  }
  for (int u : vs_units_[vs]) {
    const UnitSpec& unit = layout_.units[u];
    GatherUnit(u, m, c, "fwd");
    DequantizeUnit(u, m, c, "fwd");
    int sv = -1;
    if (!saved_bytes_.empty() && saved_bytes_[u] > 0) {
      // fp32 words: the planner aligns every buffer to 256 bytes.
      sv = Buffer(absl::StrCat("saved.", unit.name, t), BufferRole::kSavedActivation, -1,
                  (saved_bytes_[u] + 3) / 4, DataType::kF32, false);
      saved_[static_cast<size_t>(m) * layout_.units.size() + u] = sv;
    }
    if (unit.kind == UnitKind::kBlock && p_.tensor_parallel > 1) {
      cur = ForwardBlock(u, m, c, cur, sv);
      EndUnit();
      continue;
    }
    if (Moe(u)) {
      cur = MoeForward(NodeKind::kForward, u, m, c, cur, sv, kMoeHead);
      EndUnit();
      continue;
    }
    const int out = Act(absl::StrCat("act.", unit.name, t), sp, false);
    std::vector<int> reads = Params(u);
    if (cur >= 0) reads.push_back(cur);
    std::vector<int> writes = {out};
    if (sv >= 0) writes.push_back(sv);
    Compute(NodeKind::kForward, u, m, c, 0, reads, std::move(writes), false,
            absl::StrCat("F ", unit.name, t));
    if (unit.kind == UnitKind::kBlock) AddRing(g_.nodes.back(), false);
    EndUnit();
    cur = out;
  }
  if (vs < nv - 1) {
    Node& s = Add(NodeKind::kSend, g_.stream_for(StreamClass::kPipelineSend), {cur}, {},
                  absl::StrCat("SEND act", t));
    s.peer = (vs + 1) % pp;
    s.group = kPipelineGroup;
    s.tag = MessageTag(m, vs + 1, false, nv);
    s.micro_step = m;
    s.chunk = c;
  }
}

void StageBuilder::Backward(int m, int c, bool split) {
  const int vs = VStage(c), nv = NumVStages(), pp = p_.pipeline_parallel;
  const std::string t = Tag(m, c);
  const bool sp = p_.sequence_parallel;
  int cur = -1;
  BeginPass();
  if (vs < nv - 1) {
    cur = Act(absl::StrCat("recv.grad", t), sp, true);
    Node& r = Add(NodeKind::kRecv, g_.stream_for(StreamClass::kPipelineRecv), {}, {cur},
                  absl::StrCat("RECV grad", t));
    r.peer = (vs + 1) % pp;
    r.group = kPipelineGroup;
    r.tag = MessageTag(m, vs, true, nv);
    r.micro_step = m;
    r.chunk = c;
  }
  const std::vector<int>& units = vs_units_[vs];
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    const int u = *it;
    const UnitSpec& unit = layout_.units[u];
    GatherUnit(u, m, c, "bwd");
    DequantizeUnit(u, m, c, "bwd");
    const int sv = Saved(m, u);
    if (Recomputed(u) && Moe(u)) {
      // Its forward again from the kept input, dispatch and combine included.
      if (p_.tensor_parallel > 1) {
        ForwardBlock(u, m, c, -1, sv, NodeKind::kRecompute);
      } else {
        MoeForward(NodeKind::kRecompute, u, m, c, -1, sv, kMoeHead);
      }
    } else if (Recomputed(u)) {
      std::vector<int> writes;
      if (sv >= 0) writes.push_back(sv);
      Compute(NodeKind::kRecompute, u, m, c, 0, Params(u), std::move(writes), false,
              absl::StrCat("R ", unit.name, t));
    }
    if (Moe(u) && p_.tensor_parallel == 1) {
      const int input = recv_act_[m * p_.virtual_stages + c];
      cur = MoeBackward(u, m, c, cur, split, sv, u == units.front() ? input : -1, kMoeHead);
    } else if (unit.kind == UnitKind::kBlock && p_.tensor_parallel > 1) {
      // The chunk's first block: its attention part (the norm's backward)
      // reads the received input, as an unsplit block does.
      const int input = recv_act_[m * p_.virtual_stages + c];
      cur = BackwardBlock(u, m, c, cur, split, sv, u == units.front() ? input : -1);
    } else {
      const int out = Act(absl::StrCat("dact.", unit.name, t), sp, true);
      std::vector<int> reads = Params(u);
      if (cur >= 0) reads.push_back(cur);
      const int input = recv_act_[m * p_.virtual_stages + c];
      if (u == units.front() && input >= 0) reads.push_back(input);
      if (sv >= 0) reads.push_back(sv);
      Compute(NodeKind::kBackward, u, m, c, 0, reads, {out}, !split,
              absl::StrCat("B ", unit.name, t));
      if (unit.kind == UnitKind::kBlock) AddRing(g_.nodes.back(), true);
      cur = out;
    }
    EndUnit();
    if (!split) GradWritten(u);
  }
  if (vs > 0) {
    Node& s = Add(NodeKind::kSend, g_.stream_for(StreamClass::kPipelineSend), {cur}, {},
                  absl::StrCat("SEND grad", t));
    s.peer = (vs - 1) % pp;
    s.group = kPipelineGroup;
    s.tag = MessageTag(m, vs - 1, true, nv);
    s.micro_step = m;
    s.chunk = c;
  }
}

void StageBuilder::Weight(int m, int c) {
  const std::vector<int>& units = vs_units_[VStage(c)];
  BeginPass();
  for (auto it = units.rbegin(); it != units.rend(); ++it) {
    const int u = *it;
    const UnitSpec& unit = layout_.units[u];
    GatherUnit(u, m, c, "wgt");
    DequantizeUnit(u, m, c, "wgt");
    std::vector<int> reads = Params(u);
    if (const int sv = Saved(m, u); sv >= 0) reads.push_back(sv);
    if (unit.kind == UnitKind::kBlock && p_.tensor_parallel > 1) {
      // Each backward part's weight gradients, in the backward's order (the
      // MLP with its norm, then the attention with its norm); no tensor
      // collective: the input-gradient parts ran them.
      for (int half = 1; half >= 0; --half) {
        const uint8_t covers =
            half == 0
                ? SegmentBit(BlockSegment::kAttnNorm) | SegmentBit(BlockSegment::kAttention)
            : Moe(u) ? kMoeMlp
                     : SegmentBit(BlockSegment::kMlpNorm) | SegmentBit(BlockSegment::kMlp);
        Compute(NodeKind::kBackwardWeight, u, m, c, covers, reads, {}, true,
                absl::StrCat("W ", unit.name, half == 0 ? ".attn" : ".mlp", Tag(m, c)));
      }
    } else {
      Compute(NodeKind::kBackwardWeight, u, m, c, 0, std::move(reads), {}, true,
              absl::StrCat("W ", unit.name, Tag(m, c)));
    }
    EndUnit();
    GradWritten(u);
  }
}

StatusOr<StepGraph> StageBuilder::Build() {
  g_.layout = layout_;
  g_.policy = p_;
  g_.stage = stage_;
  g_.tensor_slices = sliced_;
  g_.num_streams = NumStreams(p_.shared_comm_stream, false, true, layout_.spec.moe.enabled());
  for (int c = 0; c < p_.virtual_stages; ++c) g_.chunk_units.push_back(vs_units_[VStage(c)]);
  position_.assign(layout_.units.size(), 0);
  for (const std::vector<int>& units : vs_units_) {
    int k = 0;
    for (int u : units) {
      if (layout_.units[u].kind == UnitKind::kBlock) position_[u] = k++;
    }
  }
  Persistent();
  pass_gathered_.assign(layout_.buckets.size(), -1);
  pass_dequantized_.assign(layout_.buckets.size(), -1);
  recv_act_.assign(static_cast<size_t>(p_.micro_steps) * p_.virtual_stages, -1);
  if (!saved_bytes_.empty()) {
    saved_.assign(static_cast<size_t>(p_.micro_steps) * layout_.units.size(), -1);
  }
  {
    // About 10 nodes and 8 buffers per unit pass with tensor parallelism.
    size_t units = 0;
    for (const std::vector<int>& u : g_.chunk_units) units += u.size();
    const size_t per = p_.tensor_parallel > 1 ? 10 : 3;
    const size_t passes = order_.size() * (units / g_.chunk_units.size() + 1);
    g_.nodes.reserve(passes * per + 4 * buckets_.size());
    g_.buffers.reserve(g_.buffers.size() + passes * per);
  }
  if (!p_.all_reduce && !p_.gather_per_micro_batch) {
    for (int b : buckets_) {
      Node& n = Add(NodeKind::kAllGather, g_.stream_for(StreamClass::kAllGather), {shard_[b]},
                    {gathered_[b]}, absl::StrCat("AG ", layout_.buckets[b].name));
      n.bucket = b;
      n.group = layout_.buckets[b].expert ? kExpertDataGroup : ParallelDataGroup(p_);
    }
  }
  const bool split = p_.pipeline_schedule == PipelineSchedule::kZbH1;
  // moe_a2a_overlap: each backward pass and the forward pass right after it
  // (of another micro-batch or chunk) are issued interleaved. Backward
  // first on every stage: pair i of stage s then needs only pair i of
  // stage s + 1 (its output gradient) and pair i - 1 of stage s - 1 (its
  // input), so the stages cannot wait on each other in a cycle (a forward-
  // first pair beside a backward-first one can).
  size_t pair_start = SIZE_MAX;  // the first pass's first node of an open pair
  size_t pair_mid = 0;
  const Pass* open = nullptr;
  for (const Pass& pass : order_) {
    const size_t begin = g_.nodes.size();
    switch (pass.kind) {
      case Pass::Kind::kForward: Forward(pass.micro, pass.chunk); break;
      case Pass::Kind::kBackward: Backward(pass.micro, pass.chunk, split); break;
      case Pass::Kind::kWeight: Weight(pass.micro, pass.chunk); break;
    }
    if (!p_.moe_a2a_overlap || !layout_.spec.moe.enabled()) continue;
    if (open != nullptr && pass.kind == Pass::Kind::kForward &&
        (open->micro != pass.micro || open->chunk != pass.chunk)) {
      InterleavePasses(pair_start, pair_mid, g_.nodes.size());
      open = nullptr;
    } else if (pass.kind == Pass::Kind::kBackward) {
      open = &pass;
      pair_start = begin;
      pair_mid = g_.nodes.size();
    } else {
      open = nullptr;
    }
  }
  for (auto it = buckets_.rbegin(); it != buckets_.rend(); ++it) {
    const int b = *it;
    if (layout_.buckets[b].frozen) continue;
    const std::string& name = layout_.buckets[b].name;
    Node& o = Add(NodeKind::kOptimizer, kComputeStream, {gshard_[b], master_[b], m1_[b], m2_[b]},
                  {master_[b], m1_[b], m2_[b]}, absl::StrCat("OPT ", name));
    o.bucket = b;
    o.micro_step = p_.micro_steps - 1;
    Node& cast = Add(NodeKind::kCast, kComputeStream, {master_[b]}, {shard_[b]},
                     absl::StrCat("CAST ", name));
    cast.bucket = b;
    cast.micro_step = p_.micro_steps - 1;
  }
  internal::DeriveDataEdges(g_, window_edges_);
  if (plan_memory_) {
    BATON_RETURN_IF_ERROR(internal::PlanBuffers(g_, true, p_.reuse_edges));
    BATON_RETURN_IF_ERROR(internal::DeriveFinalUsesAndWaits(g_));
    return std::move(g_);
  }
  for (const GraphBuffer& b : g_.buffers) {
    if (b.persistent) g_.persistent_bytes += b.bytes();
  }
  BATON_RETURN_IF_ERROR(internal::DeriveWaits(g_));
  return std::move(g_);
}

}  // namespace

StatusOr<ParallelStep> BuildParallelStep(const ModelSpec& spec, const Policy& policy_in,
                                         int world_size, int64_t seq, int64_t micro_batch,
                                         std::vector<int> virtual_layers,
                                         const PassCosts& costs, bool plan_memory,
                                         bool tensor_slices,
                                         const std::vector<int64_t>& saved_bytes) {
  const auto t0 = std::chrono::steady_clock::now();
  Policy policy = policy_in;
  BATON_RETURN_IF_ERROR(ValidatePolicy(policy));
  BATON_RETURN_IF_ERROR(ValidateModelSpec(spec));
  if (!IsParallel(policy) && !spec.moe.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel graph: policy ", policy.name,
        " uses no tensor, context or pipeline parallelism: BuildStepGraph builds its graph"));
  }
  BATON_RETURN_IF_ERROR(ValidateParallel(spec, policy));
  if (seq < 1 || micro_batch < 1 || seq % (2 * policy.context_parallel) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--seq=", seq, " must split into 2 x --cp = ", 2 * policy.context_parallel,
        " equal chunks (context parallelism's load-balanced causal split)"));
  }
  if (policy.sequence_parallel && (seq * micro_batch / policy.context_parallel) %
                                          policy.tensor_parallel != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence parallelism needs the tokens per micro-batch per context rank (",
        seq * micro_batch / policy.context_parallel, ") to divide by --tp=",
        policy.tensor_parallel));
  }
  BATON_ASSIGN_OR_RETURN(DeviceMesh mesh, ResolveMesh(policy, world_size));
  const int p = policy.pipeline_parallel, v = policy.virtual_stages, nv = p * v;
  if (virtual_layers.empty()) {
    BATON_ASSIGN_OR_RETURN(virtual_layers, VirtualStageLayers(spec, policy));
  }
  int64_t sum = 0;
  for (int n : virtual_layers) sum += n;
  if (static_cast<int>(virtual_layers.size()) != nv || sum != spec.layers ||
      *std::min_element(virtual_layers.begin(), virtual_layers.end()) < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel graph: ", virtual_layers.size(), " virtual stages of ", sum,
        " blocks given; want ", nv, " of at least 1 block summing to ", spec.layers));
  }
  // Per-unit buckets, no resident bucket: a bucket never spans two stages.
  policy.layout.bucket_policy = BucketPolicy::kPerUnit;
  policy.layout.resident_small_params = false;
  Sharding sharding = ShardingFor(policy, mesh);
  // Executed tensor parallelism: the layout of this rank's slice (whose
  // buffers the builder does not divide again).
  if (tensor_slices && spec.moe.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "parallel graph: ", spec.name, " is a mixture of experts, whose graphs are simulated; "
        "the executor does not run expert dispatch yet"));
  }
  const bool sliced = tensor_slices && policy.tensor_parallel > 1;
  ModelSpec laid_out = spec;
  if (sliced) {
    BATON_ASSIGN_OR_RETURN(laid_out, TensorParallelSlice(spec, policy.tensor_parallel));
  }
  BATON_ASSIGN_OR_RETURN(ModelLayout layout, BuildLayout(laid_out, policy.layout, sharding));
  if (!saved_bytes.empty()) {
    if (saved_bytes.size() != layout.units.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "parallel graph: saved activation bytes for ", saved_bytes.size(),
          " units given; the model has ", layout.units.size()));
    }
    for (size_t u = 0; u < saved_bytes.size(); ++u) {
      if (saved_bytes[u] < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parallel graph: negative saved activation bytes (", saved_bytes[u], ") for unit ",
            layout.units[u].name));
      }
    }
  }
  std::vector<std::vector<int>> vs_units(nv);
  int block = 1;  // unit index of the next block
  const int nunits = static_cast<int>(layout.units.size());
  for (int vs = 0; vs < nv; ++vs) {
    if (vs == 0) vs_units[vs].push_back(0);  // embedding
    for (int i = 0; i < virtual_layers[vs]; ++i) vs_units[vs].push_back(block++);
  }
  for (int u = block; u < nunits; ++u) vs_units[nv - 1].push_back(u);  // norm, head
  BATON_ASSIGN_OR_RETURN(
      auto order, PipelineOrder(policy.pipeline_schedule, p, policy.micro_steps, v, costs));
  const int64_t act = seq * micro_batch / policy.context_parallel * spec.hidden;
  ParallelStep step;
  step.mesh = mesh;
  step.order = order;
  step.virtual_layers = virtual_layers;
  for (int s = 0; s < p; ++s) {
    BATON_ASSIGN_OR_RETURN(
        StepGraph g, StageBuilder(layout, policy, mesh, s, vs_units, order[s], act, plan_memory,
                                  sliced, saved_bytes).Build());
    step.stages.push_back(std::move(g));
  }
  step.layout = std::move(layout);
  step.build_ms = std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - t0).count();
  return step;
}

}  // namespace baton::scheduler
