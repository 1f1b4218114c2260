// CUDA kernels of ops/rmsnorm.h (math and conventions there).
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float BlockSum(float v) {
  return BlockReduce<kThreads>(v);
}

__global__ void Forward(const void* __restrict__ x, const void* __restrict__ w,
                        void* __restrict__ y, float* __restrict__ rstd,
                        int64_t hidden, int dtype, float eps) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * hidden;
  float sum = 0;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    const float v = Load(x, row + i, dtype);
    sum += v * v;
  }
  const float r = rsqrtf(BlockSum(sum) / static_cast<float>(hidden) + eps);
  if (threadIdx.x == 0) rstd[blockIdx.x] = r;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    Store(y, row + i, dtype, Load(x, row + i, dtype) * r * Load(w, i, dtype));
  }
}

__global__ void BackwardDx(const void* __restrict__ dy,
                           const void* __restrict__ x,
                           const void* __restrict__ w,
                           const float* __restrict__ rstd,
                           void* __restrict__ dx, bool accumulate_dx,
                           int64_t hidden, int dtype) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * hidden;
  const float r = rstd[blockIdx.x];
  float c = 0;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    c += Load(dy, row + i, dtype) * Load(w, i, dtype) * Load(x, row + i, dtype);
  }
  c = BlockSum(c) / static_cast<float>(hidden);
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    const float g = Load(dy, row + i, dtype);
    const float prev = accumulate_dx ? Load(dx, row + i, dtype) : 0.0f;
    Store(dx, row + i, dtype,
       prev + r * (g * Load(w, i, dtype) - Load(x, row + i, dtype) * r * r * c));
  }
}

// Column partial sums over a slice of tokens, added atomically into acc.
__global__ void BackwardDw(const void* __restrict__ dy,
                           const void* __restrict__ x,
                           const float* __restrict__ rstd,
                           float* __restrict__ acc, int64_t tokens,
                           int64_t hidden, int64_t per_slice, int dtype) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= hidden) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * per_slice;
  const int64_t t1 = t0 + per_slice < tokens ? t0 + per_slice : tokens;
  float sum = 0;
  for (int64_t t = t0; t < t1; ++t) {
    sum += Load(dy, t * hidden + i, dtype) * Load(x, t * hidden + i, dtype) * rstd[t];
  }
  atomicAdd(acc + i, sum);
}

__global__ void FinishDw(const float* __restrict__ acc, void* __restrict__ dw,
                         int64_t hidden, int dw_dtype, bool accumulate) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= hidden) return;
  Store(dw, i, dw_dtype, (accumulate ? Load(dw, i, dw_dtype) : 0.0f) + acc[i]);
}

}  // namespace

int LaunchRmsNormForward(const void* x, const void* w, void* y, float* rstd,
                         int64_t tokens, int64_t hidden, int dtype, float eps,
                         void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  Forward<<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(x, w, y, rstd,
                                                             hidden, dtype, eps);
  return static_cast<int>(cudaGetLastError());
}

int LaunchRmsNormBackward(const void* dy, const void* x, const void* w,
                          const float* rstd, void* dx, bool accumulate_dx,
                          void* dw, int dw_dtype,
                          bool accumulate_dw, int64_t tokens, int64_t hidden,
                          int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  BackwardDx<<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(
      dy, x, w, rstd, dx, accumulate_dx, hidden, dtype);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
  float* acc = nullptr;
  if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&acc),
                                      hidden * sizeof(float), s);
      e != cudaSuccess) {
    return e;
  }
  cudaMemsetAsync(acc, 0, hidden * sizeof(float), s);
  const unsigned cols = static_cast<unsigned>((hidden + kThreads - 1) / kThreads);
  const int64_t slices = tokens < 128 ? tokens : 128;
  const int64_t per_slice = (tokens + slices - 1) / slices;
  BackwardDw<<<dim3(cols, static_cast<unsigned>(slices)), kThreads, 0, s>>>(
      dy, x, rstd, acc, tokens, hidden, per_slice, dtype);
  FinishDw<<<cols, kThreads, 0, s>>>(acc, dw, hidden, dw_dtype, accumulate_dw);
  cudaFreeAsync(acc, s);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
