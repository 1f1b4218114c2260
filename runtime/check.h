// One family of check macros that turns a foreign library's result code into
// an absl::Status carrying the call, file:line and the library's own error
// string. The core is library-neutral; each library adds an overload set in
// its own small header (so that no target pulls in CUDA, NCCL or UCX headers
// it does not use):
//
//   runtime/cuda_check.h   BATON_CUDA_CHECK(cudaMalloc(...));
//   runtime/nccl_check.h   BATON_NCCL_CHECK(ncclAllGather(...));
//   runtime/ucx_check.h    BATON_UCX_CHECK(ucp_worker_create(...));
//
// Each macro returns the Status from the enclosing function on failure, so
// it can be used in functions returning absl::Status or absl::StatusOr<T>.
// An overload set consists of
//   bool   baton::check_internal::IsOk(R result);
//   Status baton::check_internal::ToStatus(R result, const char* expr,
//                                          const char* file, int line);
#ifndef BATON_RUNTIME_CHECK_H_
#define BATON_RUNTIME_CHECK_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace baton::check_internal {

// "<library> error <code> (<name>: <message>) in `<expr>` at <file>:<line>"
inline std::string FormatError(const char* library, long long code,
                               const char* name, const char* message,
                               const char* expr, const char* file, int line) {
  return absl::StrCat(library, " error ", code, " (", name, ": ", message,
                      ") in `", expr, "` at ", file, ":", line);
}

}  // namespace baton::check_internal

#define BATON_LIB_CHECK_(expr)                                             \
  do {                                                                     \
    const auto baton_result_ = (expr);                                     \
    if (!::baton::check_internal::IsOk(baton_result_)) {                   \
      return ::baton::check_internal::ToStatus(baton_result_, #expr,       \
                                               __FILE__, __LINE__);        \
    }                                                                      \
  } while (0)

#endif  // BATON_RUNTIME_CHECK_H_
