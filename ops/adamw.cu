// CUDA kernel of ops/adamw.h (math there): one grid-stride pass, the bf16
// (or f32) param cast fused in.
//
// Launch shape: 256-thread blocks, at most SMs x 16 blocks, grid-stride over
// groups of 4 elements: master, m1 and m2 move as 16-byte float4 loads and
// stores, the gradient and the param as 4 x sizeof(dtype) (16 bytes f32, 8
// bytes bf16). Width 4 is the most the fp32 state allows in one 16-byte
// access. The vector path needs each pointer aligned to its 4-element size
// (checked); n % 4 trailing elements are a scalar tail, and misaligned
// pointers run the same kernel with one element per access. The arithmetic
// is AdamWStep's, in the same order.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;

struct Hyper {
  float scale, lr, b1, b2, eps, wd, bc1, bc2;
};

// kParam: 0 no param output, 1 f32, 2 bf16.
template <int kParam>
struct ParamType {
  using T = float;
};
template <>
struct ParamType<2> {
  using T = __nv_bfloat16;
};

__device__ __forceinline__ void Element(const Hyper& h, float graw, float& master,
                                        float& m1, float& m2) {
  const float g = graw * h.scale;
  const float m = h.b1 * m1 + (1.0f - h.b1) * g;
  const float v = h.b2 * m2 + (1.0f - h.b2) * g * g;
  m1 = m;
  m2 = v;
  master = master * (1.0f - h.lr * h.wd) - h.lr * (m / h.bc1) / (sqrtf(v / h.bc2) + h.eps);
}

template <typename G, int kParam, int kW>
__global__ void __launch_bounds__(kThreads)
    Adam(float* __restrict__ master, const G* __restrict__ grad,
         float* __restrict__ m1, float* __restrict__ m2,
         typename ParamType<kParam>::T* __restrict__ param, int64_t n, Hyper h) {
  using P = typename ParamType<kParam>::T;
  const int64_t nvec = n / kW;
  for (int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; j < nvec;
       j += static_cast<int64_t>(gridDim.x) * kThreads) {
    float g[kW], p[kW], a[kW], b[kW];
    LoadVec<G, kW>(grad + j * kW, g);
    LoadVec<float, kW>(master + j * kW, p);
    LoadVec<float, kW>(m1 + j * kW, a);
    LoadVec<float, kW>(m2 + j * kW, b);
#pragma unroll
    for (int k = 0; k < kW; ++k) Element(h, g[k], p[k], a[k], b[k]);
    StoreVec<float, kW>(m1 + j * kW, a);
    StoreVec<float, kW>(m2 + j * kW, b);
    StoreVec<float, kW>(master + j * kW, p);
    if constexpr (kParam != 0) StoreVec<P, kW>(param + j * kW, p);
  }
  if (blockIdx.x == 0 && threadIdx.x < n - nvec * kW) {
    const int64_t i = nvec * kW + threadIdx.x;
    float p = master[i], a = m1[i], b = m2[i];
    Element(h, dtype_device::ToFloat(grad[i]), p, a, b);
    m1[i] = a;
    m2[i] = b;
    master[i] = p;
    if constexpr (kParam != 0) param[i] = dtype_device::FromFloat<P>(p);
  }
}

bool AlignedTo(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

template <typename G, int kParam>
int Run(float* master, const void* grad, float* m1, float* m2, void* param, int64_t n,
        const Hyper& h, cudaStream_t s) {
  using P = typename ParamType<kParam>::T;
  auto* gt = static_cast<const G*>(grad);
  auto* pt = static_cast<P*>(param);
  constexpr int kW = 4;
  const bool vec = Aligned16({master, m1, m2}) && AlignedTo(grad, kW * sizeof(G)) &&
                   (kParam == 0 || AlignedTo(param, kW * sizeof(P)));
  const int64_t items = vec ? n / kW : n;
  const int64_t cap = int64_t{SmCount()} * 16;
  int64_t blocks = (items + kThreads - 1) / kThreads;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  if (vec) {
    Adam<G, kParam, kW><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        master, gt, m1, m2, pt, n, h);
  } else {
    Adam<G, kParam, 1><<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(
        master, gt, m1, m2, pt, n, h);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename G>
int RunGrad(float* master, const void* grad, float* m1, float* m2, void* param,
            int param_dtype, int64_t n, const Hyper& h, cudaStream_t s) {
  if (param == nullptr) return Run<G, 0>(master, grad, m1, m2, param, n, h, s);
  if (param_dtype == dtype_device::kBF16) {
    return Run<G, 2>(master, grad, m1, m2, param, n, h, s);
  }
  return Run<G, 1>(master, grad, m1, m2, param, n, h, s);
}

}  // namespace

int LaunchAdamW(float* master, const void* grad, int grad_dtype, float* m1,
                float* m2, void* param, int param_dtype, int64_t n,
                float grad_scale, float lr, float beta1, float beta2, float eps,
                float weight_decay, float bc1, float bc2, void* stream) {
  const Hyper h{grad_scale, lr, beta1, beta2, eps, weight_decay, bc1, bc2};
  auto s = static_cast<cudaStream_t>(stream);
  if (grad_dtype == dtype_device::kBF16) {
    return RunGrad<__nv_bfloat16>(master, grad, m1, m2, param, param_dtype, n, h, s);
  }
  return RunGrad<float>(master, grad, m1, m2, param, param_dtype, n, h, s);
}

}  // namespace baton::ops_internal
