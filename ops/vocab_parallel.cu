// CUDA kernels of ops/vocab_parallel.h (math and conventions there).
//
// Plain scalar kernels: the embedding forward one 256-thread block per
// token (a block strides over the row); the cross-entropy's three passes
// one 256-thread block per token row of this rank's logits (rows are
// vocab / tp wide), block reductions through BlockReduce. The embedding
// backward maps the ids to this rank's rows (-1 for the others, into a
// stream-ordered scratch) and runs ops/embedding.h's kernel over the
// rank's rows, which skips the -1 ids.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float NaN() { return __int_as_float(0x7fc00000); }

__global__ void __launch_bounds__(kThreads)
    ShardLookup(const int32_t* __restrict__ ids, const void* table, void* y, int64_t start,
                int64_t rows, int64_t vocab, int64_t hidden, int dtype) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const int64_t row = static_cast<int64_t>(id) - start;
  const bool bad = id < 0 || id >= vocab, mine = row >= 0 && row < rows;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    const float v = bad ? NaN() : mine ? Load(table, row * hidden + i, dtype) : 0.0f;
    Store(y, t * hidden + i, dtype, v);
  }
}

__global__ void LocalIds(const int32_t* __restrict__ ids, int32_t* __restrict__ local,
                         int64_t tokens, int64_t start, int64_t rows) {
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (t >= tokens) return;
  const int64_t row = static_cast<int64_t>(ids[t]) - start;
  local[t] = row >= 0 && row < rows ? static_cast<int32_t>(row) : -1;
}

__global__ void __launch_bounds__(kThreads)
    RowMax(const void* z, float* row_max, int64_t rows, int dtype) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * rows;
  float m = -INFINITY;
  for (int64_t c = threadIdx.x; c < rows; c += kThreads) m = fmaxf(m, Load(z, base + c, dtype));
  m = BlockReduce<kThreads, true>(m);
  if (threadIdx.x == 0) row_max[blockIdx.x] = m;
}

__global__ void __launch_bounds__(kThreads)
    Sums(const void* z, const int32_t* __restrict__ targets, const float* __restrict__ row_max,
         float* sum_exp, float* target_logit, int64_t start, int64_t rows, int64_t vocab,
         int dtype) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * rows;
  const float m = row_max[blockIdx.x];
  float s = 0;
  for (int64_t c = threadIdx.x; c < rows; c += kThreads) s += expf(Load(z, base + c, dtype) - m);
  s = BlockReduce<kThreads>(s);
  if (threadIdx.x != 0) return;
  sum_exp[blockIdx.x] = s;
  const int32_t y = targets[blockIdx.x];
  const int64_t c = static_cast<int64_t>(y) - start;
  target_logit[blockIdx.x] = y < 0 || y >= vocab ? NaN()
                             : c >= 0 && c < rows ? Load(z, base + c, dtype)
                                                  : 0.0f;
}

__global__ void __launch_bounds__(kThreads)
    Loss(const void* z, const int32_t* __restrict__ targets, const float* __restrict__ row_max,
         const float* __restrict__ sum_exp, const float* __restrict__ target_logit, float* loss,
         void* dz, float scale, int64_t start, int64_t rows, int64_t vocab, int dtype) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * rows;
  const int32_t y = targets[blockIdx.x];
  const float m = row_max[blockIdx.x], s = sum_exp[blockIdx.x];
  if (threadIdx.x == 0) {
    loss[blockIdx.x] = y < 0 || y >= vocab ? NaN() : m + logf(s) - target_logit[blockIdx.x];
  }
  if (dz == nullptr) return;
  const float inv = 1.0f / s;
  const int64_t yc = static_cast<int64_t>(y) - start;
  // Each element is read then written by the same thread: in place is safe.
  for (int64_t c = threadIdx.x; c < rows; c += kThreads) {
    const float p = expf(Load(z, base + c, dtype) - m) * inv;
    Store(dz, base + c, dtype, scale * (p - (c == yc ? 1.0f : 0.0f)));
  }
}

}  // namespace

int LaunchVocabEmbeddingForward(const int32_t* ids, const void* table, void* y, int64_t tokens,
                                int64_t start, int64_t rows, int64_t vocab, int64_t hidden,
                                int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  ShardLookup<<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(ids, table, y, start, rows,
                                                                 vocab, hidden, dtype);
  return static_cast<int>(cudaGetLastError());
}

int LaunchVocabEmbeddingBackward(const int32_t* ids, const void* dy, void* dtable,
                                 int dtable_dtype, bool accumulate, int64_t tokens,
                                 int64_t start, int64_t rows, int64_t vocab, int64_t hidden,
                                 int dtype, void* stream) {
  (void)vocab;  // ids outside it are -1 here: skipped like the other ranks'
  auto s = static_cast<cudaStream_t>(stream);
  int32_t* local = nullptr;
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&local),
                                      static_cast<size_t>(tokens) * sizeof(int32_t), s);
      e != cudaSuccess) {
    return static_cast<int>(e);
  }
  LocalIds<<<static_cast<unsigned>((tokens + kThreads - 1) / kThreads), kThreads, 0, s>>>(
      ids, local, tokens, start, rows);
  int err = static_cast<int>(cudaGetLastError());
  if (err == 0) {
    err = LaunchEmbeddingBackward(local, dy, dtable, dtable_dtype, accumulate, tokens, rows,
                                  hidden, dtype, stream);
  }
  cudaFreeAsync(local, s);
  return err;
}

int LaunchVocabRowMax(const void* logits, float* row_max, int64_t tokens, int64_t rows,
                      int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  RowMax<<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(logits, row_max, rows, dtype);
  return static_cast<int>(cudaGetLastError());
}

int LaunchVocabSums(const void* logits, const int32_t* targets, const float* row_max,
                    float* sum_exp, float* target_logit, int64_t tokens, int64_t start,
                    int64_t rows, int64_t vocab, int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  Sums<<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(logits, targets, row_max, sum_exp,
                                                          target_logit, start, rows, vocab,
                                                          dtype);
  return static_cast<int>(cudaGetLastError());
}

int LaunchVocabLoss(const void* logits, const int32_t* targets, const float* row_max,
                    const float* sum_exp, const float* target_logit, float* loss, void* dlogits,
                    float grad_scale, int64_t tokens, int64_t start, int64_t rows, int64_t vocab,
                    int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  Loss<<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(logits, targets, row_max, sum_exp,
                                                          target_logit, loss, dlogits,
                                                          grad_scale, start, rows, vocab, dtype);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
