// Device-side loads and stores of baton's element types (DataType's codes:
// 0 f32, 1 bf16, 2 f16; int32 is never widened): the one helper every .cu
// file of the project uses (ops/, the inproc reduction, the stream ops of
// runtime/stream_ops.h). Values widen to float exactly; stores round to
// nearest even, as the host conversions of runtime/dtype.h do.
//
// Plain CUDA header (no abseil): include only from .cu files.
#ifndef BATON_RUNTIME_DTYPE_DEVICE_CUH_
#define BATON_RUNTIME_DTYPE_DEVICE_CUH_

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace baton::dtype_device {

enum Code : int { kF32 = 0, kBF16 = 1, kF16 = 2, kI32 = 3 };

// Typed forms, for kernels templated on the element type.
__device__ __forceinline__ float ToFloat(float v) { return v; }
__device__ __forceinline__ float ToFloat(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float ToFloat(__half v) { return __half2float(v); }

template <typename T>
__device__ __forceinline__ T FromFloat(float v);
template <>
__device__ __forceinline__ float FromFloat<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 FromFloat<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half FromFloat<__half>(float v) {
  return __float2half_rn(v);
}

// Element i of p (dtype code `dtype`: f32, bf16 or f16) as float.
__device__ __forceinline__ float Load(const void* p, int64_t i, int dtype) {
  if (dtype == kBF16) return ToFloat(static_cast<const __nv_bfloat16*>(p)[i]);
  if (dtype == kF16) return ToFloat(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}

// p[i] = v rounded to `dtype` (f32, bf16 or f16).
__device__ __forceinline__ void Store(void* p, int64_t i, int dtype, float v) {
  if (dtype == kBF16) {
    static_cast<__nv_bfloat16*>(p)[i] = FromFloat<__nv_bfloat16>(v);
  } else if (dtype == kF16) {
    static_cast<__half*>(p)[i] = FromFloat<__half>(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

}  // namespace baton::dtype_device

#endif  // BATON_RUNTIME_DTYPE_DEVICE_CUH_
