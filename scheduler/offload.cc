#include "baton/scheduler/offload.h"

#include "absl/strings/str_cat.h"
#ifdef BATON_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace baton::scheduler {

StatusOr<DeviceBuffer> AllocateHostState(Device& device, size_t bytes) {
  BATON_RETURN_IF_ERROR(CheckAllocationRequest(bytes, 256));
  if (device.kind() == DeviceKind::kHost) return device.Allocate(bytes);
#ifdef BATON_HAVE_CUDA
  void* p = nullptr;
  const cudaError_t rc = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  if (rc != cudaSuccess) {
    (void)cudaGetLastError();
    return absl::ResourceExhaustedError(
        absl::StrCat("offload: cannot pin ", bytes, " bytes of host memory (",
                     cudaGetErrorString(rc), ")"));
  }
  return DeviceBuffer(p, bytes, [](void* q) { (void)cudaFreeHost(q); });
#else
  return absl::UnimplementedError(
      "offload: pinned host memory needs a CUDA build");
#endif
}

}  // namespace baton::scheduler
