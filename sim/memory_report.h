// The step's memory per GPU split by what holds it (`simulate --memory`):
// the weights / activations / gradients / optimizer-state split (W, A, G,
// O) of the training-memory literature, plus the communication buffers
// and the reserve, for the policy and techniques of a step graph.
//
//   weights        the parameter-dtype shards (a frozen bucket's shard is
//                  its base weights: bf16, or NF4-packed with its scales)
//                  and the fp32 master shards: 6 bytes a parameter under
//                  bf16 mixed precision with baton's persistent bf16 gather
//                  input, 4 for fsdp1 / fsdp2, which keep only the fp32
//                  shard (sim/simulator.h StateBytes), 2 or 0.52 for a
//                  frozen bf16 or NF4 base.
//   activations    activations and logits at the peak (ActivationMemory,
//                  with the graph's recompute).
//   gradients      the reduced gradient shards (reduce dtype; zero3's in
//                  the parameter dtype): none for frozen parameters.
//   optimizer      the Adam moments: 8 bytes a parameter, 2.004 under
//                  adamw8bit; ZenFlow's device state.
//   comm_buffers   the planned arena: gathered parameters (and packings),
//                  full gradients before their reduction, copies, staged
//                  shards.
//   reserve        ClusterSpec::reserved_gib (context, NCCL, fragmentation)
//                  and what the framework's allocator holds beyond the
//                  schedule (AllocatorReserveBytes).
// The six sum to StepMemory's peak (MemoryBreakdown::peak); weights +
// gradients + optimizer are StateBytes. Host memory (offload) is given
// apart, by the same split.
//
// Plain data; thread-safe functions.
#ifndef BATON_SIM_MEMORY_REPORT_H_
#define BATON_SIM_MEMORY_REPORT_H_

#include <cstdint>

#include "baton/scheduler/step_graph.h"
#include "baton/sim/cluster.h"
#include "baton/sim/simulator.h"

namespace baton::sim {

struct MemoryReport {
  double weights = 0;
  double activations = 0;
  double gradients = 0;
  double optimizer = 0;
  double comm_buffers = 0;
  double reserve = 0;
  // Host memory per GPU (offload): the same split.
  double host_weights = 0;
  double host_gradients = 0;
  double host_optimizer = 0;
  int64_t parameters = 0;  // of the model (adapters included)
  int64_t trainable = 0;   // not frozen
  double total() const {
    return weights + activations + gradients + optimizer + comm_buffers + reserve;
  }
  double host() const { return host_weights + host_gradients + host_optimizer; }
};

MemoryReport ReportMemory(const scheduler::StepGraph& graph, const ClusterSpec& cluster,
                          const Workload& workload);

}  // namespace baton::sim

#endif  // BATON_SIM_MEMORY_REPORT_H_
