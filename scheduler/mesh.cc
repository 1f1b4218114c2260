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
    case MeshDim::kExpert: return "ep";
    case MeshDim::kExpertData: return "edp";
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
  for (int i = 0; i < kNumAllMeshDims; ++i) {
    if (has(static_cast<MeshDim>(i))) names.push_back(MeshDimName(static_cast<MeshDim>(i)));
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
  // The folded expert dimensions over a stage's ranks.
  m.stage_ranks_ = m.world_ / sizes[MeshDim::kPipeline];
  const int etp = sizes.expert_tensor, ep = sizes[MeshDim::kExpert];
  if (etp < 1 || ep < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh: expert sizes ep = ", ep, ", etp = ", etp, " must be >= 1"));
  }
  if (etp > 1) {
    MeshDim innermost = MeshDim::kTensor;
    for (MeshDim d : m.order_) {
      if (d != MeshDim::kPipeline) innermost = d;
    }
    if (etp != sizes[MeshDim::kTensor] || innermost != MeshDim::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat(
          "mesh: etp = ", etp, " must be 1 or tp = ", sizes[MeshDim::kTensor],
          " with tp innermost (the expert-tensor group is the tensor group)"));
    }
  }
  if (m.stage_ranks_ % (int64_t{ep} * etp) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "mesh: ep x etp = ", int64_t{ep} * etp, " does not divide the ", m.stage_ranks_,
        " ranks of a pipeline stage (tp x cp x dp); experts fold over them"));
  }
  m.sizes_[MeshDim::kExpertData] = m.stage_ranks_ / (ep * etp);
  return m;
}

int DeviceMesh::StageIndex(int rank) const {
  int index = 0;
  for (MeshDim d : order_) {
    if (d != MeshDim::kPipeline) index = index * sizes_[d] + coord(rank, d);
  }
  return index;
}

int DeviceMesh::FoldedCoord(int rank, MeshDim d) const {
  const int f = StageIndex(rank), etp = sizes_.expert_tensor, ep = sizes_[MeshDim::kExpert];
  return d == MeshDim::kExpert ? f / etp % ep : f / (etp * ep);
}

int DeviceMesh::RankOf(int pp, int stage_index) const {
  int rank = pp * stride(MeshDim::kPipeline);
  for (auto it = order_.rbegin(); it != order_.rend(); ++it) {
    if (*it == MeshDim::kPipeline) continue;
    rank += stage_index % sizes_[*it] * stride(*it);
    stage_index /= sizes_[*it];
  }
  return rank;
}

namespace {

bool Folded(MeshGroup g) {
  return g.has(MeshDim::kExpert) || g.has(MeshDim::kExpertData);
}

}  // namespace

int DeviceMesh::FoldedIndex(int rank, MeshGroup g, bool in_group) const {
  // Coordinates outermost first: pp, edp, ep, then etp (f mod etp), the
  // last three the folded order of a stage.
  const int f = StageIndex(rank), etp = sizes_.expert_tensor;
  const struct {
    bool member;
    int coord, size;
  } dims[] = {
      {g.has(MeshDim::kPipeline), coord(rank, MeshDim::kPipeline), sizes_[MeshDim::kPipeline]},
      {g.has(MeshDim::kExpertData), FoldedCoord(rank, MeshDim::kExpertData),
       sizes_[MeshDim::kExpertData]},
      {g.has(MeshDim::kExpert), FoldedCoord(rank, MeshDim::kExpert), sizes_[MeshDim::kExpert]},
      {g.has(MeshDim::kTensor), f % etp, etp},
  };
  int index = 0;
  for (const auto& d : dims) {
    if (d.member == in_group) index = index * d.size + d.coord;
  }
  return index;
}

std::vector<int> DeviceMesh::FoldedGroupRanks(int rank, MeshGroup g) const {
  const int etp = sizes_.expert_tensor, ep = sizes_[MeshDim::kExpert];
  const int edp = sizes_[MeshDim::kExpertData];
  const int f = StageIndex(rank);
  const int pp = coord(rank, MeshDim::kPipeline);
  std::vector<int> ranks;
  const int e0 = g.has(MeshDim::kExpertData) ? 0 : f / (etp * ep);
  const int e1 = g.has(MeshDim::kExpertData) ? edp : e0 + 1;
  const int p0 = g.has(MeshDim::kExpert) ? 0 : f / etp % ep;
  const int p1 = g.has(MeshDim::kExpert) ? ep : p0 + 1;
  for (int e = e0; e < e1; ++e) {
    for (int p = p0; p < p1; ++p) ranks.push_back(RankOf(pp, f % etp + etp * (p + ep * e)));
  }
  return ranks;
}

int DeviceMesh::size(MeshGroup g) const {
  int n = 1;
  for (int i = 0; i < kNumAllMeshDims; ++i) {
    if (g.has(static_cast<MeshDim>(i))) n *= sizes_[static_cast<MeshDim>(i)];
  }
  return n;
}

int DeviceMesh::coord(int rank, MeshDim d) const {
  if (d == MeshDim::kExpert || d == MeshDim::kExpertData) return FoldedCoord(rank, d);
  return rank / stride(d) % sizes_[d];
}

int DeviceMesh::Index(int rank, MeshGroup g, bool in_group) const {
  if (Folded(g)) return FoldedIndex(rank, g, in_group);
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
  if (Folded(g)) return FoldedGroupRanks(rank, g);
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
  if (sizes_[MeshDim::kExpert] > 1 || sizes_.expert_tensor > 1) {
    parts.push_back(absl::StrCat("ep=", sizes_[MeshDim::kExpert], " edp=",
                                 sizes_[MeshDim::kExpertData]));
    if (sizes_.expert_tensor > 1) parts.push_back(absl::StrCat("etp=", sizes_.expert_tensor));
  }
  return absl::StrJoin(parts, " ");
}

}  // namespace baton::scheduler
