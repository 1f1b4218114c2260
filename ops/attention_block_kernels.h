// The CUDA launchers of ops/attention_block.h, called by attention_block.cc
// (which holds the math, the conventions and the argument checks). Plain
// header: included by nvcc. dtype codes are DataType's values (0 f32,
// 1 bf16); each returns a cudaError_t value.
#ifndef BATON_OPS_ATTENTION_BLOCK_KERNELS_H_
#define BATON_OPS_ATTENTION_BLOCK_KERNELS_H_

#include <cstdint>

namespace baton::ops_internal {

// Limits of the kernels: one row of scores (kv_len forward and dq, q_len
// twice for dk / dv) in shared memory; BackwardKV keeps head_dim / 128
// accumulators per thread.
constexpr int64_t kBlockCudaMaxLen = 4096;
constexpr int64_t kBlockCudaMaxHeadDim = 512;

// AttentionBlockShape's fields, as plain integers.
struct BlockDims {
  int64_t batch, heads, kv_heads, head_dim;
  int dtype;
  int64_t q_seq, q_begin, q_len;
  int64_t kv_seq, kv_begin, kv_len;
  int causal;  // 1: BlockMask::kCausal
  int64_t q_pos, kv_pos;
};

int LaunchAttentionBlockForward(const void* q, const void* k, const void* v,
                                float* out, float* lse, const BlockDims& m,
                                void* stream);
int LaunchAttentionBlockMerge(float* out_a, float* lse_a, const float* out_p,
                              const float* lse_p, const BlockDims& m,
                              void* stream);
int LaunchAttentionBlockDelta(const void* dout, const void* out, float* delta,
                              const BlockDims& m, void* stream);
int LaunchAttentionBlockBackward(const void* dout, const void* q, const void* k,
                                 const void* v, const float* lse,
                                 const float* delta, float* dq, float* dk,
                                 float* dv, const BlockDims& m, void* stream);

}  // namespace baton::ops_internal

#endif  // BATON_OPS_ATTENTION_BLOCK_KERNELS_H_
