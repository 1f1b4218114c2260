// CUDA kernels of ops/attention.h (math there). Straightforward: one block
// per query row (forward, dq) or per key row (dk, dv), the row's scores in
// shared memory, dot products by a loop over head_dim.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 128;
constexpr int kMaxPerThread = 4;  // head_dim <= kThreads * kMaxPerThread
static_assert(kThreads * kMaxPerThread >= kAttentionCudaMaxHeadDim,
              "BackwardKV keeps kMaxPerThread accumulators per thread");

// Floats of one shared row of `seq` scores, rounded up to 16 bytes. ptxas
// unrolls the loops over a row by 4 and loads the 1-3 leftover scores with
// one speculative vector load (LDS.64 / LDS.96) before it tests how many
// are left, so a row must be readable up to its next 16-byte boundary: with
// exactly `seq` floats, seq = 1 read 12 bytes past a 4-byte allocation
// (compute-sanitizer memcheck, issue 13).
__host__ __device__ constexpr int64_t PaddedRow(int64_t seq) { return (seq + 3) / 4 * 4; }

// What the padding must guarantee, for every seq the kernels accept: a row
// of n <= seq scores that starts 16-byte aligned (the dynamic shared block
// and every PaddedRow offset are) has every 16-byte chunk that holds one of
// its scores allocated, so the leftover vector load (which starts at a
// multiple of 4 floats and reads at most 3) stays inside the row. The
// allocation of exactly `seq` floats fails this check at seq = 1.
constexpr bool LeftoverLoadsStayInside(int64_t max_seq) {
  for (int64_t n = 1; n <= max_seq; ++n) {
    const int64_t leftover_start = n / 4 * 4;      // after the unrolled loop
    if (n % 4 != 0 && PaddedRow(n) < leftover_start + 3) return false;
    if (PaddedRow(n) % 4 != 0) return false;       // the next row stays aligned
  }
  return true;
}
static_assert(LeftoverLoadsStayInside(kAttentionCudaMaxSeq),
              "attention's shared score rows must cover the leftover vector loads");
static_assert(2 * PaddedRow(kAttentionCudaMaxSeq) * sizeof(float) <= 48 * 1024,
              "BackwardKV's two score rows must fit the default dynamic shared memory");

struct Dims {
  int64_t seq, heads, kv_heads, head_dim;
  int dtype;
  __device__ int64_t QIndex(int64_t b, int64_t i, int64_t h) const {
    return ((b * seq + i) * heads + h) * head_dim;
  }
  __device__ int64_t KIndex(int64_t b, int64_t j, int64_t g) const {
    return ((b * seq + j) * kv_heads + g) * head_dim;
  }
};

__device__ float DotRows(const void* a, int64_t ai, const void* b, int64_t bi,
                         int64_t n, int dtype) {
  float sum = 0;
  for (int64_t e = 0; e < n; ++e) sum += Load(a, ai + e, dtype) * Load(b, bi + e, dtype);
  return sum;
}

// grid (seq, heads, batch)
__global__ void Forward(const void* q, const void* k, const void* v, void* out,
                        float* lse, Dims m) {
  extern __shared__ __align__(16) float p[];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t g = h / (m.heads / m.kv_heads);
  const float c = rsqrtf(static_cast<float>(m.head_dim));
  const int64_t qi = m.QIndex(b, i, h);
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) {
    p[j] = c * DotRows(q, qi, k, m.KIndex(b, j, g), m.head_dim, m.dtype);
    mx = fmaxf(mx, p[j]);
  }
  mx = BlockReduce<kThreads, true>(mx);
  float l = 0;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) {
    p[j] = expf(p[j] - mx);
    l += p[j];
  }
  l = BlockReduce<kThreads>(l);  // also a barrier: p is complete
  for (int64_t e = threadIdx.x; e < m.head_dim; e += kThreads) {
    float acc = 0;
    for (int64_t j = 0; j <= i; ++j) acc += p[j] * Load(v, m.KIndex(b, j, g) + e, m.dtype);
    Store(out, qi + e, m.dtype, acc / l);
  }
  if (threadIdx.x == 0) lse[(b * m.heads + h) * m.seq + i] = mx + logf(l);
}

// D[b,h,i] = dout_i . out_i; one thread per (row, head).
__global__ void RowDot(const void* dout, const void* out, float* dd,
                       int64_t rows, Dims m) {
  const int64_t idx = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (idx >= rows * m.heads) return;
  const int64_t t = idx / m.heads, h = idx % m.heads;
  const int64_t b = t / m.seq, i = t % m.seq;
  const int64_t qi = m.QIndex(b, i, h);
  dd[(b * m.heads + h) * m.seq + i] = DotRows(dout, qi, out, qi, m.head_dim, m.dtype);
}

// grid (seq, heads, batch): dq of one query row.
__global__ void BackwardQ(const void* dout, const void* q, const void* k,
                          const void* v, const float* lse, const float* dd,
                          void* dq, Dims m) {
  extern __shared__ __align__(16) float ds[];
  const int64_t i = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int64_t g = h / (m.heads / m.kv_heads);
  const float c = rsqrtf(static_cast<float>(m.head_dim));
  const int64_t qi = m.QIndex(b, i, h);
  const int64_t row = (b * m.heads + h) * m.seq + i;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) {
    const int64_t kj = m.KIndex(b, j, g);
    const float pij = expf(c * DotRows(q, qi, k, kj, m.head_dim, m.dtype) - lse[row]);
    ds[j] = pij * (DotRows(dout, qi, v, kj, m.head_dim, m.dtype) - dd[row]);
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < m.head_dim; e += kThreads) {
    float acc = 0;
    for (int64_t j = 0; j <= i; ++j) acc += ds[j] * Load(k, m.KIndex(b, j, g) + e, m.dtype);
    Store(dq, qi + e, m.dtype, c * acc);
  }
}

// grid (seq, kv_heads, batch): dk and dv of one key row, summed over the
// query heads of its group and the queries at or after it.
__global__ void BackwardKV(const void* dout, const void* q, const void* k,
                           const void* v, const float* lse, const float* dd,
                           void* dk, void* dv, Dims m) {
  extern __shared__ __align__(16) float smem[];
  float* ps = smem;                          // p_ij for i in [j, seq)
  float* ds = smem + PaddedRow(m.seq);       // ds_ij
  const int64_t j = blockIdx.x, g = blockIdx.y, b = blockIdx.z;
  const int64_t group = m.heads / m.kv_heads;
  const float c = rsqrtf(static_cast<float>(m.head_dim));
  const int64_t kj = m.KIndex(b, j, g);
  float acc_k[kMaxPerThread] = {}, acc_v[kMaxPerThread] = {};
  for (int64_t h = g * group; h < (g + 1) * group; ++h) {
    for (int64_t i = j + threadIdx.x; i < m.seq; i += kThreads) {
      const int64_t qi = m.QIndex(b, i, h);
      const int64_t row = (b * m.heads + h) * m.seq + i;
      const float pij = expf(c * DotRows(q, qi, k, kj, m.head_dim, m.dtype) - lse[row]);
      ps[i] = pij;
      ds[i] = pij * (DotRows(dout, qi, v, kj, m.head_dim, m.dtype) - dd[row]);
    }
    __syncthreads();
    for (int r = 0; r < kMaxPerThread; ++r) {
      const int64_t e = threadIdx.x + int64_t{r} * kThreads;
      if (e >= m.head_dim) break;
      for (int64_t i = j; i < m.seq; ++i) {
        const int64_t qi = m.QIndex(b, i, h);
        acc_k[r] += ds[i] * Load(q, qi + e, m.dtype);
        acc_v[r] += ps[i] * Load(dout, qi + e, m.dtype);
      }
    }
    __syncthreads();
  }
  for (int r = 0; r < kMaxPerThread; ++r) {
    const int64_t e = threadIdx.x + int64_t{r} * kThreads;
    if (e >= m.head_dim) break;
    Store(dk, kj + e, m.dtype, c * acc_k[r]);
    Store(dv, kj + e, m.dtype, acc_v[r]);
  }
}

}  // namespace

int LaunchAttentionForward(const void* q, const void* k, const void* v,
                           void* out, float* lse, int64_t batch, int64_t seq,
                           int64_t heads, int64_t kv_heads, int64_t head_dim,
                           int dtype, void* stream) {
  const Dims m{seq, heads, kv_heads, head_dim, dtype};
  const dim3 grid(static_cast<unsigned>(seq), static_cast<unsigned>(heads),
                  static_cast<unsigned>(batch));
  Forward<<<grid, kThreads, PaddedRow(seq) * sizeof(float),
            static_cast<cudaStream_t>(stream)>>>(
      q, k, v, out, lse, m);
  return static_cast<int>(cudaGetLastError());
}

int LaunchAttentionBackward(const void* dout, const void* q, const void* k,
                            const void* v, const void* out, const float* lse,
                            void* dq, void* dk, void* dv, int64_t batch,
                            int64_t seq, int64_t heads, int64_t kv_heads,
                            int64_t head_dim, int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const Dims m{seq, heads, kv_heads, head_dim, dtype};
  float* dd = nullptr;
  const int64_t rows = batch * seq;
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&dd),
                                      rows * heads * sizeof(float), s);
      e != cudaSuccess) {
    return e;
  }
  RowDot<<<Blocks(rows * heads, kThreads), kThreads, 0, s>>>(dout, out, dd, rows, m);
  BackwardQ<<<dim3(static_cast<unsigned>(seq), static_cast<unsigned>(heads),
                   static_cast<unsigned>(batch)),
              kThreads, PaddedRow(seq) * sizeof(float), s>>>(dout, q, k, v, lse, dd, dq, m);
  BackwardKV<<<dim3(static_cast<unsigned>(seq), static_cast<unsigned>(kv_heads),
                    static_cast<unsigned>(batch)),
               kThreads, 2 * PaddedRow(seq) * sizeof(float), s>>>(dout, q, k, v, lse, dd,
                                                       dk, dv, m);
  cudaFreeAsync(dd, s);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
