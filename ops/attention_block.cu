// CUDA kernels of ops/attention_block.h (math there). Straightforward, as
// ops/attention.cu: one thread block per query row (forward, dq) or per key
// row (dk, dv), the row's scores in shared memory, dot products by a loop
// over head_dim; merge and delta one thread per (row, head). The gradients
// are added (+=) into float accumulators: each accumulator element has one
// writer per launch (its query row's block for dq, its key row's for dk and
// dv), and launches on one stream run in order, so no atomics are needed.
#include "baton/ops/attention_block_kernels.h"
#include "baton/ops/cuda_util.cuh"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPerThread = 4;  // head_dim <= kThreads * kMaxPerThread
static_assert(kThreads * kMaxPerThread >= kBlockCudaMaxHeadDim,
              "BackwardKV keeps kMaxPerThread accumulators per thread");

// A shared row of n scores rounded up to 16 bytes: ptxas may read the 1-3
// leftover scores of an unrolled loop with one vector load (ops/attention.cu
// explains it, issue 13).
__host__ __device__ constexpr int64_t PaddedRow(int64_t n) { return (n + 3) / 4 * 4; }
static_assert(2 * PaddedRow(kBlockCudaMaxLen) * sizeof(float) <= 48 * 1024,
              "BackwardKV's two score rows must fit the default dynamic shared memory");

// Keys [0, n) of the block that query row i sees.
__device__ int64_t Visible(const BlockDims& m, int64_t i) {
  if (!m.causal) return m.kv_len;
  const int64_t n = m.q_pos + i - m.kv_pos + 1;
  return n < 0 ? 0 : (n > m.kv_len ? m.kv_len : n);
}

// The first query row of the block that sees key row j (q_len: none).
__device__ int64_t FirstQuery(const BlockDims& m, int64_t j) {
  if (!m.causal) return 0;
  const int64_t i = m.kv_pos + j - m.q_pos;
  return i < 0 ? 0 : (i > m.q_len ? m.q_len : i);
}

__device__ int64_t QIndex(const BlockDims& m, int64_t b, int64_t i, int64_t h) {
  return ((b * m.q_seq + m.q_begin + i) * m.heads + h) * m.head_dim;
}
__device__ int64_t KIndex(const BlockDims& m, int64_t b, int64_t j, int64_t g) {
  return ((b * m.kv_seq + m.kv_begin + j) * m.kv_heads + g) * m.head_dim;
}
__device__ int64_t Row(const BlockDims& m, int64_t b, int64_t h, int64_t i) {
  return (b * m.heads + h) * m.q_seq + m.q_begin + i;
}

__device__ float DotRows(const void* a, int64_t ai, const void* b, int64_t bi, int64_t n,
                         int dtype) {
  float sum = 0;
  for (int64_t e = 0; e < n; ++e) sum += Load(a, ai + e, dtype) * Load(b, bi + e, dtype);
  return sum;
}

// grid (q_len, heads, batch)
__global__ void Forward(const void* q, const void* k, const void* v, float* out, float* lse,
                        BlockDims m) {
  extern __shared__ __align__(16) float p[];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t g = h / (m.heads / m.kv_heads);
  const float c = rsqrtf(static_cast<float>(m.head_dim));
  const int64_t qi = QIndex(m, b, i, h);
  const int64_t n = Visible(m, i);
  if (n == 0) {  // the whole thread block returns: no barrier is skipped
    for (int64_t e = threadIdx.x; e < m.head_dim; e += kThreads) out[qi + e] = 0;
    if (threadIdx.x == 0) lse[Row(m, b, h, i)] = -INFINITY;
    return;
  }
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    p[j] = c * DotRows(q, qi, k, KIndex(m, b, j, g), m.head_dim, m.dtype);
    mx = fmaxf(mx, p[j]);
  }
  mx = BlockReduce<kThreads, true>(mx);
  float l = 0;
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    p[j] = expf(p[j] - mx);
    l += p[j];
  }
  l = BlockReduce<kThreads>(l);  // also a barrier: p is complete
  for (int64_t e = threadIdx.x; e < m.head_dim; e += kThreads) {
    float acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += p[j] * Load(v, KIndex(m, b, j, g) + e, m.dtype);
    out[qi + e] = acc / l;
  }
  if (threadIdx.x == 0) lse[Row(m, b, h, i)] = mx + logf(l);
}

// One thread per (batch, block row, head).
__global__ void Merge(float* out_a, float* lse_a, const float* out_p, const float* lse_p,
                      BlockDims m) {
  const int64_t idx = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (idx >= m.batch * m.q_len * m.heads) return;
  const int64_t h = idx % m.heads, t = idx / m.heads;
  const int64_t i = t % m.q_len, b = t / m.q_len;
  const int64_t r = Row(m, b, h, i), o = QIndex(m, b, i, h);
  const float la = lse_a[r], lp = lse_p[r];
  if (lp == -INFINITY) return;
  if (la == -INFINITY) {
    for (int64_t e = 0; e < m.head_dim; ++e) out_a[o + e] = out_p[o + e];
    lse_a[r] = lp;
    return;
  }
  const float total = fmaxf(la, lp) + log1pf(expf(-fabsf(la - lp)));
  const float wa = expf(la - total), wp = expf(lp - total);
  for (int64_t e = 0; e < m.head_dim; ++e) out_a[o + e] = wa * out_a[o + e] + wp * out_p[o + e];
  lse_a[r] = total;
}

// One thread per (batch, block row, head).
__global__ void Delta(const void* dout, const void* out, float* delta, BlockDims m) {
  const int64_t idx = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (idx >= m.batch * m.q_len * m.heads) return;
  const int64_t h = idx % m.heads, t = idx / m.heads;
  const int64_t i = t % m.q_len, b = t / m.q_len;
  const int64_t o = QIndex(m, b, i, h);
  delta[Row(m, b, h, i)] = DotRows(dout, o, out, o, m.head_dim, m.dtype);
}

// grid (q_len, heads, batch): dq of one query row.
__global__ void BackwardQ(const void* dout, const void* q, const void* k, const void* v,
                          const float* lse, const float* delta, float* dq, BlockDims m) {
  extern __shared__ __align__(16) float ds[];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t n = Visible(m, i);
  if (n == 0) return;  // the whole thread block
  const int64_t g = h / (m.heads / m.kv_heads);
  const float c = rsqrtf(static_cast<float>(m.head_dim));
  const int64_t qi = QIndex(m, b, i, h), row = Row(m, b, h, i);
  for (int64_t j = threadIdx.x; j < n; j += kThreads) {
    const int64_t kj = KIndex(m, b, j, g);
    const float pij = expf(c * DotRows(q, qi, k, kj, m.head_dim, m.dtype) - lse[row]);
    ds[j] = pij * (DotRows(dout, qi, v, kj, m.head_dim, m.dtype) - delta[row]);
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < m.head_dim; e += kThreads) {
    float acc = 0;
    for (int64_t j = 0; j < n; ++j) acc += ds[j] * Load(k, KIndex(m, b, j, g) + e, m.dtype);
    dq[qi + e] += c * acc;
  }
}

// grid (kv_len, kv_heads, batch): dk and dv of one key row, summed over the
// query heads of its group and the block's queries that see it.
__global__ void BackwardKV(const void* dout, const void* q, const void* k, const void* v,
                           const float* lse, const float* delta, float* dk, float* dv,
                           BlockDims m) {
  extern __shared__ __align__(16) float smem[];
  float* ps = smem;                     // p_ij for the block's query rows
  float* ds = smem + PaddedRow(m.q_len);  // ds_ij
  const int64_t j = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
  const int64_t i0 = FirstQuery(m, j);
  if (i0 == m.q_len) return;  // the whole thread block
  const int64_t group = m.heads / m.kv_heads;
  const float c = rsqrtf(static_cast<float>(m.head_dim));
  const int64_t kj = KIndex(m, b, j, g);
  float acc_k[kMaxPerThread] = {}, acc_v[kMaxPerThread] = {};
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i = i0 + threadIdx.x; i < m.q_len; i += kThreads) {
      const int64_t qi = QIndex(m, b, i, h), row = Row(m, b, h, i);
      const float pij = expf(c * DotRows(q, qi, k, kj, m.head_dim, m.dtype) - lse[row]);
      ps[i] = pij;
      ds[i] = pij * (DotRows(dout, qi, v, kj, m.head_dim, m.dtype) - delta[row]);
    }
    __syncthreads();
    for (int r = 0; r < kMaxPerThread; ++r) {
      const int64_t e = threadIdx.x + int64_t{r} * kThreads;
      if (e >= m.head_dim) break;
      for (int64_t i = i0; i < m.q_len; ++i) {
        const int64_t qi = QIndex(m, b, i, h);
        acc_k[r] += ds[i] * Load(q, qi + e, m.dtype);
        acc_v[r] += ps[i] * Load(dout, qi + e, m.dtype);
      }
    }
    __syncthreads();
  }
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int64_t e = threadIdx.x + int64_t{r} * kThreads;
    if (e >= m.head_dim) break;
    dk[kj + e] += c * acc_k[r];
    dv[kj + e] += acc_v[r];
  }
}

dim3 Grid(int64_t rows, int64_t heads, int64_t batch) {
  return dim3(static_cast<unsigned>(rows), static_cast<unsigned>(heads),
              static_cast<unsigned>(batch));
}

}  // namespace

int LaunchAttentionBlockForward(const void* q, const void* k, const void* v, float* out,
                                float* lse, const BlockDims& m, void* stream) {
  Forward<<<Grid(m.q_len, m.heads, m.batch), kThreads, PaddedRow(m.kv_len) * sizeof(float),
            static_cast<cudaStream_t>(stream)>>>(q, k, v, out, lse, m);
  return static_cast<int>(cudaGetLastError());
}

int LaunchAttentionBlockMerge(float* out_a, float* lse_a, const float* out_p,
                              const float* lse_p, const BlockDims& m, void* stream) {
  Merge<<<Blocks(m.batch * m.q_len * m.heads, kThreads), kThreads, 0,
          static_cast<cudaStream_t>(stream)>>>(out_a, lse_a, out_p, lse_p, m);
  return static_cast<int>(cudaGetLastError());
}

int LaunchAttentionBlockDelta(const void* dout, const void* out, float* delta,
                              const BlockDims& m, void* stream) {
  Delta<<<Blocks(m.batch * m.q_len * m.heads, kThreads), kThreads, 0,
          static_cast<cudaStream_t>(stream)>>>(dout, out, delta, m);
  return static_cast<int>(cudaGetLastError());
}

int LaunchAttentionBlockBackward(const void* dout, const void* q, const void* k,
                                 const void* v, const float* lse, const float* delta,
                                 float* dq, float* dk, float* dv, const BlockDims& m,
                                 void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  BackwardQ<<<Grid(m.q_len, m.heads, m.batch), kThreads, PaddedRow(m.kv_len) * sizeof(float),
              s>>>(dout, q, k, v, lse, delta, dq, m);
  BackwardKV<<<Grid(m.kv_len, m.kv_heads, m.batch), kThreads,
               2 * PaddedRow(m.q_len) * sizeof(float), s>>>(dout, q, k, v, lse, delta, dk, dv,
                                                             m);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
