#include "baton/scheduler/mesh.h"

#include <algorithm>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/comm/factory.h"
#include "baton/runtime/device.h"
#include "baton/scheduler/policy.h"
#include "baton/scheduler/testing/toy_model.h"
#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

MeshSizes Sizes(int pp, int rep, int shard, int hpz, int cp, int tp) {
  MeshSizes s;
  s[MeshDim::kPipeline] = pp;
  s[MeshDim::kReplicate] = rep;
  s[MeshDim::kShard] = shard;
  s[MeshDim::kHpz] = hpz;
  s[MeshDim::kContext] = cp;
  s[MeshDim::kTensor] = tp;
  return s;
}

// Every group of `g` partitions the world; a member's position is its index
// in group_ranks, and all members share one group index.
void CheckGroups(const DeviceMesh& m, MeshGroup g) {
  std::set<int> seen;
  std::set<int> indices;
  for (int r = 0; r < m.world_size(); ++r) {
    const std::vector<int> ranks = m.group_ranks(r, g);
    ASSERT_EQ(static_cast<int>(ranks.size()), m.size(g)) << g.name();
    EXPECT_EQ(ranks[m.position(r, g)], r) << g.name() << " rank " << r;
    for (int q : ranks) {
      EXPECT_EQ(m.group_index(q, g), m.group_index(r, g)) << g.name();
      // Members differ only along the group's dimensions.
      for (int d = 0; d < kNumMeshDims; ++d) {
        const MeshDim dim = static_cast<MeshDim>(d);
        if (!g.has(dim)) {
          EXPECT_EQ(m.coord(q, dim), m.coord(r, dim)) << g.name();
        }
      }
    }
    if (m.position(r, g) == 0) {
      indices.insert(m.group_index(r, g));
      for (int q : ranks) EXPECT_TRUE(seen.insert(q).second) << g.name();
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), m.world_size()) << g.name();
  EXPECT_EQ(static_cast<int>(indices.size()), m.world_size() / m.size(g)) << g.name();
  EXPECT_EQ(*indices.rbegin(), m.world_size() / m.size(g) - 1) << g.name();
}

TEST(MeshTest, RanksAreRowMajorWithTheInnermostFastest) {
  auto m = DeviceMesh::Create(Sizes(2, 1, 3, 1, 1, 4));  // pp 2, dp_shard 3, tp 4
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->world_size(), 24);
  EXPECT_EQ(m->stride(MeshDim::kTensor), 1);
  EXPECT_EQ(m->stride(MeshDim::kShard), 4);
  EXPECT_EQ(m->stride(MeshDim::kPipeline), 12);
  // Rank 17 = pp 1, dp_shard 1, tp 1.
  EXPECT_EQ(m->coord(17, MeshDim::kPipeline), 1);
  EXPECT_EQ(m->coord(17, MeshDim::kShard), 1);
  EXPECT_EQ(m->coord(17, MeshDim::kTensor), 1);
  EXPECT_EQ(m->group_ranks(17, kTensorGroup), (std::vector<int>{16, 17, 18, 19}));
  EXPECT_EQ(m->group_ranks(17, kDataShardGroup), (std::vector<int>{13, 17, 21}));
  EXPECT_EQ(m->group_ranks(17, kPipelineGroup), (std::vector<int>{5, 17}));
  EXPECT_EQ(m->position(17, kPipelineGroup), 1);
  EXPECT_EQ(m->group_index(17, kPipelineGroup), 5);
  EXPECT_EQ(m->ToString(), "pp=2 dp_replicate=1 dp_shard=3 hpz=1 cp=1 tp=4");
  EXPECT_EQ(MeshGroup({MeshDim::kShard, MeshDim::kTensor}).name(), "dp_shard+tp");
  EXPECT_EQ(MeshGroup().name(), "none");
}

TEST(MeshTest, EveryGroupPartitionsTheWorldInAnyOrder) {
  const std::vector<MeshGroup> groups = {
      kDataShardGroup, kReplicaGroup, kHpzGroup, kTensorGroup, kContextGroup,
      kPipelineGroup,  MeshGroup(),   MeshGroup({MeshDim::kShard, MeshDim::kContext}),
      MeshGroup({MeshDim::kPipeline, MeshDim::kTensor}),
  };
  std::vector<MeshDim> reversed = DefaultMeshOrder();
  std::reverse(reversed.begin(), reversed.end());
  for (const auto& order : {DefaultMeshOrder(), reversed}) {
    auto m = DeviceMesh::Create(Sizes(2, 2, 2, 1, 3, 2), order);
    ASSERT_TRUE(m.ok()) << m.status();
    for (MeshGroup g : groups) CheckGroups(*m, g);
  }
  // Reversed, pipeline is innermost: its groups are consecutive ranks.
  auto r = DeviceMesh::Create(Sizes(2, 1, 2, 1, 1, 2), reversed);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->group_ranks(0, kPipelineGroup), (std::vector<int>{0, 1}));
  EXPECT_EQ(r->group_ranks(0, kTensorGroup), (std::vector<int>{0, 4}));
}

// The data-parallel groups of a policy, as they were numbered before the
// mesh: shard group r / S (position r % S), replica group r % S (position
// r / S), hpZ group r / h (position r % h).
TEST(MeshTest, PolicyGroupsKeepTheirNumbering) {
  for (int world : {1, 2, 4, 8, 12, 16}) {
    for (int shard : {0, 1, 2, 4, 6, 8}) {
      for (int hpz : {0, 1, 2, 4}) {
        Policy p = *PolicyPreset("baton");
        p.shard_group = shard;
        p.hpz_group = hpz;
        auto m = ResolveMesh(p, world);
        const int s = shard == 0 ? world : std::min(shard, world);
        const int h = std::min(hpz, world);
        if (world % s != 0 || (h > 0 && s % h != 0)) {
          EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument)
              << world << " " << shard << " " << hpz;
          continue;
        }
        ASSERT_TRUE(m.ok()) << m.status();
        EXPECT_EQ(m->world_size(), world);
        EXPECT_EQ(m->size(kDataShardGroup), s);
        for (int r = 0; r < world; ++r) {
          EXPECT_EQ(m->position(r, kDataShardGroup), r % s);
          EXPECT_EQ(m->group_index(r, kDataShardGroup), r / s);
          EXPECT_EQ(m->position(r, kReplicaGroup), r / s);
          EXPECT_EQ(m->group_index(r, kReplicaGroup), r % s);
          if (h > 0) {
            EXPECT_EQ(m->position(r, kHpzGroup), r % h);
            EXPECT_EQ(m->group_index(r, kHpzGroup), r / h);
          }
        }
        EXPECT_EQ(UsesHpz(p), hpz > 0);
      }
    }
  }
}

TEST(MeshTest, BadMeshesAreRefusedNamingTheProblem) {
  auto zero = DeviceMesh::Create(Sizes(1, 1, 0, 1, 1, 1));
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("dp_shard has size 0"), std::string::npos)
      << zero.status();
  auto huge = DeviceMesh::Create(Sizes(2048, 1024, 1024, 1, 1, 1));
  EXPECT_NE(huge.status().message().find("2^30"), std::string::npos) << huge.status();
  std::vector<MeshDim> dup = DefaultMeshOrder();
  dup[0] = MeshDim::kTensor;
  auto twice = DeviceMesh::Create(Sizes(1, 1, 1, 1, 1, 1), dup);
  EXPECT_NE(twice.status().message().find("names tp twice"), std::string::npos)
      << twice.status();
  auto short_order = DeviceMesh::Create(Sizes(1, 1, 1, 1, 1, 1), {MeshDim::kTensor});
  EXPECT_EQ(short_order.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ParseMeshDim("cp").ok());
  EXPECT_EQ(*ParseMeshDim("dp_replicate"), MeshDim::kReplicate);
  EXPECT_NE(ParseMeshDim("dp").status().message().find("unknown mesh dimension 'dp'"),
            std::string::npos);
}

// The mesh's colour and key make the same groups on a backend: every group
// of a 2 x 2 x 2 (pp x dp_shard x tp) mesh, split from 8 inproc ranks,
// all-reduces the world ranks of exactly its members.
TEST(MeshTest, SplitByTheMeshGivesItsGroupsOnInproc) {
  auto m = DeviceMesh::Create(Sizes(2, 1, 2, 1, 1, 2));
  ASSERT_TRUE(m.ok());
  auto group = testing::CreateInprocGroup(8);
  ASSERT_TRUE(group.ok()) << group.status();
  const std::vector<MeshGroup> groups = {kPipelineGroup, kDataShardGroup, kTensorGroup,
                                         MeshGroup({MeshDim::kShard, MeshDim::kTensor})};
  std::vector<std::string> errors(8);
  testing::RunRanks(8, [&](int r) {
    Communicator& world = *group->comms[r];
    auto stream = group->device->CreateStream();
    if (!stream.ok()) {
      errors[r] = stream.status().ToString();
      return;
    }
    for (MeshGroup g : groups) {
      auto child = world.Split(m->group_index(r, g), m->position(r, g));
      if (!child.ok() || *child == nullptr) {
        errors[r] = absl::StrCat(g.name(), ": split failed");
        return;
      }
      float value = static_cast<float>(r);
      Status st = (*child)->AllReduce(&value, &value, 1, DataType::kF32,
                                      ReduceOp::kSum, **stream, {});
      if (st.ok()) st = (*stream)->Synchronize();
      float want = 0;
      for (int q : m->group_ranks(r, g)) want += static_cast<float>(q);
      if (!st.ok() || value != want || (*child)->rank() != m->position(r, g)) {
        errors[r] = absl::StrCat(g.name(), ": got ", value, " want ", want, " ",
                                 st.ToString());
        return;
      }
    }
  });
  for (int r = 0; r < 8; ++r) EXPECT_EQ(errors[r], "") << "rank " << r;
}

}  // namespace
}  // namespace baton::scheduler

namespace baton::scheduler {
namespace {

// Every group of folded dimension set `g` partitions the world; its
// members share the pipeline coordinate and every folded coordinate
// outside `g`; positions and group indices are Split's key and colour.
void CheckFoldedGroups(const DeviceMesh& m, MeshGroup g) {
  std::set<int> seen, indices;
  for (int r = 0; r < m.world_size(); ++r) {
    const std::vector<int> ranks = m.group_ranks(r, g);
    ASSERT_EQ(static_cast<int>(ranks.size()), m.size(g)) << g.name();
    EXPECT_EQ(ranks[m.position(r, g)], r) << g.name() << " rank " << r;
    for (int q : ranks) {
      EXPECT_EQ(m.group_index(q, g), m.group_index(r, g)) << g.name();
      EXPECT_EQ(m.coord(q, MeshDim::kPipeline), m.coord(r, MeshDim::kPipeline));
      for (MeshDim d : {MeshDim::kExpert, MeshDim::kExpertData}) {
        if (!g.has(d)) {
          EXPECT_EQ(m.coord(q, d), m.coord(r, d)) << g.name();
        }
      }
    }
    if (m.position(r, g) == 0) {
      indices.insert(m.group_index(r, g));
      for (int q : ranks) EXPECT_TRUE(seen.insert(q).second) << g.name();
    }
  }
  EXPECT_EQ(static_cast<int>(seen.size()), m.world_size()) << g.name();
  EXPECT_EQ(static_cast<int>(indices.size()), m.world_size() / m.size(g)) << g.name();
}

TEST(MeshTest, ExpertsFoldOverTheStageRanks) {
  // pp 2, dp 8, tp 2 (32 ranks, 16 per stage); ep 4 with etp 1: an expert
  // group is 4 consecutive ranks of a stage (spanning 2 tp ranks and 2 data
  // ranks), edp = 16 / 4.
  MeshSizes s = Sizes(2, 1, 8, 1, 1, 2);
  s[MeshDim::kExpert] = 4;
  auto m = DeviceMesh::Create(s);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->world_size(), 32);
  EXPECT_EQ(m->size(kExpertGroup), 4);
  EXPECT_EQ(m->size(kExpertDataGroup), 4);
  EXPECT_EQ(m->group_ranks(5, kExpertGroup), (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(m->group_ranks(17, kExpertDataGroup), (std::vector<int>{17, 21, 25, 29}));
  EXPECT_EQ(m->ToString(), "pp=2 dp_replicate=1 dp_shard=8 hpz=1 cp=1 tp=2 ep=4 edp=4");
  CheckFoldedGroups(*m, kExpertGroup);
  CheckFoldedGroups(*m, kExpertDataGroup);
  // etp = tp: the expert group strides over the tensor ranks.
  s.expert_tensor = 2;
  m = DeviceMesh::Create(s);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->size(kExpertDataGroup), 2);
  EXPECT_EQ(m->group_ranks(1, kExpertGroup), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(m->group_ranks(1, kExpertDataGroup), (std::vector<int>{1, 9}));
  CheckFoldedGroups(*m, kExpertGroup);
  CheckFoldedGroups(*m, kExpertDataGroup);
  // Another order: the flat index follows the mesh order.
  MeshSizes o = Sizes(2, 1, 4, 1, 2, 1);
  o[MeshDim::kExpert] = 8;
  auto permuted = DeviceMesh::Create(o, {MeshDim::kReplicate, MeshDim::kShard, MeshDim::kHpz,
                                         MeshDim::kContext, MeshDim::kTensor,
                                         MeshDim::kPipeline});
  ASSERT_TRUE(permuted.ok()) << permuted.status();
  EXPECT_EQ(permuted->group_ranks(0, kExpertGroup),
            (std::vector<int>{0, 2, 4, 6, 8, 10, 12, 14}));
  CheckFoldedGroups(*permuted, kExpertGroup);
  CheckFoldedGroups(*permuted, kExpertDataGroup);
}

TEST(MeshTest, ExpertsThatDoNotFoldAreRefused) {
  MeshSizes s = Sizes(2, 1, 4, 1, 1, 2);  // 8 ranks a stage
  s[MeshDim::kExpert] = 16;
  EXPECT_NE(DeviceMesh::Create(s).status().message().find(
                "ep x etp = 16 does not divide the 8 ranks of a pipeline stage"),
            std::string::npos);
  s[MeshDim::kExpert] = 2;
  s.expert_tensor = 4;
  EXPECT_NE(DeviceMesh::Create(s).status().message().find("etp = 4 must be 1 or tp = 2"),
            std::string::npos);
}

}  // namespace
}  // namespace baton::scheduler
