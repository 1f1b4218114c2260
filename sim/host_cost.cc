#include "baton/sim/host_cost.h"

#include <algorithm>

namespace baton::sim {

HostOptimizerFigures ExecutorFigures(OffloadExecutor executor) {
  switch (executor) {
    case OffloadExecutor::kDeepSpeed:
      return {42, kDeepSpeedHostEfficiency, 1.2};
    case OffloadExecutor::kBaton:
      break;
  }
  return {30, 0.93, 1.2};
}

double PcieRawGbps(int gen) {
  // 8 GT/s x 128b/130b per lane at gen 3, doubling each generation (gen 6's
  // FLIT encoding keeps about the same efficiency), 16 lanes, one way.
  constexpr double kRaw[] = {15.75, 31.5, 63.0, 121.0};
  return kRaw[std::clamp(gen, 3, 6) - 3];
}

HostRates ResolveHostRates(const ClusterSpec& c, int world_size) {
  HostRates r;
  r.ranks_on_node = std::max(1, std::min(world_size, c.gpus_per_node));
  const double ranks = r.ranks_on_node;
  r.stream_gbps = c.host_mem_gbps * c.host_stream_fraction / ranks;
  const int sharing = std::max(1, std::min(c.gpus_per_pcie_switch, r.ranks_on_node));
  const double pinned = PcieRawGbps(c.pcie_gen) * c.pcie_efficiency / sharing;
  r.link_gbps = c.host_pinned != 0 ? pinned : 1 / (1 / pinned + 2 / r.stream_gbps);
  if (c.host_link_gbps > 0) r.link_gbps = c.host_link_gbps;

  r.figures = ExecutorFigures(c.offload_executor);
  if (c.host_opt_bytes > 0) r.figures.bytes_per_param = c.host_opt_bytes;
  if (c.host_opt_efficiency > 0) r.figures.efficiency = c.host_opt_efficiency;
  if (c.host_core_gparams > 0) r.figures.core_gparams = c.host_core_gparams;
  const double memory =
      r.stream_gbps * r.figures.efficiency / r.figures.bytes_per_param;
  const double cores = c.host_cores / ranks * r.figures.core_gparams;
  r.opt_memory_bound = memory <= cores;
  r.opt_gparams = std::min(memory, cores);
  if (c.host_adam_gparams > 0) r.opt_gparams = c.host_adam_gparams;
  return r;
}

}  // namespace baton::sim
