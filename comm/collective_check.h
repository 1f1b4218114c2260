// Inputs and checks for collectives, the nccl-tests way: every input is a
// small integer, so every reduction order gives the same bits and results
// are compared exactly (avg: to within one rounding of the division).
// Used by the collective tests and by //bench:collectives (#wrong).
#ifndef BATON_COMM_COLLECTIVE_CHECK_H_
#define BATON_COMM_COLLECTIVE_CHECK_H_

#include <cstddef>

#include "comm/communicator.h"
#include "comm/dtype.h"
#include "runtime/device.h"
#include "runtime/status.h"

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
// expected result.
size_t CountWrong(const CheckCase& c, int rank, const void* recv);

// Runs one collective on host memory (host stream) with checked inputs:
// fills the inputs, poisons the outputs (so unwritten elements count as
// wrong), issues it, synchronizes the stream and returns this rank's number
// of wrong elements. In place follows the NCCL pointer conventions.
StatusOr<size_t> RunHostChecked(Communicator& comm, Stream& stream,
                                const CheckCase& c, bool in_place,
                                const CollectiveOptions& options = {});

// The same with buffers allocated on `device` (any kind): inputs and outputs
// are staged through host memory with Stream::MemcpyAsync.
StatusOr<size_t> RunDeviceChecked(Communicator& comm, Device& device,
                                  Stream& stream, const CheckCase& c,
                                  bool in_place,
                                  const CollectiveOptions& options = {});

// Issues one collective of kind c.kind on the given buffers.
Status IssueCollective(Communicator& comm, Stream& stream, const CheckCase& c,
                       const void* send, void* recv,
                       const CollectiveOptions& options);

}  // namespace baton

#endif  // BATON_COMM_COLLECTIVE_CHECK_H_
