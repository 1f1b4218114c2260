// Inputs and checks for collectives, the nccl-tests way: every input is a
// small non-negative integer, so every reduction order gives the same bits
// and results are compared exactly (avg: to within one rounding of the
// division).
//
// Inputs come from a hash of (seed, rank, index), so no two ranks, indices
// or seeds repeat a pattern: a chunk in the wrong rank's slot, a shifted
// block or a stale iteration is caught (up to the chance that two small
// integers agree, for every element at once). Without reduction the values
// are below 2^min(exact bits, 16). With a reduction over n ranks they are
// below 2^(exact bits - ceil(log2 n)), so that every partial sum is an
// exact integer: exact bits are 8 for bf16, 11 for f16, 24 for f32, 30 for
// i32 (bf16 over 8 ranks: values in [0, 32)). Past 2^(exact bits - 1) ranks
// each index takes 0 or 1 from at most 2^(exact bits - 1) ranks.
// Used by the collective tests and by //bench:collectives (#wrong).
#ifndef BATON_COMM_TESTING_COLLECTIVE_CHECK_H_
#define BATON_COMM_TESTING_COLLECTIVE_CHECK_H_

#include <cstddef>

#include "baton/comm/communicator.h"
#include "baton/comm/reduce.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton {

struct CheckCase {
  CollectiveKind kind = CollectiveKind::kAllGather;
  DataType type = DataType::kF32;
  ReduceOp op = ReduceOp::kSum;
  int nranks = 1;
  size_t count = 0;  // per-rank count, as in Communicator
  int root = 0;
  int seed = 0;      // vary between iterations
};

// Value rank `rank` contributes at index i of its send buffer.
double InputValue(const CheckCase& c, int rank, size_t i);

// Fills rank `rank`'s send buffer (SendBytes of the collective).
void FillInput(const CheckCase& c, int rank, void* send);

// Number of elements of rank `rank`'s recv buffer that differ from the
// expected result (64-bit).
size_t CountWrong(const CheckCase& c, int rank, const void* recv);

// Where send and recv go inside `a` (and `b` when out of place), following
// the NCCL in-place conventions for rank `rank`.
void PlaceBuffers(const CheckCase& c, int rank, bool in_place, char* a,
                  char* b, const void** send, void** recv);

// Runs one collective with checked inputs on buffers of any device kind:
// poisons the output (so unwritten elements count as wrong), writes the
// input, issues the collective, copies the output back through host memory,
// synchronizes `stream` and returns this rank's number of wrong elements.
StatusOr<size_t> CheckOnBuffers(Communicator& comm, Stream& stream,
                                const CheckCase& c, const void* send,
                                void* recv, const CollectiveOptions& options);

// The same on buffers it allocates on `device`.
StatusOr<size_t> RunChecked(Communicator& comm, Device& device, Stream& stream,
                            const CheckCase& c, bool in_place,
                            const CollectiveOptions& options = {});

// Issues one collective of kind c.kind on the given buffers. kind kSend
// means the ring exchange (//bench:collectives --collective=sendrecv): each
// rank sends `count` to the next rank and receives `count` from the previous
// one in one SendRecvGroup; CountWrong then expects the previous rank's
// input.
Status IssueCollective(Communicator& comm, Stream& stream, const CheckCase& c,
                       const void* send, void* recv,
                       const CollectiveOptions& options);

}  // namespace baton

#endif  // BATON_COMM_TESTING_COLLECTIVE_CHECK_H_
