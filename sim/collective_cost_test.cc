#include "baton/sim/collective_cost.h"

#include <cmath>

#include "gtest/gtest.h"

namespace baton::sim {
namespace {

using scheduler::DeviceMesh;
using scheduler::MeshDim;
using scheduler::MeshSizes;

DeviceMesh Mesh(int rep, int shard, int hpz = 1, int tp = 1) {
  MeshSizes s;
  s[MeshDim::kReplicate] = rep;
  s[MeshDim::kShard] = shard;
  s[MeshDim::kHpz] = hpz;
  s[MeshDim::kTensor] = tp;
  return *DeviceMesh::Create(s);
}

void ExpectPlaced(const GroupPlacement& p, int n, int per_node, int nodes) {
  EXPECT_EQ(p.n, n);
  EXPECT_EQ(p.per_node, per_node);
  EXPECT_EQ(p.nodes, nodes);
}

TEST(CollectiveCostTest, GroupsArePlacedOnTheNodesTheirRanksFill) {
  // HSDP 4 x 32 on 8-GPU nodes: a shard group spans 4 nodes, a replica
  // group (32 ranks apart) has one member per node.
  const DeviceMesh hsdp = Mesh(4, 32);
  ExpectPlaced(PlaceGroup(hsdp, scheduler::kDataShardGroup, 8), 32, 8, 4);
  ExpectPlaced(PlaceGroup(hsdp, scheduler::kReplicaGroup, 8), 4, 1, 4);
  // Shard groups of 4 inside 8-GPU nodes: two replica members per node.
  ExpectPlaced(PlaceGroup(Mesh(16, 4), scheduler::kReplicaGroup, 8), 16, 2, 8);
  // A stride that does not divide the node: ranks 0, 3, 6 share node 0.
  ExpectPlaced(PlaceGroup(Mesh(16, 3), scheduler::kReplicaGroup, 8), 16, 3, 6);
  // hpZ inside the shard group, tensor parallelism innermost.
  ExpectPlaced(PlaceGroup(Mesh(1, 16, 8), scheduler::kHpzGroup, 8), 8, 8, 1);
  const DeviceMesh tp = Mesh(1, 4, 1, 16);  // a TP group larger than a node
  ExpectPlaced(PlaceGroup(tp, scheduler::kTensorGroup, 8), 16, 8, 2);
  ExpectPlaced(PlaceGroup(tp, scheduler::kDataShardGroup, 8), 4, 1, 4);
}

TEST(CollectiveCostTest, RingTimeIsTheHierarchicalAlphaBeta) {
  ClusterSpec c;  // h100 constants
  const double s = 1e9;
  const CollectiveTime one = RingTime(c, {1, 1, 1}, s, CollectiveKind::kAllGather);
  EXPECT_EQ(one.latency_s, 0);
  EXPECT_EQ(one.work_s, 0);
  const CollectiveTime t = RingTime(c, {32, 8, 4}, s, CollectiveKind::kReduceScatter);
  EXPECT_DOUBLE_EQ(t.latency_s, (c.base_latency_us + 7 * c.nvlink_hop_us +
                                 3 * c.net_hop_us) * 1e-6);
  EXPECT_DOUBLE_EQ(t.work_s, 7.0 / 8 * s / (c.nvlink_gbps * 1e9) +
                                 3.0 / 4 * s / (8 * c.nic_gbps * 1e9));
  // All-reduce: twice the ring, but the tree's latency at many nodes.
  const CollectiveTime ar = RingTime(c, {512, 8, 64}, s, CollectiveKind::kAllReduce);
  const CollectiveTime rs = RingTime(c, {512, 8, 64}, s, CollectiveKind::kReduceScatter);
  EXPECT_DOUBLE_EQ(ar.work_s, 2 * rs.work_s);
  EXPECT_DOUBLE_EQ(ar.latency_s, 2 * (c.base_latency_us + 7 * c.nvlink_hop_us +
                                      6 * c.net_hop_us) * 1e-6);
  EXPECT_LT(ar.latency_s, 2 * rs.latency_s);
  // Half the bandwidth, twice the work.
  const CollectiveTime slow =
      RingTime(c, {32, 8, 4}, s, CollectiveKind::kReduceScatter, 0.5);
  EXPECT_DOUBLE_EQ(slow.work_s, 2 * t.work_s);
}

TEST(CollectiveCostTest, ACalibrationTableReplacesTheModel) {
  ClusterSpec c;
  Calibration cal;
  ASSERT_TRUE(AddCalibration(
                  R"({"collective": "all_gather", "results": [
                       {"size": 1048576, "out_of_place": {"busbw_gbps": 100}},
                       {"size": 1073741824, "out_of_place": {"busbw_gbps": 100}}]})",
                  "test", cal)
                  .ok());
  const double s = 1 << 30;
  const CollectiveTime ag =
      CollectiveCost(c, {8, 8, 1}, s, CollectiveKind::kAllGather, &cal);
  EXPECT_EQ(ag.latency_s, 0);
  EXPECT_NEAR(ag.work_s, s * 7 / 8 / 100e9, 1e-12);
  // No table for reduce-scatter: the ring model.
  const CollectiveTime rs =
      CollectiveCost(c, {8, 8, 1}, s, CollectiveKind::kReduceScatter, &cal);
  const CollectiveTime ring = RingTime(c, {8, 8, 1}, s, CollectiveKind::kReduceScatter);
  EXPECT_EQ(rs.latency_s, ring.latency_s);
  EXPECT_EQ(rs.work_s, ring.work_s);
}

}  // namespace
}  // namespace baton::sim
