#include "baton/sim/memory_report.h"

namespace baton::sim {

using scheduler::BufferRole;
using scheduler::GraphBuffer;

MemoryReport ReportMemory(const scheduler::StepGraph& g, const ClusterSpec& cluster,
                          const Workload& workload) {
  MemoryReport r;
  const MemoryBreakdown m = StepMemory(g, cluster, workload);
  r.activations = m.activations + m.logits;
  r.comm_buffers = m.arena;
  r.reserve = m.reserved;
  // StateBytes' rules (sim/simulator.cc): fsdp1 / fsdp2 keep no bf16 shard
  // of trained parameters; zero3 keeps its gradient partition in the
  // parameter dtype.
  const bool fp32_shard_only = g.policy.name == "fsdp1" || g.policy.name == "fsdp2";
  const bool low_precision_grad = g.policy.name == "zero3";
  for (const GraphBuffer& b : g.buffers) {
    if (!b.persistent) continue;
    double bytes = static_cast<double>(b.bytes());
    const bool frozen = g.layout.buckets[b.bucket].frozen;
    switch (b.role) {
      case BufferRole::kShard:
        if (fp32_shard_only && !frozen) bytes = 0;
        [[fallthrough]];
      case BufferRole::kMaster:
      case BufferRole::kHostShard:
        (b.host ? r.host_weights : r.weights) += bytes;
        break;
      case BufferRole::kGradShard:
        if (low_precision_grad) {
          bytes = static_cast<double>(b.numel) * DataTypeSize(g.policy.param_dtype);
        }
        [[fallthrough]];
      case BufferRole::kHostGrad:
        (b.host ? r.host_gradients : r.gradients) += bytes;
        break;
      default:  // moments, 8-bit moments, ZenFlow's state and accumulators
        (b.host ? r.host_optimizer : r.optimizer) += bytes;
        break;
    }
  }
  r.parameters = g.layout.total_params();
  r.trainable = g.layout.trainable_params();
  return r;
}

}  // namespace baton::sim
