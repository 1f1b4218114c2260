#include "baton/sim/collective_cost.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace baton::sim {

GroupPlacement PlaceGroup(const scheduler::DeviceMesh& mesh,
                          scheduler::MeshGroup group, int gpus_per_node) {
  std::vector<int> nodes = mesh.group_ranks(0, group);
  for (int& r : nodes) r /= std::max(gpus_per_node, 1);
  std::sort(nodes.begin(), nodes.end());
  GroupPlacement p;
  p.n = static_cast<int>(nodes.size());
  p.nodes = 0;
  p.per_node = 0;
  for (size_t i = 0; i < nodes.size();) {
    size_t j = i;
    while (j < nodes.size() && nodes[j] == nodes[i]) ++j;
    ++p.nodes;
    p.per_node = std::max(p.per_node, static_cast<int>(j - i));
    i = j;
  }
  return p;
}

const char* CollectiveKindName(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::kAllGather: return "all_gather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kAllReduce: return "all_reduce";
  }
  return "?";
}

CollectiveTime RingTime(const ClusterSpec& c, const GroupPlacement& placement,
                        double bytes, CollectiveKind kind, double bw_scale) {
  CollectiveTime t;
  if (placement.n <= 1) return t;
  const int g = std::max(placement.per_node, 1);
  const int m = std::max(placement.nodes, 1);
  const double nvl = c.nvlink_gbps * 1e9 * bw_scale;
  const double nic = c.nic_gbps * 1e9 * bw_scale;
  double lat = c.base_latency_us + (g - 1) * c.nvlink_hop_us + (m - 1) * c.net_hop_us;
  double work = (g - 1.0) / g * bytes / nvl;
  if (m > 1) work += (m - 1.0) / m * bytes / (g * nic);
  if (kind == CollectiveKind::kAllReduce) {
    lat *= 2;
    work *= 2;
    // NCCL's tree all-reduce (a chain inside each node, a double binary
    // tree across nodes): a reduce up and a broadcast down, each
    // ceil(log2 m) network hops deep, at about the ring's bus bandwidth.
    // Like NCCL's tuner, take the faster of the two: at many nodes the
    // tree's latency grows with log m where the ring's grows with m.
    if (m > 2) {
      const double tree_lat =
          2 * (c.base_latency_us + (g - 1) * c.nvlink_hop_us +
               std::ceil(std::log2(static_cast<double>(m))) * c.net_hop_us);
      lat = std::min(lat, tree_lat);
    }
  }
  t.latency_s = lat * 1e-6;
  t.work_s = work;
  return t;
}

CollectiveTime P2PTime(const ClusterSpec& c, bool same_node, double bytes,
                       double bw_scale) {
  CollectiveTime t;
  t.latency_s = (c.base_latency_us + (same_node ? c.nvlink_hop_us : c.net_hop_us)) * 1e-6;
  t.work_s = bytes / ((same_node ? c.nvlink_gbps : c.nic_gbps) * 1e9 * bw_scale);
  return t;
}

CollectiveTime CollectiveCost(const ClusterSpec& c, const GroupPlacement& placement,
                              double bytes, CollectiveKind kind,
                              const Calibration* calibration, double bw_scale) {
  if (calibration != nullptr && placement.n > 1) {
    auto it = calibration->tables.find(CollectiveKindName(kind));
    if (it != calibration->tables.end()) {
      const double n = placement.n;
      const double factor = (kind == CollectiveKind::kAllReduce ? 2 : 1) * (n - 1) / n;
      CollectiveTime t;
      t.work_s = bytes * factor / (it->second.Busbw(bytes) * 1e9 * bw_scale);
      return t;
    }
  }
  return RingTime(c, placement, bytes, kind, bw_scale);
}

}  // namespace baton::sim
