// Rotary position embeddings, in place, Hugging Face's half-split layout
// (rotate_half): within each head of width d, element i < d/2 pairs with
// element i + d/2.
//
// Math, for x [batch * seq, heads * d] (row t is position p = t mod seq):
//   a_i      = p * theta^(-2i/d)                       (computed in float64)
//   x'[i]    = x[i] cos a_i - x[i+d/2] sin a_i         (=, in place)
//   x'[i+d/2]= x[i+d/2] cos a_i + x[i] sin a_i
// Backward, given dx' (in place): the inverse rotation, the same with -a_i,
// since the map is orthogonal.
// One dtype (f32 or bf16); d must be even. Launchers follow ops/op_util.h.
#ifndef BATON_OPS_ROTARY_H_
#define BATON_OPS_ROTARY_H_

#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct RotaryShape {
  int64_t batch = 0;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;  // even
  double theta = 10000.0;
  DataType dtype = DataType::kF32;
};

Status RotaryForward(Stream& stream, const RotaryShape& shape, void* x);
Status RotaryBackward(Stream& stream, const RotaryShape& shape, void* dx);

}  // namespace baton::ops

#endif  // BATON_OPS_ROTARY_H_
