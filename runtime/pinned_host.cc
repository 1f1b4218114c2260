#include "baton/runtime/pinned_host.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"

#ifdef BATON_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "baton/runtime/cuda_check.h"
#endif

namespace baton {
namespace {

constexpr size_t kMaxAlignment = 4096;

StatusOr<DeviceBuffer> AlignedHost(size_t bytes, size_t alignment) {
  alignment = alignment < sizeof(void*) ? sizeof(void*) : alignment;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  if (rounded < bytes) {
    return absl::ResourceExhaustedError(
        absl::StrCat("AllocatePinnedHost: ", bytes, " bytes overflows"));
  }
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("AllocatePinnedHost: host allocation of ", bytes, " bytes failed"));
  }
  return DeviceBuffer(p, bytes, [](void* q) { std::free(q); });
}

#ifdef BATON_HAVE_CUDA
StatusOr<DeviceBuffer> CudaPinned(int ordinal, size_t bytes) {
  int previous = 0;
  BATON_CUDA_CHECK(cudaGetDevice(&previous));
  BATON_CUDA_CHECK(cudaSetDevice(ordinal));
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
  (void)cudaSetDevice(previous);
  BATON_CUDA_CHECK(e);
  return DeviceBuffer(p, bytes, [](void* q) { cudaFreeHost(q); });
}
#endif

}  // namespace

bool PinsHostMemory(const Device& device) {
#ifdef BATON_HAVE_CUDA
  return device.kind() == DeviceKind::kCuda;
#else
  return false;
#endif
}

StatusOr<DeviceBuffer> AllocatePinnedHost(Device& device, size_t bytes,
                                          size_t alignment) {
  BATON_RETURN_IF_ERROR(CheckAllocationRequest(bytes, alignment));
  if (alignment > kMaxAlignment) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AllocatePinnedHost: alignment ", alignment, " exceeds the page (",
        kMaxAlignment, " bytes)"));
  }
#ifdef BATON_HAVE_CUDA
  if (device.kind() == DeviceKind::kCuda) return CudaPinned(device.ordinal(), bytes);
#endif
  return AlignedHost(bytes, alignment);
}

}  // namespace baton
