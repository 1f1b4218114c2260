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

Status Stream::WaitValue(const uint64_t*, uint64_t) {
  return absl::UnimplementedError(
      absl::StrCat("Stream::WaitValue: not implemented by stream '", name(),
                   "'"));
}

Status Stream::WriteValue(uint64_t*, uint64_t) {
  return absl::UnimplementedError(
      absl::StrCat("Stream::WriteValue: not implemented by stream '", name(),
                   "'"));
}

std::shared_ptr<StreamErrorSink> Stream::error_sink() { return nullptr; }

uint64_t HostReadValue(const uint64_t* addr) {
  return __atomic_load_n(addr, __ATOMIC_ACQUIRE);
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
