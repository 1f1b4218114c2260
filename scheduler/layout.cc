#include "baton/scheduler/layout.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace baton::scheduler {
namespace {

int64_t RoundUp(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

void AddSlot(Bucket& b, const ParamSpec& p, int unit, int64_t granule) {
  ParamSlot slot;
  slot.name = p.name;
  slot.shape = p.shape;
  slot.numel = p.numel;
  slot.unit = unit;
  slot.offset = RoundUp(b.numel, granule);
  b.numel = slot.offset + p.numel;
  b.params.push_back(std::move(slot));
}

}  // namespace

int64_t ModelLayout::total_params() const {
  int64_t n = 0;
  for (const Bucket& b : buckets) {
    for (const ParamSlot& p : b.params) n += p.numel;
  }
  return n;
}

int64_t ModelLayout::trainable_params() const {
  int64_t n = 0;
  for (const Bucket& b : buckets) {
    for (const ParamSlot& p : b.params) n += p.frozen ? 0 : p.numel;
  }
  return n;
}

int64_t ModelLayout::shard_bytes(DataType dtype) const {
  int64_t n = 0;
  for (const Bucket& b : buckets) n += b.shard_numel;
  return n * static_cast<int64_t>(DataTypeSize(dtype));
}

namespace {

// The LoRA options' checks that need no spec.
Status CheckLora(const LayoutOptions& o) {
  if (o.lora_rank < 0 || o.lora_rank > kMaxLoraRank) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout: lora_rank = ", o.lora_rank, " must be in [0, ", kMaxLoraRank, "]"));
  }
  if (o.lora_rank > 0 && (o.lora_targets & kAllLoraTargets) == 0) {
    return absl::InvalidArgumentError("layout: lora_targets names no matrix");
  }
  if ((o.lora_targets & ~kAllLoraTargets) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout: lora_targets has unknown bits ", o.lora_targets));
  }
  if (!(o.lora_alpha > 0) || !std::isfinite(o.lora_alpha)) {
    return absl::InvalidArgumentError(
        absl::StrCat("layout: lora_alpha = ", o.lora_alpha, " must be positive and finite"));
  }
  if (o.base_dtype == BaseDtype::kNf4 && o.lora_rank == 0) {
    return absl::InvalidArgumentError(
        "layout: base_dtype = nf4 stores the base weights frozen in 4 bits, so the "
        "base cannot be trained: set lora_rank > 0 (the adapters train)");
  }
  return absl::OkStatus();
}

// Appends the LoRA adapters of each block's targeted matrices to its unit.
Status AddAdapters(const LayoutOptions& o, std::vector<UnitSpec>& units) {
  for (UnitSpec& u : units) {
    if (u.kind != UnitKind::kBlock) continue;
    std::vector<ParamSpec> adapters;
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (!(o.lora_targets & (1u << t))) continue;
      const std::string name =
          absl::StrCat(u.name, ".", LoraTargetParam(static_cast<LoraTarget>(t)));
      const ParamSpec* w = nullptr;
      for (const ParamSpec& p : u.params) {
        if (p.name == name) w = &p;
      }
      if (w == nullptr || w->shape.size() != 2) {
        return absl::InternalError(absl::StrCat("layout: no matrix ", name));
      }
      const int64_t out = w->shape[0], in = w->shape[1];
      if (o.lora_rank > std::min(out, in)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "layout: lora_rank = ", o.lora_rank, " is larger than the matrix ", name, " [",
            out, " x ", in, "]: the rank of its adapters must be at most ", std::min(out, in)));
      }
      const int64_t r = o.lora_rank;
      adapters.push_back({name + ".lora_a", {r, in}, r * in, false});
      adapters.push_back({name + ".lora_b", {out, r}, out * r, false});
    }
    u.params.insert(u.params.end(), adapters.begin(), adapters.end());
  }
  return absl::OkStatus();
}

// Moves each bucket's routed-expert parameters into a bucket of their own
// right after it (layout.h), renumbering buckets, slots and references.
void SplitExpertBuckets(ModelLayout& l, int64_t granule) {
  std::vector<Bucket> out;
  std::vector<int> own(l.buckets.size());
  // Per old bucket and slot: (new bucket, new slot).
  std::vector<std::vector<std::pair<int, int>>> where(l.buckets.size());
  for (size_t i = 0; i < l.buckets.size(); ++i) {
    const Bucket& b = l.buckets[i];
    Bucket dense = b, experts = b;
    dense.params.clear();
    experts.params.clear();
    dense.numel = experts.numel = 0;
    experts.name = absl::StrCat(b.name, ".experts");
    experts.expert = true;
    experts.adapters = -1;
    experts.resident = false;
    std::vector<std::pair<bool, int>> slot(b.params.size());
    for (size_t k = 0; k < b.params.size(); ++k) {
      ParamSlot p = b.params[k];
      const bool e = p.name.find(".experts.") != std::string::npos;
      Bucket& t = e ? experts : dense;
      p.offset = RoundUp(t.numel, granule);
      t.numel = p.offset + p.numel;
      t.params.push_back(std::move(p));
      slot[k] = {e, static_cast<int>(t.params.size()) - 1};
    }
    own[i] = static_cast<int>(out.size());
    out.push_back(std::move(dense));
    const int exp_id = experts.params.empty() ? -1 : static_cast<int>(out.size());
    if (exp_id >= 0) out.push_back(std::move(experts));
    for (const auto& [e, k] : slot) where[i].push_back({e ? exp_id : own[i], k});
  }
  for (Bucket& b : out) {
    if (b.adapters >= 0) b.adapters = own[b.adapters];
  }
  for (int& b : l.unit_bucket) {
    if (b >= 0) b = own[b];
  }
  if (l.resident_bucket >= 0) l.resident_bucket = own[l.resident_bucket];
  for (std::vector<ParamRef>& refs : l.unit_params) {
    for (ParamRef& r : refs) {
      const auto [b, k] = where[r.bucket][r.slot];
      r.bucket = b;
      r.slot = k;
    }
  }
  l.buckets = std::move(out);
}

bool IsAdapter(const ParamSpec& p) {
  const size_t n = p.name.size();
  return n > 7 && (p.name.compare(n - 7, 7, ".lora_a") == 0 ||
                   p.name.compare(n - 7, 7, ".lora_b") == 0);
}

}  // namespace

StatusOr<ModelLayout> BuildLayout(const ModelSpec& spec,
                                  const LayoutOptions& options,
                                  const Sharding& sharding) {
  BATON_RETURN_IF_ERROR(ValidateModelSpec(spec));
  if (sharding.ranks < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout: sharding over ", sharding.ranks, " ranks; it must be at least 1"));
  }
  if (options.bucket_policy == BucketPolicy::kMerge &&
      options.merge_target_bytes <= 0) {
    return absl::InvalidArgumentError(
        "layout: merge_target_bytes must be positive for the merge policy");
  }
  if (sharding.block < 1 || sharding.block > kMaxShardingBlock) {
    return absl::InvalidArgumentError(absl::StrCat(
        "layout: sharding block ", sharding.block, " must be in [1, ", kMaxShardingBlock,
        "]"));
  }
  if (sharding.dtype == DataType::kI32) {
    return absl::InvalidArgumentError(
        "layout: param_dtype must be a floating type");
  }
  BATON_RETURN_IF_ERROR(CheckLora(options));
  ModelLayout layout;
  layout.spec = spec;
  layout.units = BuildUnits(spec);
  const bool lora = options.lora_rank > 0;
  if (lora) BATON_RETURN_IF_ERROR(AddAdapters(options, layout.units));
  layout.options = options;
  layout.sharding = sharding;
  const int n_units = static_cast<int>(layout.units.size());
  const int64_t elem = static_cast<int64_t>(DataTypeSize(sharding.dtype));
  // 16 bytes in the smaller of the parameter dtype and fp32 master,
  // and a multiple of the sharding's block (the 8-bit optimizer's, NF4's).
  const int64_t granule = std::lcm(16 / std::min<int64_t>(elem, 4), sharding.block);
  const int64_t shards = sharding.shard ? sharding.ranks : 1;
  // Without sharding (DDP) nothing but a tied embedding is resident.
  const bool resident_small = options.resident_small_params && sharding.shard;

  auto is_resident = [&](const UnitSpec& u, const ParamSpec& p) {
    if (IsAdapter(p)) return false;
    if (spec.tie_embeddings && u.kind == UnitKind::kEmbedding) return true;
    if (!resident_small) return false;
    return options.resident_max_numel > 0 ? p.numel <= options.resident_max_numel
                                          : p.small;
  };

  Bucket resident;
  resident.name = "resident";
  resident.resident = true;
  // Own buckets (frozen under LoRA) in forward order, and each one's
  // adapter bucket (empty params: none).
  std::vector<Bucket> buckets, adapters;
  // An own bucket of adapters alone: a unit whose base is all resident
  // (zero3's small-parameter rule on a small model) trains its adapters in
  // a bucket of its own.
  std::vector<bool> adapters_only;
  std::vector<int> unit_own(n_units, -1);
  // Slot positions before the final bucket ids: kind 0 own, 1 adapter, 2
  // resident; index into buckets / adapters; slot.
  struct Ref {
    int kind, index, slot;
  };
  std::vector<std::vector<Ref>> refs(n_units);
  int tied_slot = -1;
  for (int u = 0; u < n_units; ++u) {
    const UnitSpec& unit = layout.units[u];
    bool has_own = false, has_adapters = false;
    int64_t own_numel = 0;
    for (const ParamSpec& p : unit.params) {
      has_adapters |= IsAdapter(p);
      if (!is_resident(unit, p) && !IsAdapter(p)) {
        has_own = true;
        own_numel += p.numel;
      }
    }
    if (!has_own && has_adapters) {
      Bucket b;
      b.name = absl::StrCat(unit.name, ".lora");
      b.units.push_back(u);
      buckets.push_back(std::move(b));
      adapters.emplace_back();
      adapters_only.push_back(true);
      unit_own[u] = static_cast<int>(buckets.size()) - 1;
    } else if (has_own) {
      const int64_t unit_bytes = own_numel * elem;
      const bool merge =
          options.bucket_policy == BucketPolicy::kMerge && !buckets.empty() &&
          !buckets.back().units.empty() && !adapters_only.back() &&
          buckets.back().units.back() == u - 1 &&
          (buckets.back().numel + own_numel) * elem <=
              options.merge_target_bytes &&
          unit_bytes <= options.merge_target_bytes;
      if (!merge) {
        Bucket b;
        b.name = unit.name;
        buckets.push_back(std::move(b));
        adapters.emplace_back();
        adapters_only.push_back(false);
      } else {
        buckets.back().name =
            absl::StrCat(layout.units[buckets.back().units.front()].name, "..",
                         unit.name);
      }
      buckets.back().units.push_back(u);
      unit_own[u] = static_cast<int>(buckets.size()) - 1;
    }
    for (const ParamSpec& p : unit.params) {
      const bool frozen = lora && !IsAdapter(p);
      if (is_resident(unit, p)) {
        if (resident.units.empty() || resident.units.back() != u) {
          resident.units.push_back(u);
        }
        AddSlot(resident, p, u, granule);
        resident.params.back().frozen = frozen;
        const int slot = static_cast<int>(resident.params.size()) - 1;
        refs[u].push_back({2, 0, slot});
        if (unit.kind == UnitKind::kEmbedding && spec.tie_embeddings) {
          tied_slot = slot;
        }
      } else if (IsAdapter(p) && adapters_only[unit_own[u]]) {
        Bucket& b = buckets[unit_own[u]];
        AddSlot(b, p, u, granule);
        refs[u].push_back({0, unit_own[u], static_cast<int>(b.params.size()) - 1});
      } else if (IsAdapter(p)) {
        Bucket& a = adapters[unit_own[u]];
        if (a.units.empty() || a.units.back() != u) a.units.push_back(u);
        AddSlot(a, p, u, granule);
        refs[u].push_back({1, unit_own[u], static_cast<int>(a.params.size()) - 1});
      } else {
        Bucket& b = buckets.back();
        AddSlot(b, p, u, granule);
        b.params.back().frozen = frozen;
        refs[u].push_back({0, unit_own[u], static_cast<int>(b.params.size()) - 1});
      }
    }
    if (unit.kind == UnitKind::kLmHead && spec.tie_embeddings) {
      refs[u].push_back({2, 0, tied_slot});
      if (resident.units.empty() || resident.units.back() != u) {
        resident.units.push_back(u);
      }
    }
  }
  // Final ids: each own bucket, then its adapters; the resident bucket last.
  std::vector<Bucket> ordered;
  std::vector<int> own_id(buckets.size()), adapter_id(buckets.size(), -1);
  for (size_t i = 0; i < buckets.size(); ++i) {
    own_id[i] = static_cast<int>(ordered.size());
    Bucket b = std::move(buckets[i]);
    b.frozen = lora && !adapters_only[i];
    bool blocks_only = true;
    for (int u : b.units) blocks_only &= layout.units[u].kind == UnitKind::kBlock;
    b.nf4 = b.frozen && blocks_only && options.base_dtype == BaseDtype::kNf4;
    ordered.push_back(std::move(b));
    if (!adapters[i].params.empty()) {
      adapter_id[i] = static_cast<int>(ordered.size());
      ordered[own_id[i]].adapters = adapter_id[i];
      Bucket a = std::move(adapters[i]);
      a.name = absl::StrCat(ordered[own_id[i]].name, ".lora");
      ordered.push_back(std::move(a));
    }
  }
  int resident_id = -1;
  if (!resident.params.empty()) {
    resident.frozen = lora;
    resident_id = static_cast<int>(ordered.size());
    ordered.push_back(std::move(resident));
  }
  layout.buckets = std::move(ordered);
  layout.unit_bucket.assign(n_units, -1);
  layout.unit_params.resize(n_units);
  for (int u = 0; u < n_units; ++u) {
    if (unit_own[u] >= 0) layout.unit_bucket[u] = own_id[unit_own[u]];
    for (const Ref& r : refs[u]) {
      const int id = r.kind == 0 ? own_id[r.index]
                     : r.kind == 1 ? adapter_id[r.index]
                                   : resident_id;
      layout.unit_params[u].push_back({id, r.slot});
    }
  }
  layout.resident_bucket = resident_id;
  if (spec.moe.enabled()) SplitExpertBuckets(layout, granule);
  for (int i = 0; i < static_cast<int>(layout.buckets.size()); ++i) {
    Bucket& b = layout.buckets[i];
    b.id = i;
    b.padded_numel = RoundUp(std::max<int64_t>(b.numel, 1), shards * granule);
    b.shard_numel = b.padded_numel / shards;
  }
  return layout;
}

const char* LoraTargetName(LoraTarget t) {
  static const char* const kNames[] = {"q", "k", "v", "o", "gate", "up", "down"};
  return kNames[static_cast<int>(t)];
}

const char* LoraTargetParam(LoraTarget t) {
  static const char* const kParams[] = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};
  return kParams[static_cast<int>(t)];
}

std::string LoraTargetsName(uint32_t targets) {
  std::string out;
  for (int t = 0; t < kNumLoraTargets; ++t) {
    if (!(targets & (1u << t))) continue;
    if (!out.empty()) out += ",";
    out += LoraTargetName(static_cast<LoraTarget>(t));
  }
  return out;
}

StatusOr<uint32_t> ParseLoraTargets(absl::string_view list) {
  if (list == "all") return kAllLoraTargets;
  uint32_t mask = 0;
  for (absl::string_view name : absl::StrSplit(list, ',')) {
    int found = -1;
    for (int t = 0; t < kNumLoraTargets; ++t) {
      if (name == LoraTargetName(static_cast<LoraTarget>(t))) found = t;
    }
    if (found < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown LoRA target \"", name, "\" (targets: ",
          LoraTargetsName(kAllLoraTargets), ", or all)"));
    }
    mask |= 1u << found;
  }
  return mask;
}

const char* BaseDtypeName(BaseDtype d) { return d == BaseDtype::kNf4 ? "nf4" : "param"; }

StatusOr<BaseDtype> ParseBaseDtype(absl::string_view name) {
  if (name == "param") return BaseDtype::kParam;
  if (name == "nf4") return BaseDtype::kNf4;
  return absl::InvalidArgumentError(absl::StrCat(
      "base dtype must be param (the parameter dtype) or nf4, got \"", name, "\""));
}

}  // namespace baton::scheduler
