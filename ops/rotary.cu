// CUDA kernel of ops/rotary.h (math there). One thread per (row, pair i):
// the angle is computed once in float64 and applied to every head.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 128;

__global__ void Rotate(void* x, int64_t rows, int64_t seq, int64_t heads,
                       int64_t head_dim, double theta, double sign, int dtype) {
  const int64_t half = head_dim / 2;
  const int64_t idx = blockIdx.x * int64_t{kThreads} + threadIdx.x;
  if (idx >= rows * half) return;
  const int64_t t = idx / half, i = idx % half;
  const double a = sign * static_cast<double>(t % seq) *
                   pow(theta, -2.0 * static_cast<double>(i) / head_dim);
  const float c = static_cast<float>(cos(a)), sn = static_cast<float>(sin(a));
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t k = (t * heads + h) * head_dim + i;
    const float x1 = Load(x, k, dtype), x2 = Load(x, k + half, dtype);
    Store(x, k, dtype, x1 * c - x2 * sn);
    Store(x, k + half, dtype, x2 * c + x1 * sn);
  }
}

}  // namespace

int LaunchRotary(void* x, int64_t rows, int64_t seq, int64_t heads,
                 int64_t head_dim, double theta, double sign, int dtype,
                 void* stream) {
  const int64_t n = rows * (head_dim / 2);
  Rotate<<<Blocks(n, kThreads), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      x, rows, seq, heads, head_dim, theta, sign, dtype);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
