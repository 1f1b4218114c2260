// Which elements of the training state one rank writes into its
// checkpoint file, and which it reads back from a checkpoint's files, for
// the rank's step graph (its layout, policy and mesh): the layout-specific
// half of scheduler/checkpoint.h, pure functions.
//
// Saving: rank r holds elements [S, S + shard_numel) of every bucket's flat
// buffer (S = its position in the data-shard group x shard_numel; 0 under
// DDP, where it holds whole buckets). The ranks that hold the same elements
// (its replica group under HSDP; every rank under DDP) split that range
// evenly, so each element is written once and the writes are spread over
// the replicas: rank r writes the piece of its replica-group position.
// Its file holds, bucket by bucket and per bucket master, moment1, moment2,
// the parameter elements of that piece (gaps and padding are not saved):
// one chunk per (parameter, tensor) run. The piece is first copied into a
// host staging buffer (spans: one per bucket and tensor), which the file's
// chunks then point into.
//
// Loading: for each bucket, tensor and parameter run of the rank's shard
// (padding stays zero), the byte ranges of the checkpoint's files that
// hold it, found by parameter name: the same layout, or a different rank
// count, policy or mesh.
//
// Pipeline stages: a stage's graph has every bucket of the model in its
// layout but buffers for its own buckets only; a rank saves and loads the
// buckets it holds (another stage's ranks write the others), so the files
// of every stage's ranks tile each parameter as above.
//
// Tensor parallelism (a graph of tensor slices, StepGraph::tensor_slices):
// the layout is of tensor rank t's slice (scheduler/tensor_parallel.h) and
// the chunks are element ranges of the whole parameter: a slice of rows
// (column-parallel linears, vocabulary rows) is one run of it; a slice of
// columns (row-parallel linears) is one run per row: a rank's shard of it
// is a partial first row, its whole rows as one strided chunk
// (CheckpointChunk::runs) and a partial last row. Replicated
// parameters (norms) are written by tensor rank 0 only. The manifest's
// params are the whole model's (CheckpointParamsOf).
//
// Thread-safe (pure).
#ifndef BATON_SCHEDULER_CHECKPOINT_PLAN_H_
#define BATON_SCHEDULER_CHECKPOINT_PLAN_H_

#include <cstdint>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/checkpoint_format.h"
#include "baton/scheduler/step_graph.h"

namespace baton::scheduler {

// Elements [first, first + count) of graph buffer `buffer` (a master or
// moment shard) to staging byte `staging_offset`.
struct SaveSpan {
  int buffer = 0;
  int64_t first = 0;
  int64_t count = 0;
  int64_t staging_offset = 0;
};

// A chunk of the rank's file and where its bytes are in staging.
struct SaveChunk {
  CheckpointChunk chunk;
  int64_t staging_offset = 0;
};

struct RankSavePlan {
  std::vector<SaveSpan> spans;
  std::vector<SaveChunk> chunks;  // in file order (offsets increasing)
  int64_t staging_bytes = 0;
  int64_t file_bytes = 0;
};

// The whole model's parameters of `graph` in model order: its layout's
// (CheckpointParams), with the shapes of the whole parameters when the
// layout is of a tensor slice.
std::vector<CheckpointParam> CheckpointParamsOf(const StepGraph& graph);

// `params` = CheckpointParamsOf(graph) (chunks index it).
// InvalidArgument when the graph lacks a master or moment buffer of a bucket.
StatusOr<RankSavePlan> PlanRankSave(const StepGraph& graph, int rank,
                                    const std::vector<CheckpointParam>& params);

// `bytes` of file `file` (an index into the manifest's files) at
// `file_offset` are elements [shard_elem, ...) of this rank's shard of
// `tensor` of bucket `bucket`.
struct LoadPiece {
  int file = 0;
  int64_t file_offset = 0;
  int64_t bytes = 0;
  int bucket = 0;
  StateTensor tensor = StateTensor::kMaster;
  int64_t shard_elem = 0;
};

// The pieces rank `rank` of `graph` reads (of the buckets it holds), by
// file then offset.
// InvalidArgument naming the parameter when the checkpoint lacks one of
// the layout's parameters, holds one the layout lacks, or has another
// shape for it.
StatusOr<std::vector<LoadPiece>> PlanRankLoad(const Manifest& manifest, const StepGraph& graph,
                                              int rank);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_CHECKPOINT_PLAN_H_
