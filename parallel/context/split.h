// The load-balanced causal split of context parallelism (Megatron-Core's and
// torchtitan's): a sequence of `seq` tokens is cut into 2C equal chunks of
// seq / 2C tokens, and rank r of the context group of C ranks holds chunks
// r and 2C-1-r, in that order, as its local sequence of 2 seq / 2C rows
// (slot 0: chunk r, slot 1: chunk 2C-1-r). Under the causal mask the
// queries of chunk i cost i + 1/2 chunk-pairs of attention (i earlier
// chunks in full, half of their own), so every rank does the same work:
// (r + 1/2) + (2C - 1 - r + 1/2) = 2C chunk-pairs.
//
// Layouts (rows of `row_bytes` bytes, batch-major as everywhere in ops/):
//   full      [batch, seq]                 the unsplit sequences
//   local     [batch, local_seq]           one rank's rows (slot 0, slot 1)
//   by rank   [C, batch, local_seq]        every rank's local rows, rank-
//                                          major: AllGather's output and
//                                          ReduceScatter's input layout
// ContextSplit is a plain value (copyable, thread-compatible). The stream
// calls follow runtime/stream_ops.h's contract: arguments checked first
// (InvalidArgument naming the problem, nothing enqueued), then copies
// enqueued on `stream` (MemcpyAsync, 2 per sequence and rank); buffers must
// be memory of the stream's device, must not overlap, and must stay valid
// until the copies have run.
#ifndef BATON_PARALLEL_CONTEXT_SPLIT_H_
#define BATON_PARALLEL_CONTEXT_SPLIT_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "baton/comm/communicator.h"
#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"

namespace baton::context {

class ContextSplit {
 public:
  // InvalidArgument with one line when cp < 1, seq < 1, or seq does not
  // split into 2 cp equal chunks ("seq 10 does not split into 2 x cp = 6
  // equal chunks").
  static StatusOr<ContextSplit> Create(int64_t seq, int cp);

  int cp() const { return cp_; }
  int64_t seq() const { return seq_; }
  int64_t chunk() const { return seq_ / (2 * cp_); }
  int64_t local_seq() const { return 2 * chunk(); }
  int64_t chunks() const { return 2 * int64_t{cp_}; }

  // The chunk in `slot` (0 or 1) of `rank` (0..cp-1): rank, or 2cp-1-rank.
  int64_t ChunkOf(int rank, int slot) const {
    return slot == 0 ? rank : chunks() - 1 - rank;
  }
  // The sequence position of local row `row` (0..local_seq-1) of `rank`:
  // what RoPE and the loss's targets follow.
  int64_t Position(int rank, int64_t row) const {
    return ChunkOf(rank, static_cast<int>(row / chunk())) * chunk() + row % chunk();
  }
  // Position(rank, row) for every local row.
  std::vector<int64_t> Positions(int rank) const;

  // InvalidArgument unless 0 <= rank < cp.
  Status CheckRank(int rank) const;

 private:
  ContextSplit(int64_t seq, int cp) : seq_(seq), cp_(cp) {}
  int64_t seq_;
  int cp_;
};

// full -> local of `rank`.
Status SplitSequence(Stream& stream, const ContextSplit& split, int rank, int64_t batch,
                     size_t row_bytes, const void* full, void* local);
// by rank -> full (puts every rank's rows back in sequence order).
Status UnsplitSequence(Stream& stream, const ContextSplit& split, int64_t batch,
                       size_t row_bytes, const void* by_rank, void* full);
// full -> by rank (every rank's local rows; UnsplitSequence's inverse).
Status SplitAllRanks(Stream& stream, const ContextSplit& split, int64_t batch,
                     size_t row_bytes, const void* full, void* by_rank);

// Gathers the whole sequences back from the ranks of the context group
// (group.size() == split.cp(), this rank's local rows in `local`): an
// AllGather of `local` into `scratch` ([C, batch, local_seq] rows of
// `row_elems` elements of `type`), then UnsplitSequence into `full`, all on
// `stream` (the collective's ordering and failure rules are
// comm/communicator.h's). Collective: every rank of the group calls it.
Status GatherSequence(Communicator& group, Stream& stream, const ContextSplit& split,
                      int64_t batch, size_t row_elems, DataType type, const void* local,
                      void* scratch, void* full, const CollectiveOptions& options);

}  // namespace baton::context

#endif  // BATON_PARALLEL_CONTEXT_SPLIT_H_
