// BATON_UCX_CHECK(expr): a ucs_status_t other than UCS_OK becomes a Status
// (see check.h). UCS_INPROGRESS is NOT success: callers that post
// non-blocking requests test for it first. Timeouts map to DeadlineExceeded,
// unreachable or closed peers to Unavailable, invalid parameters to
// InvalidArgument, memory to ResourceExhausted, everything else to Internal.
#ifndef BATON_RUNTIME_UCX_CHECK_H_
#define BATON_RUNTIME_UCX_CHECK_H_

#include <ucs/type/status.h>

#include "baton/runtime/check.h"

namespace baton::check_internal {

inline bool IsOk(ucs_status_t s) { return s == UCS_OK; }

inline absl::Status ToStatus(ucs_status_t s, const char* expr,
                             const char* file, int line) {
  std::string msg =
      FormatError("UCX", static_cast<long long>(s), "ucs_status_t",
                  ucs_status_string(s), expr, file, line);
  switch (s) {
    case UCS_ERR_TIMED_OUT:
    case UCS_ERR_ENDPOINT_TIMEOUT:
      return absl::DeadlineExceededError(msg);
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_REJECTED:
    case UCS_ERR_CANCELED:
      return absl::UnavailableError(msg);
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR:
      return absl::InvalidArgumentError(msg);
    case UCS_ERR_NO_MEMORY:
      return absl::ResourceExhaustedError(msg);
    default:
      return absl::InternalError(msg);
  }
}

}  // namespace baton::check_internal

#define BATON_UCX_CHECK(expr) BATON_LIB_CHECK_(expr)

#endif  // BATON_RUNTIME_UCX_CHECK_H_
