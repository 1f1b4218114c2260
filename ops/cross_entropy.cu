// CUDA kernel of ops/cross_entropy.h (math there): one block per token.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;

__global__ void Xent(const void* z, const int32_t* targets, float* loss,
                     void* dz, float scale, int64_t vocab, int dtype) {
  const int64_t row = blockIdx.x * vocab;
  const int32_t y = targets[blockIdx.x];
  float m = -INFINITY;
  for (int64_t v = threadIdx.x; v < vocab; v += kThreads) m = fmaxf(m, Load(z, row + v, dtype));
  m = BlockReduce<kThreads, true>(m);
  float sum = 0;
  for (int64_t v = threadIdx.x; v < vocab; v += kThreads) sum += expf(Load(z, row + v, dtype) - m);
  const float lse = m + logf(BlockReduce<kThreads>(sum));
  const bool ok = y >= 0 && y < vocab;
  if (threadIdx.x == 0) {
    loss[blockIdx.x] = ok ? lse - Load(z, row + y, dtype) : __int_as_float(0x7fc00000);
  }
  if (dz == nullptr) return;
  __syncthreads();  // every read of z[row + y] is done before an in-place write
  for (int64_t v = threadIdx.x; v < vocab; v += kThreads) {
    const float p = expf(Load(z, row + v, dtype) - lse);
    Store(dz, row + v, dtype, scale * (p - (v == y ? 1.0f : 0.0f)));
  }
}

}  // namespace

int LaunchCrossEntropy(const void* logits, const int32_t* targets, float* loss,
                       void* dlogits, float grad_scale, int64_t tokens,
                       int64_t vocab, int dtype, void* stream) {
  Xent<<<static_cast<unsigned>(tokens), kThreads, 0,
         static_cast<cudaStream_t>(stream)>>>(logits, targets, loss, dlogits,
                                              grad_scale, vocab, dtype);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
