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
// CommConfig::inproc_event_protocol), the event protocol. CUDA host
// functions may not call CUDA, so the work is enqueued when the collective
// is ISSUED, and no issuing thread ever waits for another rank. Per
// collective (tag, seq), rank r:
//   1. records `ready` on its stream (all earlier work on r's buffers) and
//      publishes its buffers and `ready` in the slot of (tag, seq) (under
//      the group's mutex; the first rank to arrive gives the slot a word of
//      Device::AllocateValues and a target value larger than any before);
//   2a. if some rank has not issued yet: leaves its stream's error sink in
//      the slot, enqueues WaitValue(word, target) on its stream and returns
//      (nothing else per call on the stream: no host function);
//   2b. if it is the last to issue: it now knows every rank's buffers, and
//      every peer's `ready` was recorded before the peer published it, so
//      its stream waits on each (no wait on a record made later: device.h
//      rule 3), then the WHOLE data movement of all ranks is enqueued on its
//      stream (host: one host work item running every rank's share; CUDA:
//      one copy kernel for all-gather / broadcast, one reduction kernel
//      writing every output for reduce-scatter / all-reduce), then
//      WriteValue(word, target), which releases the other ranks' streams.
// No rank's stream moves past the collective before all data has moved, so
// peers may read and write its buffers until then. Ranks may issue in any
// order in time; a word is reused only once its last target was written
// (waits compare with >=; device.h rule 8). Ready events are pooled per
// rank and return to the pool once the last rank has issued its waits.
// On the device, 16-bit reductions always accumulate in fp32.
//
// Failures. Host path: mismatched calls are found when the last rank
// arrives; everyone then fails with InvalidArgument. A rank that does not
// arrive within the timeout fails the slot (DeadlineExceeded naming the
// missing ranks), so a late rank fails too instead of reading buffers that
// were given up. Abort() wakes every waiter of the group with Unavailable.
// Event protocol: the last rank finds a mismatch (its call returns
// InvalidArgument); a watchdog thread of the group fails a slot whose ranks
// did not all issue within the timeout (DeadlineExceeded naming them);
// Abort() fails every open slot (Unavailable). A failed slot first fails
// the waiting ranks' streams through their error sinks, then its word is
// written from the host (HostWriteValue), which releases them: no
// Synchronize that returns after the release misses the error. The group's
// event protocol stays failed (health(), later calls).
// Point-to-point (Send / Recv / SendRecvGroup): on host streams one host
// work item per group (p2p.h); on the event protocol, CUDA streams
// included, the scheme above between the two ranks of each message: the
// side that posts second enqueues the copy and the write the first side's
// stream waits for (p2p_events.h).
// Collectives of one tag must be issued by every rank in one order, and on
// one stream collectives of different tags too (NCCL's rule): a cycle of
// streams waiting on one another is not detected and does not time out.
// Streams must have completed a communicator's collectives before it is
// destroyed.
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
