// CUDA kernels of ops/swiglu.h (math there).
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;

__global__ void SwiGluFwd(const void* g, const void* u, void* h, int64_t n,
                          int dtype) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const float gv = Load(g, i, dtype);
    Store(h, i, dtype, gv / (1.0f + expf(-gv)) * Load(u, i, dtype));
  }
}

__global__ void SwiGluBwd(const void* dh, const void* g, const void* u,
                          void* dg, void* du, int64_t n, int dtype) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const float gv = Load(g, i, dtype), uv = Load(u, i, dtype), d = Load(dh, i, dtype);
    const float sg = 1.0f / (1.0f + expf(-gv));
    Store(dg, i, dtype, d * uv * sg * (1.0f + gv * (1.0f - sg)));
    Store(du, i, dtype, d * gv * sg);
  }
}

unsigned Grid(int64_t n) {
  const unsigned b = Blocks(n, kThreads);
  return b < 65535u * 8 ? b : 65535u * 8;
}

}  // namespace

int LaunchSwiGluForward(const void* g, const void* u, void* h, int64_t n,
                        int dtype, void* stream) {
  SwiGluFwd<<<Grid(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      g, u, h, n, dtype);
  return static_cast<int>(cudaGetLastError());
}

int LaunchSwiGluBackward(const void* dh, const void* g, const void* u,
                         void* dg, void* du, int64_t n, int dtype,
                         void* stream) {
  SwiGluBwd<<<Grid(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      dh, g, u, dg, du, n, dtype);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
