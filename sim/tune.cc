#include "baton/sim/tune.h"

#include <algorithm>
#include <functional>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/step_graph.h"

namespace baton::sim {
namespace {

using scheduler::Policy;

constexpr DataType kReduceDtypes[] = {DataType::kF32, DataType::kBF16};
// Offload values searched. ZenFlow is left out: it changes the update itself
// (two optimizers over the columns, bounded staleness), and the tuner only
// chooses among schedules of the same arithmetic.
constexpr scheduler::Offload kOffloads[] = {scheduler::Offload::kNone,
                                            scheduler::Offload::kOptimizer};

// One point of the search space.
struct Knobs {
  int64_t micro_batch = 1;
  int reduce = 0;  // index into kReduceDtypes
  int shard = 0;   // 0: every rank
  int hpz = 0;
  int64_t merge = 0;  // 0: a bucket per unit
  int fwd = 1, bwd = 1;
  int offload = 0;  // index into kOffloads
  auto Tie() const {
    return std::tie(micro_batch, reduce, shard, hpz, merge, fwd, bwd, offload);
  }
  bool operator<(const Knobs& o) const { return Tie() < o.Tie(); }
  bool operator==(const Knobs& o) const { return Tie() == o.Tie(); }
};

struct Entry {
  bool ok = false;  // simulated (else pruned or refused)
  TuneCandidate c;
};

// a before b: fits, then faster, then less memory, then smaller knobs.
bool Better(const Entry& a, const Knobs& ka, const Entry& b, const Knobs& kb) {
  if (a.ok != b.ok) return a.ok;
  if (!a.ok) return ka < kb;
  if (a.c.result.fits != b.c.result.fits) return a.c.result.fits;
  // Neither fits: the closest to fitting first.
  if (!a.c.result.fits && a.c.result.memory.peak() != b.c.result.memory.peak()) {
    return a.c.result.memory.peak() < b.c.result.memory.peak();
  }
  if (a.c.result.step_s != b.c.result.step_s) {
    return a.c.result.step_s < b.c.result.step_s;
  }
  if (a.c.result.memory.peak() != b.c.result.memory.peak()) {
    return a.c.result.memory.peak() < b.c.result.memory.peak();
  }
  return ka < kb;
}

class Tuner {
 public:
  Tuner(const scheduler::ModelSpec& m, const ClusterSpec& c, const Workload& w,
        const TuneOptions& o)
      : m_(m), c_(c), w_(w), o_(o) {}

  StatusOr<TuneReport> Run() {
    BATON_RETURN_IF_ERROR(SetUpValues());
    // Starting points: the presets the knobs can express.
    const int gpn = c_.gpus_per_node;
    Knobs base;
    base.micro_batch = std::find(mbs_.begin(), mbs_.end(), w_.micro_batch) != mbs_.end()
                           ? w_.micro_batch
                           : mbs_.back();
    Knobs hsdp = base, zeropp = base;
    hsdp.shard = gpn < w_.gpus && w_.gpus % gpn == 0 ? gpn : 0;
    zeropp.hpz = gpn < w_.gpus && w_.gpus % gpn == 0 ? gpn : 0;
    Knobs cur = base;
    for (const Knobs& k : {base, hsdp, zeropp}) {
      BATON_ASSIGN_OR_RETURN(const Entry* e, Eval(k));
      BATON_ASSIGN_OR_RETURN(const Entry* best, Eval(cur));
      if (Better(*e, k, *best, cur)) cur = k;
    }
    // Coordinate descent.
    using Setter = std::function<void(Knobs&, size_t)>;
    const std::vector<std::pair<size_t, Setter>> dims = {
        {shards_.size(), [&](Knobs& k, size_t i) { k.shard = shards_[i]; }},
        {hpzs_.size(), [&](Knobs& k, size_t i) { k.hpz = hpzs_[i]; }},
        {mbs_.size(), [&](Knobs& k, size_t i) { k.micro_batch = mbs_[i]; }},
        {merges_.size(), [&](Knobs& k, size_t i) { k.merge = merges_[i]; }},
        {static_cast<size_t>(o_.max_prefetch + 1),
         [](Knobs& k, size_t i) { k.fwd = static_cast<int>(i); }},
        {static_cast<size_t>(o_.max_prefetch + 1),
         [](Knobs& k, size_t i) { k.bwd = static_cast<int>(i); }},
        {std::size(kReduceDtypes),
         [](Knobs& k, size_t i) { k.reduce = static_cast<int>(i); }},
        {std::size(kOffloads),
         [](Knobs& k, size_t i) { k.offload = static_cast<int>(i); }},
    };
    for (int pass = 0; pass < o_.max_passes; ++pass) {
      const Knobs before = cur;
      for (const auto& [n, set] : dims) {
        Knobs best = cur;
        for (size_t i = 0; i < n; ++i) {
          Knobs k = cur;
          set(k, i);
          BATON_ASSIGN_OR_RETURN(const Entry* e, Eval(k));
          BATON_ASSIGN_OR_RETURN(const Entry* b, Eval(best));
          if (Better(*e, k, *b, best)) best = k;
        }
        cur = best;
      }
      if (cur == before) break;
    }
    // The best few of everything simulated.
    std::vector<std::pair<Knobs, const Entry*>> all;
    for (const auto& [k, e] : cache_) {
      if (e.ok) all.push_back({k, &e});
    }
    std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
      return Better(*a.second, a.first, *b.second, b.first);
    });
    if (all.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tune: no configuration fits in ", c_.memory_gib, " GiB of device memory (",
          report_.pruned, " over it by the memory lower bound, ", report_.refused,
          " refused)"));
    }
    report_.simulated = simulated_;
    for (size_t i = 0; i < all.size() && i < static_cast<size_t>(o_.keep); ++i) {
      report_.best.push_back(all[i].second->c);
    }
    return report_;
  }

 private:
  Status SetUpValues() {
    const int64_t local = w_.global_batch / w_.gpus;
    for (int64_t mb = 1; mb <= local; ++mb) {
      const int64_t steps = local / mb;
      if (local % mb != 0 || steps > scheduler::kMaxMicroSteps ||
          steps * (m_.layers + 3) > o_.max_step_units) {
        continue;
      }
      mbs_.push_back(mb);
    }
    if (mbs_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tune: every micro-batch of the local batch ", local, " takes more than ",
          o_.max_step_units, " micro-steps x units"));
    }
    const int gpn = c_.gpus_per_node;
    shards_ = {0};
    for (int64_t s = gpn; s < w_.gpus; s *= 2) {
      if (w_.gpus % s == 0) shards_.push_back(static_cast<int>(s));
    }
    hpzs_ = {0, gpn, 2 * gpn};
    const std::vector<scheduler::UnitSpec> units = scheduler::BuildUnits(m_);
    int64_t block = 0;
    for (const auto& u : units) {
      if (u.kind == scheduler::UnitKind::kBlock) block = std::max(block, u.numel());
    }
    merges_ = {0};
    const Policy baton = *scheduler::PolicyPreset("baton");
    for (int64_t k : {2, 4, 8}) {
      if (k <= m_.layers) {
        merges_.push_back(k * block *
                          static_cast<int64_t>(DataTypeSize(baton.param_dtype)));
      }
    }
    return absl::OkStatus();
  }

  Policy PolicyOf(const Knobs& k) const {
    Policy p = *scheduler::PolicyPreset("baton");
    p.name = "tuned";
    p.micro_steps = static_cast<int>(w_.global_batch / w_.gpus / k.micro_batch);
    p.reduce_every_micro_step = p.micro_steps > 1;
    p.reduce_dtype = kReduceDtypes[k.reduce];
    p.shard_group = k.shard;
    p.hpz_group = k.hpz;
    if (k.merge > 0) {
      p.layout.bucket_policy = scheduler::BucketPolicy::kMerge;
      p.layout.merge_target_bytes = k.merge;
    }
    p.forward_prefetch = k.fwd;
    p.backward_prefetch = k.bwd;
    p.offload = kOffloads[k.offload];
    return p;
  }

  // The entry for `k`, simulating it on first use. Errors other than
  // InvalidArgument (a refused combination) are returned.
  StatusOr<const Entry*> Eval(const Knobs& k) {
    auto [it, fresh] = cache_.try_emplace(k);
    Entry& e = it->second;
    if (!fresh) return &e;
    Policy p = PolicyOf(k);
    StatusOr<scheduler::DeviceMesh> mesh = scheduler::ResolveMesh(p, w_.gpus);
    if (!mesh.ok()) {
      ++report_.refused;
      return &e;
    }
    Workload w = w_;
    w.micro_batch = k.micro_batch;
    w.shard_group = p.shard_group;
    w.hpz_group = p.hpz_group;
    // Lower bound: fp32 master and two moments over the shard group (on
    // the host under offload), the reserve, and activations with every
    // block recomputed.
    const double gib = 1073741824.0;
    const MemoryBreakdown least = ActivationMemory(m_, w, -1);
    const double state = p.offload == scheduler::Offload::kNone ? 12.0 : 0.0;
    const double bound = state * static_cast<double>(scheduler::ParameterCount(m_)) /
                             mesh->size(scheduler::kDataShardGroup) +
                         c_.reserved_gib * gib + least.activations + least.logits;
    if (bound > c_.memory_gib * gib) {
      ++report_.pruned;
      return &e;
    }
    scheduler::StepGraph graph;
    StatusOr<SimResult> r =
        SimulatePolicy(m_, c_, w, p, kAutoRecompute, o_.sim, &graph);
    ++simulated_;
    if (!r.ok()) {
      if (r.status().code() != absl::StatusCode::kInvalidArgument) {
        return r.status();
      }
      ++report_.refused;
      return &e;
    }
    p.recompute_blocks = graph.policy.recompute_blocks;
    e.ok = true;
    e.c = {std::move(p), w, *std::move(r)};
    return &e;
  }

  const scheduler::ModelSpec& m_;
  const ClusterSpec& c_;
  const Workload& w_;
  const TuneOptions& o_;
  std::vector<int64_t> mbs_, merges_;
  std::vector<int> shards_, hpzs_;
  std::map<Knobs, Entry> cache_;
  TuneReport report_;
  int simulated_ = 0;
};

}  // namespace

StatusOr<TuneReport> Tune(const scheduler::ModelSpec& model,
                          const ClusterSpec& cluster, const Workload& workload,
                          const TuneOptions& options) {
  BATON_RETURN_IF_ERROR(scheduler::ValidateModelSpec(model));
  BATON_RETURN_IF_ERROR(ValidateCluster(cluster));
  BATON_RETURN_IF_ERROR(ValidateWorkload(workload));
  // An attention kernel that cannot run the model's head dim refuses every
  // candidate alike: say so, not "no configuration fits".
  BATON_RETURN_IF_ERROR(
      KernelHeadDim(options.sim.attention, model.head_dim).status());
  if (options.keep < 1 || options.max_prefetch < 0 || options.max_passes < 1 ||
      options.max_step_units < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tune: options out of range (keep ", options.keep, ", max_prefetch ",
        options.max_prefetch, ", max_passes ", options.max_passes,
        ", max_step_units ", options.max_step_units, ")"));
  }
  return Tuner(model, cluster, workload, options).Run();
}

std::string DescribeKnobs(const TuneCandidate& c) {
  const Policy& p = c.policy;
  return absl::StrCat(
      "mb=", c.workload.micro_batch, " reduce=", DataTypeName(p.reduce_dtype),
      " shard=", p.shard_group, " hpz=", p.hpz_group, " buckets=",
      p.layout.bucket_policy == scheduler::BucketPolicy::kMerge
          ? absl::StrCat("merge:", p.layout.merge_target_bytes >> 20, "MiB")
          : std::string("per_unit"),
      " prefetch=", p.forward_prefetch, "/", p.backward_prefetch,
      " offload=", scheduler::OffloadName(p.offload), " recompute=",
      p.recompute_blocks < 0 ? std::string("all") : absl::StrCat(p.recompute_blocks));
}

}  // namespace baton::sim
