// Helpers shared by both implementations of runtime/device.h.
#include "baton/runtime/device.h"

#include "absl/strings/str_cat.h"

namespace baton {

const char* DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kHost:
      return "host";
    case DeviceKind::kCuda:
      return "cuda";
  }
  return "unknown";
}

Status CheckAllocationRequest(size_t bytes, size_t alignment) {
  if (bytes == 0) {
    return absl::InvalidArgumentError("Allocate: zero bytes requested");
  }
  if (alignment == 0 || (alignment & (alignment - 1)) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Allocate: alignment ", alignment, " is not a power of two"));
  }
  return Status();
}

}  // namespace baton
