// UCX backend: one rank per process, host memory, UCP tag messages.
//
// Creation: ucp_init (TAG feature) with UCX_TLS defaulting to
// "self,posix,sysv,tcp" (works in containers where cma is refused; an
// UCX_TLS in the environment wins), one worker per rank, worker addresses
// exchanged through the Store (sealed, comm/bootstrap/sealed_value.h: a
// garbled or foreign value under "<group>/ucx/addr/R" is InvalidArgument
// naming the key and rank R before UCX sees it), endpoints to the ring
// neighbours with peer error handling, then a store barrier.
//
// Failures: a collective that fails because of a peer reports the rank
// that failed as the first rank to see it named it (blame.h), then what
// this rank saw; the communicator stays failed.
//
// Execution: a progress thread owns the worker and drives every collective
// in flight (ring.h) with ucp_worker_progress; it sleeps when none is. A
// collective is host work on the caller's host stream that hands the job to
// that thread and waits for it (the stream's worker blocks, as a GPU stream
// does behind a collective kernel); the thread that issued it never blocks.
// Collectives on different streams (with different tags) progress together.
#ifndef BATON_COMM_UCX_UCX_H_
#define BATON_COMM_UCX_UCX_H_

#include <memory>

#include "baton/comm/comm_config.h"
#include "baton/comm/communicator.h"

namespace baton {

StatusOr<std::unique_ptr<Communicator>> CreateUcxCommunicator(
    const CommConfig& config);

}  // namespace baton

#endif  // BATON_COMM_UCX_UCX_H_
