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
// that did not within `timeout`. Unavailable when the backend was not built
// in (nccl without a CUDA toolkit) or cannot run here (no GPU).
#ifndef BATON_COMM_FACTORY_H_
#define BATON_COMM_FACTORY_H_

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm_config.h"
#include "comm/communicator.h"
#include "comm/store.h"
#include "runtime/device.h"
#include "runtime/status.h"

namespace baton {

StatusOr<std::unique_ptr<Communicator>> CreateCommunicator(
    const CommConfig& config);

// The backends this build includes, e.g. {"inproc", "ucx", "nccl"}.
std::vector<std::string> BuiltBackends();

}  // namespace baton

#endif  // BATON_COMM_FACTORY_H_
