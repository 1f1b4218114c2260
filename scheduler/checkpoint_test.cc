// Checkpoints on the host runtime with inproc ranks and the toy model
// (exact arithmetic, so a resumed or resharded run must match the
// unsharded reference bit for bit): save / load round trips across
// layouts, the format's checks, damaged files, a disk that fills up, the
// event order of the copies. The kill-during-save trials run in separate
// processes: tests/checkpoint_kill_test.cc.
#include "baton/comm/testing/forwarding_comm.h"
#include "baton/scheduler/checkpoint.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstring>
#include <fstream>
#include <map>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "baton/scheduler/checkpoint_format.h"
#include "baton/scheduler/checkpoint_io.h"
#include "baton/scheduler/checkpoint_plan.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/parallel_graph.h"
#include "baton/scheduler/session.h"
#include "baton/scheduler/tensor_parallel.h"
#include "baton/scheduler/testing/checkpoint_toy.h"
#include "baton/scheduler/testing/fault_fs.h"
#include "baton/scheduler/testing/toy_model.h"
#include "gtest/gtest.h"

namespace baton::scheduler {
namespace {

using testing::Advance;
using testing::CompareCheckpoints;
using testing::CreateInprocGroup;
using testing::FaultFs;
using testing::Initial;
using testing::Micro;
using testing::RunRanks;
using testing::RunToy;
using testing::ToyRunSpec;
using testing::WithMoments;
using testing::ToyModel;

std::string TempDir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string templ = absl::StrCat(base != nullptr ? base : "/tmp", "/", name, "-XXXXXX");
  char* made = mkdtemp(templ.data());
  return made != nullptr ? std::string(made) : std::string();
}

Policy Preset(const std::string& name, int shard_group = -1) {
  return testing::Fp32Preset(name, shard_group);
}

TEST(CheckpointTest, StepDirNames) {
  EXPECT_EQ(StepDirName(10), "step-00000010");
  EXPECT_EQ(StepOfDirName("step-00000010"), 10);
  EXPECT_EQ(StepOfDirName("step-123456789"), 123456789);
  EXPECT_EQ(StepOfDirName("step-0000001x"), -1);
  EXPECT_EQ(StepOfDirName("step-1"), -1);
  EXPECT_EQ(StepOfDirName("latest"), -1);
}

// Every rank's plan together saves every element of every parameter's
// three tensors exactly once (the manifest's own check), under full
// sharding, HSDP, hpZ, DDP (each replica writes a share) and offload.
TEST(CheckpointTest, EveryElementIsSavedOnceUnderEveryLayout) {
  struct Case {
    std::string policy;
    int ranks, shard_group;
  };
  for (const Case& c : {Case{"baton", 8, -1}, Case{"hsdp", 4, 2}, Case{"hsdp", 8, 4},
                        Case{"zeropp", 8, -1}, Case{"ddp", 3, -1}, Case{"zero_offload", 2, -1},
                        Case{"baton", 1, -1}}) {
    SCOPED_TRACE(absl::StrCat(c.policy, " on ", c.ranks));
    const Policy policy = Preset(c.policy, c.shard_group);
    auto graph = BuildStepGraph(Micro(), policy, c.ranks);
    ASSERT_TRUE(graph.ok()) << graph.status();
    Manifest m;
    m.header.params = CheckpointParams(graph->layout);
    m.header.world_size = c.ranks;
    m.header.mesh = graph->mesh.sizes();
    int64_t total = 0;
    for (int r = 0; r < c.ranks; ++r) {
      auto plan = PlanRankSave(*graph, r, m.header.params);
      ASSERT_TRUE(plan.ok()) << plan.status();
      CheckpointFileInfo f;
      f.name = absl::StrCat("r", r);
      f.rank = r;
      f.bytes = plan->file_bytes;
      f.block_crc32c.assign((f.bytes + m.header.block_bytes - 1) / m.header.block_bytes, 0);
      for (const SaveChunk& sc : plan->chunks) f.chunks.push_back(sc.chunk);
      for (const SaveSpan& s : plan->spans) {
        EXPECT_LE(s.first + s.count, graph->buffers[s.buffer].numel);
      }
      total += plan->file_bytes;
      m.files.push_back(f);
    }
    auto parsed = ManifestFromJson(ManifestToJson(m), "test manifest");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(total, ParameterCount(Micro()) * 4 * kNumStateTensors);
  }
}

// Pipeline stages and tensor slices (BuildParallelStep's graphs, as the
// executor runs them): every rank's plan together saves every element of
// the whole model once (the manifest's check), and a load on any of these
// layouts (or the plain one) reads, for every element of every shard it
// holds, the bytes that rank wrote for that very element of the whole
// parameter. The files are simulated: each element's four bytes hold its
// (parameter, tensor, whole index) code.
TEST(CheckpointTest, PipelineStagesAndTensorSlicesMapToTheWholeModel) {
  struct Layout {
    std::string name;
    int pp, tp, world;
  };
  const std::vector<Layout> layouts = {{"plain", 1, 1, 2}, {"pp2", 2, 1, 4}, {"tp2", 1, 2, 4},
                                       {"pp2-tp2", 2, 2, 8}, {"tp2-ddp", 1, 2, 2}};
  auto stage_graphs = [](const Layout& l) -> StatusOr<std::vector<std::shared_ptr<StepGraph>>> {
    Policy p = Preset("fsdp2");
    p.pipeline_parallel = l.pp;
    p.tensor_parallel = l.tp;
    p.micro_steps = l.pp > 1 ? 2 : 1;
    std::vector<std::shared_ptr<StepGraph>> out;
    if (l.pp == 1 && l.tp == 1) {
      BATON_ASSIGN_OR_RETURN(StepGraph g, BuildStepGraph(Micro(), p, l.world));
      out.push_back(std::make_shared<StepGraph>(std::move(g)));
      return out;
    }
    BATON_ASSIGN_OR_RETURN(ParallelStep step, BuildParallelStep(Micro(), p, l.world, 4, 1, {}, {},
                                                                /*plan_memory=*/true,
                                                                /*tensor_slices=*/true));
    for (StepGraph& g : step.stages) out.push_back(std::make_shared<StepGraph>(std::move(g)));
    return out;
  };
  auto graph_of = [](const std::vector<std::shared_ptr<StepGraph>>& stages, int r) {
    return stages.size() == 1 ? stages[0]
                              : stages[stages[0]->mesh.coord(r, MeshDim::kPipeline)];
  };
  auto code = [](int param, int tensor, int64_t whole) {
    return static_cast<uint32_t>(((param * kNumStateTensors + tensor) << 20) + whole);
  };
  const std::vector<CheckpointParam> whole = CheckpointParams(
      BuildLayout(Micro(), Preset("fsdp2").layout, Sharding{}).value());
  for (const Layout& save : layouts) {
    SCOPED_TRACE(absl::StrCat("saved on ", save.name));
    auto stages = stage_graphs(save);
    ASSERT_TRUE(stages.ok()) << stages.status();
    Manifest m;
    m.header.params = CheckpointParamsOf(*(*stages)[0]);
    ASSERT_EQ(m.header.params.size(), whole.size());
    for (size_t i = 0; i < whole.size(); ++i) {
      EXPECT_EQ(m.header.params[i].name, whole[i].name);
      EXPECT_EQ(m.header.params[i].shape, whole[i].shape) << whole[i].name;
    }
    m.header.world_size = save.world;
    m.header.mesh = (*stages)[0]->mesh.sizes();
    std::vector<std::vector<uint32_t>> files;
    int64_t total = 0, strided = 0;
    for (int r = 0; r < save.world; ++r) {
      const StepGraph& g = *graph_of(*stages, r);
      auto plan = PlanRankSave(g, r, m.header.params);
      ASSERT_TRUE(plan.ok()) << plan.status();
      CheckpointFileInfo f;
      f.name = absl::StrCat("r", r);
      f.rank = r;
      f.bytes = plan->file_bytes;
      f.block_crc32c.assign((f.bytes + m.header.block_bytes - 1) / m.header.block_bytes, 0);
      std::vector<uint32_t> data(plan->file_bytes / 4);
      for (const SaveChunk& sc : plan->chunks) {
        f.chunks.push_back(sc.chunk);
        const CheckpointChunk& c = sc.chunk;
        strided += c.runs > 1;
        for (int64_t k = 0; k < c.runs; ++k) {
          for (int64_t i = 0; i < c.end - c.begin; ++i) {
            data[c.run_offset(k) / 4 + i] =
                code(c.param, static_cast<int>(c.tensor), c.run_begin(k) + i);
          }
        }
      }
      total += plan->file_bytes;
      m.files.push_back(f);
      files.push_back(std::move(data));
    }
    // Slices of columns (wo, w_down) go as strided chunks: version 2.
    EXPECT_EQ(strided > 0, save.tp > 1);
    const std::string text = ManifestToJson(m);
    EXPECT_EQ(absl::StrContains(text, "\"version\": 2"), save.tp > 1) << text.substr(0, 200);
    auto parsed = ManifestFromJson(text, "test manifest");
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(total, ParameterCount(Micro()) * 4 * kNumStateTensors);
    for (const Layout& load : layouts) {
      SCOPED_TRACE(absl::StrCat("loaded on ", load.name));
      auto into = stage_graphs(load);
      ASSERT_TRUE(into.ok()) << into.status();
      int64_t read = 0;
      for (int r = 0; r < load.world; ++r) {
        const StepGraph& g = *graph_of(*into, r);
        const int tp = g.mesh.size(MeshDim::kTensor);
        const int tp_rank = g.mesh.coord(r, MeshDim::kTensor);
        auto pieces = PlanRankLoad(*parsed, g, r);
        ASSERT_TRUE(pieces.ok()) << pieces.status();
        // Shard elements read, per (bucket, tensor): each once.
        std::map<std::pair<int, int>, std::vector<int>> seen;
        for (const LoadPiece& lp : *pieces) {
          const Bucket& bk = g.layout.buckets[lp.bucket];
          const int64_t lo =
              g.layout.sharding.shard ? g.mesh.position(r, kDataShardGroup) * bk.shard_numel : 0;
          std::vector<int>& s = seen[{lp.bucket, static_cast<int>(lp.tensor)}];
          s.resize(bk.shard_numel, 0);
          for (int64_t k = 0; k < lp.bytes / 4; ++k) {
            const int64_t flat = lo + lp.shard_elem + k;
            const ParamSlot* slot = nullptr;
            for (const ParamSlot& ps : bk.params) {
              if (flat >= ps.offset && flat < ps.offset + ps.numel) slot = &ps;
            }
            ASSERT_NE(slot, nullptr) << "padding read in bucket " << bk.name;
            int pi = 0;
            while (whole[pi].name != slot->name) ++pi;
            const TensorSplit split =
                tp > 1 ? TensorSplitOf(slot->name, true) : TensorSplit::kReplicated;
            const int64_t w = TensorWholeIndex(split, slot->shape, tp, tp_rank, flat - slot->offset);
            ASSERT_EQ(files[lp.file][lp.file_offset / 4 + k],
                      code(pi, static_cast<int>(lp.tensor), w))
                << slot->name << " element " << flat - slot->offset << " on rank " << r;
            ++s[lp.shard_elem + k];
            ++read;
          }
        }
        // Every parameter element of every bucket the rank holds, once.
        for (const Bucket& bk : g.layout.buckets) {
          if (g.parallel() && g.policy.pipeline_parallel > 1) {
            bool held = false;
            for (const GraphBuffer& b : g.buffers) {
              held |= b.role == BufferRole::kMaster && b.bucket == bk.id;
            }
            if (!held) continue;
          }
          const int64_t lo =
              g.layout.sharding.shard ? g.mesh.position(r, kDataShardGroup) * bk.shard_numel : 0;
          for (int t = 0; t < kNumStateTensors; ++t) {
            const std::vector<int>& s = seen[{bk.id, t}];
            for (int64_t k = 0; k < bk.shard_numel; ++k) {
              bool in_param = false;
              for (const ParamSlot& ps : bk.params) {
                in_param |= lo + k >= ps.offset && lo + k < ps.offset + ps.numel;
              }
              const int got = k < static_cast<int64_t>(s.size()) ? s[k] : 0;
              ASSERT_EQ(got, in_param ? 1 : 0) << bk.name << " shard element " << k;
            }
          }
        }
      }
      EXPECT_GT(read, 0);
    }
  }
}

TEST(CheckpointTest, ManifestChecksItsInvariants) {
  auto graph = BuildStepGraph(Micro(), Preset("baton"), 2);
  ASSERT_TRUE(graph.ok());
  Manifest m;
  m.header.params = CheckpointParams(graph->layout);
  m.header.world_size = 2;
  for (int r = 0; r < 2; ++r) {
    auto plan = PlanRankSave(*graph, r, m.header.params);
    ASSERT_TRUE(plan.ok());
    CheckpointFileInfo f;
    f.name = absl::StrCat("rank", r, ".bin");
    f.rank = r;
    f.bytes = plan->file_bytes;
    f.block_crc32c.assign(1, 0);
    for (const SaveChunk& sc : plan->chunks) f.chunks.push_back(sc.chunk);
    m.files.push_back(f);
  }
  ASSERT_TRUE(ManifestFromJson(ManifestToJson(m), "m").ok());
  // A file dropped: the elements it held are named.
  Manifest gap = m;
  gap.files.pop_back();
  auto st = ManifestFromJson(ManifestToJson(gap), "m.json").status();
  EXPECT_TRUE(absl::StrContains(st.message(), "no file holds elements")) << st;
  EXPECT_TRUE(absl::StartsWith(st.message(), "m.json: ")) << st;
  // A chunk held twice.
  Manifest twice = m;
  twice.files[1].chunks.push_back(twice.files[0].chunks[0]);
  st = ManifestFromJson(ManifestToJson(twice), "m").status();
  EXPECT_TRUE(absl::StrContains(st.message(), "two files hold elements")) << st;
  // Edited by hand: the manifest's own CRC no longer matches.
  std::string text = ManifestToJson(m);
  const size_t at = text.find("\"step\": 0");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 9, "\"step\": 7");
  st = ManifestFromJson(text, "m").status();
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  // Not JSON, another version.
  EXPECT_FALSE(ManifestFromJson("{", "m").ok());
  std::string v3 = ManifestToJson(m);
  v3.replace(v3.find("\"version\": 1"), 12, "\"version\": 3");
  st = ManifestFromJson(v3, "m").status();
  EXPECT_TRUE(absl::StrContains(st.message(), "version 3")) << st;
  // Strided chunks: parameter 0's master as two blocks of columns, one per
  // file (version 2); overlapping columns and a block past the end refused.
  const CheckpointParam& p0 = m.header.params[0];
  ASSERT_EQ(p0.shape.size(), 2u);
  const int64_t rows = p0.shape[0], cols = p0.shape[1];
  Manifest cols2 = m;
  for (CheckpointFileInfo& f : cols2.files) {
    std::vector<CheckpointChunk> kept;
    for (const CheckpointChunk& c : f.chunks) {
      if (c.param != 0 || c.tensor != StateTensor::kMaster) kept.push_back(c);
    }
    f.chunks = kept;
  }
  CheckpointChunk left{0, StateTensor::kMaster, 0, cols / 2, 0, cols, rows};
  CheckpointChunk right{0, StateTensor::kMaster, cols / 2, cols, 0, cols, rows};
  ASSERT_LE(left.bytes(), cols2.files[0].bytes);
  cols2.files[0].chunks.push_back(left);
  cols2.files[1].chunks.push_back(right);
  text = ManifestToJson(cols2);
  EXPECT_TRUE(absl::StrContains(text, "\"version\": 2")) << text.substr(0, 300);
  auto strided = ManifestFromJson(text, "m");
  ASSERT_TRUE(strided.ok()) << strided.status();
  bool found = false;
  for (const CheckpointChunk& c : strided->files[1].chunks) {
    found |= c.param == 0 && c.runs == rows && c.stride == cols && c.begin == cols / 2;
  }
  EXPECT_TRUE(found);
  Manifest overlap = cols2;
  overlap.files[1].chunks.back().begin = cols / 2 - 1;
  st = ManifestFromJson(ManifestToJson(overlap), "m").status();
  EXPECT_TRUE(absl::StrContains(st.message(), "two files hold elements")) << st;
  Manifest past = cols2;
  past.files[1].chunks.back().runs = rows + 1;
  st = ManifestFromJson(ManifestToJson(past), "m").status();
  EXPECT_TRUE(absl::StrContains(st.message(), "past parameter")) << st;
  // A part that says version 1 has no strided chunks.
  std::string part = PartToJson(cols2.header, cols2.files[1]);
  ASSERT_TRUE(PartFromJson(part, "p").ok());
  part.replace(part.find("\"version\":2"), 11, "\"version\":1");
  st = PartFromJson(part, "p").status();
  EXPECT_TRUE(absl::StrContains(st.message(), "is not [param, tensor, begin, end, offset]")) << st;
}

// Saved on 8 ranks fully sharded after 3 steps; loaded on 4 ranks HSDP
// 2 x 2, on 1 rank, and on 3 ranks DDP; each continues 2 steps and
// matches the reference exactly. A save right after the load holds the
// same bits as the original checkpoint (masters and moments resharded).
TEST(CheckpointTest, ResumesExactlyOnAnotherLayout) {
  const std::string root = TempDir("ckpt_reshard");
  ASSERT_FALSE(root.empty());
  const ToyModel::Reference at3 = Advance(Initial(), 8, 3);
  ToyRunSpec save;
  save.policy = Preset("baton");
  save.ranks = 8;
  save.steps = 3;
  save.save_root = root + "/a";
  save.compare = &at3;
  std::vector<SaveStats> stats;
  ASSERT_EQ(RunToy(save, &stats), "");
  int committed = 0;
  for (const SaveStats& s : stats) {
    EXPECT_EQ(s.step, 3);
    EXPECT_EQ(s.dir, root + "/a/step-00000003");
    committed += s.committed;
  }
  EXPECT_GE(committed, 1);
  struct Target {
    std::string policy;
    int ranks, shard_group;
  };
  for (const Target& t : {Target{"hsdp", 4, 2}, Target{"baton", 1, -1}, Target{"ddp", 3, -1}}) {
    SCOPED_TRACE(absl::StrCat(t.policy, " on ", t.ranks));
    // Load and save again at once: the same state, another layout's files.
    ToyRunSpec again;
    again.policy = Preset(t.policy, t.shard_group);
    again.ranks = t.ranks;
    again.load = root + "/a";
    again.save_root = absl::StrCat(root, "/", t.policy, t.ranks);
    again.compare = &at3;
    ASSERT_EQ(RunToy(again), "");
    EXPECT_EQ(CompareCheckpoints(root + "/a", again.save_root), "");
    auto m = ReadManifest(PosixFs(), again.save_root + "/step-00000003");
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->header.world_size, t.ranks);
    EXPECT_EQ(m->header.data_position, 300);
    EXPECT_EQ(m->header.policy_name, t.policy);
    // Continue: the step count and the state carried over.
    const ToyModel::Reference at5 = Advance(at3, t.ranks, 2);
    ToyRunSpec resume;
    resume.policy = again.policy;
    resume.ranks = t.ranks;
    resume.load = root + "/a/step-00000003";
    resume.steps = 2;
    resume.compare = &at5;
    EXPECT_EQ(RunToy(resume), "");
  }
}

// Offloaded state (host masters and moments) saves and loads the same way.
TEST(CheckpointTest, OffloadRoundTrip) {
  const std::string root = TempDir("ckpt_offload");
  const ToyModel::Reference at2 = Advance(Initial(), 2, 2);
  ToyRunSpec save;
  save.policy = Preset("zero_offload");
  save.ranks = 2;
  save.steps = 2;
  save.save_root = root + "/off";
  save.compare = &at2;
  ASSERT_EQ(RunToy(save), "");
  ToyRunSpec to_device = save;
  to_device.policy = Preset("baton");
  to_device.load = root + "/off";
  to_device.steps = 0;
  to_device.save_root = root + "/dev";
  ASSERT_EQ(RunToy(to_device), "");
  EXPECT_EQ(CompareCheckpoints(root + "/off", root + "/dev"), "");
  ToyRunSpec back = save;
  back.load = root + "/dev";
  back.steps = 1;
  back.save_root = "";
  const ToyModel::Reference at3 = Advance(at2, 2, 1);
  back.compare = &at3;
  EXPECT_EQ(RunToy(back), "");
}

// A flipped byte, a truncated file, a missing file: Load refuses with an
// error naming the file; a partial save (no manifest) is skipped.
TEST(CheckpointTest, DamagedFilesAreRefusedByName) {
  const std::string root = TempDir("ckpt_damage");
  ToyRunSpec save;
  save.policy = Preset("baton");
  save.ranks = 2;
  save.steps = 1;
  save.save_root = root;
  ASSERT_EQ(RunToy(save), "");
  const std::string dir = root + "/step-00000001";
  auto m = ReadManifest(PosixFs(), dir);
  ASSERT_TRUE(m.ok()) << m.status();
  ASSERT_EQ(m->files.size(), 2u);
  const std::string victim = dir + "/" + m->files[1].name;
  std::string bytes;
  {
    std::ifstream in(victim, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(bytes.size(), 100u);
  auto load = [&](int ranks) {
    ToyRunSpec l;
    l.policy = Preset("baton");
    l.ranks = ranks;
    l.load = root;
    return RunToy(l);
  };
  auto write = [&](const std::string& b) {
    std::ofstream out(victim, std::ios::binary | std::ios::trunc);
    out.write(b.data(), static_cast<std::streamsize>(b.size()));
  };
  ASSERT_EQ(load(2), "");
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x01;
  write(flipped);
  std::string err = load(1);  // one rank reads every file
  EXPECT_TRUE(absl::StrContains(err, victim)) << err;
  EXPECT_TRUE(absl::StrContains(err, "CRC-32C")) << err;
  EXPECT_TRUE(absl::StrContains(err, "DATA_LOSS")) << err;
  Status verify = VerifyFile(PosixFs(), dir, *m, 1);
  EXPECT_TRUE(absl::StrContains(verify.message(), victim)) << verify;
  EXPECT_TRUE(VerifyFile(PosixFs(), dir, *m, 0).ok());
  write(bytes.substr(0, bytes.size() - 4));
  err = load(2);
  EXPECT_TRUE(absl::StrContains(err, victim)) << err;
  EXPECT_TRUE(absl::StrContains(err, "truncated")) << err;
  ASSERT_EQ(::unlink(victim.c_str()), 0);
  err = load(2);
  EXPECT_TRUE(absl::StrContains(err, victim)) << err;
  EXPECT_TRUE(absl::StrContains(err, "NOT_FOUND")) << err;
  write(bytes);
  EXPECT_EQ(load(2), "");
  // A later save that has no manifest yet is ignored; a damaged manifest
  // is refused by name.
  ASSERT_EQ(::mkdir((root + "/step-00000002").c_str(), 0755), 0);
  auto found = FindCheckpoint(PosixFs(), root);
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(*found, dir);
  {
    std::ofstream(dir + "/manifest.json", std::ios::app) << " ";  // still valid JSON
    std::fstream f(dir + "/manifest.json", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(40);
    f.put('#');
  }
  err = load(2);
  EXPECT_TRUE(absl::StrContains(err, dir + "/manifest.json")) << err;
  auto none = FindCheckpoint(PosixFs(), root + "/nothing");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

// Disk full at every operation of a save: a clear error (naming the step
// directory and "No space"), the previous checkpoint intact and found, no
// manifest in the failed one, and later saves refused (the error sticks).
TEST(CheckpointTest, DiskFullKeepsThePreviousCheckpoint) {
  const std::string root = TempDir("ckpt_full");
  ToyRunSpec first;
  first.policy = Preset("baton");
  first.ranks = 2;
  first.steps = 1;
  first.save_root = root;
  ASSERT_EQ(RunToy(first), "");
  const std::string good = root + "/step-00000001";
  // How many operations a save of step 2 makes.
  FaultFs counter;
  counter.Arm(-1, FaultFs::Fault::kNone);
  ToyRunSpec second = first;
  second.load = root;
  second.save_root = TempDir("ckpt_count");
  second.fs = &counter;
  ASSERT_EQ(RunToy(second), "");
  const int64_t ops = counter.ops();
  ASSERT_GT(ops, 10);
  int failed = 0;
  for (int64_t k = 0; k < ops; ++k) {
    SCOPED_TRACE(absl::StrCat("no space from operation ", k, " of ", ops));
    FaultFs full;
    full.Arm(k, FaultFs::Fault::kNoSpace);
    second.load = good;
    second.save_root = root;
    second.fs = &full;
    const std::string err = RunToy(second);
    if (!err.empty()) {
      ++failed;
      EXPECT_TRUE(absl::StrContains(err, "No space left on device")) << err;
      EXPECT_TRUE(absl::StrContains(err, "step-00000002")) << err;
      EXPECT_TRUE(absl::StrContains(err, "RESOURCE_EXHAUSTED")) << err;
    }
    // The previous checkpoint is whole; the newest complete one (step 1,
    // or step 2 when the failure came after a rank's commit) loads.
    auto found = FindCheckpoint(PosixFs(), root);
    ASSERT_TRUE(found.ok()) << found.status();
    if (err.empty()) {
      EXPECT_EQ(*found, root + "/step-00000002");
    }
    EXPECT_TRUE(*found == good || *found == root + "/step-00000002") << *found;
    for (const std::string& dir : {good, *found}) {
      ToyRunSpec check = first;
      check.load = dir;
      check.steps = 0;
      check.save_root = "";
      EXPECT_EQ(RunToy(check), "") << dir;
    }
    // Start the next trial from step 1 alone.
    const std::string partial = root + "/step-00000002";
    auto names = PosixFs().List(partial);
    if (names.ok()) {
      for (const std::string& n : *names) ::unlink((partial + "/" + n).c_str());
    }
    ::rmdir(partial.c_str());
  }
  // Every operation up to the manifest's commit fails the save.
  EXPECT_GE(failed, ops / 2);
}

// A failed save sticks: the next Save returns its error and issues nothing.
TEST(CheckpointTest, FailedSaveSticks) {
  const std::string root = TempDir("ckpt_sticky");
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  auto graph = BuildStepGraph(Micro(), Preset("baton"), 1);
  ASSERT_TRUE(graph.ok());
  auto exec = Executor::Create(*graph, *group->device, *group->comms[0]);
  ASSERT_TRUE(exec.ok());
  ASSERT_TRUE((*exec)->InitParameters([](const ParamSlot&, float* v) { v[0] = 1; }).ok());
  FaultFs full;
  full.Arm(0, FaultFs::Fault::kNoSpace);
  SaveOptions so;
  so.root = root;
  so.fs = &full;
  ASSERT_TRUE((*exec)->Save(so).ok());
  const Status first = (*exec)->WaitForSave();
  EXPECT_EQ(first.code(), absl::StatusCode::kResourceExhausted) << first;
  so.fs = nullptr;
  EXPECT_EQ((*exec)->Save(so), first);
  EXPECT_EQ((*exec)->WaitForSave(), first);
  SaveOptions none;
  EXPECT_EQ((*exec)->Save(none).code(), absl::StatusCode::kInvalidArgument);
}

// An earlier save of the same step that never committed (its files, of
// another nonce, still in the directory) and a complete checkpoint of the
// same step are replaced whole: afterwards the directory holds exactly the
// new save's files.
TEST(CheckpointTest, ASecondSaveOfAStepReplacesTheFirstWhole) {
  const std::string root = TempDir("ckpt_twice");
  ToyRunSpec save;
  save.policy = Preset("baton");
  save.ranks = 2;
  save.steps = 2;
  save.save_root = root;
  ASSERT_EQ(RunToy(save), "");
  const std::string dir = root + "/step-00000002";
  auto first = ReadManifest(PosixFs(), dir);
  ASSERT_TRUE(first.ok());
  // Leave a stray part of a save that never finished.
  std::ofstream(dir + "/rank-00001-00000000000000aa.json") << "{}";
  ASSERT_EQ(RunToy(save), "");
  auto second = ReadManifest(PosixFs(), dir);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(first->header.nonce, second->header.nonce);
  auto names = PosixFs().List(dir);
  ASSERT_TRUE(names.ok());
  // The manifest, and per rank its data file and its part.
  EXPECT_EQ(names->size(), 1u + 2u * 2u) << absl::StrJoin(*names, " ");
  for (const std::string& n : *names) {
    EXPECT_TRUE(n == "manifest.json" ||
                absl::StrContains(n, absl::StrFormat("%016x", second->header.nonce)))
        << n;
  }
  ToyRunSpec load = save;
  load.load = root;
  load.steps = 0;
  load.save_root = "";
  EXPECT_EQ(RunToy(load), "");
}

TEST(CheckpointTest, AnotherModelIsRefusedNamingTheParameter) {
  const std::string root = TempDir("ckpt_model");
  ToyRunSpec save;
  save.policy = Preset("baton");
  save.ranks = 1;
  save.save_root = root;
  ASSERT_EQ(RunToy(save), "");
  ModelSpec other = Micro();
  other.hidden = 64;
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  auto graph = BuildStepGraph(other, Preset("baton"), 1);
  ASSERT_TRUE(graph.ok());
  auto exec = Executor::Create(*graph, *group->device, *group->comms[0]);
  ASSERT_TRUE(exec.ok());
  const Status st = (*exec)->Load(root).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "embedding.tok_embeddings.weight")) << st;
  EXPECT_TRUE(absl::StrContains(st.message(), "shape")) << st;
}

// A communicator whose checkpoint broadcast is held at a gate on its
// stream until the test opens it: the save's copies (behind it on the
// checkpoint stream) cannot run before then.
class GatedComm final : public baton::testing::ForwardingComm {
 public:
  GatedComm(Communicator& base, std::shared_future<void> gate)
      : ForwardingComm(base), gate_(gate) {}
  Status Broadcast(const void* s, void* r, size_t n, DataType t, int root, Stream& st,
                   const CollectiveOptions& o) override {
    if (o.tag == kCheckpointTag) {
      auto gate = gate_;
      BATON_RETURN_IF_ERROR(st.Enqueue([gate]() {
        gate.wait();
        return absl::OkStatus();
      }));
    }
    return ForwardingComm::Broadcast(s, r, n, t, root, st, o);
  }

 private:
  std::shared_future<void> gate_;
};

// On the compute stream, at the first optimizer node after a save: before
// its waits, tells the test it got there; after them (before its work),
// checks that the save's copies are done.
class CopiesDoneObserver final : public NodeObserver {
 public:
  Executor* exec = nullptr;
  int checked = 0;
  std::promise<void> reached;
  Status Observe(int node, int64_t, Point point, Stream& s) override {
    if (exec->graph().nodes[node].kind != NodeKind::kOptimizer) return absl::OkStatus();
    Event* copied = exec->SaveCopiesEvent();
    if (copied == nullptr) return absl::OkStatus();
    if (point == Point::kBeforeWaits && !signalled_) {
      signalled_ = true;
      return s.Enqueue([this]() {
        reached.set_value();
        return absl::OkStatus();
      });
    }
    if (point != Point::kBeforeWork) return absl::OkStatus();
    ++checked;
    return s.Enqueue([copied]() -> Status {
      BATON_ASSIGN_OR_RETURN(const bool done, copied->Query());
      if (!done) return absl::InternalError("an optimizer ran before the checkpoint's copies");
      return absl::OkStatus();
    });
  }

 private:
  bool signalled_ = false;
};

// The step after a save starts at once (Step returns while the copies are
// held back) and its optimizer waits for them on the device: the state
// saved is the state of the save's step, bit for bit.
TEST(CheckpointTest, TheNextStepsOptimizerWaitsForTheCopies) {
  const std::string root = TempDir("ckpt_order");
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  std::promise<void> open;
  GatedComm comm(*group->comms[0], open.get_future().share());
  CopiesDoneObserver observer;
  ExecutorOptions options;
  options.observer = &observer;
  // Wide enough (about 1M parameters) that the copies take milliseconds,
  // so an optimizer not ordered after them would run first.
  ModelSpec wide = Micro();
  wide.hidden = 256;
  wide.intermediate = 512;
  auto graph = BuildStepGraph(wide, Preset("baton"), 1);
  ASSERT_TRUE(graph.ok());
  auto exec = Executor::Create(*graph, *group->device, comm, options);
  ASSERT_TRUE(exec.ok()) << exec.status();
  observer.exec = exec->get();
  ASSERT_TRUE((*exec)->InitParameters([](const ParamSlot& p, float* v) {
    for (int64_t i = 0; i < p.numel; ++i) v[i] = testing::InitialValue(p, i);
  }).ok());
  ToyModel toy(1);
  const StepCallbacks cb = WithMoments(toy.Callbacks(0));
  ASSERT_TRUE((*exec)->Step(cb).ok());
  SaveOptions so;
  so.root = root;
  ASSERT_TRUE((*exec)->Save(so).ok());
  ASSERT_TRUE((*exec)->Step(cb).ok());  // issued while the copies are held
  // The compute stream got to the first optimizer (its forward and
  // backward ran meanwhile); only now may the copies go.
  observer.reached.get_future().wait();
  open.set_value();
  ASSERT_TRUE((*exec)->Step(cb).ok());
  EXPECT_GT(observer.checked, 0);
  EXPECT_TRUE((*exec)->WaitForSave().ok());
  EXPECT_TRUE((*exec)->Synchronize().ok());
  // What was saved is the state after step 1.
  const ToyModel::Reference at1 = Advance(Initial(wide), 1, 1, wide);
  ToyRunSpec load;
  load.spec = wide;
  load.policy = Preset("baton");
  load.ranks = 1;
  load.load = root;
  load.compare = &at1;
  EXPECT_EQ(RunToy(load), "");
}

// Save and Load refuse inside a step and with an optimizer driver.
class NoopDriver final : public OptimizerDriver {
 public:
  Status Init(ExecutorParts&) override { return absl::OkStatus(); }
  Stream* NodeStream(int, int64_t) override { return nullptr; }
  Stream* BeginNode(int, int64_t) override { return nullptr; }
  Status BeforeWaits(int, int64_t, Stream&) override { return absl::OkStatus(); }
  Status AfterWaits(int, int64_t, Stream&) override { return absl::OkStatus(); }
  StatusOr<bool> Run(int, int64_t, bool, Stream&) override { return false; }
  Status AfterNode(int, int64_t, Stream&) override { return absl::OkStatus(); }
  void EndNode(int, int64_t, const Status&) override {}
  Status Synchronize() override { return absl::OkStatus(); }
  Status CanCapture() const override { return absl::OkStatus(); }
};

TEST(CheckpointTest, RefusedInsideAStepAndWithAnOptimizerDriver) {
  const std::string root = TempDir("ckpt_refused");
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  auto graph = BuildStepGraph(Micro(), Preset("baton"), 1);
  ASSERT_TRUE(graph.ok());
  auto exec = Executor::Create(*graph, *group->device, *group->comms[0]);
  ASSERT_TRUE(exec.ok());
  SaveOptions so;
  so.root = root;
  ASSERT_TRUE((*exec)->BeginStep().ok());
  EXPECT_EQ((*exec)->Save(so).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ((*exec)->Load(root).status().code(), absl::StatusCode::kFailedPrecondition);
  ExecutorOptions options;
  options.optimizer_driver = [] { return std::make_unique<NoopDriver>(); };
  auto driven = Executor::Create(*graph, *group->device, *group->comms[0], options);
  ASSERT_TRUE(driven.ok()) << driven.status();
  const Status st = (*driven)->Save(so);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(st.message(), "ZenFlow")) << st;
  // A LoRA run (frozen base buckets without a master): refused by the
  // check trainers call before training, and by Save.
  Policy lora = Preset("baton");
  lora.layout.lora_rank = 2;
  const Status why = CheckCheckpointable(lora);
  EXPECT_EQ(why.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(why.message(), "LoRA")) << why;
  auto lora_graph = BuildStepGraph(Micro(), lora, 1);
  ASSERT_TRUE(lora_graph.ok()) << lora_graph.status();
  auto lora_exec = Executor::Create(*lora_graph, *group->device, *group->comms[0]);
  ASSERT_TRUE(lora_exec.ok()) << lora_exec.status();
  EXPECT_EQ((*lora_exec)->Save(so).code(), absl::StatusCode::kFailedPrecondition);
}

// The session saves and loads between steps and refuses inside one,
// naming the hook the plan expects.
TEST(CheckpointTest, SessionSavesAndLoadsBetweenSteps) {
  const std::string root = TempDir("ckpt_session");
  auto group = CreateInprocGroup(1);
  ASSERT_TRUE(group.ok());
  auto session = Session::Create(Micro(), Preset("baton"), *group->device, *group->comms[0]);
  ASSERT_TRUE(session.ok()) << session.status();
  Session& s = **session;
  ASSERT_TRUE(s.executor().InitParameters([](const ParamSlot& p, float* v) {
    for (int64_t i = 0; i < p.numel; ++i) v[i] = testing::InitialValue(p, i);
  }).ok());
  ToyModel toy(1);
  ASSERT_TRUE(s.executor().Step(toy.Callbacks(0)).ok());
  SaveOptions so;
  so.root = root;
  so.data_position = 7;
  ASSERT_TRUE(s.BeginStep().ok());
  const Status inside = s.Save(so);
  EXPECT_EQ(inside.code(), absl::StatusCode::kFailedPrecondition) << inside;
  EXPECT_TRUE(absl::StrContains(inside.message(), "PreForward(embedding)")) << inside;
  EXPECT_EQ(s.Load(root).status().code(), absl::StatusCode::kFailedPrecondition);
  auto other = Session::Create(Micro(), Preset("baton"), *group->device, *group->comms[0]);
  ASSERT_TRUE(other.ok());
  Session& fresh = **other;
  ASSERT_TRUE(fresh.executor().InitParameters([](const ParamSlot& p, float* v) {
    for (int64_t i = 0; i < p.numel; ++i) v[i] = testing::InitialValue(p, i);
  }).ok());
  ASSERT_TRUE(fresh.executor().Step(toy.Callbacks(0)).ok());
  ASSERT_TRUE(fresh.Save(so).ok());
  ASSERT_TRUE(fresh.WaitForSave().ok());
  auto third = Session::Create(Micro(), Preset("baton"), *group->device, *group->comms[0]);
  ASSERT_TRUE(third.ok());
  auto info = (*third)->Load(root);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->step, 1);
  EXPECT_EQ(info->data_position, 7);
  EXPECT_EQ(info->world_size, 1);
  EXPECT_EQ((*third)->executor().steps_issued(), 1);
  EXPECT_EQ(ToyModel::CompareShards((*third)->executor(), Advance(Initial(), 1, 1)), "");
}

}  // namespace
}  // namespace baton::scheduler
