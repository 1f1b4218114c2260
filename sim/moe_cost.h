// What a mixture-of-experts block's own nodes cost (scheduler/parallel_graph.h
// "experts"): its kernels by segment, its dispatch and combine over the
// expert group, and its activation bytes. sim/node_cost.h prices the graph's
// nodes with it; every constant is below with its source.
//
// Tokens. A rank routes T tokens per micro-batch (s b / cp, / tp with
// sequence parallelism), each to top_k of E experts; it holds E / ep
// experts, each 1 / etp of its FFN (width F_e / etp). Balanced, it receives
// T k etp token copies (the tensor group all-gathers them when etp > 1),
// m_e = T k etp ep / E per local expert. Load imbalance: the busiest
// rank's load over the mean, a stated factor (Workload::moe_imbalance,
// default 1: the balance Megatron-Bridge's benchmarks force), capped by a
// capacity factor c (Policy::moe_capacity_factor; 0: dropless): the busiest
// rank computes and receives min(imbalance, c) times the mean, and the
// step waits for it.
//
// Kernels (forward; backward the dgrads in the input part, the wgrads in
// the weight part, as the dense block's):
//   router    the router GEMM (T x E x h); softmax or sigmoid and top-k over
//             T x E fp32 scores (three passes); the permute, a gather of T k
//             rows of h (read + write) and its index work. Memory-bound but
//             the GEMM, as Megatron's --moe-permute-fusion / router fusion
//             run them.
//   experts   grouped GEMMs: each local expert's gate/up (m_e x 2 F_e/etp x
//             h) and down (m_e x h x F_e/etp) priced by the kernel table at
//             m_e rows, so their efficiency falls with tokens per expert as
//             the table's measured small-m GEMMs do; one launch per grouped
//             GEMM; SwiGLU on the routed tokens.
//   unpermute the probability-weighted sum of each token's k expert outputs
//             (read T k h, write T h) and the residual add.
//   shared    the shared experts as a dense SwiGLU MLP of width shared x
//             F_s on the T tokens (/ etp), plus Qwen2-MoE's gate.
// fp8 (KernelStack::fp8): the expert and shared GEMMs at peak / fp8 peak,
// as the dense block's (DeepSeek-V3 and Megatron's FP8 recipes run them in
// FP8); the router stays bf16.
//
// Dispatch and combine (the a2a nodes; bytes per token copy h x 2, or
// h x (1 + 4 / 128) for an fp8 dispatch with its per-128 scales, as
// DeepEP's fp8 dispatch sends; the combine and every gradient going back
// to the tokens in bf16, as DeepSeek-V3 sec. 3.3 does), on the expert
// group's placement (g ranks per node on m nodes, n = g m):
//   alltoall      each rank sends T k copies evenly to the n ranks: (g - 1)
//                 / n of them over NVLink, (n - g) / n over its NIC, the two
//                 at once: time = imbalance x max(NVLink bytes / nvlink_gbps,
//                 network bytes / nic_gbps) + base latency + one hop (NCCL's
//                 all-to-all is grouped point-to-point: the ring latency of
//                 sim/collective_cost.h for one hop).
//   hierarchical  DeepEP's normal kernels: a token crosses the network once
//                 per destination node (to the GPU of the same local index
//                 there), then NVLink carries one copy per destination rank
//                 (DeepEP's "NVL" bytes, every copy a rank receives):
//                 D = M (1 - P(node missed)) nodes and R = M g (1 - P(rank
//                 missed)) ranks per token, for its top_k experts drawn
//                 without replacement among the M nodes it may use (M = m,
//                 or with group-limited routing topk_groups x the nodes a
//                 group spans, at most m: DeepSeek-V3's "at most 4 nodes");
//                 network bytes T D (m - 1) / m, NVLink bytes T R; time =
//                 imbalance x max(network / nic_gbps, NVLink / nvlink_gbps)
//                 + base latency + a network and an NVLink hop.
//   allgather     the expert group all-gathers every token (T n copies) and
//                 reduce-scatters the outputs: sim/collective_cost.h's ring.
// ep = 1: no transfer (the permute is local).
//
// Activations per MoE block and micro-batch on a rank (bf16; Korthikanti
// et al.'s 34 t h of a dense block less its MLP's 19 t h, plus): the router
// input and its fp32 scores 2 h + 8 E per token, the permuted copies 2 h k,
// and per received copy its expert input 2 h and gate, up and activation
// outputs 6 F_e / etp, the combined copies 2 h k, the shared experts'
// 6 x shared width. A recomputed block keeps its input, as a dense one.
//
// Plain data; thread-safe once built.
#ifndef BATON_SIM_MOE_COST_H_
#define BATON_SIM_MOE_COST_H_

#include <cstdint>

#include "baton/runtime/status.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/sim/cluster.h"
#include "baton/sim/collective_cost.h"
#include "baton/sim/compute_model.h"

namespace baton::sim {

// The segments a MoE block adds (scheduler/step_graph.h BlockSegment 4-7:
// router, shared, experts, unpermute), indexed by segment - 4.
struct MoeKernels {
  KernelSum fwd[4], bwd[4], bwd_input[4], weight[4];
  double gemm_fwd[4] = {0, 0, 0, 0};  // the GEMMs inside each (what fp8 scales)
  double tokens_per_expert = 0;       // m_e on the busiest rank
  double load = 1;                    // min(imbalance, capacity)
  double dropped = 0;                 // fraction of copies a capacity drops
};

// A rank's expert work: the model, the policy's ep / etp / capacity, T
// tokens routed per micro-batch and the stated imbalance (>= 1).
struct MoeShape {
  int64_t tokens = 0;
  int ep = 1, etp = 1;
  double imbalance = 1;
  double capacity = 0;  // 0: dropless
};

// InvalidArgument for a model without experts, sizes < 1, ep not dividing
// the experts, or an imbalance outside [1, 64].
StatusOr<MoeKernels> BuildMoeKernels(const ComputeModel& compute,
                                     const scheduler::ModelSpec& model, const MoeShape& shape,
                                     const KernelStack& stack, const ClusterSpec& cluster);

// One dispatch or combine: T tokens (each sent as top_k copies, or once per
// node / rank as the dispatcher dedups), `copy_bytes` per token copy, over
// the expert group's placement.
struct A2aShape {
  double tokens = 0;
  double copy_bytes = 0;
  int64_t top_k = 1, experts = 1;
  int64_t groups = 0, topk_groups = 0;  // group-limited routing (0: none)
  double load = 1;                      // the busiest rank's factor
};

// The expected distinct nodes (D) and ranks (R) one token's top_k experts
// fall on, with experts spread evenly over `place` and group-limited
// routing as the shape says (the hierarchical dispatcher's counts above).
struct A2aSpread {
  double nodes = 1, remote_nodes = 0, ranks = 1, nodes_allowed = 1;
};
A2aSpread TokenSpread(const GroupPlacement& place, const A2aShape& shape);

// The time of one dispatch or combine by `dispatcher` (latency not shared,
// work shared with the rank's other transfers), bandwidths scaled by
// `bw_scale`.
CollectiveTime AllToAllTime(const ClusterSpec& cluster, const GroupPlacement& place,
                            scheduler::MoeDispatcher dispatcher, const A2aShape& shape,
                            double bw_scale = 1.0);

// What sim/node_cost.h needs to price a graph's MoE nodes: the kernels, the
// dispatcher, the tokens a rank routes with the routing's shape, and the
// bytes of one token copy going to the experts (dispatch, and the combine's
// backward) and coming back (combine, and the dispatch's backward).
struct MoeCost {
  MoeKernels kernels;
  scheduler::MoeDispatcher dispatcher = scheduler::MoeDispatcher::kAllToAll;
  A2aShape a2a;  // copy_bytes unused: the two below
  double to_experts_bytes = 0;
  double from_experts_bytes = 0;
};

// The MoeCost of `model` (with experts) under `policy` for `tokens` routed
// per micro-batch per rank, `imbalance` (>= 1) and the stack's dtypes:
// to-experts copies in fp8 with per-128 scales under KernelStack::fp8, bf16
// otherwise; from-experts copies bf16. Errors as BuildMoeKernels.
StatusOr<MoeCost> BuildMoeCost(const ComputeModel& compute, const scheduler::ModelSpec& model,
                               const scheduler::Policy& policy, int64_t tokens,
                               double imbalance, const KernelStack& stack,
                               const ClusterSpec& cluster);

// The extra activation bytes of one MoE block per micro-batch on a rank
// beyond the dense block's attention part (above), for `tokens` routed.
double MoeMlpActivationBytes(const scheduler::ModelSpec& model, const MoeShape& shape);

}  // namespace baton::sim

#endif  // BATON_SIM_MOE_COST_H_
