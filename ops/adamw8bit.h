// AdamW with both moments stored in 8 bits, block-wise (Dettmers et al.
// 2021, "8-bit Optimizers via Block-wise Quantization"), fused in one pass
// with the fp32 master update and the cast of the master into the
// parameter-dtype shard that feeds the next all-gather.
//
// Storage, per element: one code byte for each moment; per block of
// kAdamW8bitBlock consecutive elements (from element 0 of the arguments,
// which the caller places on a block boundary of the parameter; the last
// block may be short): one fp32 absmax for each moment. A moment's value is
// code[byte] x absmax of its block.
//
// Codes: the dynamic (tree) quantization of the paper, not a linear one:
// a linear 8-bit code over [-absmax, absmax] has a step of absmax / 127,
// so the many small second moments of a block would all round to 0 and
// their updates m / (sqrt(v) + eps) blow up; the dynamic code spends its
// values on every decade from 1e-6 to 1 (a decade e below 1 holding half
// as many values as the one above it), keeping a near-constant relative
// error over six decades. Each value is the midpoint of one of 2^k equal
// bins of [0.1, 1] times 10^-e:
//   moment1 (signed):   decades e = 6..0 with 1, 2, ..., 64 values, each
//                       with both signs (254), then 0 and 1: 256 values;
//   moment2 (unsigned): decades e = 6..0 with 2, 4, ..., 128 values
//                       (254), then 0 and 1: 256 values.
// Both tables are sorted ascending (DynamicCode).
//
// Math, per block, at step t >= 1 (1-based), with AdamWStep's update
// (ops/adamw.h) in the same float operations and order:
//   m, v     = code1[c1] a1, code2[c2] a2                 (dequantize)
//   g        = grad * grad_scale
//   m        = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   master   = master (1 - lr wd) - lr (m / (1 - beta1^t))
//                                     / (sqrt(v / (1 - beta2^t)) + eps)
//   param    = round(master) into param_dtype             (if given)
//   a1, a2   = max |m|, max v over the block
//   c1, c2   = the nearest code value to m / a1, v / a2 (ties to the
//              smaller; a zero absmax stores the code of 0)
// The step uses the unquantized m and v; only what is stored is 8 bits.
// Zeroed state (codes and absmax all 0) is the moments' initial zero.
//
// Launchers follow ops/op_util.h. CPU: one pass over each block on the
// stream's host work; CUDA: ops/adamw8bit.cu (one thread block per
// quantization block). The state buffers must not overlap the others.
#ifndef BATON_OPS_ADAMW8BIT_H_
#define BATON_OPS_ADAMW8BIT_H_

#include <array>
#include <cstdint>

#include "baton/ops/adamw.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

// Elements per quantization block (the paper's block size).
inline constexpr int64_t kAdamW8bitBlock = 2048;

// Blocks covering n elements.
inline int64_t AdamW8bitBlocks(int64_t n) {
  return (n + kAdamW8bitBlock - 1) / kAdamW8bitBlock;
}

// The 256 code values (ascending) of the signed (moment1) or unsigned
// (moment2) dynamic code described above.
const std::array<float, 256>& DynamicCode(bool is_signed);

// The index of the value of `code` (256 ascending values) nearest to x,
// ties to the smaller index: the number of midpoints 0.5f * (code[i] +
// code[i + 1]) below x. What both kernels compute.
uint8_t NearestCode(const std::array<float, 256>& code, float x);

struct AdamW8bitArgs {
  int64_t n = 0;
  int64_t step = 1;  // 1-based
  float grad_scale = 1.0f;
  float* master = nullptr;
  const void* grad = nullptr;
  DataType grad_dtype = DataType::kF32;
  uint8_t* moment1 = nullptr;  // n codes
  uint8_t* moment2 = nullptr;  // n codes
  float* absmax1 = nullptr;    // AdamW8bitBlocks(n)
  float* absmax2 = nullptr;    // AdamW8bitBlocks(n)
  void* param = nullptr;       // optional: the fused cast
  DataType param_dtype = DataType::kBF16;
};

// InvalidArgument, naming the op and the argument, for a bad config (as
// CheckAdamWArgs), n < 0, step < 1, a null buffer (n > 0) or a dtype other
// than f32 / bf16; nothing is enqueued then.
Status AdamW8bitStep(Stream& stream, const AdamWConfig& config,
                     const AdamW8bitArgs& args);

}  // namespace baton::ops

#endif  // BATON_OPS_ADAMW8BIT_H_
