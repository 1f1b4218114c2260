#include "baton/sim/node_cost.h"

#include <algorithm>

#include "baton/sim/offload_cost.h"
#include "baton/sim/simulator.h"

namespace baton::sim {

using scheduler::BlockSegment;
using scheduler::FusedComm;
using scheduler::MeshGroup;
using scheduler::Node;
using scheduler::NodeKind;
using scheduler::UnitKind;

NodeCoster::NodeCoster(const scheduler::StepGraph& graph, const ClusterSpec& cluster,
                       const SimOptions& options, const ComputeModel& compute,
                       const MoeCost* moe)
    : g_(graph), c_(cluster), o_(options), k_(compute), moe_(moe) {
  for (const Node& n : g_.nodes) {
    auto& p = placement_[n.group.bits()];
    if (!p) p = PlaceGroup(g_.mesh, n.group, c_.gpus_per_node);
  }
  if (g_.parallel()) {
    for (MeshGroup gr : {scheduler::kTensorGroup, scheduler::kContextGroup,
                         scheduler::kPipelineGroup}) {
      auto& p = placement_[gr.bits()];
      if (!p) p = PlaceGroup(g_.mesh, gr, c_.gpus_per_node);
    }
    // A micro-batch's activation at full size: the largest activation
    // buffer (s x b x h / cp elements; sequence shards are / tp).
    for (const scheduler::GraphBuffer& b : g_.buffers) {
      if (b.role == scheduler::BufferRole::kActivation) {
        act_bytes_ = std::max(act_bytes_, static_cast<double>(b.bytes()));
      }
    }
    const scheduler::ModelSpec& m = g_.layout.spec;
    const double tokens = act_bytes_ / DataTypeSize(g_.policy.param_dtype) /
                          static_cast<double>(m.hidden);
    ring_step_bytes_ = 2 * tokens * static_cast<double>(m.kv_heads * m.head_dim) /
                       g_.policy.tensor_parallel * DataTypeSize(g_.policy.param_dtype);
  }
}

NodeCost NodeCoster::Cost(const Node& n) const {
  auto time = [](const KernelSum& k) {
    NodeCost cost;
    cost.latency_s = k.seconds;
    return cost;
  };
  auto buffer_bytes = [&](int b) { return static_cast<double>(g_.buffers[b].bytes()); };
  auto time_s = [](double seconds) {
    NodeCost cost;
    cost.latency_s = seconds;
    return cost;
  };
  if (const std::optional<double> s = OffloadNodeSeconds(g_, n, c_, k_)) {
    return NodeCost{*s, 0, false};  // sim/offload_cost.h
  }
  switch (n.kind) {
    case NodeKind::kForward:
    case NodeKind::kRecompute:
    case NodeKind::kBackward:
    case NodeKind::kBackwardWeight:
      if (g_.parallel()) return time_s(ParallelCompute(n));
      return ComputeCost(n);
    case NodeKind::kSend: {
      NodeCost cost;
      cost.comm = true;
      if (o_.free_comm) return cost;
      const GroupPlacement& pp = *placement_[scheduler::kPipelineGroup.bits()];
      const CollectiveTime t =
          P2PTime(c_, pp.nodes == 1, buffer_bytes(n.reads[0]), o_.bandwidth_scale);
      cost.latency_s = t.latency_s;
      cost.work_s = t.work_s;
      return cost;
    }
    case NodeKind::kRecv:
      return NodeCost{};  // finishes with its send (the event loop's wait)
    case NodeKind::kDispatch:
    case NodeKind::kCombine:
      return ExpertExchange(n);
    case NodeKind::kAllGather:
      return Collective(CollectiveKind::kAllGather, buffer_bytes(n.writes[0]), n.group);
    case NodeKind::kReduceScatter:
      return Collective(CollectiveKind::kReduceScatter, buffer_bytes(n.reads[0]),
                        n.group);
    case NodeKind::kAllReduce:
      return Collective(CollectiveKind::kAllReduce, buffer_bytes(n.reads[0]), n.group);
    case NodeKind::kCopy:
      return time(k_.CopyBytes(2 * buffer_bytes(n.writes[0])));
    case NodeKind::kAccumulate:
      return time(k_.CopyBytes(3 * buffer_bytes(n.writes[0])));
    case NodeKind::kOptimizer: {
      // The fused 8-bit AdamW (ops/adamw8bit.h) reads and writes the master
      // (4 + 4), the codes (2 + 2), reads the gradient (4), writes the
      // param (2): 18 bytes a parameter, fp32 AdamW 30 (8 + 8 moments).
      const double traffic =
          g_.policy.optimizer == scheduler::OptimizerKind::kAdamW8bit ? 18.0 / 30 : 1.0;
      // A parallel graph's: the shard of this rank's tensor slice.
      const double params =
          g_.parallel() ? static_cast<double>(g_.buffers[n.reads[0]].numel)
                        : static_cast<double>(g_.layout.buckets[n.bucket].shard_numel);
      return time(k_.Optimizer(params, traffic));
    }
    case NodeKind::kCast:  // read fp32, write the parameter dtype
      return time(k_.CopyBytes(3 * buffer_bytes(n.writes[0])));
    case NodeKind::kD2H:
    case NodeKind::kH2D:
      return NodeCost{};  // priced by OffloadNodeSeconds
    case NodeKind::kDequantize:  // read the packing, write the weights
      return time(k_.CopyBytes(buffer_bytes(n.reads[0]) + buffer_bytes(n.writes[0])));
  }
  return NodeCost{};
}

NodeCost NodeCoster::ComputeCost(const Node& n) const {
  const bool bwd = n.kind == NodeKind::kBackward;
  KernelSum k;
  if (n.kind == NodeKind::kRecompute && n.recompute == scheduler::Recompute::kSelective) {
    NodeCost cost;  // the attention core's forward only
    cost.latency_s = k_.AttentionCoreForward().seconds;
    return cost;
  }
  // LoRA's frozen base: no weight gradients (the adapters' are in the
  // block's frozen backward).
  const int own = g_.layout.unit_bucket[n.unit];
  const bool frozen = own >= 0 && g_.layout.buckets[own].frozen;
  switch (g_.layout.units[n.unit].kind) {
    case UnitKind::kBlock: {
      bool acc = false;
      for (bool a : n.grad_accumulate) acc |= a;
      k = !bwd     ? k_.BlockForward()
          : frozen ? k_.BlockBackwardFrozen()
                   : WithGradientCopy(k_.BlockBackward(acc), n.unit);
      break;
    }
    case UnitKind::kLmHead:
      k = !bwd     ? k_.LmHeadForward()
          : frozen ? k_.LmHeadBackwardFrozen()
                   : WithGradientCopy(k_.LmHeadBackward(), n.unit);
      break;
    case UnitKind::kEmbedding:  // frozen: no backward work at all
      k = !bwd ? k_.EmbeddingForward()
          : frozen ? KernelSum{}
                   : WithGradientCopy(k_.EmbeddingBackward(), n.unit);
      break;
    case UnitKind::kFinalNorm:
      k = bwd ? k_.FinalNormBackward() : k_.FinalNormForward();
      break;
  }
  NodeCost cost;
  cost.latency_s = k.seconds;
  return cost;
}

// The peers' own device copies of a unit's gradient in its backward, on
// the compute stream (bf16: read 2 + write 2 bytes per parameter):
//   fsdp1  the unit's parameters are views into one FlatParameter
//          (torch/distributed/fsdp/_flat_param.py, _unflatten_as_params),
//          so autograd concatenates their gradients into the flat gradient.
//   zero3  each gradient is copied into the contiguous reduce bucket
//          before the reduce-scatter (deepspeed/runtime/zero/stage3.py,
//          __add_grad_to_ipg_bucket: new_grad_tensor.copy_(param.grad)).
// baton and YaFSDP compute into the gradient buffer that is reduced;
// FSDP2's copies are graph nodes (Policy::copy_in_out).
KernelSum NodeCoster::WithGradientCopy(KernelSum k, int unit) const {
  const std::string& p = g_.policy.name;
  if (p == "fsdp1" || p == "zero3") {
    k.Add(k_.CopyBytes(4.0 * static_cast<double>(g_.layout.units[unit].numel())).seconds,
          k_.launch_s());
  }
  return k;
}

NodeCost NodeCoster::Collective(CollectiveKind kind, double bytes,
                                MeshGroup group) const {
  NodeCost cost;
  cost.comm = true;
  if (o_.free_comm) return cost;
  const CollectiveTime t = CollectiveCost(c_, *placement_[group.bits()], bytes, kind,
                                          o_.calibration, o_.bandwidth_scale);
  cost.latency_s = t.latency_s;
  cost.work_s = t.work_s;
  return cost;
}

}  // namespace baton::sim

namespace baton::sim {

double NodeCoster::CommSeconds(CollectiveKind kind, double bytes, MeshGroup group) const {
  if (o_.free_comm) return 0;
  const CollectiveTime t = CollectiveCost(c_, *placement_[group.bits()], bytes, kind,
                                          o_.calibration, o_.bandwidth_scale);
  return t.latency_s + t.work_s;
}

double NodeCoster::ParallelCompute(const Node& n) const {
  const scheduler::UnitSpec& unit = g_.layout.units[n.unit];
  const bool split = g_.policy.pipeline_schedule == scheduler::PipelineSchedule::kZbH1;
  const bool bwd = n.kind == NodeKind::kBackward;
  const bool weight = n.kind == NodeKind::kBackwardWeight;
  if (unit.kind != UnitKind::kBlock) {
    KernelSum k;
    switch (unit.kind) {
      case UnitKind::kEmbedding:
        k = weight || (bwd && !split) ? k_.EmbeddingBackward()
            : bwd                      ? KernelSum{}
                                       : k_.EmbeddingForward();
        break;
      case UnitKind::kFinalNorm:
        k = weight ? KernelSum{} : bwd ? k_.FinalNormBackward() : k_.FinalNormForward();
        break;
      case UnitKind::kLmHead:
        k = weight              ? k_.LmHeadBackwardWeight()
            : bwd && split      ? k_.LmHeadBackwardInput()
            : bwd               ? k_.LmHeadBackward()
                                : k_.LmHeadForward();
        break;
      case UnitKind::kBlock:
        break;
    }
    return k.seconds + (weight ? 0 : VocabularyComm(n));
  }
  if (n.kind == NodeKind::kRecompute && n.segments == 0) return RecomputeSeconds();
  return BlockSegmentsSeconds(n);
}

double NodeCoster::BlockSegmentsSeconds(const Node& n) const {
  const bool split = g_.policy.pipeline_schedule == scheduler::PipelineSchedule::kZbH1;
  const BlockSegments& seg = k_.Segments();
  const bool bwd = n.kind == NodeKind::kBackward;
  const bool weight = n.kind == NodeKind::kBackwardWeight;
  const scheduler::UnitSpec& unit = g_.layout.units[n.unit];
  const bool moe = moe_ != nullptr && g_.layout.spec.moe_block(unit.block);
  // A MoE block's whole unit: its attention segments and its MoE ones.
  constexpr uint8_t kMoeAll = 0xF7;  // every segment but the dense MLP
  double moe_part = 0;
  if (moe) {
    const uint8_t all = n.segments == 0 ? kMoeAll : n.segments;
    for (int i = 4; i < 8; ++i) {
      if ((all & (1u << i)) == 0) continue;
      const MoeKernels& mk = moe_->kernels;
      moe_part += weight ? mk.weight[i - 4].seconds
                  : bwd  ? (split ? mk.bwd_input[i - 4].seconds : mk.bwd[i - 4].seconds)
                         : mk.fwd[i - 4].seconds;
    }
  }
  if (weight) {
    // A block part's weight pass: its segments' share of the weight-gradient
    // kernels (the backward less its input part).
    if (n.segments == 0 && !moe) return seg.weight.seconds;
    const uint8_t covers = n.segments == 0 ? kMoeAll : n.segments;
    double part = 0, all = 0;
    for (int i = 0; i < 4; ++i) {
      const double w = std::max(0.0, seg.bwd[i].seconds - seg.bwd_input[i].seconds);
      all += w;
      if (covers & (1u << i)) part += w;
    }
    return (all > 0 ? seg.weight.seconds * part / all : 0.0) + moe_part;
  }
  // The segments this node covers (all four for a whole dense block).
  const uint8_t covers = n.segments == 0 ? (moe ? kMoeAll : 0xF) : n.segments;
  double total = moe_part, gemm = 0, attn = 0;
  for (int i = 0; i < 4; ++i) {
    if ((covers & (1u << i)) == 0) continue;
    total += bwd ? (split ? seg.bwd_input[i].seconds : seg.bwd[i].seconds) : seg.fwd[i].seconds;
    gemm += bwd ? (split ? seg.gemm_bwd_input[i] : seg.gemm_bwd[i]) : seg.gemm_fwd[i];
  }
  if (covers & scheduler::SegmentBit(BlockSegment::kAttention)) {
    attn = bwd ? seg.attn_bwd : seg.attn_fwd;
  }
  return WithFused(n, total, gemm, attn);
}

NodeCost NodeCoster::ExpertExchange(const Node& n) const {
  NodeCost cost;
  cost.comm = true;
  if (o_.free_comm || moe_ == nullptr) return cost;
  A2aShape a = moe_->a2a;
  // The forward dispatch and the backward DISPATCH-GRAD go to the experts.
  a.copy_bytes = n.kind == NodeKind::kDispatch ? moe_->to_experts_bytes : moe_->from_experts_bytes;
  const CollectiveTime t = AllToAllTime(c_, *placement_[scheduler::kExpertGroup.bits()],
                                        moe_->dispatcher, a, o_.bandwidth_scale);
  cost.latency_s = t.latency_s;
  cost.work_s = t.work_s;
  return cost;
}

namespace {

// A chunked pipeline of kernels g and transfers c in k pieces; k == 0:
// side by side.
double Pipelined(double g, double c, int k) {
  if (k <= 0) return std::max(g, c);
  return (g + c) / k + (k - 1.0) / k * std::max(g, c);
}

}  // namespace

double NodeCoster::RingSeconds(double attention, double step_bytes) const {
  const int cp = g_.policy.context_parallel;
  if (cp < 2) return attention;
  const GroupPlacement& place = *placement_[scheduler::kContextGroup.bits()];
  const CollectiveTime t = P2PTime(c_, place.nodes == 1, step_bytes, o_.bandwidth_scale);
  const double step = o_.free_comm ? 0 : t.latency_s + t.work_s;
  const double piece = attention / cp;
  return piece + (cp - 1) * std::max(piece, step);
}

double NodeCoster::RecomputeSeconds() const {
  const BlockSegments& seg = k_.Segments();
  const scheduler::Policy& p = g_.policy;
  double t = seg.Forward().seconds;
  if (p.tensor_parallel > 1) {
    const MeshGroup tg = scheduler::kTensorGroup;
    const double half =
        p.sequence_parallel ? CommSeconds(CollectiveKind::kAllGather, act_bytes_, tg) +
                                  CommSeconds(CollectiveKind::kReduceScatter, act_bytes_, tg)
                            : CommSeconds(CollectiveKind::kAllReduce, act_bytes_, tg);
    for (int i : {1, 3}) {
      t += p.tp_comm_overlap
               ? Pipelined(seg.gemm_fwd[i], half, p.tensor_parallel) - seg.gemm_fwd[i]
               : half;
    }
  }
  return t - seg.attn_fwd + RingSeconds(seg.attn_fwd, ring_step_bytes_);
}

double NodeCoster::WithFused(const Node& n, double total, double gemm, double attention) const {
  double tensor_c = 0;
  int chunks = -1;
  double ring_bytes = -1;
  for (const FusedComm& f : n.fused) {
    const double bytes = static_cast<double>(f.bytes);
    switch (f.kind) {
      case FusedComm::Kind::kAllGather:
        tensor_c += CommSeconds(CollectiveKind::kAllGather, bytes, f.group);
        break;
      case FusedComm::Kind::kReduceScatter:
        tensor_c += CommSeconds(CollectiveKind::kReduceScatter, bytes, f.group);
        break;
      case FusedComm::Kind::kAllReduce:
        tensor_c += CommSeconds(CollectiveKind::kAllReduce, bytes, f.group);
        break;
      case FusedComm::Kind::kRing:
        ring_bytes = bytes;  // one step's transfer
        continue;
    }
    chunks = chunks < 0 ? f.chunks : std::min(chunks, f.chunks);
  }
  double t = total;
  if (chunks >= 0 && tensor_c > 0) {
    const double g = std::min(gemm, t);
    t += Pipelined(g, tensor_c, chunks) - g;
  }
  if (ring_bytes >= 0) {
    const double a = std::min(attention, t);
    t += RingSeconds(a, ring_bytes) - a;
  }
  return t;
}

double NodeCoster::VocabularyComm(const Node& n) const {
  const scheduler::Policy& p = g_.policy;
  if (p.tensor_parallel < 2 || o_.free_comm) return 0;
  const scheduler::UnitSpec& unit = g_.layout.units[n.unit];
  const double act_bytes = act_bytes_;
  const MeshGroup tg = scheduler::kTensorGroup;
  const bool sp = p.sequence_parallel;
  const bool bwd = n.kind == NodeKind::kBackward;
  switch (unit.kind) {
    case UnitKind::kEmbedding:  // forward: sum the vocabulary shards' rows
      return bwd ? 0
                 : CommSeconds(sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                               act_bytes, tg);
    case UnitKind::kLmHead: {
      const double tokens_f32 = act_bytes / static_cast<double>(g_.layout.spec.hidden) /
                                DataTypeSize(p.param_dtype) * 4;
      if (bwd) {  // the input gradient: reduce-scatter (SP) or all-reduce
        return CommSeconds(sp ? CollectiveKind::kReduceScatter : CollectiveKind::kAllReduce,
                           act_bytes, tg);
      }
      return (sp ? CommSeconds(CollectiveKind::kAllGather, act_bytes, tg) : 0) +
             3 * CommSeconds(CollectiveKind::kAllReduce, tokens_f32, tg);
    }
    default:
      return 0;
  }
}

}  // namespace baton::sim
