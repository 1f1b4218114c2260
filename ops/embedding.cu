// CUDA kernels of ops/embedding.h (math and conventions there).
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;

// One block per token.
__global__ void Lookup(const int32_t* ids, const void* table, void* y,
                       int64_t vocab, int64_t hidden, int dtype) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  const bool ok = id >= 0 && id < vocab;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    Store(y, t * hidden + i, dtype,
       ok ? Load(table, int64_t{id} * hidden + i, dtype) : __int_as_float(0x7fc00000));
  }
}

// Starts the fp32 accumulator: the old gradient (+=) or zero (=).
__global__ void Start(const void* dtable, float* acc, int64_t n, int dt_dtype,
                      bool accumulate) {
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i < n) acc[i] = accumulate ? Load(dtable, i, dt_dtype) : 0.0f;
}

__global__ void Scatter(const int32_t* ids, const void* dy, float* acc,
                        int64_t vocab, int64_t hidden, int dtype) {
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  if (id < 0 || id >= vocab) return;
  for (int64_t i = threadIdx.x; i < hidden; i += kThreads) {
    atomicAdd(acc + int64_t{id} * hidden + i, Load(dy, t * hidden + i, dtype));
  }
}

__global__ void Finish(const float* acc, void* dtable, int64_t n, int dt_dtype) {
  const int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (i < n) Store(dtable, i, dt_dtype, acc[i]);
}

}  // namespace

int LaunchEmbeddingForward(const int32_t* ids, const void* table, void* y,
                           int64_t tokens, int64_t vocab, int64_t hidden,
                           int dtype, void* stream) {
  Lookup<<<static_cast<unsigned>(tokens), kThreads, 0,
           static_cast<cudaStream_t>(stream)>>>(ids, table, y, vocab, hidden,
                                                dtype);
  return static_cast<int>(cudaGetLastError());
}

int LaunchEmbeddingBackward(const int32_t* ids, const void* dy, void* dtable,
                            int dtable_dtype, bool accumulate, int64_t tokens,
                            int64_t vocab, int64_t hidden, int dtype,
                            void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const int64_t n = vocab * hidden;
  float* acc = nullptr;
  if (dtable_dtype == 0) {
    acc = static_cast<float*>(dtable);  // accumulate in place
    if (!accumulate) {
      if (cudaError_t e = cudaMemsetAsync(acc, 0, n * sizeof(float), s); e != cudaSuccess) {
        return e;
      }
    }
  } else {
    if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&acc), n * sizeof(float), s);
        e != cudaSuccess) {
      return e;
    }
    Start<<<Blocks(n, kThreads), kThreads, 0, s>>>(dtable, acc, n, dtable_dtype,
                                                   accumulate);
  }
  Scatter<<<static_cast<unsigned>(tokens), kThreads, 0, s>>>(ids, dy, acc, vocab,
                                                             hidden, dtype);
  if (dtable_dtype != 0) {
    Finish<<<Blocks(n, kThreads), kThreads, 0, s>>>(acc, dtable, n, dtable_dtype);
    cudaFreeAsync(acc, s);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
