// Token embedding lookup and its scatter-add backward.
//
// Math, for ids [tokens] (int32, each in [0, vocab)) and table [vocab, hidden]:
//   y[t, :]       = table[ids[t], :]                          (=)
// Backward, given dy [tokens, hidden]:
//   dtable[v, :]  = sum over t with ids[t] = v of dy[t, :]
//                   (= or += : `accumulate`; with =, rows of tokens that
//                   do not occur become zero)
// table, y, dy share one dtype (f32 or bf16); dtable has its own. The CPU
// backward adds in token order (deterministic); the CUDA one accumulates in
// fp32 with atomics (order varies, within fp32 rounding).
//
// Token ids are data: the CPU path returns InvalidArgument from its host
// work for an id out of range (the stream carries the error); the CUDA path
// writes NaN into that token's row of y and skips it in the backward, so a
// bad id is loud in the loss, never silently a valid row.
// Launchers follow ops/op_util.h.
#ifndef BATON_OPS_EMBEDDING_H_
#define BATON_OPS_EMBEDDING_H_

#include <cstdint>

#include "baton/runtime/dtype.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

struct EmbeddingShape {
  int64_t tokens = 0;
  int64_t vocab = 0;
  int64_t hidden = 0;
  DataType dtype = DataType::kF32;  // table, y, dy
};

Status EmbeddingForward(Stream& stream, const EmbeddingShape& shape,
                        const int32_t* ids, const void* table, void* y);
Status EmbeddingBackward(Stream& stream, const EmbeddingShape& shape,
                         const int32_t* ids, const void* dy, void* dtable,
                         DataType dtable_dtype, bool accumulate);

}  // namespace baton::ops

#endif  // BATON_OPS_EMBEDDING_H_
