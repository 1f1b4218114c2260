// The data movement of the inproc backend, given every rank's buffers (not a
// public header).
//
//   MoveShare        rank r's share, on the calling thread, in host memory:
//                    all-gather copies the n blocks into r's recv;
//                    reduce-scatter reduces block r of the n sends into r's
//                    recv; all-reduce reduces range r of every send into
//                    range r of every recv; broadcast copies the root's send
//                    into r's recv.
//   EnqueueMoveAll   every rank's share, enqueued on one stream: a host
//                    stream gets one host work item running MoveShare for
//                    r = 0..n-1; a CUDA stream gets one kernel for the
//                    copies (all-gather, broadcast) or one reduction kernel
//                    (reduce-scatter, all-reduce; fp32 accumulation).
// Shares in any order, and in place, give exact results: no share writes a
// byte another share reads.
#ifndef BATON_COMM_INPROC_MOVE_H_
#define BATON_COMM_INPROC_MOVE_H_

#include <vector>

#include "baton/comm/backend_util.h"
#include "baton/runtime/device.h"

namespace baton::inproc_internal {

struct RankBuffers {
  const void* send = nullptr;
  void* recv = nullptr;
};

void MoveShare(const CollectiveHeader& h, const std::vector<RankBuffers>& a,
               int rank);

Status EnqueueMoveAll(const CollectiveHeader& h, std::vector<RankBuffers> a,
                      Stream& stream);

}  // namespace baton::inproc_internal

#endif  // BATON_COMM_INPROC_MOVE_H_
