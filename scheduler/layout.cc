#include "baton/scheduler/layout.h"

#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"

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

int64_t ModelLayout::shard_bytes(DataType dtype) const {
  int64_t n = 0;
  for (const Bucket& b : buckets) n += b.shard_numel;
  return n * static_cast<int64_t>(DataTypeSize(dtype));
}

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
  ModelLayout layout;
  layout.spec = spec;
  layout.units = BuildUnits(spec);
  layout.options = options;
  layout.sharding = sharding;
  const int n_units = static_cast<int>(layout.units.size());
  const int64_t elem = static_cast<int64_t>(DataTypeSize(sharding.dtype));
  // 16 bytes in the smaller of the parameter dtype and fp32 master.
  // and a multiple of the sharding's block (the 8-bit optimizer's).
  const int64_t granule = std::lcm(16 / std::min<int64_t>(elem, 4), sharding.block);
  const int64_t shards = sharding.shard ? sharding.ranks : 1;
  // Without sharding (DDP) nothing but a tied embedding is resident.
  const bool resident_small = options.resident_small_params && sharding.shard;

  auto is_resident = [&](const UnitSpec& u, const ParamSpec& p) {
    if (spec.tie_embeddings && u.kind == UnitKind::kEmbedding) return true;
    if (!resident_small) return false;
    return options.resident_max_numel > 0 ? p.numel <= options.resident_max_numel
                                          : p.small;
  };

  Bucket resident;
  resident.name = "resident";
  resident.resident = true;
  std::vector<Bucket> buckets;
  layout.unit_bucket.assign(n_units, -1);
  layout.unit_params.resize(n_units);
  // Slot positions, filled before buckets get final ids.
  std::vector<std::vector<std::pair<int, int>>> refs(n_units);  // (-1: resident)
  int tied_slot = -1;
  for (int u = 0; u < n_units; ++u) {
    const UnitSpec& unit = layout.units[u];
    bool has_own = false;
    for (const ParamSpec& p : unit.params) has_own |= !is_resident(unit, p);
    if (has_own) {
      const int64_t unit_bytes = unit.numel() * elem;
      const bool merge =
          options.bucket_policy == BucketPolicy::kMerge && !buckets.empty() &&
          !buckets.back().units.empty() &&
          buckets.back().units.back() == u - 1 &&
          (buckets.back().numel + unit.numel()) * elem <=
              options.merge_target_bytes &&
          unit_bytes <= options.merge_target_bytes;
      if (!merge) {
        Bucket b;
        b.name = unit.name;
        buckets.push_back(std::move(b));
      } else {
        buckets.back().name =
            absl::StrCat(layout.units[buckets.back().units.front()].name, "..",
                         unit.name);
      }
      buckets.back().units.push_back(u);
      layout.unit_bucket[u] = static_cast<int>(buckets.size()) - 1;
    }
    for (const ParamSpec& p : unit.params) {
      if (is_resident(unit, p)) {
        if (resident.units.empty() || resident.units.back() != u) {
          resident.units.push_back(u);
        }
        AddSlot(resident, p, u, granule);
        const int slot = static_cast<int>(resident.params.size()) - 1;
        refs[u].push_back({-1, slot});
        if (unit.kind == UnitKind::kEmbedding && spec.tie_embeddings) {
          tied_slot = slot;
        }
      } else {
        Bucket& b = buckets.back();
        AddSlot(b, p, u, granule);
        refs[u].push_back({layout.unit_bucket[u],
                           static_cast<int>(b.params.size()) - 1});
      }
    }
    if (unit.kind == UnitKind::kLmHead && spec.tie_embeddings) {
      refs[u].push_back({-1, tied_slot});
      if (resident.units.empty() || resident.units.back() != u) {
        resident.units.push_back(u);
      }
    }
  }
  if (!resident.params.empty()) buckets.push_back(std::move(resident));
  const int resident_id =
      !buckets.empty() && buckets.back().resident
          ? static_cast<int>(buckets.size()) - 1
          : -1;
  for (int i = 0; i < static_cast<int>(buckets.size()); ++i) {
    Bucket& b = buckets[i];
    b.id = i;
    b.padded_numel = RoundUp(std::max<int64_t>(b.numel, 1), shards * granule);
    b.shard_numel = b.padded_numel / shards;
  }
  for (int u = 0; u < n_units; ++u) {
    for (const auto& [bucket, slot] : refs[u]) {
      layout.unit_params[u].push_back(
          {bucket < 0 ? resident_id : bucket, slot});
    }
  }
  layout.resident_bucket = resident_id;
  layout.buckets = std::move(buckets);
  return layout;
}

}  // namespace baton::scheduler
