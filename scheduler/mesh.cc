#include "baton/scheduler/mesh.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace baton::scheduler {
namespace {

constexpr MeshDim kAllDims[kNumMeshDims] = {
    MeshDim::kPipeline, MeshDim::kReplicate, MeshDim::kShard,
    MeshDim::kHpz,      MeshDim::kContext,   MeshDim::kTensor,
};
constexpr int64_t kMaxWorld = int64_t{1} << 30;

}  // namespace

const char* MeshDimName(MeshDim dim) {
  switch (dim) {
    case MeshDim::kPipeline: return "pp";
    case MeshDim::kReplicate: return "dp_replicate";
    case MeshDim::kShard: return "dp_shard";
    case MeshDim::kHpz: return "hpz";
    case MeshDim::kContext: return "cp";
    case MeshDim::kTensor: return "tp";
  }
  return "?";
}

StatusOr<MeshDim> ParseMeshDim(absl::string_view name) {
  for (MeshDim d : kAllDims) {
    if (name == MeshDimName(d)) return d;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown mesh dimension '", name,
      "' (pp, dp_replicate, dp_shard, hpz, cp, tp)"));
}

std::string MeshGroup::name() const {
  std::vector<const char*> names;
  for (MeshDim d : kAllDims) {
    if (has(d)) names.push_back(MeshDimName(d));
  }
  return names.empty() ? "none" : absl::StrJoin(names, "+");
}

std::vector<MeshDim> DefaultMeshOrder() {
  return std::vector<MeshDim>(std::begin(kAllDims), std::end(kAllDims));
}

StatusOr<DeviceMesh> DeviceMesh::Create(const MeshSizes& sizes,
                                        std::vector<MeshDim> order) {
  if (order.size() != static_cast<size_t>(kNumMeshDims)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh order names ", order.size(), " dimensions; it must name each of the ",
        kNumMeshDims, " (pp, dp_replicate, dp_shard, hpz, cp, tp) once"));
  }
  std::array<bool, kNumMeshDims> seen{};
  for (MeshDim d : order) {
    bool& s = seen[static_cast<int>(d)];
    if (s) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh order names ", MeshDimName(d), " twice"));
    }
    s = true;
  }
  int64_t world = 1;
  for (MeshDim d : kAllDims) {
    if (sizes[d] < 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh dimension ", MeshDimName(d), " has size ", sizes[d], "; it must be >= 1"));
    }
    world *= sizes[d];
    if (world > kMaxWorld) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh of more than 2^30 ranks (at ", MeshDimName(d), " = ", sizes[d], ")"));
    }
  }
  DeviceMesh m;
  m.sizes_ = sizes;
  m.order_ = std::move(order);
  m.world_ = static_cast<int>(world);
  int stride = 1;
  for (auto it = m.order_.rbegin(); it != m.order_.rend(); ++it) {
    m.stride_[static_cast<int>(*it)] = stride;
    stride *= sizes[*it];
  }
  return m;
}

int DeviceMesh::size(MeshGroup g) const {
  int n = 1;
  for (MeshDim d : kAllDims) {
    if (g.has(d)) n *= sizes_[d];
  }
  return n;
}

int DeviceMesh::coord(int rank, MeshDim d) const {
  return rank / stride(d) % sizes_[d];
}

int DeviceMesh::Index(int rank, MeshGroup g, bool in_group) const {
  int index = 0;
  for (MeshDim d : order_) {
    if (g.has(d) == in_group) index = index * sizes_[d] + coord(rank, d);
  }
  return index;
}

int DeviceMesh::position(int rank, MeshGroup g) const {
  return Index(rank, g, true);
}

int DeviceMesh::group_index(int rank, MeshGroup g) const {
  return Index(rank, g, false);
}

std::vector<int> DeviceMesh::group_ranks(int rank, MeshGroup g) const {
  // Start from the group's first member (every group coordinate 0), then
  // count over the group's dimensions row-major in mesh order.
  int base = rank;
  std::vector<MeshDim> dims;
  for (MeshDim d : order_) {
    if (!g.has(d)) continue;
    base -= coord(rank, d) * stride(d);
    dims.push_back(d);
  }
  std::vector<int> ranks = {base};
  for (MeshDim d : dims) {
    std::vector<int> next;
    next.reserve(ranks.size() * static_cast<size_t>(sizes_[d]));
    for (int r : ranks) {
      for (int c = 0; c < sizes_[d]; ++c) next.push_back(r + c * stride(d));
    }
    ranks = std::move(next);
  }
  return ranks;
}

std::string DeviceMesh::ToString() const {
  std::vector<std::string> parts;
  for (MeshDim d : order_) parts.push_back(absl::StrCat(MeshDimName(d), "=", sizes_[d]));
  return absl::StrJoin(parts, " ");
}

}  // namespace baton::scheduler
