// NF4 (4-bit NormalFloat with double quantization; QLoRA, Dettmers et al.
// 2023): packs fp32 values into 4-bit codes and dequantizes them back, the
// kernels behind the NF4 base weights of a LoRA layout.
//
// Packing of n elements (the byte layout of scheduler/nf4_layout.h, which
// ops/ may not include: Nf4LayoutFor computes the same offsets and
// examples/llama_trainer checks that the two agree):
//   codes   [0, (n + 1) / 2): two 4-bit codes a byte, element 2i in the low
//           nibble (an odd n leaves the last high nibble 0);
//   absmax  (n + 63) / 64 bytes: block b's (kNf4Block elements) absmax,
//           quantized to 8 bits by the unsigned dynamic code of
//           ops/adamw8bit.h (DynamicCode(false)) against its group's scale;
//   scales  4-byte aligned, one fp32 per group of kNf4Group blocks: the
//           largest absmax of the group.
// The last block and group may be short.
//
// Math, per block b of group g (all in fp32):
//   absmax_b = max |x_i|;  scale_g = max absmax_b over the group
//   q_b      = NearestCode(code8, absmax_b / scale_g)  (scale_g = 0: the
//              code of 0)
//   a_b      = code8[q_b] * scale_g                     (the stored absmax)
//   c_i      = the nearest of kNf4Code to x_i / a_b (ties to the smaller;
//              a_b = 0: the code of 0), clamped to [-1, 1] by the table
//   dequantized x_i = kNf4Code[c_i] * a_b
// A group's largest block gets q = 255 (code8 = 1.0), so its a_b is exact;
// the round-trip error of an element is at most half the largest gap of
// the table (between -1 and -0.696: 0.1519) times a_b, plus |x_i| - a_b
// where that is positive (a value above the stored absmax).
//
// Launchers follow ops/op_util.h: host work on a host stream, the CUDA
// kernels (ops/nf4.cu) on a CUDA stream, computing the same bits (explicit
// rounding, no FMA). Nf4PackHost is the same CPU path as a plain function
// (what the executor's Nf4Packer calls). Thread-safe; buffers must not
// overlap.
#ifndef BATON_OPS_NF4_H_
#define BATON_OPS_NF4_H_

#include <array>
#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

inline constexpr int64_t kNf4Block = 64;   // elements per absmax
inline constexpr int64_t kNf4Group = 256;  // blocks per fp32 scale

// The 16 NF4 values (ascending; QLoRA's table: the quantiles of N(0, 1)
// normalized to [-1, 1], with an exact 0 at index 7).
const std::array<float, 16>& Nf4Code();

struct Nf4Layout {
  int64_t codes = 0;   // byte offsets of the three parts
  int64_t absmax = 0;
  int64_t scales = 0;
  int64_t bytes = 0;   // the whole packing
};
Nf4Layout Nf4LayoutFor(int64_t n);

// The index of the NF4 value nearest to x (ties to the smaller index): the
// number of the 15 midpoints 0.5f * (code[i] + code[i + 1]) below x.
uint8_t Nf4Nearest(float x);

// Packs n fp32 values into Nf4LayoutFor(n).bytes at `packed` (host
// memory). InvalidArgument for n < 0 or a null pointer (n > 0).
Status Nf4PackHost(const float* values, int64_t n, void* packed);

// The same on a stream (device memory; CUDA: one thread block per group).
Status Nf4Pack(Stream& stream, const float* values, int64_t n, void* packed);

// Dequantizes one packing of n elements into `out` (n elements of
// out_dtype: f32, or bf16 rounded to nearest even). InvalidArgument for
// n < 0, a null pointer (n > 0) or another dtype.
Status Nf4Dequantize(Stream& stream, const void* packed, int64_t n, void* out,
                     DataType out_dtype);

}  // namespace baton::ops

#endif  // BATON_OPS_NF4_H_
