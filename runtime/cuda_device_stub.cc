// Built instead of cuda_device.cc when no CUDA toolkit was found: the CUDA
// device is reported Unavailable, so callers and tests skip cleanly.
#include "baton/runtime/device.h"

namespace baton {

StatusOr<std::unique_ptr<Device>> CreateCudaDevice(int ordinal) {
  return absl::UnavailableError(
      "baton was built without CUDA (no toolkit at $CUDA_HOME or "
      "/usr/local/cuda, or BATON_NO_CUDA=1)");
}

int CudaDeviceCount() { return 0; }

bool BuiltWithCuda() { return false; }

}  // namespace baton
