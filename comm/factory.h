// Creates a Communicator by backend name. Nothing above comm/ includes a
// backend header; it fills a CommConfig and calls CreateCommunicator.
//
//   backend  rendezvous                          memory / streams
//   inproc   threads with the same `group` name  host memory + host streams,
//            in this process                     or one GPU + CUDA streams
//   ucx      `store` (worker addresses)          host memory + host streams
//   nccl     `store` (unique id)                 device memory + CUDA streams
//
// CreateCommunicator is collective: every rank of the group calls it, and it
// returns once all ranks have joined, or DeadlineExceeded naming the ranks
// that did not within `timeout`. Unavailable when the backend was not linked
// into the program (the message names the target: ucx and nccl each live in
// their own library, //:baton_ucx and //:baton_nccl; inproc is always
// there), was not built (nccl without a CUDA toolkit) or cannot run here
// (no GPU).
#ifndef BATON_COMM_FACTORY_H_
#define BATON_COMM_FACTORY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "baton/comm/comm_config.h"
#include "baton/comm/communicator.h"
#include "baton/comm/bootstrap/store.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton {

StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    const CommConfig& config);

// n inproc ranks of one process: creates their communicators on n threads
// at once (creation is collective) from `base`, whose backend, rank and size
// are set here for each rank; an empty base.group gets a fresh name. The
// communicators may then be used from any thread (one thread per rank at a
// time). Returns them in rank order, or the first rank's error
// (InvalidArgument for a base.recorder: each rank gets its own).
StatusOr<std::vector<std::unique_ptr<Communicator>>> CreateInprocGroup(
    int n, const CommConfig& base);

// The backends linked into this program, inproc first, e.g.
// {"inproc", "nccl", "ucx"}.
std::vector<std::string> BuiltBackends();

}  // namespace baton

#endif  // BATON_COMM_FACTORY_H_
