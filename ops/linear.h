// Linear layer without bias, PyTorch's convention: w is [out, in].
//
// Math, for x [rows, in], w [out, in]:
//   y  = x w^T          [rows, out]  (= or += : `accumulate_y`, so a
//                                     residual connection adds in place)
// Backward, given dy [rows, out]:
//   dx = dy w           [rows, in]   (= or += : `accumulate_dx`, for inputs
//                                     that feed several linears, q/k/v)
//   dw = dy^T x         [out, in]    (= or += : `accumulate_dw`, into the
//                                     parameter's gradient slice)
// x, w, y, dy, dx share one dtype (f32 or bf16); dw has its own (f32, or
// bf16 when the inputs are bf16). Products are accumulated in fp32 and
// rounded once on store; fp32 inputs are not computed in TF32.
//
// CPU: a blocked fp32 GEMM (operands converted / transposed into fp32
// panels once per call). CUDA: cublasGemmEx with fp32 compute, one cuBLAS
// handle per thread and device, bound to the launch stream.
//
// Launchers follow ops/op_util.h. dx may be null (the gradient is not
// needed, e.g. for the first layer's input); dw may be null (a frozen
// weight: LoRA's base, ops/lora.h), but not both.
#ifndef BATON_OPS_LINEAR_H_
#define BATON_OPS_LINEAR_H_

#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct LinearShape {
  int64_t rows = 0;
  int64_t in = 0;
  int64_t out = 0;
  DataType dtype = DataType::kF32;  // x, w, y, dy, dx
};

Status LinearForward(Stream& stream, const LinearShape& shape, const void* x,
                     const void* w, void* y, bool accumulate_y = false);

Status LinearBackward(Stream& stream, const LinearShape& shape,
                      const void* dy, const void* x, const void* w, void* dx,
                      bool accumulate_dx, void* dw, DataType dw_dtype,
                      bool accumulate_dw);

// fp32 row-major GEMM the CPU path uses: c[m,n] (+)= a[m,k] b[k,n].
void GemmCpu(int64_t m, int64_t n, int64_t k, const float* a, const float* b,
             float* c, bool accumulate);

}  // namespace baton::ops

#endif  // BATON_OPS_LINEAR_H_
