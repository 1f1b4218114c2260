// A run's final parameters gathered from the ranks' master shards, and
// their distance from another run's (train_tiny --check-reference compares
// a sharded or pipelined run with the unsharded one).
//
// Each rank reads its executor's fp32 master shards (its stage's buckets
// only, on a pipeline stage) as pieces of whole parameters; the pieces of
// every rank merge into whole parameters by name. Plain functions; the
// executor must be between steps.
#ifndef BATON_EXAMPLES_FINAL_PARAMS_H_
#define BATON_EXAMPLES_FINAL_PARAMS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "baton/runtime/status.h"
#include "baton/scheduler/executor.h"
#include "baton/scheduler/layout.h"

namespace baton::examples {

// Consecutive elements of one parameter.
struct ParamPiece {
  std::string name;
  int64_t numel = 0;   // the whole parameter's
  int64_t offset = 0;  // of values[0] in it
  std::vector<float> values;
};

// Whole parameters by name.
using WholeParams = std::map<std::string, std::vector<float>>;

// This rank's pieces: every bucket of `layout` whose master the executor
// holds, its shard of each. Under tensor parallelism (`tp` > 1) the layout
// is of tensor rank `tp_rank`'s slice (scheduler/tensor_parallel.h) and
// the pieces are placed in the whole parameters (a row-parallel weight's
// slice is one piece per row). Errors of Executor::ReadMaster (other than
// a bucket it does not hold).
StatusOr<std::vector<ParamPiece>> FinalParamPieces(const scheduler::ModelLayout& layout,
                                                   scheduler::Executor& executor, int tp = 1,
                                                   int tp_rank = 0);

// Every rank's pieces merged; InternalError naming a parameter some
// element of which no rank holds.
StatusOr<WholeParams> MergeParamPieces(const std::vector<std::vector<ParamPiece>>& ranks);

// The largest relative difference of a parameter from the reference's,
// ||run - ref|| / ||ref|| (L2 over its elements; ||run - ref|| where ref is
// 0), over every parameter. InternalError when the two hold different
// parameters or shapes.
StatusOr<double> MaxParamDifference(const WholeParams& run, const WholeParams& ref);

}  // namespace baton::examples

#endif  // BATON_EXAMPLES_FINAL_PARAMS_H_
