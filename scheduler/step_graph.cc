#include "baton/scheduler/step_graph.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "baton/memory/step_dag.h"
#include "baton/scheduler/nf4_layout.h"
#include "baton/scheduler/optimizer_state.h"
#include "baton/scheduler/graph_edges.h"
#include "baton/scheduler/zenflow_buffers.h"

namespace baton::scheduler {

const char* NodeKindName(NodeKind kind) {
  switch (kind) {
    case NodeKind::kForward: return "forward";
    case NodeKind::kRecompute: return "recompute";
    case NodeKind::kBackward: return "backward";
    case NodeKind::kAllGather: return "all_gather";
    case NodeKind::kReduceScatter: return "reduce_scatter";
    case NodeKind::kAllReduce: return "all_reduce";
    case NodeKind::kCopy: return "copy";
    case NodeKind::kAccumulate: return "accumulate";
    case NodeKind::kOptimizer: return "optimizer";
    case NodeKind::kCast: return "cast";
    case NodeKind::kD2H: return "d2h";
    case NodeKind::kH2D: return "h2d";
    case NodeKind::kDequantize: return "dequantize";
    case NodeKind::kSend: return "send";
    case NodeKind::kRecv: return "recv";
    case NodeKind::kBackwardWeight: return "backward_weight";
    case NodeKind::kDispatch: return "dispatch";
    case NodeKind::kCombine: return "combine";
  }
  return "?";
}

bool IsCompute(NodeKind kind) {
  return kind == NodeKind::kForward || kind == NodeKind::kRecompute ||
         kind == NodeKind::kBackward || kind == NodeKind::kBackwardWeight;
}

const char* BlockSegmentName(BlockSegment segment) {
  switch (segment) {
    case BlockSegment::kAttnNorm: return "attn_norm";
    case BlockSegment::kAttention: return "attention";
    case BlockSegment::kMlpNorm: return "mlp_norm";
    case BlockSegment::kMlp: return "mlp";
    case BlockSegment::kRouter: return "router";
    case BlockSegment::kShared: return "shared";
    case BlockSegment::kExperts: return "experts";
    case BlockSegment::kUnpermute: return "unpermute";
  }
  return "?";
}

const char* BufferRoleName(BufferRole role) {
  switch (role) {
    case BufferRole::kGathered: return "gathered";
    case BufferRole::kGradFull: return "grad";
    case BufferRole::kCopy: return "copy";
    case BufferRole::kRsScratch: return "rs_scratch";
    case BufferRole::kShard: return "shard";
    case BufferRole::kMaster: return "master";
    case BufferRole::kGradShard: return "grad_shard";
    case BufferRole::kMoment1: return "moment1";
    case BufferRole::kMoment2: return "moment2";
    case BufferRole::kHpzShard: return "hpz_shard";
    case BufferRole::kHostGrad: return "host_grad";
    case BufferRole::kHostShard: return "host_shard";
    case BufferRole::kTopkState: return "topk_state";
    case BufferRole::kColumnNorms: return "column_norms";
    case BufferRole::kHostAccum: return "host_accum";
    case BufferRole::kStage: return "h2d_stage";
    case BufferRole::kMoments8bit: return "moments8bit";
    case BufferRole::kPacked: return "packed";
    case BufferRole::kStagedShard: return "staged_shard";
    case BufferRole::kActivation: return "activation";
    case BufferRole::kActivationGrad: return "activation_grad";
    case BufferRole::kSavedActivation: return "saved_activation";
  }
  return "?";
}

std::vector<std::string> StepGraph::stream_names() const {
  std::vector<std::string> names = {"compute", "comm"};
  if (!policy.shared_comm_stream) names = {"compute", "allgather", "reducescatter"};
  if (parallel()) {
    names.push_back("tensor");
    names.push_back("pp_send");
    names.push_back("pp_recv");
    if (num_streams > NumStreams(policy.shared_comm_stream, false, true)) {
      names.push_back("expert");
    }
  }
  if (offload()) {
    names.push_back("hostcopy");
    names.push_back("host");
  }
  return names;
}

std::string StepGraph::ToText() const {
  const std::vector<std::string> streams = stream_names();
  std::string out;
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Node& n = nodes[i];
    absl::StrAppend(&out, i, "\t", streams[n.stream.index()], "\t", n.name);
    if (!n.waits.empty()) {
      absl::StrAppend(&out, "\twaits");
      for (int w : n.waits) absl::StrAppend(&out, " ", w);
    }
    if (n.host_wait >= 0) absl::StrAppend(&out, "\thost_waits ", n.host_wait);
    absl::StrAppend(&out, "\n");
  }
  return out;
}

namespace internal {

void DeriveDataEdges(StepGraph& g, const std::vector<GraphEdge>& extra) {
  const int nbuf = static_cast<int>(g.buffers.size());
  std::vector<int> last_writer(nbuf, -1);
  std::vector<std::vector<int>> readers(nbuf);
  std::vector<GraphEdge>& e = g.edges;
  for (int v = 0; v < static_cast<int>(g.nodes.size()); ++v) {
    const Node& node = g.nodes[v];
    for (int r : node.reads) {
      if (last_writer[r] >= 0) e.push_back({last_writer[r], v, EdgeKind::kData});
      readers[r].push_back(v);
    }
    for (int w : node.writes) {
      if (last_writer[w] >= 0 && last_writer[w] != v) {
        e.push_back({last_writer[w], v, EdgeKind::kData});
      }
      for (int r : readers[w]) {
        if (r != v) e.push_back({r, v, EdgeKind::kData});
      }
      readers[w].clear();
      last_writer[w] = v;
    }
  }
  e.insert(e.end(), extra.begin(), extra.end());
  // Drop same-stream edges (FIFO orders them) and duplicates.
  e.erase(std::remove_if(e.begin(), e.end(),
                         [&](const GraphEdge& x) {
                           return g.nodes[x.from].stream ==
                                  g.nodes[x.to].stream;
                         }),
          e.end());
  std::sort(e.begin(), e.end(), [](const GraphEdge& a, const GraphEdge& b) {
    return a.from != b.from ? a.from < b.from
                            : a.to != b.to ? a.to < b.to : a.kind < b.kind;
  });
  e.erase(std::unique(e.begin(), e.end(),
                      [](const GraphEdge& a, const GraphEdge& b) {
                        return a.from == b.from && a.to == b.to;
                      }),
          e.end());
}

void DeriveNodeWaits(StepGraph& g, const memory::HappensBefore& hb) {
  const int nn = static_cast<int>(g.nodes.size());
  std::vector<std::vector<int>> preds(nn);
  for (const GraphEdge& e : g.edges) preds[e.to].push_back(e.from);
  std::vector<int> prev_on_stream(g.num_streams, -1);
  std::vector<int> prev_of(nn, -1);
  for (int v = 0; v < nn; ++v) {
    const int s = g.nodes[v].stream.index();
    prev_of[v] = prev_on_stream[s];
    prev_on_stream[s] = v;
  }
  for (int v = 0; v < nn; ++v) {
    Node& node = g.nodes[v];
    // Latest predecessor on each other (dense) stream.
    std::vector<int> need(hb.num_streams(), -1);
    for (int u : preds[v]) {
      const int ds = hb.stream(u);
      if (need[ds] < 0 || hb.index_in_stream(u) > hb.index_in_stream(need[ds])) {
        need[ds] = u;
      }
    }
    const int prev = prev_of[v];
    for (int ds = 0; ds < hb.num_streams(); ++ds) {
      const int u = need[ds];
      if (u < 0) continue;
      if (prev >= 0 && (prev == u || hb.Before(u, prev))) continue;
      node.waits.push_back(u);
    }
    std::sort(node.waits.begin(), node.waits.end());
  }
}


Status DeriveWaits(StepGraph& g) {
  memory::StepDag dag;
  dag.nodes.reserve(g.nodes.size());
  for (const Node& n : g.nodes) dag.AddNode(std::string(), n.stream.index());
  for (const GraphEdge& e : g.edges) dag.AddEdge(e.from, e.to);
  BATON_ASSIGN_OR_RETURN(memory::HappensBefore hb, memory::HappensBefore::Build(dag));
  DeriveNodeWaits(g, hb);
  return absl::OkStatus();
}

Status PlanBuffers(StepGraph& g_, bool plan_memory, bool reuse_edges) {
  memory::PlanInput& in = g_.plan_input;
  in.dag.nodes.reserve(g_.nodes.size());
  for (const Node& n : g_.nodes) in.dag.AddNode(n.name, n.stream.index());
  for (const GraphEdge& e : g_.edges) in.dag.AddEdge(e.from, e.to);
  // Writer and users of each transient buffer.
  const int nbuf = static_cast<int>(g_.buffers.size());
  std::vector<int> writer(nbuf, -1);
  std::vector<std::vector<int>> users(nbuf);
  for (int v = 0; v < static_cast<int>(g_.nodes.size()); ++v) {
    for (int w : g_.nodes[v].writes) {
      if (writer[w] < 0) writer[w] = v; else users[w].push_back(v);
    }
    for (int r : g_.nodes[v].reads) users[r].push_back(v);
  }
  g_.first_write.assign(nbuf, -1);
  g_.last_use.assign(nbuf, -1);
  for (int i = 0; i < nbuf; ++i) {
    GraphBuffer& buf = g_.buffers[i];
    if (buf.persistent) {
      (buf.host ? g_.host_bytes : g_.persistent_bytes) += buf.bytes();
      continue;
    }
    if (writer[i] < 0) {
      return absl::InternalError(absl::StrCat("step graph: transient buffer ",
                                              buf.name, " is never written"));
    }
    int last = writer[i];
    for (int u : users[i]) last = std::max(last, u);
    g_.first_write[i] = writer[i];
    g_.last_use[i] = last;
    buf.plan_id = in.AddBuffer(buf.name, std::max<size_t>(buf.bytes(), 1),
                               writer[i], users[i]);
  }
  if (!plan_memory) return absl::OkStatus();
  memory::PlanOptions po;
  po.allow_reuse_edges = reuse_edges;
  const std::vector<Node>& nodes = g_.nodes;
  po.edge_filter = [&nodes](memory::NodeId from, memory::NodeId to) {
    if (nodes[to].stream.is_compute()) return false;  // never delay compute
    // Never delay a gather behind compute: the prefetch window governs.
    if (nodes[from].stream.is_compute() &&
        nodes[to].kind != NodeKind::kReduceScatter &&
        nodes[to].kind != NodeKind::kAllReduce &&
        nodes[to].kind != NodeKind::kAccumulate) {
      return false;
    }
    return true;
  };
  BATON_ASSIGN_OR_RETURN(g_.plan, memory::PlanMemory(in, po));
  for (const memory::DagEdge& e : g_.plan.added_edges) {
    g_.edges.push_back({e.from, e.to, EdgeKind::kReuse});
  }
  return absl::OkStatus();
}

Status DeriveFinalUsesAndWaits(StepGraph& g_) {
  memory::StepDag dag;
  dag.nodes.reserve(g_.nodes.size());
  for (const Node& n : g_.nodes) dag.AddNode(std::string(), n.stream.index());
  for (const GraphEdge& e : g_.edges) dag.AddEdge(e.from, e.to);
  BATON_ASSIGN_OR_RETURN(memory::HappensBefore hb,
                         memory::HappensBefore::Build(dag));
  g_.last_use_is_final.assign(g_.buffers.size(), false);
  for (size_t b = 0; b < g_.buffers.size(); ++b) {
    if (g_.buffers[b].persistent) continue;
    const memory::BufferSpec& spec = g_.plan_input.buffers[g_.buffers[b].plan_id];
    const int last = g_.last_use[b];
    bool is_final = spec.writer == last || hb.Before(spec.writer, last);
    for (int u : spec.users) is_final &= u == last || hb.Before(u, last);
    g_.last_use_is_final[b] = is_final;
  }
  internal::DeriveNodeWaits(g_, hb);
  return absl::OkStatus();
}

}  // namespace internal

namespace {

// Builds nodes and buffers in issue order, then edges, plan and waits.
class Builder {
 public:
  Builder(const ModelLayout& layout, const Policy& policy, DeviceMesh mesh)
      : layout_(layout), p_(policy) {
    g_.mesh = std::move(mesh);
  }

  StatusOr<StepGraph> Build(const GraphOptions& options);

 private:
  enum Phase { kFwd, kBwd };

  int AddBuffer(std::string name, BufferRole role, int bucket, int64_t numel,
                DataType dtype, bool persistent, bool host = false) {
    GraphBuffer b;
    b.host = host;
    b.name = std::move(name);
    b.role = role;
    b.bucket = bucket;
    b.numel = numel;
    b.dtype = dtype;
    b.persistent = persistent;
    g_.buffers.push_back(std::move(b));
    return static_cast<int>(g_.buffers.size()) - 1;
  }
  int AddNode(NodeKind kind, StreamId stream, int unit, int bucket, int micro,
              std::vector<int> reads, std::vector<int> writes,
              std::string name) {
    Node n;
    n.kind = kind;
    n.stream = stream;
    n.unit = unit;
    n.bucket = bucket;
    n.micro_step = micro;
    n.reads = std::move(reads);
    n.writes = std::move(writes);
    n.name = std::move(name);
    g_.nodes.push_back(std::move(n));
    return static_cast<int>(g_.nodes.size()) - 1;
  }
  const Bucket& B(int b) const { return layout_.buckets[b]; }
  bool Hpz(int b) const { return UsesHpz(p_) && !B(b).resident; }
  std::string Tag(int m) const { return absl::StrCat(" m", m); }

  void Persistent();
  // Gathers bucket `b` for `phase` of micro-step m; returns the buffer the
  // compute nodes read. `window_src` / `host_src`: nodes it must follow.
  int Gather(int b, Phase phase, int m, int window_src, int host_src);
  // Compute-side copy-out under copy_in_out.
  int CopyOut(int b, int gathered, Phase phase, int m);
  void GatherAhead(Phase phase, int m, int k, int& issued);
  std::vector<int> ParamReads(int u, const std::vector<int>& view) const;
  void Forward(int m);
  void Backward(int m);
  int Reduce(int b, int m);
  void Optimizer();
  // Offload: OPT and CAST of bucket b on the host stream.
  void HostOptimizer(int b, int m);
  void DeriveDataEdges();
  Status Plan(const GraphOptions& options);
  Status DeriveWaits();

  const ModelLayout& layout_;
  const Policy& p_;
  StepGraph g_;
  StreamId ag_, rs_;  // the all-gather and reduce-scatter streams
  StreamId hcopy_, host_;  // offload: host-link copies, host work
  bool offload_ = false;
  std::vector<int> shard_, master_, gshard_, m1_, m2_;
  std::vector<int> q8_;  // adamw8bit: the 8-bit moments (m1_, m2_ unused)
  // The moment buffers of bucket b, in the optimizer's read / write order.
  std::vector<int> Moments(int b) const {
    return q8_.empty() ? std::vector<int>{m1_[b], m2_[b]} : std::vector<int>{q8_[b]};
  }
  // NF4: the compute-side dequantize of a gathered packing; returns the
  // buffer compute reads (the packing itself for other buckets).
  int Dequantize(int b, int packed, Phase phase, int m);
  // The compute side of a gathered bucket: its dequantize (NF4) or its
  // copy-out (copy_in_out).
  int ComputeSide(int b, int gathered, Phase phase, int m) {
    return B(b).nf4 ? Dequantize(b, gathered, phase, m) : CopyOut(b, gathered, phase, m);
  }
  std::vector<int> host_grad_, host_shard_;  // offload
  std::vector<int> topk_, norms_, stage_;    // zenflow: device state
  std::vector<int> accum_;                   // zenflow: host accumulator
  std::vector<bool> uploaded_;  // offload: bucket's H2D issued this step
  std::vector<int> fwd_order_;  // non-resident buckets, forward order
  std::vector<int> pos_;        // bucket -> index in fwd_order_
  std::vector<int> view_;       // bucket -> buffer compute reads now
  std::vector<int> fwd_view_;   // bucket -> forward view (no reshard)
  std::vector<int> grad_;       // bucket -> current full-gradient buffer
  std::vector<std::vector<bool>> grad_written_;  // bucket -> slot written
  std::vector<int> last_consumer_;  // bucket -> last compute node this phase
  std::vector<int> reducer_;        // bucket -> reduce node this micro-step
  // bucket -> the node the reduce window waits for this micro-step: the
  // last reader of the full gradient buffer (the reduce-scatter), not the
  // replica all-reduce of its shard after it, which then overlaps the rest
  // of the backward instead of gating it.
  std::vector<int> window_src_;
  std::vector<int> final_reduce_;   // bucket -> last node producing gshard
  int resident_view_ = -1;
  std::vector<int> hpz_;  // bucket -> its current hpZ secondary shard
  int last_gather_ = -1;  // the all-gather node Gather added last
  std::vector<GraphEdge> window_edges_;
};

void Builder::Persistent() {
  const int nb = static_cast<int>(layout_.buckets.size());
  for (int b = 0; b < nb; ++b) {
    const int64_t n = B(b).shard_numel;
    const std::string& name = B(b).name;
    if (B(b).frozen) {
      // The shard only: gathered for compute, never reduced or updated
      // (on the host under offload = params).
      const bool on_host = p_.offload == Offload::kParams;
      const BufferRole role = on_host ? BufferRole::kHostShard : BufferRole::kShard;
      shard_.push_back(B(b).nf4 ? AddBuffer(absl::StrCat("shard.", name), role, b,
                                            Nf4PackedWords(n), DataType::kF32, true, on_host)
                                : AddBuffer(absl::StrCat("shard.", name), role, b, n,
                                            p_.param_dtype, true, on_host));
      for (auto* v : {&master_, &gshard_, &m1_, &m2_}) v->push_back(-1);
      if (p_.optimizer == OptimizerKind::kAdamW8bit) q8_.push_back(-1);
      if (offload_) {
        host_grad_.push_back(-1);
        host_shard_.push_back(-1);
      }
      continue;
    }
    const bool h = offload_;  // master and moments on the host
    shard_.push_back(AddBuffer(absl::StrCat("shard.", name), BufferRole::kShard,
                               b, n, p_.param_dtype, true));
    master_.push_back(AddBuffer(absl::StrCat("master.", name),
                                BufferRole::kMaster, b, n, DataType::kF32, true,
                                h));
    gshard_.push_back(AddBuffer(absl::StrCat("grad_shard.", name),
                                BufferRole::kGradShard, b, n, p_.reduce_dtype,
                                true));
    if (p_.optimizer == OptimizerKind::kAdamW8bit) {
      q8_.push_back(AddBuffer(absl::StrCat("moments8bit.", name),
                              BufferRole::kMoments8bit, b, Moments8bitWords(n),
                              DataType::kF32, true, h));
      m1_.push_back(-1);
      m2_.push_back(-1);
    } else {
      m1_.push_back(AddBuffer(absl::StrCat("moment1.", name), BufferRole::kMoment1,
                              b, n, DataType::kF32, true, h));
      m2_.push_back(AddBuffer(absl::StrCat("moment2.", name), BufferRole::kMoment2,
                              b, n, DataType::kF32, true, h));
    }
    if (offload_) {
      host_grad_.push_back(AddBuffer(absl::StrCat("host_grad.", name),
                                     BufferRole::kHostGrad, b, n,
                                     p_.reduce_dtype, true, true));
      host_shard_.push_back(AddBuffer(absl::StrCat("host_shard.", name),
                                      BufferRole::kHostShard, b, n,
                                      p_.param_dtype, true, true));
    }
    if (p_.zenflow) {
      const int shards = layout_.sharding.shard ? layout_.sharding.ranks : 1;
      topk_.push_back(AddBuffer(
          absl::StrCat("topk_state.", name), BufferRole::kTopkState, b,
          ZenFlowTopkStateNumel(B(b), shards, p_.zenflow_topk_ratio),
          DataType::kF32, true));
      norms_.push_back(AddBuffer(absl::StrCat("column_norms.", name),
                                 BufferRole::kColumnNorms, b,
                                 ZenFlowNormsNumel(B(b)), DataType::kF32, true));
      // Two accumulators (by window parity): the next window adds into one
      // while the host update of the last reads the other.
      accum_.push_back(AddBuffer(absl::StrCat("host_accum.", name),
                                 BufferRole::kHostAccum, b, 2 * n, DataType::kF32,
                                 true, true));
      stage_.push_back(AddBuffer(absl::StrCat("h2d_stage.", name),
                                 BufferRole::kStage, b, n, p_.param_dtype, true));
    }
  }
}

int Builder::Gather(int b, Phase phase, int m, int window_src, int host_src) {
  if (p_.all_reduce) return shard_[b];  // whole parameters live in the shard
  const std::string suffix =
      absl::StrCat(B(b).name, phase == kFwd ? " fwd" : " bwd", Tag(m));
  // hpZ: the backward gathers read the secondary shard over the hpZ group.
  const bool secondary = phase == kBwd && Hpz(b);
  if (offload_ && !uploaded_[b] && !B(b).frozen) {
    // The host updated this bucket last step: bring its shard back first.
    uploaded_[b] = true;
    std::vector<int> writes = {shard_[b]};
    if (p_.zenflow) writes.push_back(stage_[b]);  // staging, then unselected
    AddNode(NodeKind::kH2D, hcopy_, -1, b, m, {host_shard_[b]}, writes,
            absl::StrCat("H2D ", B(b).name));
  }
  int input = secondary ? hpz_[b] : shard_[b];
  int staging = -1;  // the H2D of a frozen shard on the host
  if (!secondary && B(b).frozen && p_.offload == Offload::kParams) {
    const GraphBuffer host = g_.buffers[input];
    const int staged = AddBuffer(absl::StrCat("staged.", suffix), BufferRole::kStagedShard, b,
                                 host.numel, host.dtype, false);
    staging = AddNode(NodeKind::kH2D, hcopy_, -1, b, m, {input}, {staged},
                      absl::StrCat("H2D ", suffix));
    input = staged;
  }
  if (p_.copy_in_out) {
    const int in = AddBuffer(absl::StrCat("ag_in.", suffix), BufferRole::kCopy,
                             b, g_.buffers[input].numel, g_.buffers[input].dtype, false);
    AddNode(NodeKind::kCopy, ag_, -1, b, m, {input}, {in},
            absl::StrCat("COPY-IN ", suffix));
    input = in;
  }
  // The group's shards one after another (NF4: their packings).
  const GraphBuffer in_buf = g_.buffers[input];
  const int group = g_.mesh.size(secondary ? kHpzGroup : kDataShardGroup);
  const int out = AddBuffer(absl::StrCat(B(b).nf4 ? "packed." : "gathered.", suffix),
                            B(b).nf4 ? BufferRole::kPacked : BufferRole::kGathered, b,
                            in_buf.numel * group, in_buf.dtype, false);
  const int node = AddNode(NodeKind::kAllGather, ag_, -1, b, m, {input}, {out},
                           absl::StrCat(secondary ? "AG-HPZ " : "AG ", suffix));
  if (secondary) g_.nodes[node].group = kHpzGroup;
  last_gather_ = node;
  if (window_src >= 0) {
    window_edges_.push_back({window_src, node, EdgeKind::kWindow});
    if (staging >= 0) window_edges_.push_back({window_src, staging, EdgeKind::kWindow});
    if (p_.copy_in_out) {
      window_edges_.push_back({window_src, node - 1, EdgeKind::kWindow});
    }
  }
  if (host_src >= 0) g_.nodes[p_.copy_in_out ? node - 1 : node].host_wait = host_src;
  if (phase == kFwd && Hpz(b)) {
    // Keep this rank's hpZ slice of the gathered bucket for the backward.
    hpz_[b] = AddBuffer(absl::StrCat("hpz.", suffix), BufferRole::kHpzShard, b,
                        g_.buffers[out].numel / g_.mesh.size(kHpzGroup),
                        g_.buffers[out].dtype, false);
    const int copy = AddNode(NodeKind::kCopy, ag_, -1, b, m, {out}, {hpz_[b]},
                             absl::StrCat("HPZ-COPY ", suffix));
    g_.nodes[copy].group = kHpzGroup;
  }
  return out;
}

int Builder::CopyOut(int b, int gathered, Phase phase, int m) {
  if (!p_.copy_in_out || p_.all_reduce) return gathered;
  const std::string suffix =
      absl::StrCat(B(b).name, phase == kFwd ? " fwd" : " bwd", Tag(m));
  const int out = AddBuffer(absl::StrCat("params.", suffix), BufferRole::kCopy,
                            b, B(b).padded_numel, p_.param_dtype, false);
  AddNode(NodeKind::kCopy, kComputeStream, -1, b, m, {gathered}, {out},
          absl::StrCat("COPY-OUT ", suffix));
  return out;
}

int Builder::Dequantize(int b, int packed, Phase phase, int m) {
  const std::string suffix =
      absl::StrCat(B(b).name, phase == kFwd ? " fwd" : " bwd", Tag(m));
  const int out = AddBuffer(absl::StrCat("gathered.", suffix), BufferRole::kGathered, b,
                            B(b).padded_numel, p_.param_dtype, false);
  AddNode(NodeKind::kDequantize, kComputeStream, -1, b, m, {packed}, {out},
          absl::StrCat("DQ ", suffix));
  return out;
}

std::vector<int> Builder::ParamReads(int u, const std::vector<int>& view) const {
  std::vector<int> reads;
  for (const ParamRef& ref : layout_.unit_params[u]) {
    const int buf = ref.bucket == layout_.resident_bucket && !p_.all_reduce
                        ? resident_view_
                        : view[ref.bucket];
    if (std::find(reads.begin(), reads.end(), buf) == reads.end()) {
      reads.push_back(buf);
    }
  }
  return reads;
}

// Issues the gathers of `phase`'s bucket order up to position k + depth
// (`issued` counts those already issued): each waits for compute to finish
// with the bucket depth + 1 places earlier (window) and, with a host
// limiter, the host waits for the one host_limit places earlier.
void Builder::GatherAhead(Phase phase, int m, int k, int& issued) {
  const int n = static_cast<int>(fwd_order_.size());
  const int d = phase == kFwd ? p_.forward_prefetch : p_.backward_prefetch;
  auto bucket = [&](int j) {
    return phase == kFwd ? fwd_order_[j] : fwd_order_[n - 1 - j];
  };
  while (issued <= std::min(k + d, n - 1)) {
    const int j = issued++;
    const int wsrc = j - d - 1 >= 0 ? last_consumer_[bucket(j - d - 1)] : -1;
    const int hsrc = p_.host_limit > 0 && j - p_.host_limit >= 0
                         ? last_consumer_[bucket(j - p_.host_limit)]
                         : -1;
    view_[bucket(j)] = Gather(bucket(j), phase, m, wsrc, hsrc);
    // A frozen bucket's adapters come with it.
    if (const int a = B(bucket(j)).adapters; a >= 0) view_[a] = Gather(a, phase, m, wsrc, hsrc);
    // A later micro-step gathers a bucket only after the previous
    // micro-step reduced it: the reduction's buffers can then give their
    // bytes to this gather (one comm stream gets this order from FIFO).
    // reducer_ still holds the previous micro-step's reduces here.
    const int prev =
        phase == kFwd && m > 0 && !p_.all_reduce ? reducer_[bucket(j)] : -1;
    if (prev >= 0 && g_.nodes[prev].stream != ag_) {
      window_edges_.push_back({prev, last_gather_, EdgeKind::kWindow});
    }
  }
}

void Builder::Forward(int m) {
  std::fill(last_consumer_.begin(), last_consumer_.end(), -1);
  int issued = 0;
  for (int u = 0; u < static_cast<int>(layout_.units.size()); ++u) {
    const int b = layout_.unit_bucket[u];
    if (b >= 0) {
      const int k = pos_[b];
      GatherAhead(kFwd, m, k, issued);
      if (B(b).units.front() == u) {
        view_[b] = ComputeSide(b, view_[b], kFwd, m);
        if (const int a = B(b).adapters; a >= 0) view_[a] = CopyOut(a, view_[a], kFwd, m);
      }
    }
    const int node = AddNode(NodeKind::kForward, kComputeStream, u, -1, m, ParamReads(u, view_),
                             {}, absl::StrCat("F ", layout_.units[u].name, Tag(m)));
    if (b >= 0) last_consumer_[b] = node;
  }
  fwd_view_ = view_;
}

void Builder::Backward(int m) {
  const int n = static_cast<int>(fwd_order_.size());
  const bool reduce_now = p_.reduce_every_micro_step || m == p_.micro_steps - 1;
  std::fill(last_consumer_.begin(), last_consumer_.end(), -1);
  std::fill(reducer_.begin(), reducer_.end(), -1);
  std::fill(window_src_.begin(), window_src_.end(), -1);
  auto bwd = [&](int j) { return fwd_order_[n - 1 - j]; };
  int issued = 0;
  const int nu = static_cast<int>(layout_.units.size());
  for (int u = nu - 1; u >= 0; --u) {
    const int b = layout_.unit_bucket[u];
    if (b >= 0) {
      const int k = n - 1 - pos_[b];
      if (p_.reshard_after_forward && !p_.all_reduce) {
        GatherAhead(kBwd, m, k, issued);
        if (B(b).units.back() == u) {
          view_[b] = ComputeSide(b, view_[b], kBwd, m);
          if (const int a = B(b).adapters; a >= 0) view_[a] = CopyOut(a, view_[a], kBwd, m);
        }
      } else {
        view_[b] = fwd_view_[b];
        if (const int a = B(b).adapters; a >= 0) view_[a] = fwd_view_[a];
      }
    }
    const std::vector<int> reads = ParamReads(u, view_);
    const UnitSpec& unit = layout_.units[u];
    const bool recompute =
        unit.kind == UnitKind::kBlock &&
        (p_.recompute_blocks < 0 || unit.block < p_.recompute_blocks);
    if (recompute) {
      const bool selective = p_.recompute == Recompute::kSelective;
      const int r = AddNode(NodeKind::kRecompute, kComputeStream, u, -1, m, reads, {},
                            absl::StrCat(selective ? "R-ATTN " : "R ", unit.name, Tag(m)));
      g_.nodes[r].recompute = p_.recompute;
    }
    // Gradient buffers this backward writes, and accumulate flags.
    std::vector<int> writes;
    std::vector<bool> acc;
    for (const ParamRef& ref : layout_.unit_params[u]) {
      if (B(ref.bucket).params[ref.slot].frozen) {
        acc.push_back(false);  // no gradient
        continue;
      }
      int& gb = grad_[ref.bucket];
      if (gb < 0) {
        const Bucket& bk = B(ref.bucket);
        gb = AddBuffer(absl::StrCat("grad.", bk.name,
                                    bk.resident ? "" : Tag(m)),
                       BufferRole::kGradFull, ref.bucket, bk.padded_numel,
                       p_.reduce_dtype, false);
        grad_written_[ref.bucket].assign(bk.params.size(), false);
      }
      acc.push_back(grad_written_[ref.bucket][ref.slot]);
      grad_written_[ref.bucket][ref.slot] = true;
      if (std::find(writes.begin(), writes.end(), gb) == writes.end()) {
        writes.push_back(gb);
      }
    }
    const int node = AddNode(NodeKind::kBackward, kComputeStream, u, -1, m, reads, writes,
                             absl::StrCat("B ", unit.name, Tag(m)));
    g_.nodes[node].grad_accumulate = std::move(acc);
    if (b >= 0) {
      const int k = n - 1 - pos_[b];
      // Reduce window: the first backward of bucket k waits for the reduce
      // of bucket k - w.
      if (reduce_now && B(b).units.back() == u && k - p_.reduce_window >= 0) {
        const int src = window_src_[bwd(k - p_.reduce_window)];
        if (src >= 0) window_edges_.push_back({src, node, EdgeKind::kWindow});
      }
      last_consumer_[b] = node;
      if (reduce_now && B(b).units.front() == u) {
        // A frozen bucket's adapters are reduced in its place.
        const int rb = B(b).frozen ? B(b).adapters : b;
        if (rb >= 0 && grad_[rb] >= 0) {
          reducer_[b] = Reduce(rb, m);
          window_src_[b] = window_src_[rb];
        }
      }
    }
  }
  const int r = layout_.resident_bucket;
  if (r >= 0 && m == p_.micro_steps - 1 && grad_[r] >= 0) Reduce(r, m);
}

int Builder::Reduce(int b, int m) {
  const Bucket& bk = B(b);
  int src = grad_[b];
  const std::string suffix = absl::StrCat(bk.name, bk.resident ? "" : Tag(m));
  if (p_.copy_in_out) {
    const int in = AddBuffer(absl::StrCat("rs_in.", suffix), BufferRole::kCopy,
                             b, bk.padded_numel, p_.reduce_dtype, false);
    AddNode(NodeKind::kCopy, rs_, -1, b, m, {src}, {in},
            absl::StrCat("COPY-RS ", suffix));
    src = in;
  }
  // Micro-steps after the first add their reduced gradient into the shard.
  const bool accumulate = p_.reduce_every_micro_step && m > 0 && !bk.resident;
  int out = gshard_[b];
  if (accumulate) {
    out = AddBuffer(absl::StrCat("rs_scratch.", suffix), BufferRole::kRsScratch,
                    b, p_.all_reduce ? bk.padded_numel : bk.shard_numel,
                    p_.reduce_dtype, false);
  }
  int node = p_.all_reduce
                 ? AddNode(NodeKind::kAllReduce, rs_, -1, b, m, {src}, {out},
                           absl::StrCat("AR ", suffix))
                 : AddNode(NodeKind::kReduceScatter, rs_, -1, b, m, {src},
                           {out}, absl::StrCat("RS ", suffix));
  if (!p_.all_reduce && g_.replicated()) {
    window_src_[b] = node;
    // HSDP: the shard group's sum, then the sum over the replicas.
    node = AddNode(NodeKind::kAllReduce, rs_, -1, b, m, {out}, {out},
                   absl::StrCat("AR-R ", suffix));
    g_.nodes[node].group = kReplicaGroup;
  }
  if (accumulate) {
    node = AddNode(NodeKind::kAccumulate, rs_, -1, b, m, {out, gshard_[b]},
                   {gshard_[b]}, absl::StrCat("ACC ", suffix));
  }
  grad_[b] = -1;
  final_reduce_[b] = node;
  if (!g_.replicated() || p_.all_reduce) window_src_[b] = node;
  if (offload_ && !p_.zenflow && m == p_.micro_steps - 1) {
    // Offload: the gradient shard goes to the host as soon as it is final.
    AddNode(NodeKind::kD2H, hcopy_, -1, b, m, {gshard_[b]}, {host_grad_[b]},
            absl::StrCat("D2H ", bk.name));
  }
  return node;
}

void Builder::HostOptimizer(int b, int m) {
  const std::string& name = B(b).name;
  std::vector<int> reads = {host_grad_[b], master_[b]};
  std::vector<int> writes = {master_[b]};
  for (int m : Moments(b)) {
    reads.push_back(m);
    writes.push_back(m);
  }
  if (p_.zenflow) {
    reads.push_back(accum_[b]);
    writes.push_back(accum_[b]);
  }
  AddNode(NodeKind::kOptimizer, host_, -1, b, m, reads, writes,
          absl::StrCat("OPT ", name));
  AddNode(NodeKind::kCast, host_, -1, b, m, {master_[b]}, {host_shard_[b]},
          absl::StrCat("CAST ", name));
}

void Builder::Optimizer() {
  std::vector<int> order;
  for (auto it = fwd_order_.rbegin(); it != fwd_order_.rend(); ++it) {
    order.push_back(*it);  // frozen: never reduced, skipped below
    if (B(*it).adapters >= 0) order.push_back(B(*it).adapters);
  }
  if (layout_.resident_bucket >= 0) order.push_back(layout_.resident_bucket);
  for (int b : order) {
    if (final_reduce_[b] < 0) continue;  // a bucket no unit reads
    if (p_.zenflow) {
      // Column norms, their sum over the shard group, the device update of
      // the selected columns; then the gradient shard goes to the host.
      const int m = p_.micro_steps - 1;
      AddNode(NodeKind::kAccumulate, kComputeStream, -1, b, m, {gshard_[b]},
              {norms_[b]}, absl::StrCat("NORM ", B(b).name));
      AddNode(NodeKind::kAllReduce, rs_, -1, b, m, {norms_[b]}, {norms_[b]},
              absl::StrCat("AR-NORM ", B(b).name));
      AddNode(NodeKind::kOptimizer, kComputeStream, -1, b, m,
              {gshard_[b], norms_[b], topk_[b]},
              {topk_[b], shard_[b], norms_[b]}, absl::StrCat("TOPK ", B(b).name));
      AddNode(NodeKind::kD2H, hcopy_, -1, b, m, {gshard_[b], topk_[b]},
              {host_grad_[b]}, absl::StrCat("D2H ", B(b).name));
    }
    if (offload_) {
      // On the host stream: it waits for the bucket's D2H only, so it
      // starts during the backward; issued here, after the compute, so a
      // Session issues it with FinishStep's optimizer.
      HostOptimizer(b, p_.micro_steps - 1);
      continue;
    }
    std::vector<int> reads = {gshard_[b], master_[b]};
    std::vector<int> writes = {master_[b]};
    for (int m : Moments(b)) {
      reads.push_back(m);
      writes.push_back(m);
    }
    AddNode(NodeKind::kOptimizer, kComputeStream, -1, b, p_.micro_steps - 1, reads, writes,
            absl::StrCat("OPT ", B(b).name));
    AddNode(NodeKind::kCast, kComputeStream, -1, b, p_.micro_steps - 1, {master_[b]},
            {shard_[b]}, absl::StrCat("CAST ", B(b).name));
  }
}

void Builder::DeriveDataEdges() { internal::DeriveDataEdges(g_, window_edges_); }

Status Builder::Plan(const GraphOptions& options) {
  return internal::PlanBuffers(g_, options.plan_memory, p_.reuse_edges);
}

Status Builder::DeriveWaits() { return internal::DeriveFinalUsesAndWaits(g_); }

StatusOr<StepGraph> Builder::Build(const GraphOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  g_.layout = layout_;
  g_.policy = p_;
  ag_ = StreamFor(StreamClass::kAllGather, p_.shared_comm_stream);
  rs_ = StreamFor(StreamClass::kReduceScatter, p_.shared_comm_stream);
  offload_ = p_.offload != Offload::kNone;
  hcopy_ = StreamFor(StreamClass::kHostCopy, p_.shared_comm_stream);
  host_ = StreamFor(StreamClass::kHost, p_.shared_comm_stream);
  g_.num_streams = NumStreams(p_.shared_comm_stream, offload_);
  const int nb = static_cast<int>(layout_.buckets.size());
  pos_.assign(nb, -1);
  for (int u = 0; u < static_cast<int>(layout_.units.size()); ++u) {
    const int b = layout_.unit_bucket[u];
    if (b >= 0 && pos_[b] < 0) {
      pos_[b] = static_cast<int>(fwd_order_.size());
      fwd_order_.push_back(b);
    }
  }
  view_.assign(nb, -1);
  hpz_.assign(nb, -1);
  grad_.assign(nb, -1);
  grad_written_.assign(nb, {});
  last_consumer_.assign(nb, -1);
  reducer_.assign(nb, -1);
  window_src_.assign(nb, -1);
  final_reduce_.assign(nb, -1);
  uploaded_.assign(nb, false);
  Persistent();
  if (p_.all_reduce) view_ = shard_;  // whole parameters, never gathered
  const int r = layout_.resident_bucket;
  for (int m = 0; m < p_.micro_steps; ++m) {
    if (m == 0 && r >= 0) {
      resident_view_ = Gather(r, kFwd, 0, -1, -1);
      if (p_.copy_in_out && !p_.all_reduce) {
        resident_view_ = CopyOut(r, resident_view_, kFwd, 0);
      }
    }
    Forward(m);
    Backward(m);
  }
  Optimizer();
  DeriveDataEdges();
  g_.build_ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - t0)
                    .count();
  BATON_RETURN_IF_ERROR(Plan(options));
  BATON_RETURN_IF_ERROR(DeriveWaits());
  return std::move(g_);
}

}  // namespace

StatusOr<StepGraph> BuildStepGraph(const ModelLayout& layout,
                                   const Policy& policy,
                                   const GraphOptions& options,
                                   int world_size) {
  BATON_RETURN_IF_ERROR(ValidatePolicy(policy));
  if (IsParallel(policy)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step graph: policy ", policy.name,
        " uses tensor, context or pipeline parallelism: BuildParallelStep builds its graphs"));
  }
  if (layout.spec.moe.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step graph: ", layout.spec.name,
        " is a mixture of experts: BuildParallelStep builds its graphs (its dispatch and "
        "combine nodes, its experts' buckets over the expert groups)"));
  }
  BATON_RETURN_IF_ERROR(CheckPolicyForModel(policy, layout.spec));
  const int world = world_size > 0 ? world_size : layout.sharding.ranks;
  BATON_ASSIGN_OR_RETURN(DeviceMesh mesh, ResolveMesh(policy, world));
  const Sharding want = ShardingFor(policy, mesh);
  if (want.ranks != layout.sharding.ranks) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step graph: the layout shards over ", layout.sharding.ranks,
        " ranks but policy ", policy.name, " shards over ", want.ranks,
        " of ", world));
  }
  if (!(want == layout.sharding) || !(policy.layout == layout.options)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "step graph: the layout was not built for policy ", policy.name,
        " (LayoutFor(spec, policy, mesh))"));
  }
  return Builder(layout, policy, std::move(mesh)).Build(options);
}

StatusOr<StepGraph> BuildStepGraph(const ModelSpec& spec, const Policy& policy,
                                   int world_size,
                                   const GraphOptions& options) {
  BATON_RETURN_IF_ERROR(ValidatePolicy(policy));
  BATON_RETURN_IF_ERROR(CheckPolicyForModel(policy, spec));
  BATON_ASSIGN_OR_RETURN(DeviceMesh mesh, ResolveMesh(policy, world_size));
  BATON_ASSIGN_OR_RETURN(ModelLayout layout, LayoutFor(spec, policy, mesh));
  return BuildStepGraph(layout, policy, options, world_size);
}

}  // namespace baton::scheduler

namespace baton::scheduler {

namespace {

// The offload invariants of node v (before its writes are recorded in
// `last_writer`): see VerifyStepGraph.
Status VerifyOffloadNode(const StepGraph& g, int v,
                         const std::vector<int>& last_writer) {
  const Node& n = g.nodes[v];
  auto fail = [](auto&&... parts) {
    return absl::FailedPreconditionError(absl::StrCat("step graph: ", parts...));
  };
  const bool offload = g.offload();
  const bool host_node = offload && n.stream == g.stream_for(StreamClass::kHost);
  const bool link = n.kind == NodeKind::kD2H || n.kind == NodeKind::kH2D;
  if (!offload && link) {
    return fail(n.name, " moves data over the host link without offload");
  }
  if (link && n.stream != g.stream_for(StreamClass::kHostCopy)) {
    return fail(n.name, " is not on the host-copy stream");
  }
  const bool topk = g.policy.zenflow && n.kind == NodeKind::kOptimizer &&
                    !n.reads.empty() &&
                    g.buffers[n.reads.back()].role == BufferRole::kTopkState;
  if (offload && (n.kind == NodeKind::kOptimizer || n.kind == NodeKind::kCast) &&
      !host_node && !topk) {
    return fail(n.name, " runs on the device under offload");
  }
  auto check = [&](int b, bool write) -> Status {
    const GraphBuffer& buf = g.buffers[b];
    // The host side of a copy: D2H writes host memory, H2D reads it.
    const bool host_side = (n.kind == NodeKind::kD2H && write) ||
                           (n.kind == NodeKind::kH2D && !write);
    const bool want_host = host_node || host_side;
    if (buf.host != want_host) {
      return fail(n.name, write ? " writes " : " reads ",
                  buf.host ? "host buffer " : "device buffer ", buf.name,
                  buf.host ? " off the host" : " from the host");
    }
    return absl::OkStatus();
  };
  for (int r : n.reads) BATON_RETURN_IF_ERROR(check(r, false));
  for (int w : n.writes) BATON_RETURN_IF_ERROR(check(w, true));
  if (!offload) return absl::OkStatus();
  if (n.kind == NodeKind::kOptimizer && !topk) {
    const int grad = n.reads.empty() ? -1 : n.reads[0];
    const int w = grad >= 0 ? last_writer[grad] : -1;
    if (grad < 0 || g.buffers[grad].role != BufferRole::kHostGrad || w < 0 ||
        g.nodes[w].kind != NodeKind::kD2H || g.nodes[w].bucket != n.bucket) {
      return fail(n.name, " reads no gradient that a D2H of its bucket copied "
                          "this step");
    }
  }
  if (n.kind == NodeKind::kAllGather || n.kind == NodeKind::kCopy) {
    for (int r : n.reads) {
      if (g.buffers[r].role != BufferRole::kShard) continue;
      if (g.layout.buckets[g.buffers[r].bucket].frozen) continue;  // stays on the device
      const int w = last_writer[r];
      if (w < 0 || g.nodes[w].kind != NodeKind::kH2D) {
        return fail(n.name, " gathers ", g.buffers[r].name,
                    " that no H2D brought from the host this step");
      }
    }
  }
  return absl::OkStatus();
}

// Frozen buckets are never reduced or updated; a dequantize reads a packing
// that an all-gather wrote and writes gathered weights; compute never reads
// a packing.
Status VerifyFrozenNode(const StepGraph& g, int v, const std::vector<int>& last_writer) {
  const Node& n = g.nodes[v];
  auto fail = [](auto&&... parts) {
    return absl::FailedPreconditionError(absl::StrCat("step graph: ", parts...));
  };
  const bool touches_state =
      n.kind == NodeKind::kReduceScatter || n.kind == NodeKind::kOptimizer ||
      n.kind == NodeKind::kCast || n.kind == NodeKind::kD2H || n.kind == NodeKind::kAccumulate ||
      (n.kind == NodeKind::kAllReduce && !n.reads.empty() &&
       g.buffers[n.reads[0]].role != BufferRole::kColumnNorms);
  if (touches_state && n.bucket >= 0 && g.layout.buckets[n.bucket].frozen) {
    return fail(n.name, " reduces or updates frozen bucket ", g.layout.buckets[n.bucket].name);
  }
  if (n.kind == NodeKind::kDequantize) {
    const int in = n.reads.empty() ? -1 : n.reads[0];
    const int w = in >= 0 ? last_writer[in] : -1;
    if (in < 0 || g.buffers[in].role != BufferRole::kPacked || w < 0 ||
        g.nodes[w].kind != NodeKind::kAllGather || n.writes.size() != 1 ||
        g.buffers[n.writes[0]].role != BufferRole::kGathered) {
      return fail(n.name, " does not dequantize a packing an all-gather wrote into gathered "
                          "weights");
    }
  }
  if (IsCompute(n.kind)) {
    for (int r : n.reads) {
      if (g.buffers[r].role == BufferRole::kPacked) {
        return fail(n.name, " reads the packing ", g.buffers[r].name, " without a dequantize");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

Status VerifyStepGraph(const StepGraph& g) {
  const int nn = static_cast<int>(g.nodes.size());
  auto fail = [](auto&&... parts) {
    return absl::FailedPreconditionError(absl::StrCat("step graph: ", parts...));
  };
  for (const GraphEdge& e : g.edges) {
    if (e.from < 0 || e.to >= nn || e.from >= e.to) {
      return fail("edge ", e.from, " -> ", e.to, " does not go forward");
    }
  }
  // Happens-before as the executor will enforce it: waits + FIFO only.
  memory::StepDag dag;
  for (const Node& n : g.nodes) dag.AddNode(n.name, n.stream.index());
  for (int v = 0; v < nn; ++v) {
    for (int w : g.nodes[v].waits) dag.AddEdge(w, v);
  }
  auto built = memory::HappensBefore::Build(dag);
  if (!built.ok()) return fail(built.status().message());
  const memory::HappensBefore& hb = *built;
  for (const GraphEdge& e : g.edges) {
    if (!hb.Before(e.from, e.to)) {
      return fail("edge ", g.nodes[e.from].name, " -> ", g.nodes[e.to].name,
                  " is not enforced by the waits");
    }
  }
  const int nbuf = static_cast<int>(g.buffers.size());
  std::vector<int> last_writer(nbuf, -1);
  std::vector<int> reduced_after(nbuf, -1);
  // Reduce-scatter outputs still waiting for their replica all-reduce.
  std::vector<int> unreplicated(nbuf, -1);
  for (int v = 0; v < nn; ++v) {
    const Node& n = g.nodes[v];
    BATON_RETURN_IF_ERROR(VerifyOffloadNode(g, v, last_writer));
    BATON_RETURN_IF_ERROR(VerifyFrozenNode(g, v, last_writer));
    const bool replica_ar =
        n.kind == NodeKind::kAllReduce && n.group == kReplicaGroup;
    if (n.group == kReplicaGroup &&
        (!g.replicated() || !replica_ar)) {
      return fail(n.name, " runs over the replica group, which ",
                  !g.replicated() ? "this graph does not have"
                                         : "only takes all-reduces");
    }
    if (n.group == kHpzGroup &&
        (!UsesHpz(g.policy) ||
         (n.kind != NodeKind::kAllGather && n.kind != NodeKind::kCopy))) {
      return fail(n.name, " runs over the hpZ group, which ",
                  !UsesHpz(g.policy) ? "this graph does not have"
                                    : "only takes gathers and copies");
    }
    if (n.kind == NodeKind::kAllGather && n.group == kHpzGroup) {
      // Its input is a secondary shard (possibly through a copy-in).
      int in = n.reads.empty() ? -1 : n.reads[0];
      if (in >= 0 && g.buffers[in].role == BufferRole::kCopy &&
          last_writer[in] >= 0 && !g.nodes[last_writer[in]].reads.empty()) {
        in = g.nodes[last_writer[in]].reads[0];
      }
      const int w = in >= 0 ? last_writer[in] : -1;
      if (in < 0 || g.buffers[in].role != BufferRole::kHpzShard || w < 0 ||
          g.nodes[w].kind != NodeKind::kCopy ||
          g.nodes[w].group != kHpzGroup) {
        return fail(n.name, " gathers over the hpZ group but reads no "
                            "secondary shard written by an hpZ copy");
      }
    }
    for (int r : n.reads) {
      if (unreplicated[r] >= 0) {
        if (!replica_ar) {
          return fail(n.name, " reads ", g.buffers[r].name,
                      " before its replica all-reduce");
        }
        unreplicated[r] = -1;
      } else if (replica_ar) {
        return fail(n.name, " all-reduces ", g.buffers[r].name,
                    " which no reduce-scatter wrote just before");
      }
      const GraphBuffer& buf = g.buffers[r];
      if (last_writer[r] < 0 && !buf.persistent) {
        return fail(n.name, " reads ", buf.name, " before anything wrote it");
      }
      if (last_writer[r] >= 0 && !hb.Before(last_writer[r], v)) {
        return fail(n.name, " reads ", buf.name, " without waiting for ",
                    g.nodes[last_writer[r]].name);
      }
      if (buf.role == BufferRole::kGradFull &&
          (n.kind == NodeKind::kReduceScatter ||
           n.kind == NodeKind::kAllReduce || n.kind == NodeKind::kCopy)) {
        reduced_after[r] = v;
      }
    }
    if (IsCompute(n.kind)) {
      for (const ParamRef& ref : g.layout.unit_params[n.unit]) {
        int found = -1;
        for (int r : n.reads) {
          if (g.buffers[r].bucket == ref.bucket) found = r;
        }
        if (found < 0) {
          return fail(n.name, " reads no buffer of bucket ",
                      g.layout.buckets[ref.bucket].name);
        }
        const int w = last_writer[found];
        const bool gathered =
            w >= 0 && (g.nodes[w].kind == NodeKind::kAllGather ||
                       g.nodes[w].kind == NodeKind::kCopy ||
                       g.nodes[w].kind == NodeKind::kDequantize);
        const bool whole = g.policy.all_reduce &&
                           g.buffers[found].role == BufferRole::kShard;
        if (!gathered && !whole) {
          return fail(n.name, " reads ", g.buffers[found].name,
                      " which no all-gather produced this step");
        }
      }
    }
    for (int w : n.writes) {
      if (last_writer[w] >= 0 && !hb.Before(last_writer[w], v) &&
          last_writer[w] != v) {
        return fail(n.name, " overwrites ", g.buffers[w].name,
                    " without waiting for ", g.nodes[last_writer[w]].name);
      }
      last_writer[w] = v;
      if (g.buffers[w].role == BufferRole::kGradFull) reduced_after[w] = -1;
      if (n.kind == NodeKind::kReduceScatter && g.replicated()) {
        unreplicated[w] = v;
      }
    }
  }
  for (int b = 0; b < nbuf; ++b) {
    if (unreplicated[b] >= 0) {
      return fail(g.buffers[b].name, " (from ", g.nodes[unreplicated[b]].name,
                  ") is never all-reduced over the replica group");
    }
  }
  for (int b = 0; b < nbuf; ++b) {
    if (g.buffers[b].role != BufferRole::kGradFull) continue;
    if (reduced_after[b] < 0) {
      return fail("gradient ", g.buffers[b].name,
                  " is not reduced after its last write");
    }
    if (!hb.Before(last_writer[b], reduced_after[b])) {
      return fail("gradient ", g.buffers[b].name, " is reduced by ",
                  g.nodes[reduced_after[b]].name,
                  " without waiting for its last write");
    }
  }
  return absl::OkStatus();
}

}  // namespace baton::scheduler
