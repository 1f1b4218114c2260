// Built instead of cuda_order.cc without a CUDA toolkit: no CUDA stream
// exists to order (CreateCudaDevice fails first), so these only say why.
#include "baton/python/cuda_order.h"

namespace baton::python {

Status ConsumerWaitsFor(Stream&, int, int64_t) {
  return absl::UnavailableError("baton was built without CUDA");
}

Status StreamWaitsForConsumer(Stream&, int, int64_t) {
  return absl::UnavailableError("baton was built without CUDA");
}

}  // namespace baton::python
