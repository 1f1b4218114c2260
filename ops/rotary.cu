// CUDA kernel of ops/rotary.h (math there).
//
// Launch shape: 128-thread blocks; blockIdx.x / threadIdx.x pick (row t,
// kW consecutive pairs i of the first half), blockIdx.y a chunk of
// kHeadsPerThread heads. The kW angles are computed once in float64 (as the
// CPU path does; float angles lose 1e-4 rad at position 4096) and applied
// to the chunk's heads, so the float64 work is rows x half x heads / 8
// evaluations while chunks give 4x more threads at 32 heads to keep loads
// in flight. Each head is two 16-byte loads and stores (x[i..] and
// x[i + half..], 8 bf16 / 4 f32) when x is 16-byte aligned and half is a
// multiple of the width (checked), else one element per access.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 128;
constexpr int kHeadsPerThread = 8;

template <typename T, int kW>
__global__ void __launch_bounds__(kThreads)
    Rotate(T* __restrict__ x, int64_t rows, int64_t seq, int64_t heads,
           int64_t head_dim, double theta, double sign) {
  const int64_t half = head_dim / 2, pv = half / kW;
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= rows * pv) return;
  const int64_t t = idx / pv, p = idx % pv;
  float c[kW], sn[kW];
#pragma unroll
  for (int k = 0; k < kW; ++k) {
    const int64_t i = p * kW + k;
    const double a = sign * static_cast<double>(t % seq) *
                     pow(theta, -2.0 * static_cast<double>(i) / head_dim);
    c[k] = static_cast<float>(cos(a));
    sn[k] = static_cast<float>(sin(a));
  }
  const int64_t h0 = static_cast<int64_t>(blockIdx.y) * kHeadsPerThread;
  const int64_t h1 = h0 + kHeadsPerThread < heads ? h0 + kHeadsPerThread : heads;
#pragma unroll 4
  for (int64_t h = h0; h < h1; ++h) {
    T* lo = x + (t * heads + h) * head_dim + p * kW;
    float x1[kW], x2[kW], o1[kW], o2[kW];
    LoadVec<T, kW>(lo, x1);
    LoadVec<T, kW>(lo + half, x2);
#pragma unroll
    for (int k = 0; k < kW; ++k) {
      o1[k] = x1[k] * c[k] - x2[k] * sn[k];
      o2[k] = x2[k] * c[k] + x1[k] * sn[k];
    }
    StoreVec<T, kW>(lo, o1);
    StoreVec<T, kW>(lo + half, o2);
  }
}

template <typename T>
int Run(void* x, int64_t rows, int64_t seq, int64_t heads, int64_t head_dim,
        double theta, double sign, cudaStream_t s) {
  const int64_t half = head_dim / 2;
  const bool vec = half % VecWidth<T>() == 0 && Aligned16({x});
  const int64_t n = rows * (vec ? half / VecWidth<T>() : half);
  const dim3 grid(Blocks(n, kThreads),
                  static_cast<unsigned>((heads + kHeadsPerThread - 1) / kHeadsPerThread));
  auto* xt = static_cast<T*>(x);
  if (vec) {
    Rotate<T, VecWidth<T>()><<<grid, kThreads, 0, s>>>(xt, rows, seq, heads, head_dim,
                                                      theta, sign);
  } else {
    Rotate<T, 1><<<grid, kThreads, 0, s>>>(xt, rows, seq, heads, head_dim, theta, sign);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchRotary(void* x, int64_t rows, int64_t seq, int64_t heads,
                 int64_t head_dim, double theta, double sign, int dtype,
                 void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    return Run<__nv_bfloat16>(x, rows, seq, heads, head_dim, theta, sign, s);
  }
  return Run<float>(x, rows, seq, heads, head_dim, theta, sign, s);
}

}  // namespace baton::ops_internal
