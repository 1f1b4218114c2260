#include "baton/sim/moe_cost.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace baton::sim {
namespace {

using scheduler::MoeDispatcher;

// Segment indices of MoeKernels (BlockSegment - 4).
constexpr int kRouter = 0, kShared = 1, kExperts = 2, kUnpermute = 3;

// P(none of `k` experts drawn without replacement from `pool` falls among
// `owned` of them).
double Missed(double pool, double owned, int64_t k) {
  double p = 1;
  for (int64_t i = 0; i < k && p > 0; ++i) {
    p *= std::max(0.0, pool - owned - static_cast<double>(i)) / (pool - static_cast<double>(i));
  }
  return p;
}

}  // namespace

StatusOr<MoeKernels> BuildMoeKernels(const ComputeModel& k, const scheduler::ModelSpec& m,
                                     const MoeShape& shape, const KernelStack& stack,
                                     const ClusterSpec& cluster) {
  const scheduler::MoeSpec& moe = m.moe;
  if (!moe.enabled()) {
    return absl::InvalidArgumentError(absl::StrCat("moe cost: ", m.name, " has no experts"));
  }
  if (shape.tokens < 1 || shape.ep < 1 || shape.etp < 1 || moe.experts % shape.ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "moe cost: tokens ", shape.tokens, ", ep ", shape.ep, ", etp ", shape.etp,
        " must be >= 1 with ep dividing the ", moe.experts, " experts"));
  }
  if (!(shape.imbalance >= 1 && shape.imbalance <= 64)) {
    return absl::InvalidArgumentError(
        absl::StrCat("moe cost: load imbalance ", shape.imbalance, " must be in [1, 64]"));
  }
  MoeKernels r;
  r.load = shape.capacity > 0 ? std::min(shape.imbalance, shape.capacity) : shape.imbalance;
  r.dropped = shape.imbalance > r.load ? 1 - r.load / shape.imbalance : 0;
  const double L = k.launch_s();
  const double T = static_cast<double>(shape.tokens), h = static_cast<double>(m.hidden);
  const double E = static_cast<double>(moe.experts), topk = static_cast<double>(moe.top_k);
  const double local = E / shape.ep;
  const double f = std::ceil(static_cast<double>(moe.expert_intermediate) / shape.etp);
  const double routed = T * topk * shape.etp * r.load;  // copies on the busiest rank
  const double me = routed / local;
  r.tokens_per_expert = me;
  const double fp8 = stack.fp8 ? cluster.peak_tflops / cluster.fp8_tflops : 1.0;
  auto gemm = [&](KernelSum& sum, int seg, double mm, double nn, double kk, double count,
                  bool fwd) {
    const double t = count * k.GemmSeconds(mm, nn, kk) * fp8;
    if (fwd) r.gemm_fwd[seg] += t;
    sum.Add(t, L);  // one launch: a grouped GEMM
  };
  auto copy = [&](KernelSum& sum, double bytes) { sum.Add(k.CopySeconds(bytes), L); };
  // Router, top-k and permute.
  r.fwd[kRouter].Add(k.GemmSeconds(T, E, h), L);
  copy(r.fwd[kRouter], T * E * 4 * 3);          // scores: softmax / sigmoid, top-k
  copy(r.fwd[kRouter], T * topk * h * 2 * 2);   // the permute's gather
  copy(r.fwd[kRouter], T * topk * 8 * 2);       // its indices
  r.bwd_input[kRouter].Add(k.GemmSeconds(T, h, E), L);
  copy(r.bwd_input[kRouter], T * E * 4 * 3);
  copy(r.bwd_input[kRouter], T * topk * h * 2 * 2);  // the scatter-add back
  r.weight[kRouter].Add(k.GemmSeconds(h, E, T), L);
  // Experts: grouped GEMMs at m_e rows per local expert.
  BATON_ASSIGN_OR_RETURN(const double glu_f, k.OpSeconds("swiglu", routed * f * 6, false));
  BATON_ASSIGN_OR_RETURN(const double glu_b, k.OpSeconds("swiglu", routed * f * 6, true));
  gemm(r.fwd[kExperts], kExperts, me, 2 * f, h, local, true);
  r.fwd[kExperts].Add(glu_f, L);
  gemm(r.fwd[kExperts], kExperts, me, h, f, local, true);
  gemm(r.bwd_input[kExperts], kExperts, me, f, h, local, false);
  r.bwd_input[kExperts].Add(glu_b, L);
  gemm(r.bwd_input[kExperts], kExperts, me, h, 2 * f, local, false);
  gemm(r.weight[kExperts], kExperts, f, h, me, local, false);
  gemm(r.weight[kExperts], kExperts, h, 2 * f, me, local, false);
  // Unpermute and the residual add.
  copy(r.fwd[kUnpermute], T * topk * h * 2 + T * h * 2);
  copy(r.fwd[kUnpermute], T * h * 6);
  copy(r.bwd_input[kUnpermute], T * topk * h * 2 * 2);
  copy(r.bwd_input[kUnpermute], T * h * 6);
  // Shared experts: a dense SwiGLU MLP.
  if (moe.shared_experts > 0) {
    const double fs = std::ceil(static_cast<double>(moe.shared_experts * moe.shared_intermediate) /
                                shape.etp);
    BATON_ASSIGN_OR_RETURN(const double sf, k.OpSeconds("swiglu", T * fs * 6, false));
    BATON_ASSIGN_OR_RETURN(const double sb, k.OpSeconds("swiglu", T * fs * 6, true));
    gemm(r.fwd[kShared], kShared, T, 2 * fs, h, 1, true);
    r.fwd[kShared].Add(sf, L);
    gemm(r.fwd[kShared], kShared, T, h, fs, 1, true);
    if (moe.shared_gate) r.fwd[kShared].Add(k.GemmSeconds(T, 1, h), L);
    gemm(r.bwd_input[kShared], kShared, T, fs, h, 1, false);
    r.bwd_input[kShared].Add(sb, L);
    gemm(r.bwd_input[kShared], kShared, T, h, 2 * fs, 1, false);
    gemm(r.weight[kShared], kShared, fs, h, T, 1, false);
    gemm(r.weight[kShared], kShared, h, 2 * fs, T, 1, false);
  }
  for (int s = 0; s < 4; ++s) {
    r.bwd[s] = r.bwd_input[s];
    r.bwd[s].seconds += r.weight[s].seconds;
    r.bwd[s].kernels += r.weight[s].kernels;
  }
  return r;
}

A2aSpread TokenSpread(const GroupPlacement& place, const A2aShape& s) {
  A2aSpread d;
  const double m = std::max(place.nodes, 1), g = std::max(place.per_node, 1);
  const double E = static_cast<double>(s.experts);
  // The nodes a token may use: all, or topk_groups groups' nodes (a group
  // of E / groups experts spans ceil(m / groups) nodes when groups <= m).
  double allowed = m;
  if (s.groups > 0 && s.topk_groups > 0) {
    const double per_group = std::ceil(m / static_cast<double>(s.groups));
    allowed = std::min(m, static_cast<double>(s.topk_groups) * std::max(1.0, per_group));
  }
  d.nodes_allowed = allowed;
  const double pool = E * allowed / m;  // the experts it chooses among
  d.nodes = allowed * (1 - Missed(pool, E / m, s.top_k));
  d.remote_nodes = d.nodes * (m - 1) / m;
  d.ranks = allowed * g * (1 - Missed(pool, E / (m * g), s.top_k));
  return d;
}

CollectiveTime AllToAllTime(const ClusterSpec& c, const GroupPlacement& place,
                            MoeDispatcher dispatcher, const A2aShape& s, double bw_scale) {
  CollectiveTime t;
  if (place.n <= 1 || s.tokens <= 0) return t;
  const double n = place.n, g = std::max(place.per_node, 1), m = std::max(place.nodes, 1);
  const double nvl = c.nvlink_gbps * 1e9 * bw_scale, nic = c.nic_gbps * 1e9 * bw_scale;
  const double topk = static_cast<double>(s.top_k);
  switch (dispatcher) {
    case MoeDispatcher::kAllGather: {
      // The ring of every token (sim/collective_cost.h); the combine's
      // reduce-scatter costs the same.
      const CollectiveTime ring =
          RingTime(c, place, s.tokens * n * s.copy_bytes, CollectiveKind::kAllGather, bw_scale);
      return ring;
    }
    case MoeDispatcher::kAllToAll: {
      const double sent = s.tokens * topk * s.copy_bytes;
      const double over_nvl = sent * (g - 1) / n, over_net = sent * (n - g) / n;
      t.work_s = s.load * std::max(over_nvl / nvl, over_net / nic);
      t.latency_s =
          (c.base_latency_us + (m > 1 ? c.net_hop_us : c.nvlink_hop_us)) * 1e-6;
      return t;
    }
    case MoeDispatcher::kHierarchical: {
      const A2aSpread d = TokenSpread(place, s);
      const double over_net = s.tokens * d.remote_nodes * s.copy_bytes;
      const double over_nvl = s.tokens * d.ranks * s.copy_bytes;
      t.work_s = s.load * std::max(over_net / nic, over_nvl / nvl);
      t.latency_s =
          (c.base_latency_us + c.nvlink_hop_us + (m > 1 ? c.net_hop_us : 0)) * 1e-6;
      return t;
    }
  }
  return t;
}

StatusOr<MoeCost> BuildMoeCost(const ComputeModel& compute, const scheduler::ModelSpec& model,
                               const scheduler::Policy& policy, int64_t tokens,
                               double imbalance, const KernelStack& stack,
                               const ClusterSpec& cluster) {
  MoeShape shape;
  shape.tokens = tokens;
  shape.ep = policy.expert_parallel;
  shape.etp = policy.expert_tensor_parallel;
  shape.imbalance = imbalance;
  shape.capacity = policy.moe_capacity_factor;
  MoeCost c;
  BATON_ASSIGN_OR_RETURN(c.kernels, BuildMoeKernels(compute, model, shape, stack, cluster));
  c.dispatcher = policy.moe_dispatcher;
  c.a2a.tokens = static_cast<double>(tokens);
  c.a2a.top_k = model.moe.top_k;
  c.a2a.experts = model.moe.experts;
  c.a2a.groups = model.moe.groups;
  c.a2a.topk_groups = model.moe.topk_groups;
  c.a2a.load = c.kernels.load;
  const double h = static_cast<double>(model.hidden);
  // DeepEP's fp8 dispatch: 1 byte an element and an fp32 scale per 128
  // (deep_ep tests: fp8_factor = (1 + 4 / 128) / 2 of the bf16 bytes).
  c.to_experts_bytes = stack.fp8 ? h * (1 + 4.0 / 128) : h * 2;
  c.from_experts_bytes = h * 2;
  return c;
}

double MoeMlpActivationBytes(const scheduler::ModelSpec& model, const MoeShape& shape) {
  const scheduler::MoeSpec& moe = model.moe;
  const double T = static_cast<double>(shape.tokens), h = static_cast<double>(model.hidden);
  const double topk = static_cast<double>(moe.top_k), E = static_cast<double>(moe.experts);
  const double load =
      shape.capacity > 0 ? std::min(shape.imbalance, shape.capacity) : shape.imbalance;
  const double f = std::ceil(static_cast<double>(moe.expert_intermediate) / shape.etp);
  const double received = T * topk * shape.etp * load;
  const double fs =
      static_cast<double>(moe.shared_experts * moe.shared_intermediate) / shape.etp;
  return T * (2 * h + 8 * E + 2 * h * topk + 2 * h * topk + 6 * fs) + received * (2 * h + 6 * f);
}

}  // namespace baton::sim
