#include "baton/python/cuda_order.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "baton/runtime/cuda_check.h"

namespace baton::python {
namespace {

StatusOr<cudaStream_t> ConsumerStream(int64_t consumer) {
  if (consumer == 1) return cudaStreamLegacy;
  if (consumer == 2) return cudaStreamPerThread;
  if (consumer > 2) return reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(consumer));
  return absl::InvalidArgumentError(
      absl::StrCat("a CUDA stream is 1 (legacy default), 2 (per-thread default) or a "
                   "cudaStream_t, got ", consumer));
}

// `waiter` waits for the work enqueued on `signaller` so far. The calling
// thread's current device (the consumer's, e.g. PyTorch's) is restored.
Status Order(cudaStream_t signaller, cudaStream_t waiter, int ordinal) {
  int previous = 0;
  BATON_CUDA_CHECK(cudaGetDevice(&previous));
  BATON_CUDA_CHECK(cudaSetDevice(ordinal));
  cudaEvent_t event;
  cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (e == cudaSuccess) {
    e = cudaEventRecord(event, signaller);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(waiter, event, 0);
    const cudaError_t destroyed = cudaEventDestroy(event);  // a pending record stays valid
    if (e == cudaSuccess) e = destroyed;
  }
  const cudaError_t restored = cudaSetDevice(previous);
  BATON_CUDA_CHECK(e);
  BATON_CUDA_CHECK(restored);
  return absl::OkStatus();
}

StatusOr<cudaStream_t> BatonStream(Stream& s) {
  if (s.kind() != DeviceKind::kCuda) {
    return absl::InvalidArgumentError("stream order with a consumer stream needs a CUDA stream");
  }
  return static_cast<cudaStream_t>(s.native_handle());
}

}  // namespace

Status ConsumerWaitsFor(Stream& producer, int ordinal, int64_t consumer) {
  BATON_ASSIGN_OR_RETURN(cudaStream_t theirs, ConsumerStream(consumer));
  BATON_ASSIGN_OR_RETURN(cudaStream_t ours, BatonStream(producer));
  return Order(ours, theirs, ordinal);
}

Status StreamWaitsForConsumer(Stream& stream, int ordinal, int64_t consumer) {
  BATON_ASSIGN_OR_RETURN(cudaStream_t theirs, ConsumerStream(consumer));
  BATON_ASSIGN_OR_RETURN(cudaStream_t ours, BatonStream(stream));
  return Order(theirs, ours, ordinal);
}

}  // namespace baton::python
