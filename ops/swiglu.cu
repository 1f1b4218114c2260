// CUDA kernels of ops/swiglu.h (math there).
//
// Launch shape: element-wise, grid-stride over 16-byte vectors (8 bf16 / 4
// f32 per access) with 256-thread blocks and at most SMs x 16 blocks (2048
// resident threads per SM on Hopper: 8 blocks fill one; 16 leave a second
// wave so a slow SM does not hold the tail), each thread two vectors per
// step, so every SM has plenty of loads in flight. The vector path needs
// every pointer 16-byte aligned (checked); the elements past the last whole
// vector (n % width) are done by a scalar tail, and misaligned pointers run
// the same kernel with one element per access. expf and fp32 math; the
// forward computes g / (1 + exp(-g)) * u where the CPU path computes
// g * (1 / (1 + exp(-g))) * u, so the two may differ in the last bit.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 2;

__device__ __forceinline__ float Sig(float x) { return 1.0f / (1.0f + expf(-x)); }

template <typename T, int kW>
__global__ void __launch_bounds__(kThreads)
    SwiGluFwd(const T* __restrict__ g, const T* __restrict__ u, T* __restrict__ h,
              int64_t n) {
  const int64_t nvec = n / kW;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t j0 = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
       j0 < nvec; j0 += stride * kUnroll) {
    float gv[kUnroll][kW], uv[kUnroll][kW];
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int64_t j = j0 + int64_t{q} * kThreads;
      if (j < nvec) {
        LoadVec<T, kW>(g + j * kW, gv[q]);
        LoadVec<T, kW>(u + j * kW, uv[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int64_t j = j0 + int64_t{q} * kThreads;
      if (j < nvec) {
        float o[kW];
#pragma unroll
        for (int k = 0; k < kW; ++k) o[k] = gv[q][k] / (1.0f + expf(-gv[q][k])) * uv[q][k];
        StoreVec<T, kW>(h + j * kW, o);
      }
    }
  }
  // Scalar tail: the n % kW elements after the last whole vector.
  if (blockIdx.x == 0 && threadIdx.x < n - nvec * kW) {
    const int64_t i = nvec * kW + threadIdx.x;
    const float gv = dtype_device::ToFloat(g[i]);
    h[i] = dtype_device::FromFloat<T>(gv / (1.0f + expf(-gv)) * dtype_device::ToFloat(u[i]));
  }
}

__device__ __forceinline__ void BwdElement(float d, float gv, float uv, float& dg,
                                           float& du) {
  const float sg = Sig(gv);
  dg = d * uv * sg * (1.0f + gv * (1.0f - sg));
  du = d * gv * sg;
}

template <typename T, int kW>
__global__ void __launch_bounds__(kThreads)
    SwiGluBwd(const T* __restrict__ dh, const T* __restrict__ g,
              const T* __restrict__ u, T* __restrict__ dg, T* __restrict__ du,
              int64_t n) {
  const int64_t nvec = n / kW;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t j0 = static_cast<int64_t>(blockIdx.x) * kThreads * kUnroll + threadIdx.x;
       j0 < nvec; j0 += stride * kUnroll) {
    float dv[kUnroll][kW], gv[kUnroll][kW], uv[kUnroll][kW];
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int64_t j = j0 + int64_t{q} * kThreads;
      if (j < nvec) {
        LoadVec<T, kW>(dh + j * kW, dv[q]);
        LoadVec<T, kW>(g + j * kW, gv[q]);
        LoadVec<T, kW>(u + j * kW, uv[q]);
      }
    }
#pragma unroll
    for (int q = 0; q < kUnroll; ++q) {
      const int64_t j = j0 + int64_t{q} * kThreads;
      if (j < nvec) {
        float og[kW], ou[kW];
#pragma unroll
        for (int k = 0; k < kW; ++k) BwdElement(dv[q][k], gv[q][k], uv[q][k], og[k], ou[k]);
        StoreVec<T, kW>(dg + j * kW, og);
        StoreVec<T, kW>(du + j * kW, ou);
      }
    }
  }
  if (blockIdx.x == 0 && threadIdx.x < n - nvec * kW) {
    const int64_t i = nvec * kW + threadIdx.x;
    float og, ou;
    BwdElement(dtype_device::ToFloat(dh[i]), dtype_device::ToFloat(g[i]),
               dtype_device::ToFloat(u[i]), og, ou);
    dg[i] = dtype_device::FromFloat<T>(og);
    du[i] = dtype_device::FromFloat<T>(ou);
  }
}

// Blocks for `items` vectors, kUnroll per thread, at most SMs x 16.
unsigned Grid(int64_t items) {
  const int64_t want = (items + int64_t{kThreads} * kUnroll - 1) / (int64_t{kThreads} * kUnroll);
  const int64_t cap = int64_t{SmCount()} * 16;
  const int64_t b = want < cap ? want : cap;
  return static_cast<unsigned>(b > 0 ? b : 1);
}

template <typename T>
int Fwd(const void* g, const void* u, void* h, int64_t n, cudaStream_t s) {
  auto* gt = static_cast<const T*>(g);
  auto* ut = static_cast<const T*>(u);
  auto* ht = static_cast<T*>(h);
  if (Aligned16({g, u, h})) {
    constexpr int kW = VecWidth<T>();
    SwiGluFwd<T, kW><<<Grid(n / kW), kThreads, 0, s>>>(gt, ut, ht, n);
  } else {
    SwiGluFwd<T, 1><<<Grid(n), kThreads, 0, s>>>(gt, ut, ht, n);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int Bwd(const void* dh, const void* g, const void* u, void* dg, void* du, int64_t n,
        cudaStream_t s) {
  auto* dht = static_cast<const T*>(dh);
  auto* gt = static_cast<const T*>(g);
  auto* ut = static_cast<const T*>(u);
  auto* dgt = static_cast<T*>(dg);
  auto* dut = static_cast<T*>(du);
  if (Aligned16({dh, g, u, dg, du})) {
    constexpr int kW = VecWidth<T>();
    SwiGluBwd<T, kW><<<Grid(n / kW), kThreads, 0, s>>>(dht, gt, ut, dgt, dut, n);
  } else {
    SwiGluBwd<T, 1><<<Grid(n), kThreads, 0, s>>>(dht, gt, ut, dgt, dut, n);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchSwiGluForward(const void* g, const void* u, void* h, int64_t n,
                        int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return dtype == dtype_device::kBF16 ? Fwd<__nv_bfloat16>(g, u, h, n, s)
                                      : Fwd<float>(g, u, h, n, s);
}

int LaunchSwiGluBackward(const void* dh, const void* g, const void* u,
                         void* dg, void* du, int64_t n, int dtype,
                         void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  return dtype == dtype_device::kBF16 ? Bwd<__nv_bfloat16>(dh, g, u, dg, du, n, s)
                                      : Bwd<float>(dh, g, u, dg, du, n, s);
}

}  // namespace baton::ops_internal
