// Shared plumbing of the ops: element access in f32 / bf16, argument checks
// that name the op and the argument, and the host-or-CUDA dispatch every
// launcher uses.
//
// Every launcher follows one contract: validate (InvalidArgument naming the
// op and the argument; nothing is enqueued then), then enqueue on `stream`:
// the CPU implementation as host work on a host stream, the CUDA kernel on a
// CUDA stream. Pointers must stay valid until the work has run. A CPU
// implementation that finds bad data (an out-of-range token id) returns an
// error from its host work, which the stream carries (runtime/device.h).
#ifndef BATON_OPS_OP_UTIL_H_
#define BATON_OPS_OP_UTIL_H_

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <utility>
#include <vector>

#include "baton/ops/host_convert.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

// Element i of p (f32 or bf16) as float, and back (round to nearest even):
// inline, the same bits as runtime/dtype.h's conversions.
inline float LoadF(const void* p, DataType t, int64_t i) {
  return t == DataType::kBF16 ? Bf16BitsToFloat(static_cast<const uint16_t*>(p)[i])
                              : static_cast<const float*>(p)[i];
}

inline void StoreF(void* p, DataType t, int64_t i, float v) {
  if (t == DataType::kBF16) {
    static_cast<uint16_t*>(p)[i] = FloatToBf16Bits(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

// n elements of `p` (dtype t) as floats: a view when t is f32, else a copy
// into `scratch`.
const float* AsFloats(const void* p, DataType t, int64_t n,
                      std::vector<float>& scratch);

// InvalidArgument unless t is f32 or bf16.
Status CheckFloatType(const char* op, const char* what, DataType t);
// InvalidArgument naming the first null pointer.
Status CheckNotNull(const char* op,
                    std::initializer_list<std::pair<const char*, const void*>>
                        pointers);
// InvalidArgument naming the first size that is not positive.
Status CheckPositive(const char* op,
                     std::initializer_list<std::pair<const char*, int64_t>>
                         sizes);

// Runs (through RunOnStream, runtime/stream_ops.h) `cpu` as host work on a
// host stream (with subnormal fp32 values
// flushed to zero, FTZ/DAZ, as is usual for CPU training kernels: Adam's
// squared gradients and tiny gradient products otherwise slow the blocked
// GEMM down about 7x on x86), or `cuda(native stream)` (a
// kernel launch returning a cudaError_t value) on a CUDA stream. `cuda` is
// null in builds without CUDA: Unimplemented then.
Status OnStream(Stream& stream, const char* op, std::function<Status()> cpu,
                std::function<int(void*)> cuda);

}  // namespace baton::ops

// Wraps the CUDA launch lambda of a launcher so that it compiles away in
// builds without CUDA.
#ifdef BATON_HAVE_CUDA
#define BATON_OPS_CUDA(...) __VA_ARGS__
#else
#define BATON_OPS_CUDA(...) nullptr
#endif

#endif  // BATON_OPS_OP_UTIL_H_
