#include "baton/sim/tune.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "baton/scheduler/step_graph.h"

namespace baton::sim {
namespace {

using scheduler::Policy;

// The adapters' rank when --allow=lora is given without --lora-rank.
constexpr int kDefaultTuneLoraRank = 16;

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
  int opt = 0;      // 0 adamw, 1 adamw8bit
  int lora = 0;     // 0 none, 1 LoRA, 2 LoRA over an NF4 base
  // The mesh: tensor (with sequence parallelism), context and pipeline
  // sizes, and the schedule: 0 1f1b, 1 zb-h1, v >= 2 interleaved with v
  // virtual stages.
  int tp = 1, cp = 1, pp = 1, sched = 0;
  // Experts (MoE models): ep, etp (1 or tp), the all-to-all overlap.
  int ep = 1, etp = 1, a2a = 0;
  bool moe = false;  // a MoE model: every candidate is a parallel graph
  bool parallel() const { return moe || tp > 1 || cp > 1 || pp > 1; }
  auto Tie() const {
    return std::tie(tp, cp, pp, sched, ep, etp, a2a, micro_batch, reduce, shard, hpz, merge,
                    fwd, bwd, offload, opt, lora);
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

// The techniques on a candidate: optimizer index `opt`, adapters `lora`
// (Knobs), and the given recompute kind.
void ApplyTechniques(const TuneTechniques& t, int opt, int lora, Policy& p) {
  p.optimizer = opt == 1 ? scheduler::OptimizerKind::kAdamW8bit : scheduler::OptimizerKind::kAdamW;
  p.recompute = t.recompute;
  if (lora > 0) {
    p.layout.lora_rank = t.lora_rank > 0 ? t.lora_rank : kDefaultTuneLoraRank;
    p.layout.lora_alpha = t.lora_alpha;
    p.layout.lora_targets = t.lora_targets;
  }
  if (lora == 2) p.layout.base_dtype = scheduler::BaseDtype::kNf4;
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
    base.moe = m_.moe.enabled();
    base.opt = opts_.front();
    base.lora = loras_.front();
    base.micro_batch = std::find(mbs_.begin(), mbs_.end(), w_.micro_batch) != mbs_.end()
                           ? w_.micro_batch
                           : mbs_.back();
    Knobs hsdp = base, zeropp = base;
    hsdp.shard = gpn < w_.gpus && w_.gpus % gpn == 0 ? gpn : 0;
    zeropp.hpz = gpn < w_.gpus && w_.gpus % gpn == 0 ? gpn : 0;
    Knobs cur = base;
    std::vector<Knobs> starts = {base, hsdp, zeropp};
    if (mesh_) {
      // A mesh start and the data-parallel offload one: coordinate descent
      // does not walk from one to the other (a mesh takes no offload).
      Knobs offload = base;
      offload.offload = 1;
      starts.push_back(offload);
      MeshStarts(base, starts);
    }
    for (const Knobs& k : starts) {
      BATON_ASSIGN_OR_RETURN(const Entry* e, Eval(k));
      BATON_ASSIGN_OR_RETURN(const Entry* best, Eval(cur));
      if (Better(*e, k, *best, cur)) cur = k;
    }
    // Coordinate descent.
    using Setter = std::function<void(Knobs&, size_t)>;
    std::vector<std::pair<size_t, Setter>> dims;
    if (mesh_) {
      dims = {
          {tps_.size(), [&](Knobs& k, size_t i) { k.tp = tps_[i]; }},
          {pps_.size(), [&](Knobs& k, size_t i) { k.pp = pps_[i]; }},
          {cps_.size(), [&](Knobs& k, size_t i) { k.cp = cps_[i]; }},
          {scheds_.size(), [&](Knobs& k, size_t i) { k.sched = scheds_[i]; }},
      };
      if (m_.moe.enabled()) {
        dims.push_back({eps_.size(), [&](Knobs& k, size_t i) { k.ep = eps_[i]; }});
        dims.push_back({2, [&](Knobs& k, size_t i) { k.etp = i == 0 ? 1 : k.tp; }});
        dims.push_back({2, [&](Knobs& k, size_t i) { k.a2a = static_cast<int>(i); }});
      }
    }
    const std::vector<std::pair<size_t, Setter>> dp_dims = {
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
        {opts_.size(), [&](Knobs& k, size_t i) { k.opt = opts_[i]; }},
        {loras_.size(), [&](Knobs& k, size_t i) { k.lora = loras_[i]; }},
    };
    dims.insert(dims.end(), dp_dims.begin(), dp_dims.end());
    for (int pass = 0; pass < o_.max_passes; ++pass) {
      const Knobs before = cur;
      for (const auto& [n, set] : dims) {
        Knobs best = cur;
        for (size_t i = 0; i < n; ++i) {
          Knobs k = cur;
          set(k, i);
          Canonical(k);
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
    const TuneTechniques& t = o_.techniques;
    opts_ = {t.optimizer == scheduler::OptimizerKind::kAdamW8bit ? 1 : 0};
    if (opts_[0] == 0 && t.allow_adamw8bit) opts_.push_back(1);
    if (t.base_dtype == scheduler::BaseDtype::kNf4) {
      loras_ = {2};
    } else {
      loras_ = {t.lora_rank > 0 ? 1 : 0};
      if (loras_[0] == 0 && t.allow_lora) loras_.push_back(1);
      if (t.allow_nf4 && loras_.back() == 1) loras_.push_back(2);
    }
    const int64_t local = w_.global_batch / w_.gpus;
    if (mesh_) {
      // Per data rank under a mesh: small micro-batches of the global batch.
      for (int64_t mb = 1; mb <= 8 && mb <= w_.global_batch; mb *= 2) {
        if (w_.global_batch % mb == 0 && mb > local) mbs_.push_back(mb);
      }
    }
    for (int64_t mb = 1; mb <= local; ++mb) {
      const int64_t steps = local / mb;
      if (local % mb != 0 || steps > scheduler::kMaxMicroSteps ||
          steps * (m_.layers + 3) > o_.max_step_units) {
        continue;
      }
      mbs_.push_back(mb);
    }
    std::sort(mbs_.begin(), mbs_.end());
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
    if (mesh_) MeshValues();
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
    const int64_t data = w_.gpus / (int64_t{k.tp} * k.cp * k.pp);
    p.micro_steps = static_cast<int>(w_.global_batch / std::max<int64_t>(data, 1) /
                                     k.micro_batch);
    p.reduce_every_micro_step = p.micro_steps > 1 && !k.parallel();
    p.tensor_parallel = k.tp;
    p.sequence_parallel = k.tp > 1;
    p.context_parallel = k.cp;
    p.pipeline_parallel = k.pp;
    p.pipeline_schedule = k.sched == 0   ? scheduler::PipelineSchedule::k1F1B
                          : k.sched == 1 ? scheduler::PipelineSchedule::kZbH1
                                         : scheduler::PipelineSchedule::kInterleaved;
    p.virtual_stages = k.sched >= 2 ? k.sched : 1;
    p.expert_parallel = k.ep;
    p.expert_tensor_parallel = k.etp;
    p.moe_a2a_overlap = k.a2a == 1;
    // The workload's dispatcher, shared-expert overlap and capacity apply to
    // every candidate.
    p.moe_dispatcher = w_.moe_dispatcher;
    p.moe_shared_overlap = w_.moe_shared_overlap;
    p.moe_capacity_factor = w_.moe_capacity_factor;
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
    ApplyTechniques(o_.techniques, k.opt, k.lora, p);
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
    Workload w = w_;
    w.micro_batch = k.micro_batch;
    w.shard_group = p.shard_group;
    w.hpz_group = p.hpz_group;
    w.tp = k.tp;
    w.sp = k.tp > 1;
    w.cp = k.cp;
    w.pp = k.pp;
    w.vpp = p.virtual_stages;
    w.schedule = p.pipeline_schedule;
    w.ep = k.ep;
    w.etp = k.etp;
    w.moe_dispatcher = p.moe_dispatcher;
    w.moe_a2a_overlap = p.moe_a2a_overlap;
    if (!mesh.ok() || !ValidateWorkload(w).ok() ||
        int64_t{p.micro_steps} * (m_.layers + 3) > o_.max_step_units) {
      ++report_.refused;
      return &e;
    }
    if (k.parallel()) {
      if (MeshLowerBound(k, w, *mesh) > c_.memory_gib * 1073741824.0) {
        ++report_.pruned;
        return &e;
      }
      return Simulated(k, std::move(p), w, e);
    }
    // Lower bound: fp32 master and two moments over the shard group (on
    // the host under offload), the reserve, and activations with every
    // block recomputed.
    const double gib = 1073741824.0;
    const MemoryBreakdown least = ActivationMemory(m_, w, -1);
    // (8-bit AdamW: 4 + 2 bytes; LoRA: the base has none, and the
    // adapters are left out of the bound.)
    const double state = p.offload != scheduler::Offload::kNone ? 0.0
                         : k.lora > 0                            ? 0.0
                         : k.opt == 1                            ? 6.0
                                                                 : 12.0;
    const double bound = state * static_cast<double>(scheduler::ParameterCount(m_)) /
                             mesh->size(scheduler::kDataShardGroup) +
                         c_.reserved_gib * gib + least.activations + least.logits;
    if (bound > c_.memory_gib * gib) {
      ++report_.pruned;
      return &e;
    }
    return Simulated(k, std::move(p), w, e);
  }

  // Simulates `p` on `w` into `e` (auto recompute).
  StatusOr<const Entry*> Simulated(const Knobs& k, Policy p, const Workload& w, Entry& e) {
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

  // A parallel candidate keeps none of the data-parallel-only knobs.
  static void Canonical(Knobs& k) {
    if (k.etp > 1) k.etp = k.tp;  // etp is 1 or tp
    if (!k.parallel()) {
      k.sched = 0;
      return;
    }
    k.hpz = 0;
    k.merge = 0;
    k.fwd = k.bwd = 1;
    k.offload = 0;
    k.shard = 0;  // the distributed optimizer over every data rank
    if (k.pp == 1) k.sched = 0;
  }

  void MeshValues() {
    tps_ = {1};
    for (int t = 2; t <= c_.gpus_per_node && t <= w_.gpus; t *= 2) {
      if (m_.heads % t == 0 && m_.kv_heads % t == 0) tps_.push_back(t);
    }
    pps_ = {1};
    for (int p = 2; p <= m_.layers && p <= w_.gpus && p <= 64; p *= 2) pps_.push_back(p);
    cps_ = {1};
    for (int c = 2; c <= 8 && w_.seq % (2 * c) == 0 && w_.seq / c >= 4096; c *= 2) {
      cps_.push_back(c);
    }
    scheds_ = {0, 1, 2, 4};
    if (m_.moe.enabled()) {
      // Expert parallelism: powers of two dividing the experts, up to the
      // experts and 64 x a node's GPUs (ep x etp must also divide a
      // stage's ranks: ResolveMesh refuses the rest).
      for (int64_t e = 1; e <= m_.moe.experts && e <= 64 * c_.gpus_per_node && e <= w_.gpus;
           e *= 2) {
        if (m_.moe.experts % e == 0) eps_.push_back(static_cast<int>(e));
      }
    }
  }

  // Tensor-parallel starts: the largest tensor group, the fewest stages
  // whose lower bound fits. A MoE model also starts from no tensor
  // parallelism, each with expert parallelism over a node's GPUs (or the
  // largest that divides the experts below it: Megatron-Core's placement
  // rule, EP x TP inside the NVLink domain).
  void MeshStarts(const Knobs& base, std::vector<Knobs>& starts) {
    if (!m_.moe.enabled()) {
      MeshStart(base, tps_.back(), 1, starts);
      return;
    }
    for (int tp : {1, tps_.back()}) {
      int ep = 1;
      for (int e : eps_) {
        if (int64_t{e} * tp <= c_.gpus_per_node) ep = e;
      }
      MeshStart(base, tp, ep, starts);
    }
  }

  void MeshStart(const Knobs& base, int tp, int ep, std::vector<Knobs>& starts) {
    Knobs k = base;
    k.tp = tp;
    k.ep = ep;
    for (int p : pps_) {
      k.pp = p;
      Canonical(k);
      Workload w = w_;
      w.tp = k.tp;
      w.pp = k.pp;
      w.sp = k.tp > 1;
      w.ep = k.ep;
      StatusOr<scheduler::DeviceMesh> mesh = scheduler::ResolveMesh(PolicyOf(k), w_.gpus);
      if (!k.parallel() || !mesh.ok() || !ValidateWorkload(w).ok()) continue;
      if (MeshLowerBound(k, w, *mesh) <= c_.memory_gib * 1073741824.0) {
        starts.push_back(k);
        return;
      }
    }
  }

  // The least memory a stage of a parallel candidate can take: the first
  // stage's parameters (6 + 12 / data bytes each, sim/parallel_sim.h), the
  // reserve, and with every block recomputed its in-flight inputs and one
  // block's full activations.
  double MeshLowerBound(const Knobs& k, const Workload& w,
                        const scheduler::DeviceMesh& mesh) const {
    // A MoE model's routed experts: / (ep x etp) per rank, their master and
    // moments over the expert-data group.
    const double experts = static_cast<double>(scheduler::ExpertParameterCount(m_));
    const double params = static_cast<double>(scheduler::ParameterCount(m_)) - experts;
    const double d = mesh.size(scheduler::MeshGroup{scheduler::MeshDim::kShard,
                                                    scheduler::MeshDim::kHpz,
                                                    scheduler::MeshDim::kContext});
    const double edp = mesh.size(scheduler::kExpertDataGroup);
    const double states = (6 + 12 / d) * params / (k.tp * k.pp) +
                          (6 + 12 / edp) * experts / (static_cast<double>(k.ep) * k.etp * k.pp);
    const double t = static_cast<double>(w.seq * w.micro_batch) / k.cp;
    const double h = static_cast<double>(m_.hidden);
    const double m = static_cast<double>(w.global_batch) / (w.gpus / (k.tp * k.cp * k.pp)) /
                     w.micro_batch;
    const double held = std::min<double>(m, k.pp);
    const double layers = std::ceil(static_cast<double>(m_.layers) / k.pp);
    const double act = held * layers * 2 * t * h / k.tp + 34 * t * h / k.tp;
    return states + c_.reserved_gib * 1073741824.0 + act;
  }

  const scheduler::ModelSpec& m_;
  const ClusterSpec& c_;
  const Workload& w_;
  const TuneOptions& o_;
  const bool mesh_ = o_.search_mesh && !o_.techniques.any();
  std::vector<int> opts_, loras_;
  std::vector<int64_t> mbs_, merges_;
  std::vector<int> shards_, hpzs_;
  std::vector<int> tps_{1}, pps_{1}, cps_{1}, scheds_{0}, eps_;
  std::map<Knobs, Entry> cache_;
  TuneReport report_;
  int simulated_ = 0;
};

// The techniques every candidate may get, refused up front (naming what)
// rather than as "nothing fits".
Status CheckTechniques(const scheduler::ModelSpec& m, const TuneTechniques& t) {
  if (t.allow_nf4 && t.lora_rank == 0 && !t.allow_lora) {
    return absl::InvalidArgumentError(
        "tune: nf4 freezes the base weights, so it needs LoRA: give --lora-rank=N or allow lora "
        "too (--allow=lora,nf4)");
  }
  Policy p = *scheduler::PolicyPreset("baton");
  const bool lora = t.lora_rank > 0 || t.allow_lora;
  ApplyTechniques(t, t.allow_adamw8bit ? 1 : (t.optimizer == scheduler::OptimizerKind::kAdamW8bit),
                  !lora ? 0 : (t.allow_nf4 || t.base_dtype == scheduler::BaseDtype::kNf4) ? 2 : 1,
                  p);
  BATON_RETURN_IF_ERROR(scheduler::ValidatePolicy(p));
  return scheduler::BuildLayout(m, p.layout, scheduler::Sharding{}).status();
}

}  // namespace

bool TuneTechniques::any() const {
  return optimizer != scheduler::OptimizerKind::kAdamW ||
         recompute != scheduler::Recompute::kFull || lora_rank > 0 ||
         base_dtype != scheduler::BaseDtype::kParam || allow_adamw8bit || allow_lora ||
         allow_nf4;
}

StatusOr<TuneReport> Tune(const scheduler::ModelSpec& model,
                          const ClusterSpec& cluster, const Workload& workload,
                          const TuneOptions& options) {
  BATON_RETURN_IF_ERROR(scheduler::ValidateModelSpec(model));
  BATON_RETURN_IF_ERROR(ValidateCluster(cluster));
  if (options.search_mesh) {
    // Each mesh has its own data ranks: only the sizes are checked here.
    Workload w = workload;
    w.global_batch = w.gpus;
    w.micro_batch = 1;
    BATON_RETURN_IF_ERROR(ValidateWorkload(w));
    if (workload.global_batch < 1 || workload.micro_batch < 1) {
      return absl::InvalidArgumentError("tune: batch sizes must be positive");
    }
  } else {
    BATON_RETURN_IF_ERROR(ValidateWorkload(workload));
  }
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
  BATON_RETURN_IF_ERROR(CheckTechniques(model, options.techniques));
  return Tuner(model, cluster, workload, options).Run();
}

std::string DescribeKnobs(const TuneCandidate& c) {
  const Policy& p = c.policy;
  if (scheduler::IsParallel(p) || p.moe_a2a_overlap) {
    return absl::StrCat(
        "mb=", c.workload.micro_batch, " tp=", p.tensor_parallel,
        p.sequence_parallel ? "+sp" : "", " cp=", p.context_parallel, " pp=",
        p.pipeline_parallel, " vpp=", p.virtual_stages,
        " schedule=", scheduler::PipelineScheduleName(p.pipeline_schedule),
        p.expert_parallel > 1 || p.expert_tensor_parallel > 1
            ? absl::StrCat(" ep=", p.expert_parallel, " etp=", p.expert_tensor_parallel,
                           p.moe_a2a_overlap ? " a2a=overlap" : "")
            : std::string(),
        " data=", c.workload.data_ranks(), " reduce=", DataTypeName(p.reduce_dtype),
        " shard=", p.shard_group, " recompute=",
        p.recompute_blocks < 0 ? std::string("all")
                               : absl::StrCat(p.recompute_blocks, "/stage"));
  }
  return absl::StrCat(
      "mb=", c.workload.micro_batch, " reduce=", DataTypeName(p.reduce_dtype),
      " shard=", p.shard_group, " hpz=", p.hpz_group, " buckets=",
      p.layout.bucket_policy == scheduler::BucketPolicy::kMerge
          ? absl::StrCat("merge:", p.layout.merge_target_bytes >> 20, "MiB")
          : std::string("per_unit"),
      " prefetch=", p.forward_prefetch, "/", p.backward_prefetch,
      " offload=", scheduler::OffloadName(p.offload), " recompute=",
      p.recompute_blocks < 0 ? std::string("all") : absl::StrCat(p.recompute_blocks),
      p.optimizer == scheduler::OptimizerKind::kAdamW8bit ? " optimizer=adamw8bit" : "",
      p.layout.lora_rank > 0 ? absl::StrCat(" lora=", p.layout.lora_rank) : std::string(),
      p.layout.base_dtype == scheduler::BaseDtype::kNf4 ? " base=nf4" : "",
      p.recompute == scheduler::Recompute::kSelective ? " recompute_kind=selective" : "");
}

}  // namespace baton::sim
