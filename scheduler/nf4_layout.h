// The packed NF4 storage of a frozen bucket's shard (LayoutOptions::
// base_dtype = nf4; QLoRA, Dettmers et al. 2023), as sizes and offsets:
// the step graph plans the shard and the gathered buffers with them, the
// executor hands them to the dequantize callback, whose NF4 kernels (the
// caller's: ops/nf4.h, which computes the same offsets since scheduler/
// may not include ops/; examples/llama_trainer checks that they agree)
// read and write them.
//
// n elements (a multiple of kNf4AlignNumel: every parameter and shard of
// an NF4 layout is, Sharding::block) are stored as
//   codes     n / 2 bytes: two 4-bit NF4 codes a byte (element 2i in the
//             low nibble), each block of kNf4BlockNumel = 64 elements
//             scaled by its absmax;
//   absmax    n / 64 bytes: each block's absmax, quantized to 8 bits
//             (double quantization) by the unsigned dynamic code of
//             ops/adamw8bit.h against its group's scale;
//   scales    n / 16384 floats: per group of 256 blocks, the largest
//             absmax (fp32).
// 4 + 8 / 64 + 32 / 16384 = 4.127 bits an element, QLoRA's figure. The
// gathered bucket is its shards' packings one after another.
//
// Plain functions; thread-safe.
#ifndef BATON_SCHEDULER_NF4_LAYOUT_H_
#define BATON_SCHEDULER_NF4_LAYOUT_H_

#include <cstdint>

namespace baton::scheduler {

inline constexpr int64_t kNf4BlockNumel = 64;
inline constexpr int64_t kNf4GroupBlocks = 256;
inline constexpr int64_t kNf4AlignNumel = kNf4BlockNumel * kNf4GroupBlocks;  // 16384

struct Nf4Packing {
  int64_t codes = 0;   // byte offsets
  int64_t absmax = 0;
  int64_t scales = 0;  // 4-byte aligned
  int64_t bytes = 0;   // the whole packing
};
// For n elements (n a multiple of kNf4AlignNumel).
Nf4Packing Nf4PackingFor(int64_t n);

// Fp32 words of that packing: the graph's numel of a packed buffer.
inline int64_t Nf4PackedWords(int64_t n) { return (Nf4PackingFor(n).bytes + 3) / 4; }

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_NF4_LAYOUT_H_
