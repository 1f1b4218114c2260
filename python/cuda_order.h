// Stream order between baton's CUDA streams and a consumer's stream, as the
// DLPack Python protocol names it (python/tensor.h, python/session.cc).
//
// A consumer stream is the integer of `__dlpack__(stream=...)`: 1 the legacy
// default stream, 2 the per-thread default stream, any other value > 2 a
// cudaStream_t of the consumer's (what torch.cuda.Stream.cuda_stream holds).
// 0 and negative values are the caller's to handle (0 is ambiguous and
// refused, -1 means "no order").
//
// Both calls only enqueue (an event recorded on one stream, a wait on the
// other: cudaStreamWaitEvent); neither blocks the host nor changes the
// calling thread's current device. The event is
// destroyed at once (CUDA keeps a pending record valid). Thread-safe as the
// CUDA runtime is. Without CUDA in the build they return Unavailable.
#ifndef BATON_PYTHON_CUDA_ORDER_H_
#define BATON_PYTHON_CUDA_ORDER_H_

#include <cstdint>

#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::python {

// Work enqueued on `consumer` after this call waits for the work enqueued
// on baton's `producer` (a CUDA stream of device `ordinal`) so far.
[[nodiscard]] Status ConsumerWaitsFor(Stream& producer, int ordinal, int64_t consumer);

// Work enqueued on baton's `stream` after this call waits for the work
// enqueued on `consumer` so far.
[[nodiscard]] Status StreamWaitsForConsumer(Stream& stream, int ordinal, int64_t consumer);

}  // namespace baton::python

#endif  // BATON_PYTHON_CUDA_ORDER_H_
