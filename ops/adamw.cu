// CUDA kernel of ops/adamw.h (math there): one grid-stride pass.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;

__global__ void Adam(float* master, const void* grad, int grad_dtype, float* m1,
                     float* m2, void* param, int param_dtype, int64_t n,
                     float scale, float lr, float b1, float b2, float eps,
                     float wd, float bc1, float bc2) {
  for (int64_t i = blockIdx.x * int64_t{kThreads} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * kThreads) {
    const float g = Load(grad, i, grad_dtype) * scale;
    const float m = b1 * m1[i] + (1.0f - b1) * g;
    const float v = b2 * m2[i] + (1.0f - b2) * g * g;
    m1[i] = m;
    m2[i] = v;
    const float p = master[i] * (1.0f - lr * wd) - lr * (m / bc1) / (sqrtf(v / bc2) + eps);
    master[i] = p;
    if (param != nullptr) Store(param, i, param_dtype, p);
  }
}

}  // namespace

int LaunchAdamW(float* master, const void* grad, int grad_dtype, float* m1,
                float* m2, void* param, int param_dtype, int64_t n,
                float grad_scale, float lr, float beta1, float beta2, float eps,
                float weight_decay, float bc1, float bc2, void* stream) {
  const unsigned blocks = Blocks(n, kThreads) < 4096u ? Blocks(n, kThreads) : 4096u;
  Adam<<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      master, grad, grad_dtype, m1, m2, param, param_dtype, n, grad_scale, lr,
      beta1, beta2, eps, weight_decay, bc1, bc2);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
