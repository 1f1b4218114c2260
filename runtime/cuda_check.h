// BATON_CUDA_CHECK(expr): a cudaError_t other than cudaSuccess becomes a
// Status (see check.h). cudaErrorNoDevice and cudaErrorInsufficientDriver map
// to Unavailable, cudaErrorMemoryAllocation to ResourceExhausted, invalid
// values to InvalidArgument, everything else to Internal.
#ifndef BATON_RUNTIME_CUDA_CHECK_H_
#define BATON_RUNTIME_CUDA_CHECK_H_

#include <cuda_runtime_api.h>

#include "baton/runtime/check.h"

namespace baton::check_internal {

inline bool IsOk(cudaError_t e) { return e == cudaSuccess; }

inline absl::Status ToStatus(cudaError_t e, const char* expr, const char* file,
                             int line) {
  std::string msg = FormatError("CUDA", static_cast<long long>(e),
                                cudaGetErrorName(e), cudaGetErrorString(e),
                                expr, file, line);
  switch (e) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
      return absl::UnavailableError(msg);
    case cudaErrorMemoryAllocation:
      return absl::ResourceExhaustedError(msg);
    case cudaErrorInvalidValue:
    case cudaErrorInvalidDevice:
    case cudaErrorInvalidResourceHandle:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace baton::check_internal

#define BATON_CUDA_CHECK(expr) BATON_LIB_CHECK_(expr)

#endif  // BATON_RUNTIME_CUDA_CHECK_H_
