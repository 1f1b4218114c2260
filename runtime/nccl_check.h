// BATON_NCCL_CHECK(expr): an ncclResult_t other than ncclSuccess becomes a
// Status (see check.h). ncclInProgress is NOT success: code driving a
// non-blocking communicator tests for it before checking. ncclInvalidArgument
// and ncclInvalidUsage map to InvalidArgument, ncclRemoteError to Unavailable,
// everything else to Internal. The message includes ncclGetLastError().
#ifndef BATON_RUNTIME_NCCL_CHECK_H_
#define BATON_RUNTIME_NCCL_CHECK_H_

#include <nccl.h>

#include "baton/runtime/check.h"

namespace baton::check_internal {

inline bool IsOk(ncclResult_t r) { return r == ncclSuccess; }

inline absl::Status ToStatus(ncclResult_t r, const char* expr,
                             const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  std::string msg =
      FormatError("NCCL", static_cast<long long>(r), ncclGetErrorString(r),
                  (last != nullptr && last[0] != '\0') ? last : "no detail",
                  expr, file, line);
  switch (r) {
    case ncclInvalidArgument:
    case ncclInvalidUsage:
      return absl::InvalidArgumentError(msg);
    case ncclRemoteError:
      return absl::UnavailableError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace baton::check_internal

#define BATON_NCCL_CHECK(expr) BATON_LIB_CHECK_(expr)

#endif  // BATON_RUNTIME_NCCL_CHECK_H_
