// The simulator: runs one training step's StepGraph (the same graph and
// memory plan the executor runs) through a discrete-event model of one
// GPU's streams on a cluster, and reports step time, exposed communication,
// MFU and peak memory.
//
// Ranks are symmetric under FSDP-style sharding (every rank runs the same
// graph on equal shards, and ring collectives finish together), so one rank
// is simulated and its figures are every rank's: the cost of a simulation is
// the graph's size, independent of the number of GPUs.
//
// Model, per node of the graph:
//   compute    the sum of the node's kernels, each looked up by shape in a
//              measured kernel table and scaled to the cluster's GPU
//              (sim/compute_model.h lists every kernel of the step); a
//              recompute is one forward.
//   collective NCCL-style ring alpha-beta over the two-level cluster:
//              latency base + (g-1) NVLink hops + (m-1) network hops, and
//              (g-1)/g S / B_nvlink + (m-1)/m S / (g B_nic) for g GPUs per
//              node and m nodes (all-reduce: twice both). Collectives
//              running at the same time share the links equally.
//   host       issues one node every host_issue_us; a host-blocking limiter
//              (Node::host_wait) stalls it until that node finishes.
//   order      each stream runs its nodes in issue order; a node also waits
//              for its Node::waits (the executor's events).
//   clock      integer nanoseconds (each node's cost rounded to 1 ns), so
//              time always advances and long steps are as exact as short
//              ones; a node cost that is not finite or a step longer than
//              1e6 s is refused (InvalidArgument naming the node).
// Scale, where the number of GPUs enters beyond the shard size:
//   latency    ring collectives pay one hop per rank in the ring: (g-1)
//              NVLink and (m-1) network hops, so their latency grows with
//              the node count m; an all-reduce takes NCCL's tree instead
//              when it is faster (2 (base + (g-1) NVLink + ceil(log2 m)
//              network hops)), growing with log m.
//   stragglers every rank waits for the slowest at the step's collectives:
//              with each GPU's compute time varying by
//              ClusterSpec::straggler_cv (normal), a step on N GPUs adds
//              straggler_cv x compute x E[max of N standard normals]
//              (SimResult::straggler_s; E = 1.42 at 8, 2.41 at 64, 3.24 at
//              1024, 3.96 at 16384), so a step slows a little as N grows.
// Peers (scheduler/policy.cc presets, run on the same graph machinery), each
// mechanism with where the peer does it:
//   fsdp1  one FlatParameter per unit: the unit's gradients are copied into
//          the flat gradient on the compute stream (torch/distributed/fsdp/
//          _flat_param.py); the rate limiter stops the host from issuing a
//          third all-gather until the oldest gathered unit is freed
//          (_limiter_utils.py: _FreeEventQueue, _max_num_inflight_all_gathers
//          = 2; Policy::host_limit = 2, a Node::host_wait); no forward
//          prefetch by default, backward prefetch of one unit.
//   fsdp2  per-parameter sharding: each all-gather copies the parameters'
//          shards into one input and copies the output back out per
//          parameter, each reduce-scatter chunk-cats the gradients into its
//          input (torch/distributed/_composable/fsdp/_fsdp_collectives.py:
//          foreach_all_gather, foreach_all_gather_copy_out, foreach_reduce
//          with torch._chunk_cat); Policy::copy_in_out makes these graph
//          nodes.
//   zero3  the parameter coordinator fetches in prefetch buckets of 5e7
//          elements, keeps parameters under the persistence threshold (1e5
//          elements) whole on every rank, and gathers gradients into a
//          reduce bucket with one copy per gradient (deepspeed/runtime/zero/
//          partitioned_param_coordinator.py, stage3.py
//          __add_grad_to_ipg_bucket; stage3_prefetch_bucket_size,
//          stage3_param_persistence_threshold): merged buckets, resident
//          small parameters, a gradient copy per unit, host_limit 2.
//   yafsdp one ordered stream for all-gathers and reduce-scatters, and
//          preallocated buffer pairs for gathered weights (alternate layers
//          use alternate buffers) (github.com/yandex/YaFSDP): prefetch of
//          one unit into reused buffers, Policy::shared_comm_stream. Where
//          it simulates like baton, simulator_test states why that is right.
//   eager  every kernel a PyTorch peer runs costs at least the table's
//          launch_overhead_us of host time (sim/compute_model.h); the
//          compute model charges it to every policy's kernels alike.
// Memory (StepMemory): persistent state as the framework keeps it
// (StateBytes) + the planned arena + activations + logits + the cluster's
// reserve + what the framework's allocator holds beyond the schedule
// (AllocatorReserveBytes). Activations
// per block and sequence: 34 s h bytes (Korthikanti et al., with flash
// attention, which does not keep the s^2 scores), or 2 s h for a block that
// is recomputed in full; the backward of a recomputed block holds one
// block's full activations again. Selective recompute (attention core only,
// Policy::recompute): the block keeps all but the core's output (2 s h,
// for heads x head_dim = h; the output projection's input) and its fp32
// softmax statistics (4 s a), which its backward rebuilds for one block at
// a time by running the core's forward again (with flash attention the
// s^2 scores are not kept either way, so selective saves 2 s h + 4 s a of
// 34 s h; without flash it would also save Korthikanti's 5 a s^2).
#ifndef BATON_SIM_SIMULATOR_H_
#define BATON_SIM_SIMULATOR_H_

#include <string>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/model.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/step_graph.h"
#include "baton/sim/calibration.h"
#include "baton/sim/cluster.h"
#include "baton/sim/compute_model.h"
#include "baton/sim/kernel_table.h"

namespace baton::sim {

struct Workload {
  int gpus = 256;
  int64_t seq = 8192;
  int64_t global_batch = 256;  // sequences per step over all GPUs
  int64_t micro_batch = 1;     // sequences per micro-step per GPU
  // Hierarchical sharding (scheduler/policy.h): -1 keeps the preset's
  // value, except that the presets with a shard or hpZ group (hsdp, zeropp)
  // get one node's GPUs (ClusterSpec::gpus_per_node) in the simulator;
  // 0 is full sharding / no hpZ; N > 0 sets the group size.
  int shard_group = -1;
  int hpz_group = -1;
  // Tensor, context and pipeline parallelism (scheduler/policy.h; SimPolicy
  // sets them on the policy): the micro-batch is per data rank (gpus /
  // (tp x cp x pp) of them), and micro-steps are the pipeline's
  // micro-batches per step.
  int tp = 1;
  bool sp = false;
  bool tp_overlap = false;
  int cp = 1;
  int pp = 1;
  int vpp = 1;
  scheduler::PipelineSchedule schedule = scheduler::PipelineSchedule::k1F1B;
  int pp_first_layers = 0;
  int pp_last_layers = 0;
  // A tensor group larger than a node is refused unless this is set (its
  // collectives then cross the network on every block).
  bool tp_across_nodes = false;
  // Experts (MoE models; scheduler/policy.h, SimPolicy sets them on the
  // policy): ep and etp fold over a stage's ranks and leave data_ranks()
  // as it is. moe_imbalance: the busiest expert rank's load over the mean
  // (sim/moe_cost.h; 1: balanced), in [1, 64].
  int ep = 1;
  int etp = 1;
  scheduler::MoeDispatcher moe_dispatcher = scheduler::MoeDispatcher::kAllToAll;
  bool moe_a2a_overlap = false;
  bool moe_shared_overlap = false;
  double moe_capacity_factor = 0;
  double moe_imbalance = 1;
  // The data-parallel ranks: gpus / (tp x cp x pp).
  int64_t data_ranks() const { return gpus / (int64_t{tp} * cp * pp); }
};

// InvalidArgument naming the problem for sizes outside the limits of
// scheduler/limits.h (gpus in [1, kMaxWorldSize], seq in [1, kMaxSeq],
// batches in [1, kMaxGlobalBatch]), a mesh whose product tp x cp x pp does
// not divide the GPUs, a batch that does not divide (global_batch over the
// data ranks, local batch over micro_batch), or more than kMaxMicroSteps
// micro-steps (global_batch / data ranks / micro_batch).
Status ValidateWorkload(const Workload& w);

struct SimOptions {
  bool free_comm = false;       // collectives take no time (for tests)
  double bandwidth_scale = 1;   // multiplies NVLink and NIC bandwidth
  bool timeline = false;        // keep every node's interval
  // Measured busbw tables (sim/calibration.h); not owned; may be null.
  const Calibration* calibration = nullptr;
  // Measured kernel times (sim/kernel_table.h); not owned; null: the
  // shipped H100 table scaled to the cluster's GPU.
  const KernelTable* kernels = nullptr;
  // The run's attention kernel when it is not the table's
  // (sim/compute_model.h); default: the table's.
  AttentionKernel attention;
  // The rest of its software stack (compiled, fp8 linears); default eager
  // bf16, the table's.
  KernelStack stack;
};

struct Interval {
  int node = 0;
  scheduler::StreamId stream;
  double start_s = 0;
  double end_s = 0;
  int stage = 0;  // pipeline stage (parallel graphs)
};

struct MemoryBreakdown {
  double states = 0;       // persistent per-bucket state
  double arena = 0;        // the planned arena
  double activations = 0;  // at the peak (end of a micro-step's forward)
  double logits = 0;
  double reserved = 0;
  // MoE: one block's dispatch and combine buffers in flight (sim/parallel_sim.h).
  double dispatch = 0;
  double peak() const { return states + arena + activations + logits + reserved + dispatch; }
};

struct SimResult {
  std::string policy;
  int recompute_blocks = 0;
  double step_s = 0;
  double compute_s = 0;      // busy time of the compute stream
  double exposed_ag_s = 0;   // compute idle, waiting on an all-gather
  double exposed_rs_s = 0;   // ... on a reduce-scatter / all-reduce
  double exposed_host_s = 0; // ... on the host
  double straggler_s = 0;    // waiting for the slowest rank (in step_s)
  double exposed_offload_s = 0;  // ... on the host optimizer (offload tail)
  double exposed_tp_s = 0;   // ... on tensor collectives (parallel graphs)
  double exposed_pp_s = 0;   // ... on pipeline receives (parallel graphs)
  double exposed_a2a_s = 0;  // ... on expert dispatch / combine (MoE graphs)
  double mfu = 0;            // model FLOPs / (step time x peak)
  double tokens_per_s_per_gpu = 0;
  MemoryBreakdown memory;
  bool fits = false;
  size_t arena_bytes = 0;
  size_t lower_bound_bytes = 0;
  size_t host_bytes = 0;  // offload: state in host memory per GPU
  std::vector<Interval> timeline;  // with SimOptions::timeline
  // Parallel graphs: per pipeline stage, and the pipeline's bubble (mean
  // over stages of the stage's idle compute time in the pipeline's span,
  // first forward to last backward, less its waits on tensor collectives,
  // as a fraction of that span: sim/parallel_sim.h).
  struct Stage {
    int layers = 0;             // blocks on this stage
    double busy_s = 0;          // its compute stream's busy time
    double bubble = 0;          // idle fraction of the pipeline span
    int in_flight = 0;          // most micro-batches holding activations
    MemoryBreakdown memory;
    bool fits = false;
  };
  std::vector<Stage> stages;
  double bubble = 0;
  double pipeline_span_s = 0;  // first forward to last backward / weight pass
  double exposed_comm_s() const { return exposed_ag_s + exposed_rs_s; }
};

// The policy the simulator runs for `policy_name` on `workload`: micro_steps
// = local batch / micro_batch, reducing every micro-step.
StatusOr<scheduler::Policy> SimPolicy(const std::string& policy_name,
                                      const Workload& workload,
                                      int gpus_per_node = 8);

// Persistent bytes per GPU as the graph's framework keeps them: the graph's
// persistent buffers (parameter-dtype shard, fp32 master, gradient shard,
// two moments), less the parameter-dtype shard for fsdp1 and fsdp2, which
// keep only the fp32 shard and cast it per all-gather, and with zero3's
// gradient partition in the parameter dtype (sources in the .cc): 16 bytes
// per parameter for fsdp1, fsdp2 and zero3 under bf16 mixed precision, 18
// for baton and yafsdp (which keep a bf16 all-gather input shard and an
// fp32 gradient shard), plus ClusterSpec::reserved_gib per GPU.
double StateBytes(const scheduler::StepGraph& graph);

// Device memory the framework's allocator holds beyond the schedule's
// buffers: for fsdp1 one gathered unit (its FlatParameter in the parameter
// dtype), which record_stream keeps from reuse until the compute stream
// passes it; the same for zero3's largest gathered bucket; 0 for the other
// policies (sources in the .cc).
double AllocatorReserveBytes(const scheduler::StepGraph& graph);

// E[max of n independent standard normal samples]; 0 for n <= 1.
double ExpectedMaxOfNormals(int n);

// Activation + logits bytes per GPU at the peak with the first
// `recompute_blocks` blocks recomputed (-1: all), in full or selectively.
MemoryBreakdown ActivationMemory(
    const scheduler::ModelSpec& model, const Workload& workload, int recompute_blocks,
    scheduler::Recompute mode = scheduler::Recompute::kFull);

// The step's device memory per GPU at its peak, as the graph's framework
// keeps it: StateBytes, the planned arena, ActivationMemory at the graph's
// recompute, and reserved = ClusterSpec::reserved_gib (CUDA context, NCCL
// buffers, allocator slack) + AllocatorReserveBytes. SimResult::fits is
// peak() <= ClusterSpec::memory_gib.
MemoryBreakdown StepMemory(const scheduler::StepGraph& graph,
                           const ClusterSpec& cluster, const Workload& workload);

// Simulates `graph` (built for workload.gpus ranks).
StatusOr<SimResult> SimulateGraph(const scheduler::StepGraph& graph,
                                  const ClusterSpec& cluster,
                                  const Workload& workload,
                                  const SimOptions& options = {});

// Builds the graph for `policy` and simulates it. recompute_blocks: N, -1
// for all, or kAutoRecompute: the fewest blocks with which the step fits in
// device memory (all blocks if none fits; SimResult::fits says so).
// `graph`, when given, receives the graph that was simulated (for pictures).
constexpr int kAutoRecompute = -2;
StatusOr<SimResult> Simulate(const scheduler::ModelSpec& model,
                             const ClusterSpec& cluster,
                             const Workload& workload,
                             const std::string& policy_name,
                             int recompute_blocks = kAutoRecompute,
                             const SimOptions& options = {},
                             scheduler::StepGraph* graph = nullptr);

// Simulate for a policy given in full (a policy file, the tuner's
// candidates): `policy` as is, except recompute_blocks, which
// `recompute_blocks` sets as above (pass policy.recompute_blocks to keep
// it). InvalidArgument when the policy fails ValidatePolicy or its
// micro_steps is not the workload's (global batch / gpus / micro-batch).
StatusOr<SimResult> SimulatePolicy(const scheduler::ModelSpec& model,
                                   const ClusterSpec& cluster,
                                   const Workload& workload,
                                   scheduler::Policy policy,
                                   int recompute_blocks = kAutoRecompute,
                                   const SimOptions& options = {},
                                   scheduler::StepGraph* graph = nullptr);

}  // namespace baton::sim

#endif  // BATON_SIM_SIMULATOR_H_
