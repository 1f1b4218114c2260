#include "baton/scheduler/checkpoint_plan.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "baton/scheduler/tensor_parallel.h"

namespace baton::scheduler {
namespace {

BufferRole RoleOf(StateTensor t) {
  switch (t) {
    case StateTensor::kMaster: return BufferRole::kMaster;
    case StateTensor::kMoment1: return BufferRole::kMoment1;
    case StateTensor::kMoment2: return BufferRole::kMoment2;
  }
  return BufferRole::kMaster;
}

int FindBuffer(const StepGraph& g, int bucket, BufferRole role) {
  for (int b = 0; b < static_cast<int>(g.buffers.size()); ++b) {
    if (g.buffers[b].role == role && g.buffers[b].bucket == bucket) return b;
  }
  return -1;
}

// The first element of rank's shard in every bucket's flat buffer.
int64_t ShardBegin(const StepGraph& g, const Bucket& bk, int rank) {
  if (!g.layout.sharding.shard) return 0;
  return static_cast<int64_t>(g.mesh.position(rank, kDataShardGroup)) * bk.shard_numel;
}

// The ranks holding the same elements as `rank`.
MeshGroup SameDataGroup(const StepGraph& g) {
  if (g.layout.sharding.shard) return kReplicaGroup;
  return MeshGroup{MeshDim::kReplicate, MeshDim::kShard, MeshDim::kHpz};
}

// The tensor ranks of a graph of tensor slices (1 otherwise).
int TensorRanks(const StepGraph& g) {
  return g.tensor_slices ? g.mesh.size(MeshDim::kTensor) : 1;
}

// The split of a parameter over the tensor ranks (the embedding and head
// by vocabulary rows, as BuildParallelStep's slices hold them).
TensorSplit SplitOf(const StepGraph& g, const std::string& name) {
  return TensorRanks(g) > 1 ? TensorSplitOf(name, /*vocab_parallel=*/true)
                            : TensorSplit::kReplicated;
}

// Elements [slice, slice + count x runs) of a slice parameter are, run k
// of `count` of them, elements [whole + k x stride, ... + count) of the
// whole one (runs > 1: rows of a slice of columns).
struct Run {
  int64_t slice = 0, whole = 0, count = 0, stride = 0, runs = 1;
};

// Elements [a, e) of tensor rank `t`'s slice of parameter `p` as runs of
// the whole parameter (TensorWholeIndex's map): one run; for a slice of
// columns, its rows: a partial first row, the whole rows strided, a
// partial last row.
std::vector<Run> WholeRuns(const StepGraph& g, const ParamSlot& p, int t, int64_t a, int64_t e) {
  const int tp = TensorRanks(g);
  const TensorSplit split = SplitOf(g, p.name);
  auto whole = [&](int64_t i) { return TensorWholeIndex(split, p.shape, tp, t, i); };
  std::vector<Run> runs;
  if (split != TensorSplit::kColumns || p.shape.size() != 2) {
    runs.push_back({a, whole(a), e - a});
    return runs;
  }
  const int64_t cols = p.shape[1];
  int64_t i = a;
  if (i % cols != 0) {  // a partial first row
    const int64_t end = std::min(e, (i / cols + 1) * cols);
    runs.push_back({i, whole(i), end - i});
    i = end;
  }
  if (const int64_t rows = (e - i) / cols; rows > 0) {
    runs.push_back({i, whole(i), cols, cols * tp, rows});
    i += rows * cols;
  }
  if (i < e) runs.push_back({i, whole(i), e - i});  // a partial last row
  return runs;
}

// Whether the graph's rank holds bucket `bk` (a pipeline stage holds its
// own buckets' buffers only).
bool Holds(const StepGraph& g, const Bucket& bk) {
  return FindBuffer(g, bk.id, BufferRole::kMaster) >= 0 ||
         FindBuffer(g, bk.id, BufferRole::kMoment1) >= 0 ||
         FindBuffer(g, bk.id, BufferRole::kMoment2) >= 0;
}

std::string Shape(const std::vector<int64_t>& s) { return absl::StrCat("[", absl::StrJoin(s, ", "), "]"); }

}  // namespace

Status CheckCheckpointable(const Policy& policy) {
  if (policy.zenflow) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoints do not capture ZenFlow's state yet (policy ", policy.name,
        ": column selections, the device state of the selected columns, host accumulators); "
        "checkpoint a run under a policy without zenflow"));
  }
  if (policy.optimizer != OptimizerKind::kAdamW) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoints do not capture ", OptimizerName(policy.optimizer),
        " state yet (block-wise 8-bit moments); use optimizer adamw"));
  }
  if (policy.layout.lora_rank > 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoints do not capture LoRA runs yet (policy ", policy.name, ", lora_rank ",
        policy.layout.lora_rank, ": frozen base buckets have no master, NF4 ones are packed); "
        "checkpoint a run without adapters"));
  }
  return absl::OkStatus();
}

std::vector<CheckpointParam> CheckpointParamsOf(const StepGraph& g) {
  std::vector<CheckpointParam> params = CheckpointParams(g.layout);
  const int tp = TensorRanks(g);
  if (tp == 1) return params;
  for (CheckpointParam& p : params) {
    const TensorSplit split = SplitOf(g, p.name);
    if (split == TensorSplit::kReplicated || p.shape.size() != 2) continue;
    p.shape[split == TensorSplit::kRows ? 0 : 1] *= tp;
    p.numel *= tp;
  }
  return params;
}

StatusOr<RankSavePlan> PlanRankSave(const StepGraph& g, int rank,
                                    const std::vector<CheckpointParam>& params) {
  std::map<std::string, int> index;
  for (size_t i = 0; i < params.size(); ++i) index[params[i].name] = static_cast<int>(i);
  const MeshGroup same = SameDataGroup(g);
  const int64_t replicas = g.mesh.size(same);
  const int64_t position = g.mesh.position(rank, same);
  const int tensor_rank = TensorRanks(g) > 1 ? g.mesh.coord(rank, MeshDim::kTensor) : 0;
  RankSavePlan plan;
  for (const Bucket& bk : g.layout.buckets) {
    if (g.policy.pipeline_parallel > 1 && !Holds(g, bk)) continue;  // another stage's
    const int64_t begin = ShardBegin(g, bk, rank);
    const int64_t per = (bk.shard_numel + replicas - 1) / replicas;
    const int64_t lo = begin + std::min(bk.shard_numel, position * per);
    const int64_t hi = begin + std::min(bk.shard_numel, (position + 1) * per);
    std::vector<const ParamSlot*> slots;
    for (const ParamSlot& p : bk.params) slots.push_back(&p);
    std::sort(slots.begin(), slots.end(),
              [](const ParamSlot* a, const ParamSlot* b) { return a->offset < b->offset; });
    for (int t = 0; t < kNumStateTensors; ++t) {
      const StateTensor tensor = static_cast<StateTensor>(t);
      const int buffer = FindBuffer(g, bk.id, RoleOf(tensor));
      if (buffer < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "checkpoint: the step graph has no ", StateTensorName(tensor), " buffer for bucket ",
            bk.name));
      }
      if (hi <= lo) continue;
      SaveSpan span{buffer, lo - begin, hi - lo, plan.staging_bytes};
      for (const ParamSlot* p : slots) {
        const int64_t a = std::max(lo, p->offset), e = std::min(hi, p->offset + p->numel);
        if (a >= e) continue;
        // Every tensor rank holds a replicated parameter whole: rank 0 writes it.
        if (tensor_rank != 0 && SplitOf(g, p->name) == TensorSplit::kReplicated) continue;
        for (const Run& run : WholeRuns(g, *p, tensor_rank, a - p->offset, e - p->offset)) {
          SaveChunk c;
          c.chunk.param = index.at(p->name);
          c.chunk.tensor = tensor;
          c.chunk.begin = run.whole;
          c.chunk.end = run.whole + run.count;
          if (run.runs > 1) {
            c.chunk.stride = run.stride;
            c.chunk.runs = run.runs;
          }
          c.chunk.offset = plan.file_bytes;
          c.staging_offset = span.staging_offset + (p->offset + run.slice - lo) * 4;
          plan.file_bytes += c.chunk.bytes();
          plan.chunks.push_back(c);
        }
      }
      plan.staging_bytes += span.count * 4;
      plan.spans.push_back(span);
    }
  }
  return plan;
}

StatusOr<std::vector<LoadPiece>> PlanRankLoad(const Manifest& m, const StepGraph& g, int rank) {
  const auto& mparams = m.header.params;
  std::map<std::string, int> index;
  for (size_t i = 0; i < mparams.size(); ++i) index[mparams[i].name] = static_cast<int>(i);
  // The manifest's chunks per (parameter, tensor), by begin.
  struct Held {
    int64_t begin, end, offset;
    int file;
  };
  std::vector<std::vector<Held>> held(mparams.size() * kNumStateTensors);
  for (size_t f = 0; f < m.files.size(); ++f) {
    for (const CheckpointChunk& c : m.files[f].chunks) {
      for (int64_t k = 0; k < c.runs; ++k) {  // a strided chunk's runs
        held[c.param * kNumStateTensors + static_cast<int>(c.tensor)].push_back(
            {c.run_begin(k), c.run_begin(k) + (c.end - c.begin), c.run_offset(k),
             static_cast<int>(f)});
      }
    }
  }
  for (auto& v : held) {
    std::sort(v.begin(), v.end(), [](const Held& a, const Held& b) { return a.begin < b.begin; });
  }
  const std::string model = absl::StrCat("the checkpoint (model ", m.header.model, ")");
  const std::vector<CheckpointParam> mine = CheckpointParamsOf(g);
  for (const CheckpointParam& p : mine) {
    auto it = index.find(p.name);
    if (it == index.end()) {
      return absl::InvalidArgumentError(absl::StrCat(model, " has no parameter ", p.name,
                                                     ", which model ", g.layout.spec.name, " has"));
    }
    if (mparams[it->second].shape != p.shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          model, " holds parameter ", p.name, " with shape ", Shape(mparams[it->second].shape),
          "; model ", g.layout.spec.name, " has ", Shape(p.shape)));
    }
  }
  if (mine.size() != mparams.size()) {
    for (const CheckpointParam& p : mparams) {
      if (std::none_of(mine.begin(), mine.end(),
                       [&](const CheckpointParam& q) { return q.name == p.name; })) {
        return absl::InvalidArgumentError(absl::StrCat(model, " holds parameter ", p.name,
                                                       ", which model ", g.layout.spec.name,
                                                       " does not have"));
      }
    }
  }
  const int tensor_rank = TensorRanks(g) > 1 ? g.mesh.coord(rank, MeshDim::kTensor) : 0;
  std::vector<LoadPiece> out;
  for (const Bucket& bk : g.layout.buckets) {
    if (g.policy.pipeline_parallel > 1 && !Holds(g, bk)) continue;  // another stage's
    const int64_t lo = ShardBegin(g, bk, rank), hi = lo + bk.shard_numel;
    for (const ParamSlot& p : bk.params) {
      const int64_t a = std::max(lo, p.offset) - p.offset;
      const int64_t e = std::min(hi, p.offset + p.numel) - p.offset;
      if (a >= e) continue;
      const int pi = index.at(p.name);
      for (const Run& rows : WholeRuns(g, p, tensor_rank, a, e)) {
        for (int64_t k = 0; k < rows.runs; ++k) {
          const int64_t slice = rows.slice + k * rows.count;
          const int64_t ra = rows.whole + k * rows.stride, re = ra + rows.count;
          for (int t = 0; t < kNumStateTensors; ++t) {
            const std::vector<Held>& hv = held[pi * kNumStateTensors + t];
            // The chunks tile the parameter (sorted by begin): the first one
            // that ends after ra, then on while they begin before re.
            auto it = std::upper_bound(hv.begin(), hv.end(), ra,
                                       [](int64_t v, const Held& h) { return v < h.begin; });
            if (it != hv.begin()) --it;
            for (; it != hv.end() && it->begin < re; ++it) {
              const int64_t b = std::max(ra, it->begin), x = std::min(re, it->end);
              if (b >= x) continue;
              out.push_back({it->file, it->offset + (b - it->begin) * 4, (x - b) * 4, bk.id,
                             static_cast<StateTensor>(t), p.offset + slice + (b - ra) - lo});
            }
          }
        }
      }
    }
  }
  std::sort(out.begin(), out.end(), [](const LoadPiece& x, const LoadPiece& y) {
    return x.file != y.file ? x.file < y.file : x.file_offset < y.file_offset;
  });
  return out;
}

}  // namespace baton::scheduler
