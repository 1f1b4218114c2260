// Status helpers shared by all of baton.
//
// Public fallible APIs return absl::Status or absl::StatusOr<T>; no exception
// crosses the library boundary. Abseil 20220623 has no RETURN_IF_ERROR-style
// macros, so baton defines its own set here, once:
//
//   BATON_RETURN_IF_ERROR(expr);          // expr yields absl::Status
//   BATON_ASSIGN_OR_RETURN(lhs, expr);    // expr yields absl::StatusOr<T>
//
// Both evaluate `expr` exactly once and return the error unchanged.
#ifndef BATON_RUNTIME_STATUS_H_
#define BATON_RUNTIME_STATUS_H_

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace baton {

using absl::Status;
using absl::StatusOr;

namespace status_internal {
inline const Status& AsStatus(const Status& s) { return s; }
template <typename T>
const Status& AsStatus(const StatusOr<T>& s) {
  return s.status();
}
}  // namespace status_internal

}  // namespace baton

#define BATON_STATUS_CONCAT_INNER_(a, b) a##b
#define BATON_STATUS_CONCAT_(a, b) BATON_STATUS_CONCAT_INNER_(a, b)

#define BATON_RETURN_IF_ERROR(expr)                                          \
  do {                                                                       \
    const ::absl::Status baton_status_ =                                     \
        ::baton::status_internal::AsStatus((expr));                          \
    if (!baton_status_.ok()) return baton_status_;                           \
  } while (0)

#define BATON_ASSIGN_OR_RETURN(lhs, expr) \
  BATON_ASSIGN_OR_RETURN_IMPL_(           \
      BATON_STATUS_CONCAT_(baton_statusor_, __LINE__), lhs, expr)

#define BATON_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                 \
  if (!tmp.ok()) return std::move(tmp).status();     \
  lhs = std::move(tmp).value()

#endif  // BATON_RUNTIME_STATUS_H_
