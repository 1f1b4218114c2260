#include "baton/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "baton/sim/compute_model.h"
#include "baton/sim/offload_cost.h"

namespace baton::sim {
namespace {

using scheduler::Bucket;
using scheduler::CommGroup;
using scheduler::Groups;
using scheduler::GraphBuffer;
using scheduler::ModelSpec;
using scheduler::Node;
using scheduler::NodeKind;
using scheduler::StepGraph;
using scheduler::StreamClass;
using scheduler::StreamId;
using scheduler::UnitKind;

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Cost {
  double latency_s = 0;  // not shared
  double work_s = 0;     // at full link bandwidth; shared while concurrent
  bool comm = false;
};

// Where a communication group's members sit: `n` ranks, `stride` ranks
// apart (scheduler::Groups numbers them so: shard and hpZ groups are runs of
// consecutive ranks, a replica group takes one rank of each shard group,
// `shard` ranks apart). Ranks fill nodes in order, gpus_per_node each.
struct GroupSpan {
  int n = 1;
  int stride = 1;
};

// Ring collective time over the two-level cluster for full size `bytes` in
// a group spread as `span` says: g members share a node (NVLink), m nodes
// (InfiniBand). Rings of the other groups run beside it on their own GPUs
// and NICs (every GPU has its own NIC share), so they do not slow this one.
Cost RingCost(const ClusterSpec& c, GroupSpan span, double bytes,
              bool all_reduce, double bw_scale) {
  Cost cost;
  cost.comm = true;
  const int n = span.n;
  if (n <= 1) return cost;
  const int per_node = span.stride >= c.gpus_per_node
                           ? 1
                           : std::max(1, c.gpus_per_node / span.stride);
  const int g = std::min(n, per_node);
  const int m = (n + g - 1) / g;
  const double nvl = c.nvlink_gbps * 1e9 * bw_scale;
  const double nic = c.nic_gbps * 1e9 * bw_scale;
  double lat = c.base_latency_us + (g - 1) * c.nvlink_hop_us +
               (m - 1) * c.net_hop_us;
  double work = (g - 1.0) / g * bytes / nvl;
  if (m > 1) work += (m - 1.0) / m * bytes / (g * nic);
  if (all_reduce) {
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
  cost.latency_s = lat * 1e-6;
  cost.work_s = work;
  return cost;
}

class Model {
 public:
  Model(const StepGraph& g, const ClusterSpec& c, const Workload& w,
        const SimOptions& o, const ComputeModel& k)
      : g_(g), c_(c), w_(w), o_(o), k_(k) {}

  Cost NodeCost(const Node& n) const {
    auto time = [](const KernelSum& k) {
      Cost cost;
      cost.latency_s = k.seconds;
      return cost;
    };
    auto buffer_bytes = [&](int b) { return static_cast<double>(g_.buffers[b].bytes()); };
    if (const std::optional<double> s = OffloadNodeSeconds(g_, n, c_, k_)) {
      return Cost{*s, 0, false};  // sim/offload_cost.h
    }
    switch (n.kind) {
      case NodeKind::kForward:
      case NodeKind::kRecompute:
      case NodeKind::kBackward: {
        const bool bwd = n.kind == NodeKind::kBackward;
        switch (g_.layout.units[n.unit].kind) {
          case UnitKind::kBlock: {
            bool acc = false;
            for (bool a : n.grad_accumulate) acc |= a;
            if (!bwd) return time(k_.BlockForward());
            return time(WithGradientCopy(k_.BlockBackward(acc), n.unit));
          }
          case UnitKind::kLmHead:
            return time(bwd ? WithGradientCopy(k_.LmHeadBackward(), n.unit)
                            : k_.LmHeadForward());
          case UnitKind::kEmbedding:
            return time(bwd ? WithGradientCopy(k_.EmbeddingBackward(), n.unit)
                            : k_.EmbeddingForward());
          case UnitKind::kFinalNorm:
            return time(bwd ? k_.FinalNormBackward() : k_.FinalNormForward());
        }
        return Cost{};
      }
      case NodeKind::kAllGather:
        return Collective("all_gather", buffer_bytes(n.writes[0]), false, n.group);
      case NodeKind::kReduceScatter:
        return Collective("reduce_scatter", buffer_bytes(n.reads[0]), false,
                          n.group);
      case NodeKind::kAllReduce:
        return Collective("all_reduce", buffer_bytes(n.reads[0]), true, n.group);
      case NodeKind::kCopy:
        return time(k_.CopyBytes(2 * buffer_bytes(n.writes[0])));
      case NodeKind::kAccumulate:
        return time(k_.CopyBytes(3 * buffer_bytes(n.writes[0])));
      case NodeKind::kOptimizer:
        return time(k_.Optimizer(
            static_cast<double>(g_.layout.buckets[n.bucket].shard_numel)));
      case NodeKind::kCast:  // read fp32, write the parameter dtype
        return time(k_.CopyBytes(3 * buffer_bytes(n.writes[0])));
      case NodeKind::kD2H:
      case NodeKind::kH2D:
        return Cost{};  // priced by OffloadNodeSeconds
    }
    return Cost{};
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
  KernelSum WithGradientCopy(KernelSum k, int unit) const {
    const std::string& p = g_.policy.name;
    if (p == "fsdp1" || p == "zero3") {
      k.Add(k_.CopyBytes(4.0 * static_cast<double>(g_.layout.units[unit].numel()))
                .seconds,
            k_.launch_s());
    }
    return k;
  }

  GroupSpan SpanOf(CommGroup group) const {
    const Groups& gr = g_.groups;
    switch (group) {
      case CommGroup::kShard: return {gr.shard, 1};
      case CommGroup::kReplica: return {gr.replicas, gr.shard};
      case CommGroup::kHpz: return {std::max(gr.hpz, 1), 1};
    }
    return {gr.world, 1};
  }

  Cost Collective(const char* name, double bytes, bool all_reduce,
                  CommGroup group) const {
    if (o_.free_comm) return Cost{0, 0, true};
    const GroupSpan span = SpanOf(group);
    if (o_.calibration != nullptr && span.n > 1) {
      auto it = o_.calibration->tables.find(name);
      if (it != o_.calibration->tables.end()) {
        const double n = span.n;
        const double factor = (all_reduce ? 2 : 1) * (n - 1) / n;
        Cost cost;
        cost.comm = true;
        cost.work_s = bytes * factor /
                      (it->second.Busbw(bytes) * 1e9 * o_.bandwidth_scale);
        return cost;
      }
    }
    return RingCost(c_, span, bytes, all_reduce, o_.bandwidth_scale);
  }

  // Simulated time is integer nanoseconds, so that it always advances (on
  // doubles a step of 1 ns vanishes once t passes ~8e6 s) and a step beyond
  // kMaxStepNs is refused rather than simulated. Remaining bandwidth work of
  // a collective is counted in 1/share_units_ ns at full link bandwidth:
  // with k collectives sharing the links each advances by dt * units / k,
  // an exact integer because share_units_ = lcm(1..comm streams).
  static constexpr int64_t kMaxStepNs = 1'000'000'000'000'000;  // 1e6 s
  static constexpr int64_t kNever = std::numeric_limits<int64_t>::max();

  // `seconds` as whole nanoseconds; InvalidArgument naming `node` when it is
  // not finite, negative, or beyond kMaxStepNs.
  StatusOr<int64_t> ToNs(double seconds, const std::string& node) const {
    if (!(seconds >= 0) || !(seconds * 1e9 <= static_cast<double>(kMaxStepNs))) {
      return absl::InvalidArgumentError(absl::StrCat(
          "simulator: ", node, " would take ", seconds,
          " s, outside the simulated range 0..", kMaxStepNs / 1e9,
          " s per step (check the cluster's rates and the workload)"));
    }
    return static_cast<int64_t>(std::llround(seconds * 1e9));
  }

  Status PastRange(int64_t t, int node) const {
    return absl::InvalidArgumentError(absl::StrCat(
        "simulator: the step passes ", kMaxStepNs / 1e9,
        " s of simulated time", node >= 0 ? " at " : "",
        node >= 0 ? g_.nodes[node].name : "",
        " (check the cluster's rates and the workload)"));
  }

  StatusOr<SimResult> Run() {
    const int nn = static_cast<int>(g_.nodes.size());
    const int ns = g_.num_streams;
    std::vector<Cost> cost(nn);
    std::vector<bool> is_comm(nn);
    std::vector<int64_t> latency_ns(nn), work_units(nn);
    std::vector<bool> comm_stream(ns, false);
    for (int i = 0; i < nn; ++i) {
      cost[i] = NodeCost(g_.nodes[i]);
      is_comm[i] = cost[i].comm;
      if (cost[i].comm) comm_stream[g_.nodes[i].stream.index()] = true;
    }
    int64_t units = 1;  // lcm(1..number of comm streams)
    for (int k = 2, n = static_cast<int>(std::count(comm_stream.begin(),
                                                     comm_stream.end(), true));
         k <= n; ++k) {
      units = std::lcm(units, static_cast<int64_t>(k));
    }
    if (units > kNever / kMaxStepNs) {
      return absl::InternalError(absl::StrCat(
          "simulator: too many communication streams to share links exactly (",
          ns, " streams)"));
    }
    for (int i = 0; i < nn; ++i) {
      BATON_ASSIGN_OR_RETURN(latency_ns[i], ToNs(cost[i].latency_s, g_.nodes[i].name));
      BATON_ASSIGN_OR_RETURN(const int64_t work, ToNs(cost[i].work_s, g_.nodes[i].name));
      work_units[i] = work * units;
    }
    BATON_ASSIGN_OR_RETURN(const int64_t issue_ns,
                           ToNs(c_.host_issue_us * 1e-6, "issuing a node"));
    std::vector<std::vector<int>> queue(ns);
    for (int i = 0; i < nn; ++i) queue[g_.nodes[i].stream.index()].push_back(i);
    std::vector<size_t> head(ns, 0);
    std::vector<int64_t> start(nn, kNever), finish(nn, kNever), issue(nn, kNever);
    int issued = 0;
    int64_t host_t = 0;
    // Issue nodes whose host wait has finished (by time `t`). Issue times
    // saturate just past the range, which the loop below then refuses.
    auto advance_host = [&](int64_t t) {
      while (issued < nn) {
        const int hw = g_.nodes[issued].host_wait;
        int64_t at = host_t;
        if (hw >= 0) {
          if (finish[hw] > t) break;
          at = std::max(at, finish[hw]);
        }
        issue[issued] = at;
        host_t = std::min(at + issue_ns, kMaxStepNs + 1);
        ++issued;
      }
    };
    struct Active {
      int node;
      int64_t latency_left;  // ns
      int64_t work_left;     // 1/units ns at full bandwidth
    };
    std::vector<int> running(ns, -1);
    std::vector<int64_t> compute_end(ns, kNever);
    std::vector<Active> comm;
    int64_t t = 0;
    int done = 0;
    int64_t last_compute_end = 0;
    int64_t compute_busy = 0;
    int64_t exposed_ag = 0, exposed_rs = 0, exposed_host = 0;
    while (done < nn) {
      advance_host(t);
      // Start what can start now.
      for (int s = 0; s < ns; ++s) {
        if (running[s] >= 0 || head[s] >= queue[s].size()) continue;
        const int v = queue[s][head[s]];
        if (issue[v] > t) continue;
        bool ready = true;
        for (int w : g_.nodes[v].waits) ready &= finish[w] <= t;
        if (!ready) continue;
        running[s] = v;
        start[v] = t;
        ++head[s];
        if (is_comm[v]) {
          comm.push_back({v, latency_ns[v], work_units[v]});
        } else {
          compute_end[s] = t + latency_ns[v];
        }
        if (StreamId(s).is_compute()) {
          // Blame the idle gap before this compute-stream node.
          const int64_t gap = t - last_compute_end;
          if (gap > 0) {
            int blame = -1;
            int64_t latest = -1;
            for (int w : g_.nodes[v].waits) {
              if (finish[w] > latest) {
                latest = finish[w];
                blame = w;
              }
            }
            if (issue[v] >= latest || blame < 0) {
              exposed_host += gap;
            } else if (g_.nodes[blame].stream ==
                           g_.stream_for(StreamClass::kAllGather) &&
                       g_.nodes[blame].kind != NodeKind::kReduceScatter &&
                       g_.nodes[blame].kind != NodeKind::kAllReduce &&
                       g_.nodes[blame].kind != NodeKind::kAccumulate) {
              exposed_ag += gap;
            } else {
              exposed_rs += gap;
            }
          }
        }
      }
      // Next event. Every candidate is > t unless something completes at t,
      // so each pass completes a node or advances time.
      int64_t sharing = 0;
      for (const Active& a : comm) sharing += a.latency_left == 0 && a.work_left > 0;
      const int64_t per_ns = sharing > 0 ? units / sharing : units;  // exact
      int64_t next = kNever;
      for (int s = 0; s < ns; ++s) next = std::min(next, compute_end[s]);
      for (const Active& a : comm) {
        next = std::min(next, a.latency_left > 0
                                  ? t + a.latency_left
                                  : t + (a.work_left + per_ns - 1) / per_ns);
      }
      if (issued < nn) {
        const int hw = g_.nodes[issued].host_wait;
        if (hw < 0 || finish[hw] <= t) next = std::min(next, std::max(t, host_t));
      }
      int pending = -1;  // a node waiting for its issue time, for messages
      for (int s = 0; s < ns; ++s) {
        if (running[s] < 0 && head[s] < queue[s].size()) {
          const int v = queue[s][head[s]];
          if (issue[v] > t && issue[v] < kNever && issue[v] < next) {
            next = issue[v];
            pending = v;
          }
        }
      }
      if (next == kNever) {
        return absl::InternalError(absl::StrCat(
            "simulator: deadlock at t=", t * 1e-9, " s with ", nn - done,
            " nodes left (policy ", g_.policy.name, ")"));
      }
      if (next > kMaxStepNs) {
        int at = pending;
        for (int s = 0; s < ns && at < 0; ++s) at = running[s];
        return PastRange(next, at);
      }
      const int64_t dt = next - t;
      for (Active& a : comm) {
        if (a.latency_left > 0) {
          a.latency_left = std::max<int64_t>(0, a.latency_left - dt);
        } else {
          a.work_left = std::max<int64_t>(0, a.work_left - dt * per_ns);
        }
      }
      t = next;
      // Complete.
      for (int s = 0; s < ns; ++s) {
        if (compute_end[s] <= t) {
          const int v = running[s];
          finish[v] = compute_end[s];
          if (StreamId(s).is_compute()) {
            compute_busy += finish[v] - start[v];
            last_compute_end = finish[v];
          }
          compute_end[s] = kNever;
          running[s] = -1;
          ++done;
        }
      }
      for (size_t k = 0; k < comm.size();) {
        Active& a = comm[k];
        if (a.latency_left == 0 && a.work_left == 0) {
          finish[a.node] = t;
          running[g_.nodes[a.node].stream.index()] = -1;
          ++done;
          comm[k] = comm.back();
          comm.pop_back();
        } else {
          ++k;
        }
      }
    }
    int64_t step = 0, device_end = 0, host_busy = 0;
    for (int i = 0; i < nn; ++i) {
      step = std::max(step, finish[i]);
      if (OnHostStream(g_, g_.nodes[i])) {
        host_busy += finish[i] - start[i];
      } else {
        device_end = std::max(device_end, finish[i]);
      }
    }
    // ZenFlow: the host's update overlaps the next d steps (sim/offload_cost.h).
    if (g_.policy.zenflow) {
      step = static_cast<int64_t>(
          ZenFlowStepSeconds(g_, c_, step * 1e-9, host_busy * 1e-9) * 1e9);
    }
    // The tail after the last compute-stream node waits on reductions (and
    // under offload on the host).
    exposed_rs += std::max<int64_t>(0, std::min(step, device_end) - last_compute_end);
    const int64_t offload_tail = std::max<int64_t>(0, step - std::max(device_end, last_compute_end));
    SimResult r;
    r.step_s = step * 1e-9;
    r.compute_s = compute_busy * 1e-9;
    r.exposed_ag_s = exposed_ag * 1e-9;
    r.exposed_rs_s = exposed_rs * 1e-9;
    r.exposed_host_s = exposed_host * 1e-9;
    r.exposed_offload_s = offload_tail * 1e-9;
    if (o_.timeline) {
      for (int i = 0; i < nn; ++i) {
        r.timeline.push_back(
            {i, g_.nodes[i].stream, start[i] * 1e-9, finish[i] * 1e-9});
      }
    }
    return r;
  }

 private:
  const StepGraph& g_;
  const ClusterSpec& c_;
  const Workload& w_;
  const SimOptions& o_;
  const ComputeModel& k_;
};

}  // namespace

double StateBytes(const StepGraph& g) {
  // FSDP1 keeps the fp32 flat-parameter shard as the parameter itself and
  // casts it into a low-precision shard only for the all-gather, freeing
  // that right after (torch/distributed/fsdp/_flat_param.py:
  // _use_low_precision_shard / _free_low_precision_sharded_param); FSDP2's
  // sharded DTensor parameters are fp32 and the all-gather input is a
  // copy-in made per gather (torch/distributed/_composable/fsdp/
  // _fsdp_collectives.py: foreach_all_gather). Neither keeps a persistent
  // bf16 shard: 16 bytes per parameter under mixed precision (fp32 param,
  // fp32 gradient, two fp32 moments) where baton, YaFSDP and ZeRO-3 keep 18.
  //
  // ZeRO-3 keeps the low-precision parameter partition, the fp32 master
  // and moments, and its gradient partition in the low precision: 2 + 2 +
  // 12 = 16 bytes per parameter (Rajbhandari et al. 2020, ZeRO, section 3:
  // "2Ψ + 2Ψ + KΨ", K = 12 for mixed-precision Adam); the fp32 gradient
  // the optimizer reads is made per sub-group during the step and freed
  // (deepspeed/runtime/zero/stage3.py: _prepare_fp32_grad_for_sub_group,
  // _release_sub_group), when the activations are gone.
  const bool fp32_shard_only = g.policy.name == "fsdp1" || g.policy.name == "fsdp2";
  const bool low_precision_grad = g.policy.name == "zero3";
  double bytes = 0;
  for (const GraphBuffer& b : g.buffers) {
    if (!b.persistent) continue;
    if (fp32_shard_only && b.role == scheduler::BufferRole::kShard) continue;
    if (b.host) continue;  // offload: host memory (StepGraph::host_bytes)
    if (low_precision_grad && b.role == scheduler::BufferRole::kGradShard) {
      bytes += static_cast<double>(b.numel) * DataTypeSize(g.policy.param_dtype);
      continue;
    }
    bytes += static_cast<double>(b.bytes());
  }
  return bytes;
}

double AllocatorReserveBytes(const StepGraph& g) {
  // FSDP1 and ZeRO-3 free their all-gathered parameters with record_stream
  // for the compute stream (torch/distributed/fsdp/_flat_param.py:
  // _no_dispatch_record_stream; "Fairscale FSDP, PyTorch FSDP, and
  // DeepSpeed ZeRO use recordStream", pytorch/pytorch issue 114299, the
  // FSDP2 design): the caching allocator keeps such a block from reuse until
  // the GPU's use of it finishes, which can be much later than the host's
  // free, so the next all-gather takes a fresh block. The rate limiter
  // (FSDP1 _limiter_utils.py; ZeRO-3's prefetch bucket) keeps that to one
  // gathered unit beyond the schedule's. FSDP2 synchronizes the streams
  // explicitly instead ("deterministically achieve the desired memory",
  // same issue); baton and YaFSDP gather into buffers they own.
  if (g.policy.name != "fsdp1" && g.policy.name != "zero3") return 0;
  double largest = 0;
  for (const Bucket& b : g.layout.buckets) {  // what one all-gather fills
    largest = std::max(largest, static_cast<double>(b.padded_numel));
  }
  return largest * DataTypeSize(g.policy.param_dtype);
}

MemoryBreakdown StepMemory(const StepGraph& g, const ClusterSpec& cluster,
                           const Workload& workload) {
  MemoryBreakdown m = ActivationMemory(g.layout.spec, workload, g.policy.recompute_blocks);
  m.states = StateBytes(g);
  m.arena = static_cast<double>(g.plan.arena_bytes);
  m.reserved = cluster.reserved_gib * 1073741824.0 + AllocatorReserveBytes(g);
  return m;
}

Status ValidateWorkload(const Workload& w) {
  if (w.gpus < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpus must be positive, got ", w.gpus));
  }
  if (w.seq < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--seq must be positive, got ", w.seq));
  }
  if (w.global_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch must be positive, got ", w.global_batch));
  }
  if (w.micro_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--micro-batch must be positive, got ", w.micro_batch));
  }
  // Above (scheduler/limits.h): no real job, and no bound on the work.
  const struct {
    const char* flag;
    int64_t value, hi;
  } sizes[] = {{"--gpus", w.gpus, scheduler::kMaxWorldSize},
               {"--seq", w.seq, scheduler::kMaxSeq},
               {"--global-batch", w.global_batch, scheduler::kMaxGlobalBatch},
               {"--micro-batch", w.micro_batch, scheduler::kMaxGlobalBatch}};
  for (const auto& s : sizes) {
    if (s.value > s.hi) {
      return absl::InvalidArgumentError(absl::StrCat(
          s.flag, " = ", s.value, " is over the limit of ", s.hi, " (scheduler/limits.h)"));
    }
  }
  if (w.global_batch % w.gpus != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch ", w.global_batch,
                     " does not divide over --gpus ", w.gpus));
  }
  const int64_t local = w.global_batch / w.gpus;
  if (local % w.micro_batch != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the local batch ", local, " (global ", w.global_batch,
                     " / ", w.gpus, " GPUs) does not divide into micro-batches of ",
                     w.micro_batch));
  }
  if (local / w.micro_batch > scheduler::kMaxMicroSteps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the step would take ", local / w.micro_batch, " micro-steps (global batch ",
        w.global_batch, " / ", w.gpus, " GPUs / micro-batch ", w.micro_batch,
        "); the limit is ", scheduler::kMaxMicroSteps, ": raise --micro-batch or --gpus"));
  }
  return absl::OkStatus();
}

StatusOr<scheduler::Policy> SimPolicy(const std::string& name,
                                      const Workload& w, int gpus_per_node) {
  BATON_RETURN_IF_ERROR(ValidateWorkload(w));
  BATON_ASSIGN_OR_RETURN(scheduler::Policy p, scheduler::PolicyPreset(name));
  // A preset's group of 4 stands for "one node" (policy.h); on a simulated
  // cluster that is the node's GPUs.
  if (p.shard_group > 0) p.shard_group = gpus_per_node;
  if (p.hpz_group > 0) p.hpz_group = gpus_per_node;
  if (w.shard_group >= 0) p.shard_group = w.shard_group;
  if (w.hpz_group >= 0) p.hpz_group = w.hpz_group;
  p.micro_steps = static_cast<int>(w.global_batch / w.gpus / w.micro_batch);
  p.reduce_every_micro_step = p.micro_steps > 1;
  return p;
}

double ExpectedMaxOfNormals(int n) {
  if (n <= 1) return 0;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx, by the midpoint rule
  // over [-10, 10] (the integrand is below 1e-20 outside for n <= 1e9).
  constexpr int kSteps = 4000;
  constexpr double kLo = -10, kHi = 10, kDx = (kHi - kLo) / kSteps;
  double sum = 0;
  for (int i = 0; i < kSteps; ++i) {
    const double x = kLo + (i + 0.5) * kDx;
    const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    sum += x * n * pdf * std::pow(cdf, n - 1);
  }
  return sum * kDx;
}

MemoryBreakdown ActivationMemory(const ModelSpec& m, const Workload& w,
                                 int recompute_blocks) {
  MemoryBreakdown mem;
  const double sbh = static_cast<double>(w.seq) * w.micro_batch * m.hidden;
  const int64_t recomputed =
      recompute_blocks < 0 ? m.layers : std::min<int64_t>(recompute_blocks, m.layers);
  mem.activations = recomputed * 2 * sbh + (m.layers - recomputed) * 34 * sbh +
                    2 * sbh;  // the embedding output
  if (recomputed > 0) mem.activations += 34 * sbh;  // one block rebuilt
  mem.logits = static_cast<double>(w.seq) * w.micro_batch * m.vocab * 6;
  return mem;
}

StatusOr<SimResult> SimulateGraph(const StepGraph& graph,
                                  const ClusterSpec& cluster,
                                  const Workload& workload,
                                  const SimOptions& options) {
  BATON_RETURN_IF_ERROR(ValidateCluster(cluster));
  BATON_RETURN_IF_ERROR(ValidateWorkload(workload));
  if (graph.groups.world != workload.gpus) {
    return absl::InvalidArgumentError(absl::StrCat(
        "simulator: graph built for ", graph.groups.world,
        " ranks, workload has ", workload.gpus, " GPUs"));
  }
  const KernelTable* table = options.kernels;
  if (table == nullptr) {
    const StatusOr<KernelTable>& preset = H100KernelTable();
    BATON_RETURN_IF_ERROR(preset.status());
    table = &*preset;
  }
  BATON_ASSIGN_OR_RETURN(
      const ComputeModel kernels,
      ComputeModel::Create(*table, cluster, graph.layout.spec,
                           workload.seq * workload.micro_batch,
                           workload.micro_batch, workload.seq,
                           options.attention));
  Model model(graph, cluster, workload, options, kernels);
  BATON_ASSIGN_OR_RETURN(SimResult r, model.Run());
  // Stragglers: each rank's compute varies by straggler_cv, and every rank
  // waits for the slowest one at the step's collectives.
  r.straggler_s = cluster.straggler_cv * r.compute_s *
                  ExpectedMaxOfNormals(workload.gpus);
  r.step_s += r.straggler_s;
  const ModelSpec& m = graph.layout.spec;
  r.policy = graph.policy.name;
  r.recompute_blocks = graph.policy.recompute_blocks < 0
                           ? static_cast<int>(m.layers)
                           : graph.policy.recompute_blocks;
  const double local = static_cast<double>(workload.global_batch) / workload.gpus;
  r.mfu = scheduler::TrainingFlopsPerSequence(m, workload.seq) * local /
          (r.step_s * cluster.peak_tflops * 1e12);
  r.tokens_per_s_per_gpu = local * workload.seq / r.step_s;
  r.memory = StepMemory(graph, cluster, workload);
  r.fits = r.memory.peak() <= cluster.memory_gib * 1073741824.0;
  r.arena_bytes = graph.plan.arena_bytes;
  r.host_bytes = graph.host_bytes;
  r.lower_bound_bytes = graph.plan.lower_bound_bytes;
  return r;
}

StatusOr<SimResult> Simulate(const ModelSpec& model, const ClusterSpec& cluster,
                             const Workload& workload,
                             const std::string& policy_name,
                             int recompute_blocks, const SimOptions& options,
                             StepGraph* graph) {
  BATON_ASSIGN_OR_RETURN(scheduler::Policy policy,
                         SimPolicy(policy_name, workload, cluster.gpus_per_node));
  return SimulatePolicy(model, cluster, workload, std::move(policy),
                        recompute_blocks, options, graph);
}

StatusOr<SimResult> SimulatePolicy(const ModelSpec& model,
                                   const ClusterSpec& cluster,
                                   const Workload& workload,
                                   scheduler::Policy policy,
                                   int recompute_blocks,
                                   const SimOptions& options,
                                   StepGraph* graph) {
  BATON_RETURN_IF_ERROR(ValidateWorkload(workload));
  BATON_RETURN_IF_ERROR(scheduler::ValidatePolicy(policy));
  if (policy.micro_steps !=
      workload.global_batch / workload.gpus / workload.micro_batch) {
    return absl::InvalidArgumentError(absl::StrCat(
        "policy ", policy.name, ": micro_steps = ", policy.micro_steps,
        ", but the workload takes ",
        workload.global_batch / workload.gpus / workload.micro_batch,
        " micro-steps (global batch / gpus / micro-batch)"));
  }
  if (recompute_blocks == kAutoRecompute) {
    // Arena and states do not depend on recompute: plan once, then pick the
    // fewest recomputed blocks that fit.
    policy.recompute_blocks = 0;
    BATON_ASSIGN_OR_RETURN(StepGraph g0,
                           scheduler::BuildStepGraph(model, policy, workload.gpus));
    const double fixed = StateBytes(g0) +
                         static_cast<double>(g0.plan.arena_bytes) +
                         cluster.reserved_gib * 1073741824.0 +
                         AllocatorReserveBytes(g0);
    int chosen = -1;
    for (int n = 0; n <= model.layers; ++n) {
      const MemoryBreakdown a = ActivationMemory(model, workload, n);
      if (fixed + a.activations + a.logits <= cluster.memory_gib * 1073741824.0) {
        chosen = n;
        break;
      }
    }
    policy.recompute_blocks = chosen < 0 ? -1 : chosen;
    if (chosen == 0) {
      BATON_ASSIGN_OR_RETURN(SimResult r,
                             SimulateGraph(g0, cluster, workload, options));
      if (graph != nullptr) *graph = std::move(g0);
      return r;
    }
  } else {
    if (recompute_blocks < -1 || recompute_blocks > model.layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--recompute-layers must be 0..", model.layers,
          ", all or auto; got ", recompute_blocks));
    }
    policy.recompute_blocks = recompute_blocks;
  }
  BATON_ASSIGN_OR_RETURN(StepGraph g,
                         scheduler::BuildStepGraph(model, policy, workload.gpus));
  BATON_ASSIGN_OR_RETURN(SimResult r,
                         SimulateGraph(g, cluster, workload, options));
  if (graph != nullptr) *graph = std::move(g);
  return r;
}

}  // namespace baton::sim
