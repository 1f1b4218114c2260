// NCCL backend: one rank per GPU, device memory, CUDA streams.
//
// Creation: rank 0 makes the ncclUniqueId and shares it through the Store;
// every rank first publishes "host/GPU UUID", and two ranks on one GPU are
// refused (FailedPrecondition: NCCL 2.28 cannot run them; use inproc for
// several ranks on one GPU). The communicator is non-blocking
// (ncclConfig_t.blocking = 0), so creation and every call poll
// ncclCommGetAsyncError while NCCL says ncclInProgress, with the timeout.
//
// Errors: a watchdog thread polls ncclCommGetAsyncError and one event per
// collective; an async error, or a collective not done within its timeout,
// aborts the communicator (ncclCommAbort, which makes the kernels return).
// After each collective a host function on the stream reports the
// communicator's health, so the stream enters its error state then.
// NCCL cannot check that ranks agree on counts: a mismatch is undefined
// there (usually a timeout).
#ifndef BATON_COMM_NCCL_NCCL_H_
#define BATON_COMM_NCCL_NCCL_H_

#include <memory>

#include "baton/comm/comm_config.h"
#include "baton/comm/communicator.h"

namespace baton {

StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const CommConfig& config);

}  // namespace baton

#endif  // BATON_COMM_NCCL_NCCL_H_
