// In-process backend: the ranks are threads of one process.
//
// Host memory (host streams): each collective is host work on the rank's
// stream. When it runs, the rank publishes its buffers in a rendezvous slot
// keyed by (tag, sequence number) and waits for the other ranks (blocking
// only its stream's worker, the way a collective kernel occupies a GPU
// stream); then every rank moves its share of the data (all-gather: copies
// the n blocks into its own recv; reduce-scatter: reduces its block from the
// n sends; all-reduce: reduces range r of every send into range r of every
// recv), and waits for the others to finish before its stream moves on,
// because the others read its buffers.
//
// Device memory on one GPU (CUDA streams; or host streams with
// CommConfig::inproc_event_protocol): CUDA host functions may not call CUDA,
// so the rendezvous happens when the collective is ISSUED (the issuing
// threads of all ranks meet; this is the one place this backend blocks a
// host thread, and only until the peers have issued too). Protocol per
// collective, for rank r:
//   1. record `ready` on r's stream (all earlier work on r's buffers);
//      meet the peers (exchange buffers and `ready` events);
//   2. r's stream waits on every peer's `ready`, then r's share of the data
//      movement is enqueued on r's stream (cudaMemcpyAsync device to device;
//      a reduction kernel for reduce-scatter and all-reduce);
//   3. record `done`; meet again (exchange `done` events); r's stream waits
//      on every peer's `done`, since peers read and write r's buffers.
// On the device, 16-bit reductions always accumulate in fp32.
//
// On the host path the issuing thread never blocks. Mismatched calls are found when the last
// rank arrives; everyone then fails with InvalidArgument. A rank that does
// not arrive within the timeout fails the slot (DeadlineExceeded naming the
// missing ranks), so a late rank fails too instead of reading buffers that
// were given up. Abort() wakes every waiter of the group with Unavailable.
#ifndef BATON_COMM_INPROC_INPROC_H_
#define BATON_COMM_INPROC_INPROC_H_

#include <memory>

#include "baton/comm/communicator.h"
#include "baton/comm/comm_config.h"

namespace baton {

StatusOr<std::unique_ptr<Communicator>> CreateInprocCommunicator(
    const CommConfig& config);

}  // namespace baton

#endif  // BATON_COMM_INPROC_INPROC_H_
