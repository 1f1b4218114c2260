// CUDA kernel of ops/lora.h's ScaleInPlace (the rest of LoRA is cuBLAS
// through ops/linear.h): one thread per element, grid-stride; the product
// explicitly rounded (the host path's bits).
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

template <typename T>
__global__ void Scale(T* __restrict__ p, int64_t n, float s) {
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    p[i] = dtype_device::FromFloat<T>(__fmul_rn(dtype_device::ToFloat(p[i]), s));
  }
}

}  // namespace

int LaunchScale(void* p, int64_t n, int dtype, float s, void* stream) {
  constexpr int kThreads = 256;
  int64_t grid = (n + kThreads - 1) / kThreads;
  const int64_t cap = int64_t{SmCount()} * 16;
  if (grid > cap) grid = cap;
  auto st = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    Scale<__nv_bfloat16><<<static_cast<unsigned>(grid), kThreads, 0, st>>>(
        static_cast<__nv_bfloat16*>(p), n, s);
  } else {
    Scale<float><<<static_cast<unsigned>(grid), kThreads, 0, st>>>(static_cast<float*>(p), n, s);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::ops_internal
