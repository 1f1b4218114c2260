// SwiGLU, the gated activation of Llama's MLP.
//
// Math, elementwise over [rows, width] (gate g, up u; s = sigmoid):
//   h  = silu(g) * u = g * s(g) * u                        (=)
// Backward, given dh:
//   dg = dh * u * s(g) * (1 + g * (1 - s(g)))              (=)
//   du = dh * silu(g)                                      (=)
// One dtype (f32 or bf16) for all tensors; fp32 arithmetic.
// Launchers follow ops/op_util.h.
#ifndef BATON_OPS_SWIGLU_H_
#define BATON_OPS_SWIGLU_H_

#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct SwiGluShape {
  int64_t rows = 0;
  int64_t width = 0;
  DataType dtype = DataType::kF32;
};

Status SwiGluForward(Stream& stream, const SwiGluShape& shape, const void* g,
                     const void* u, void* h);
Status SwiGluBackward(Stream& stream, const SwiGluShape& shape,
                      const void* dh, const void* g, const void* u, void* dg,
                      void* du);

// The CPU implementations (host memory, run synchronously); what the
// launchers run on a host stream.
void SwiGluForwardCpu(const SwiGluShape& shape, const void* g, const void* u,
                      void* h);
void SwiGluBackwardCpu(const SwiGluShape& shape, const void* dh, const void* g,
                       const void* u, void* dg, void* du);

}  // namespace baton::ops

#endif  // BATON_OPS_SWIGLU_H_
