// The simulator's cost of one collective: where the group's ranks sit on
// the cluster, and the time a ring (or NCCL's tree, for all-reduces) takes
// over the links they cross.
//
// Placement. A group is a set of mesh dimensions (scheduler/mesh.h); its
// ranks are those of one group of that mesh, and ranks fill nodes in order,
// ClusterSpec::gpus_per_node consecutive ranks each. So a group of inner
// dimensions sits inside a node while its size is at most the node's GPUs;
// a group that spans several nodes has `per_node` members in each of
// `nodes` nodes (PlaceGroup counts them on the group of rank 0; the mesh is
// regular, so every group of a dimension set is placed alike). A group
// larger than a node is priced on both levels (below), never refused: the
// tensor-parallel group across nodes is slow, and the simulator says so by
// its time, not by an error.
//
// Ring cost (REFERENCE section 6; NCCL's tuner): for full size S over g
// members per node and m nodes,
//   latency  base + (g-1) NVLink hops + (m-1) network hops
//            (ClusterSpec::base_latency_us 8.4, nvlink_hop_us 3.4,
//            net_hop_us 14: NCCL's tuner's ring latencies for the Simple
//            protocol, as REFERENCE section 6 gives them)
//   work     (g-1)/g S / B_nvlink + (m-1)/m S / (g B_nic): the hierarchical
//            ring, each node's g GPUs sharing the inter-node traffic over
//            their g NICs (B_nvlink: ClusterSpec::nvlink_gbps, the measured
//            ring busbw inside a node; B_nic: nic_gbps per GPU)
//   all-reduce twice both terms, or NCCL's tree when faster (a chain in
//            each node, a double binary tree across nodes: 2 (base +
//            (g-1) NVLink + ceil(log2 m) network hops) of latency at the
//            ring's bus bandwidth).
// Rings of other groups run beside it on their own GPUs and NICs (every
// GPU has its own NIC share), so they do not slow this one; collectives of
// one rank that run at the same time share its links (the simulator's
// event loop, sim/simulator.h).
//
// Calibration (sim/calibration.h): a measured busbw table for the
// collective replaces the alpha-beta time: S x factor / busbw(S), factor
// (n-1)/n, or 2 (n-1)/n for all-reduce (nccl-tests' busbw convention).
//
// Plain functions; thread-safe.
#ifndef BATON_SIM_COLLECTIVE_COST_H_
#define BATON_SIM_COLLECTIVE_COST_H_

#include "baton/scheduler/mesh.h"
#include "baton/sim/calibration.h"
#include "baton/sim/cluster.h"

namespace baton::sim {

// Where a group's members sit: n ranks, at most per_node of them in each
// of `nodes` nodes.
struct GroupPlacement {
  int n = 1;
  int per_node = 1;
  int nodes = 1;
};
GroupPlacement PlaceGroup(const scheduler::DeviceMesh& mesh,
                          scheduler::MeshGroup group, int gpus_per_node);

// A collective's time: latency (not shared) and work at full link
// bandwidth (shared between the collectives running at once).
struct CollectiveTime {
  double latency_s = 0;
  double work_s = 0;
};

enum class CollectiveKind { kAllGather, kReduceScatter, kAllReduce };
// "all_gather", "reduce_scatter", "all_reduce": the names calibration
// tables use.
const char* CollectiveKindName(CollectiveKind kind);

// The ring (or tree) time of `kind` over `placement` for full size `bytes`,
// with every bandwidth scaled by `bw_scale`.
CollectiveTime RingTime(const ClusterSpec& cluster, const GroupPlacement& placement,
                        double bytes, CollectiveKind kind, double bw_scale = 1.0);

// A point-to-point transfer of `bytes` between two GPUs (a pipeline send,
// one step of context parallelism's ring): latency base + one NVLink or
// network hop, work bytes over NVLink (same node) or the GPU's NIC share.
CollectiveTime P2PTime(const ClusterSpec& cluster, bool same_node, double bytes,
                       double bw_scale = 1.0);

// RingTime, or the calibrated time where `calibration` (may be null) has a
// table for `kind` and the group has more than one member.
CollectiveTime CollectiveCost(const ClusterSpec& cluster,
                              const GroupPlacement& placement, double bytes,
                              CollectiveKind kind, const Calibration* calibration,
                              double bw_scale = 1.0);

}  // namespace baton::sim

#endif  // BATON_SIM_COLLECTIVE_COST_H_
