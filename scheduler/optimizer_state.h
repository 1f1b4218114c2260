// The optimizer state the step graph holds per bucket (Policy::optimizer),
// as sizes and offsets: the graph plans the buffers, the executor hands the
// pieces to the optimizer (OptimizerContext), and the kernels (ops/adamw.h,
// ops/adamw8bit.h; optim/adamw_hook.cc checks they agree) read them.
//
//   adamw      two fp32 moments per element: kMoment1, kMoment2 (8 bytes).
//   adamw8bit  one persistent buffer per bucket (BufferRole::kMoments8bit)
//              holding, for a shard of n elements (n a multiple of
//              kQuantBlockNumel: Sharding::block), the 8-bit codes of
//              moment1 (n bytes), of moment2 (n bytes), then one fp32 absmax
//              per block for moment1 and for moment2: 2 n + 8 n / 2048 bytes
//              (2.004 bytes per element). The graph types it as fp32 words.
//
// Plain functions; thread-safe.
#ifndef BATON_SCHEDULER_OPTIMIZER_STATE_H_
#define BATON_SCHEDULER_OPTIMIZER_STATE_H_

#include <cstdint>

namespace baton::scheduler {

// Elements per quantization block of the 8-bit optimizer (Dettmers et al.
// 2021's block size; ops::kAdamW8bitBlock).
inline constexpr int64_t kQuantBlockNumel = 2048;

// Where the pieces of the 8-bit state of an n-element shard lie, in bytes
// from the start of its buffer.
struct Moments8bitLayout {
  int64_t codes1 = 0;   // n bytes
  int64_t codes2 = 0;   // n bytes
  int64_t absmax1 = 0;  // blocks floats (4-byte aligned)
  int64_t absmax2 = 0;  // blocks floats
  int64_t blocks = 0;   // ceil(n / kQuantBlockNumel)
  int64_t bytes = 0;    // the whole buffer
};
Moments8bitLayout Moments8bitLayoutFor(int64_t n);

// Fp32 words of that buffer (bytes / 4, rounded up): its graph numel.
inline int64_t Moments8bitWords(int64_t n) {
  return (Moments8bitLayoutFor(n).bytes + 3) / 4;
}

}  // namespace baton::scheduler

#endif  // BATON_SCHEDULER_OPTIMIZER_STATE_H_
