// Timing of work enqueued on a baton Stream, and the limits an op's speed is
// compared with, measured in the same run: the shared core of //bench:ops
// and //bench:kernels.
//
// Method (the same on host and CUDA streams): one warm-up call, one timed
// call to size the batches, then `reps` batches of back-to-back calls, each
// batch bracketed by Stream::Synchronize and timed with a steady clock; the
// result is the median over batches of the batch time / calls. Device work
// is asynchronous, so a batch of calls measures the kernels back to back
// with their launch cost overlapped (except where a kernel is shorter than
// its launch: then the launch rate is what is measured, see
// MeasureLaunchSeconds). Events are not used: baton's events are
// timing-disabled (runtime/device.h).
//
// Not thread-safe per stream (one measurement at a time on a stream).
#ifndef BATON_BENCH_OP_TIMING_H_
#define BATON_BENCH_OP_TIMING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"

namespace baton::bench {

struct TimingOptions {
  // Time spent in the measured batches of one case, at the least (a call
  // longer than this runs min_reps times, once per batch).
  double min_seconds = 0.1;
  int reps = 5;      // batches when calls are short
  int min_reps = 3;  // batches when one call exceeds min_seconds
};

// Enqueues one call on the stream the measurement synchronizes.
using EnqueueFn = std::function<Status()>;

// Median seconds per call of `enqueue` (method above). The first error of
// `enqueue` or of the stream is returned; InvalidArgument for options that
// are not positive.
StatusOr<double> TimePerCall(Stream& stream, const EnqueueFn& enqueue,
                             const TimingOptions& options);

// The limits of one run (each measured by the functions below).
struct Limits {
  double copy_gbps = 0;     // device copy, read + write bytes per second / 1e9
  size_t copy_bytes = 0;    // the size of that copy
  double gemm_tflops = 0;   // square GEMM through ops::LinearForward
  int64_t gemm_n = 0;       // its size (n x n x n)
  DataType gemm_dtype = DataType::kBF16;
  double launch_s = 0;      // one tiny op, back to back
};

// Copy rate of one `bytes`-byte MemcpyAsync within device memory, counting
// read + write (2 x bytes per copy), in GB/s: the limit of a memory-bound
// op. On the host runtime it is the host stream's memcpy.
StatusOr<double> MeasureCopyGbps(Device& device, Stream& stream, size_t bytes,
                                 const TimingOptions& options);

// TFLOP/s (2 n^3 / time) of ops::LinearForward on n x n operands of dtype
// `dtype`: cuBLAS (cublasGemmEx, fp32 accumulation) on CUDA, the blocked
// CPU GEMM on the host runtime. The limit of a matmul-bound op.
StatusOr<double> MeasureGemmTflops(Device& device, Stream& stream, int64_t n,
                                   DataType dtype, const TimingOptions& options);

// Seconds per call of the smallest op (SwiGLU forward on one element),
// calls back to back: the per-kernel cost (launch on CUDA; the host
// stream's hand-off on the host runtime).
StatusOr<double> MeasureLaunchSeconds(Device& device, Stream& stream,
                                      const TimingOptions& options);

// All three.
StatusOr<Limits> MeasureLimits(Device& device, Stream& stream,
                               size_t copy_bytes, int64_t gemm_n,
                               DataType gemm_dtype, const TimingOptions& options);

// The GPU's name from Device::name() ("cuda:0 (NVIDIA H100 80GB HBM3)" ->
// "NVIDIA H100 80GB HBM3"); "host CPU" for the host device.
std::string DeviceLabel(const Device& device);

}  // namespace baton::bench

#endif  // BATON_BENCH_OP_TIMING_H_
