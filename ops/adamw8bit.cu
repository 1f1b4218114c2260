// CUDA kernel of ops/adamw8bit.h (math and codes there): one 256-thread
// block per quantization block of 2048 elements (8 per thread, strided by
// 256 so that every access is coalesced), grid-stride over the
// quantization blocks. A thread dequantizes its 8 elements with the
// block's old absmax, updates master and moments in registers (and writes
// the master and the fused param cast), the block reduces the new absmax
// of both moments, and each thread requantizes its elements by binary
// search over the 255 midpoints of each code (shared memory).
//
// Every float operation is an explicitly rounded intrinsic (no FMA
// contraction), in the CPU path's order, so the kernel computes the CPU
// path's values (up to subnormals, which the CPU path flushes).
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;
constexpr int kBlock = 2048;  // ops::kAdamW8bitBlock
constexpr int kPer = kBlock / kThreads;

struct Codes {
  float c1[256];
  float c2[256];
};

// kParam: 0 no param output, 1 f32, 2 bf16.
template <int kParam>
struct ParamT {
  using T = float;
};
template <>
struct ParamT<2> {
  using T = __nv_bfloat16;
};

// Number of the 255 midpoints below x (ties to the smaller index).
__device__ __forceinline__ uint8_t Nearest(const float* mid, float x) {
  int lo = 0, hi = 255;
  while (lo < hi) {
    const int m = (lo + hi) >> 1;
    if (mid[m] < x) {
      lo = m + 1;
    } else {
      hi = m;
    }
  }
  return static_cast<uint8_t>(lo);
}

template <typename G, int kParam>
__global__ void __launch_bounds__(kThreads)
    Adam8(float* __restrict__ master, const G* __restrict__ grad, uint8_t* __restrict__ q1,
          uint8_t* __restrict__ q2, float* __restrict__ am1, float* __restrict__ am2,
          typename ParamT<kParam>::T* __restrict__ param, int64_t n, AdamW8bitHyper h,
          Codes codes) {
  using P = typename ParamT<kParam>::T;
  __shared__ float c1[256], c2[256], mid1[256], mid2[256];
  const int t = threadIdx.x;
  c1[t] = codes.c1[t];
  c2[t] = codes.c2[t];
  __syncthreads();
  if (t < 255) {
    mid1[t] = __fmul_rn(0.5f, __fadd_rn(c1[t], c1[t + 1]));
    mid2[t] = __fmul_rn(0.5f, __fadd_rn(c2[t], c2[t + 1]));
  }
  __syncthreads();
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t begin = b * kBlock;
    const float a1 = am1[b], a2 = am2[b];
    float m[kPer], v[kPer];
    float max1 = 0.0f, max2 = 0.0f;
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t i = begin + t + k * kThreads;
      m[k] = v[k] = 0.0f;
      if (i >= n) continue;
      const float g = __fmul_rn(dtype_device::ToFloat(grad[i]), h.scale);
      m[k] = __fadd_rn(__fmul_rn(h.beta1, __fmul_rn(c1[q1[i]], a1)), __fmul_rn(h.omb1, g));
      v[k] = __fadd_rn(__fmul_rn(h.beta2, __fmul_rn(c2[q2[i]], a2)),
                       __fmul_rn(__fmul_rn(h.omb2, g), g));
      const float step = __fdiv_rn(__fmul_rn(h.lr, __fdiv_rn(m[k], h.bc1)),
                                   __fadd_rn(__fsqrt_rn(__fdiv_rn(v[k], h.bc2)), h.eps));
      const float p = __fsub_rn(__fmul_rn(master[i], h.decay), step);
      master[i] = p;
      if constexpr (kParam != 0) param[i] = dtype_device::FromFloat<P>(p);
      max1 = fmaxf(max1, fabsf(m[k]));
      max2 = fmaxf(max2, v[k]);
    }
    // Every thread has read the old absmax before the reductions' barrier.
    max1 = BlockReduce<kThreads, true>(max1);
    max2 = BlockReduce<kThreads, true>(max2);
    if (t == 0) {
      am1[b] = max1;
      am2[b] = max2;
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int64_t i = begin + t + k * kThreads;
      if (i >= n) continue;
      q1[i] = Nearest(mid1, max1 > 0.0f ? __fdiv_rn(m[k], max1) : 0.0f);
      q2[i] = Nearest(mid2, max2 > 0.0f ? __fdiv_rn(v[k], max2) : 0.0f);
    }
  }
}

template <typename G, int kParam>
int Run(float* master, const void* grad, uint8_t* m1, uint8_t* m2, float* am1, float* am2,
        void* param, int64_t n, const AdamW8bitHyper& h, const Codes& codes,
        cudaStream_t s) {
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  int64_t grid = int64_t{SmCount()} * 8;
  if (grid > blocks) grid = blocks;
  if (grid < 1) grid = 1;
  Adam8<G, kParam><<<static_cast<unsigned>(grid), kThreads, 0, s>>>(
      master, static_cast<const G*>(grad), m1, m2, am1, am2,
      static_cast<typename ParamT<kParam>::T*>(param), n, h, codes);
  return static_cast<int>(cudaGetLastError());
}

template <typename G>
int RunGrad(float* master, const void* grad, uint8_t* m1, uint8_t* m2, float* am1,
            float* am2, void* param, int param_dtype, int64_t n, const AdamW8bitHyper& h,
            const Codes& codes, cudaStream_t s) {
  if (param == nullptr || param_dtype < 0) {
    return Run<G, 0>(master, grad, m1, m2, am1, am2, nullptr, n, h, codes, s);
  }
  if (param_dtype == dtype_device::kBF16) {
    return Run<G, 2>(master, grad, m1, m2, am1, am2, param, n, h, codes, s);
  }
  return Run<G, 1>(master, grad, m1, m2, am1, am2, param, n, h, codes, s);
}

}  // namespace

int LaunchAdamW8bit(float* master, const void* grad, int grad_dtype, uint8_t* m1,
                    uint8_t* m2, float* absmax1, float* absmax2, void* param,
                    int param_dtype, int64_t n, const AdamW8bitHyper& h,
                    const float* code1, const float* code2, void* stream) {
  Codes codes;
  for (int i = 0; i < 256; ++i) {
    codes.c1[i] = code1[i];
    codes.c2[i] = code2[i];
  }
  auto s = static_cast<cudaStream_t>(stream);
  if (grad_dtype == dtype_device::kBF16) {
    return RunGrad<__nv_bfloat16>(master, grad, m1, m2, absmax1, absmax2, param, param_dtype,
                                  n, h, codes, s);
  }
  return RunGrad<float>(master, grad, m1, m2, absmax1, absmax2, param, param_dtype, n, h,
                        codes, s);
}

}  // namespace baton::ops_internal
