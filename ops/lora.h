// A LoRA-adapted linear layer (Hu et al. 2021), composed from ops/linear.h:
// a frozen base weight w [out, in] plus a trainable low-rank update
// b [out, rank] a [rank, in] scaled by s = alpha / rank.
//
// Forward, for x [rows, in]:
//   xa = s * (x a^T)              [rows, rank]  (kept for the backward)
//   y  = x w^T + xa b^T           [rows, out]   (= or += : accumulate_y)
// Backward, given dy [rows, out] and the forward's xa:
//   u  = s * (dy b)               [rows, rank]  (into `scratch`)
//   dx = dy w + u a               [rows, in]    (= or += : accumulate_dx)
//   db = dy^T xa                  [out, rank]   (= or += : accumulate_db)
//   da = u^T x                    [rank, in]    (= or += : accumulate_da)
// w gets no gradient (it is frozen). x, w, a, b, xa, y, dy, dx and scratch
// share one dtype (f32 or bf16); da and db have grad_dtype (f32, or bf16
// for bf16 inputs). In bf16, xa and u are rounded to bf16 once when
// stored; products accumulate in fp32 (ops/linear.h).
//
// Launchers follow ops/op_util.h: each linear is ops/linear.h's (a blocked
// GEMM on the host, cuBLAS on CUDA), and the scaling by s is one more
// element-wise pass (ops/lora.cu on CUDA). dx may be null (the gradient of
// x is not needed). Buffers must not overlap.
#ifndef BATON_OPS_LORA_H_
#define BATON_OPS_LORA_H_

#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct LoraShape {
  int64_t rows = 0;
  int64_t in = 0;
  int64_t out = 0;
  int64_t rank = 0;
  float scale = 1.0f;  // alpha / rank
  DataType dtype = DataType::kF32;
};

// InvalidArgument naming the op and the argument for a size that is not
// positive, a scale that is not finite, a null pointer or a bad dtype.
Status LoraForward(Stream& stream, const LoraShape& shape, const void* x, const void* w,
                   const void* a, const void* b, void* xa, void* y, bool accumulate_y = false);

struct LoraGrads {
  void* dx = nullptr;
  bool accumulate_dx = false;
  void* da = nullptr;
  void* db = nullptr;
  DataType grad_dtype = DataType::kF32;
  bool accumulate_da = false;
  bool accumulate_db = false;
};

Status LoraBackward(Stream& stream, const LoraShape& shape, const void* dy, const void* x,
                    const void* w, const void* a, const void* b, const void* xa,
                    void* scratch, const LoraGrads& grads);

// p[i] *= s for n elements of dtype t (f32 or bf16; bf16 rounded once).
Status ScaleInPlace(Stream& stream, void* p, int64_t n, DataType t, float s);

}  // namespace baton::ops

#endif  // BATON_OPS_LORA_H_
