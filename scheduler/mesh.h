// The device mesh: every parallel dimension of a job, named once.
//
// A job's ranks form a mesh of named dimensions whose sizes multiply to the
// world size. By default, outermost to innermost (torchtitan's ParallelDims
// order, Megatron-Core's "tp-cp-dp-pp" read from the other end):
//
//   pp            pipeline stages
//   dp_replicate  data-parallel replicas (HSDP's replica groups)
//   dp_shard      data-parallel sharding, outer part
//   hpz           data-parallel sharding, inner part: ZeRO++ hpZ's
//                 secondary-shard group (size 1 without hpZ)
//   cp            context parallelism
//   tp            tensor parallelism
//
// Ranks are numbered row-major over the order: the innermost dimension
// varies fastest, so a group of inner dimensions is a run of consecutive
// ranks. Placement rule: ranks fill nodes in order (gpus_per_node
// consecutive ranks per node), so the innermost dimensions stay inside a
// node while their product is at most the GPUs per node; a group larger
// than a node spans several (the simulator prices the links it crosses:
// sim/collective_cost.h). The order is configurable (any permutation).
//
// A communication group (MeshGroup) is a set of dimensions: the ranks that
// agree on every other dimension's coordinate. The data-shard group, over
// which parameters are sharded, is {dp_shard, hpz}; HSDP's replica group is
// {dp_replicate}; hpZ's group is {hpz}. A rank's position in its group is
// its row-major index over the group's dimensions (in mesh order), and the
// group's index is the row-major index over the other dimensions: these
// are Communicator::Split's key and colour, the same on every backend.
//
// Experts (Megatron-Core's "MoE parallel folding",
// megatron/core/transformer/moe/README.md): the ranks of one pipeline stage
// (tp x cp x dp_replicate x dp_shard x hpz of them) are numbered a second
// time for the expert part of each block, etp x ep x edp (etp innermost,
// then ep, then edp), over the same ranks in the same order: the flat index
// f of a rank within its stage is its row-major index over the non-pp
// dimensions in mesh order, and its expert coordinates are etp = f mod etp,
// ep = (f / etp) mod ep, edp = f / (etp ep). The folded dimensions ep and
// edp (MeshDim::kExpert, kExpertData) take no place in the order and do not
// multiply into the world size; edp is what ep x etp leave of a stage. The
// expert-tensor group is the tensor group itself: etp is 1 or tp (with tp
// the innermost non-pp dimension), which covers Megatron's ETP = 1 for
// fine-grained experts and ETP = TP. So with tp = 1 and ep = 8 on 8-GPU
// nodes, each expert-parallel group is one node's GPUs: ep inside the
// NVLink domain while it fits (the placement rule Megatron-Core's README
// gives: keep EP x TP inside a node), and edp spans the nodes.
//
// Plain value; immutable once built; thread-safe.
#ifndef BATON_SCHEDULER_MESH_H_
#define BATON_SCHEDULER_MESH_H_

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"

namespace baton::scheduler {

enum class MeshDim : uint8_t {
  kPipeline,
  kReplicate,
  kShard,
  kHpz,
  kContext,
  kTensor,
  // Folded (experts, above): not in the order, not in the world size.
  kExpert,      // ep: the ranks an expert layer's tokens are exchanged over
  kExpertData,  // edp: the ranks holding the same experts (their data group)
};
// The dimensions of the order (pp .. tp); the folded ones come after.
inline constexpr int kNumMeshDims = 6;
inline constexpr int kNumAllMeshDims = 8;
// MeshGroup::bits() of every group is below 1 << kNumMeshGroupBits.
inline constexpr int kNumMeshGroupBits = 8;
// "pp", "dp_replicate", "dp_shard", "hpz", "cp", "tp", "ep", "edp".
const char* MeshDimName(MeshDim dim);
// The dimensions of the order only; InvalidArgument listing the names for
// anything else.
StatusOr<MeshDim> ParseMeshDim(absl::string_view name);

// A set of mesh dimensions: the ranks of one communication group.
class MeshGroup {
 public:
  constexpr MeshGroup() = default;  // no dimension: each rank alone
  constexpr MeshGroup(std::initializer_list<MeshDim> dims) {
    for (MeshDim d : dims) bits_ |= Bit(d);
  }
  constexpr bool has(MeshDim d) const { return (bits_ & Bit(d)) != 0; }
  constexpr bool empty() const { return bits_ == 0; }
  constexpr uint8_t bits() const { return bits_; }
  // Its dimensions' names joined by '+' in the default order, e.g.
  // "dp_shard+hpz"; "none" for the empty group.
  std::string name() const;

  friend constexpr bool operator==(MeshGroup a, MeshGroup b) {
    return a.bits_ == b.bits_;
  }
  friend constexpr bool operator!=(MeshGroup a, MeshGroup b) {
    return a.bits_ != b.bits_;
  }
  friend constexpr bool operator<(MeshGroup a, MeshGroup b) {
    return a.bits_ < b.bits_;
  }

 private:
  static constexpr uint8_t Bit(MeshDim d) {
    return static_cast<uint8_t>(1u << static_cast<unsigned>(d));
  }
  uint8_t bits_ = 0;
};

// The groups the data-parallel schedules use.
inline constexpr MeshGroup kDataShardGroup{MeshDim::kShard, MeshDim::kHpz};
inline constexpr MeshGroup kReplicaGroup{MeshDim::kReplicate};
inline constexpr MeshGroup kHpzGroup{MeshDim::kHpz};
// The groups of the other parallel dimensions.
inline constexpr MeshGroup kTensorGroup{MeshDim::kTensor};
inline constexpr MeshGroup kContextGroup{MeshDim::kContext};
inline constexpr MeshGroup kPipelineGroup{MeshDim::kPipeline};
// Experts: the expert-parallel group (dispatch and combine) and the
// expert-data group (expert weights' gathers and gradient reductions).
inline constexpr MeshGroup kExpertGroup{MeshDim::kExpert};
inline constexpr MeshGroup kExpertDataGroup{MeshDim::kExpertData};

// pp, dp_replicate, dp_shard, hpz, cp, tp.
std::vector<MeshDim> DefaultMeshOrder();

// The size of every dimension (1 where a job does not use it). Of the
// folded ones, ep is given and edp is derived by DeviceMesh::Create (a
// given edp is replaced); expert_tensor is etp (1 or tp).
struct MeshSizes {
  std::array<int, kNumAllMeshDims> size{1, 1, 1, 1, 1, 1, 1, 1};
  int expert_tensor = 1;
  int& operator[](MeshDim d) { return size[static_cast<int>(d)]; }
  int operator[](MeshDim d) const { return size[static_cast<int>(d)]; }
  friend bool operator==(const MeshSizes& a, const MeshSizes& b) {
    return a.size == b.size && a.expert_tensor == b.expert_tensor;
  }
};

class DeviceMesh {
 public:
  DeviceMesh() = default;  // one rank

  // InvalidArgument naming the dimension for a size < 1, for a product over
  // 2^30, for an order that is not a permutation of every dimension of the
  // order, and for experts that do not fold: expert_tensor neither 1 nor tp
  // (or > 1 with tp not the innermost non-pp dimension), or ep x etp not
  // dividing a stage's ranks.
  static StatusOr<DeviceMesh> Create(const MeshSizes& sizes,
                                     std::vector<MeshDim> order = DefaultMeshOrder());

  int world_size() const { return world_; }
  // etp: 1 or tp (the expert-tensor group is then the tensor group).
  int expert_tensor() const { return sizes_.expert_tensor; }
  int size(MeshDim d) const { return sizes_[d]; }
  int size(MeshGroup g) const;  // product of its dimensions' sizes
  const MeshSizes& sizes() const { return sizes_; }
  const std::vector<MeshDim>& order() const { return order_; }
  // Ranks between neighbours along `d` (the product of the sizes inside it);
  // 0 for the folded dimensions.
  int stride(MeshDim d) const { return stride_[static_cast<int>(d)]; }

  // World rank `rank`'s coordinate along `d` (0 <= rank < world_size()).
  int coord(int rank, MeshDim d) const;
  // Its position in its group of `g` (Split's key) and that group's index
  // among the groups of `g` (Split's colour).
  int position(int rank, MeshGroup g) const;
  int group_index(int rank, MeshGroup g) const;
  // The world ranks of rank `rank`'s group of `g`, by position.
  std::vector<int> group_ranks(int rank, MeshGroup g) const;

  // "pp=1 dp_replicate=2 dp_shard=4 hpz=1 cp=1 tp=1" in mesh order, then
  // " ep=8 edp=4" (and " etp=2") when experts are folded over it.
  std::string ToString() const;

  friend bool operator==(const DeviceMesh& a, const DeviceMesh& b) {
    return a.sizes_ == b.sizes_ && a.order_ == b.order_;
  }
  friend bool operator!=(const DeviceMesh& a, const DeviceMesh& b) {
    return !(a == b);
  }

 private:
  // Row-major index of `rank`'s coordinates over the dimensions that are
  // (in_group) or are not (!in_group) in `g`.
  int Index(int rank, MeshGroup g, bool in_group) const;
  // The folded dimensions: a rank's flat index in its stage, its expert
  // coordinates, and the world rank of a flat index in pipeline stage `pp`.
  int StageIndex(int rank) const;
  int FoldedCoord(int rank, MeshDim d) const;
  int RankOf(int pp, int stage_index) const;
  int FoldedIndex(int rank, MeshGroup g, bool in_group) const;
  std::vector<int> FoldedGroupRanks(int rank, MeshGroup g) const;

  MeshSizes sizes_;
  std::vector<MeshDim> order_ = DefaultMeshOrder();
  std::array<int, kNumAllMeshDims> stride_{1, 1, 1, 1, 1, 1, 0, 0};
  int stage_ranks_ = 1;  // world / pp
  int world_ = 1;
};

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_MESH_H_
