// The sizes of ZenFlow's graph buffers (Policy::zenflow; step_graph.h), as
// the step graph plans them. The driver that runs ZenFlow
// (optim/zenflow_driver.h) packs its state into them and checks at creation
// that its packing fits.
//
// A matrix is a 2-D parameter; it keeps k = max(1, floor(topk_ratio x
// columns)) columns selected, at most all of them (Policy's
// zenflow_topk_ratio). Plain functions; thread-safe.
#ifndef BATON_SCHEDULER_ZENFLOW_BUFFERS_H_
#define BATON_SCHEDULER_ZENFLOW_BUFFERS_H_

#include <cstdint>

#include "baton/scheduler/layout.h"

namespace baton::scheduler {

// Columns selected of a matrix with `cols` columns (cols >= 1, ratio in
// (0, 1]).
int64_t ZenFlowSelectedColumns(double topk_ratio, int64_t cols);

// Elements of the topk state per bucket and shard position: for each 2-D
// parameter, min(elements in the shard, k x the rows the shard touches),
// summed, maximised over shard positions; times 3 (master, moment1,
// moment2, fp32). At least 3.
int64_t ZenFlowTopkStateNumel(const Bucket& bucket, int shards, double topk_ratio);
// Floats of the bucket's norms buffer: the column counts of its 2-D
// parameters, summed (the same on every rank). At least 1.
int64_t ZenFlowNormsNumel(const Bucket& bucket);

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_ZENFLOW_BUFFERS_H_
