// Device-side helpers shared by the ops' .cu files (plain CUDA; no abseil).
#ifndef BATON_OPS_CUDA_UTIL_CUH_
#define BATON_OPS_CUDA_UTIL_CUH_

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <initializer_list>

#include "baton/runtime/dtype_device.cuh"

namespace baton::ops_internal {

// Element loads and stores by dtype code (DataType's values; the ops take
// f32 and bf16): the project's one device-side helper.
using dtype_device::Load;
using dtype_device::Store;

// Sum (or max) over a block of kThreads threads; every thread gets it.
template <int kThreads, bool kMax = false>
__device__ float BlockReduce(float v) {
  __shared__ float partial[kThreads / 32];
  for (int o = 16; o > 0; o >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, o);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  float total = partial[0];
  for (int i = 1; i < kThreads / 32; ++i) {
    total = kMax ? fmaxf(total, partial[i]) : total + partial[i];
  }
  __syncthreads();
  return total;
}

// --- Vector access (16-byte loads and stores) -------------------------------
//
// The memory-bound kernels move kW elements per access: kVecBytes / sizeof(T)
// (8 bf16 or 4 f32 in one 16-byte LDG.128 / STG.128), or kW = 1, the scalar
// fallback. A kernel takes the vector path only when every pointer it
// touches with vectors is 16-byte aligned and every row stride is a multiple
// of 16 bytes (checked on the host by Aligned16 / the launcher, never
// assumed); otherwise the same kernel is instantiated with kW = 1.
constexpr int kVecBytes = 16;

template <typename T>
constexpr int VecWidth() {
  return kVecBytes / static_cast<int>(sizeof(T));
}

// kW elements of T, aligned to their total size (16 bytes for a full vector).
template <typename T, int kW>
struct alignas(sizeof(T) * kW) Pack {
  T e[kW];
};

// out[k] = p[k] for k < kW, widened to float. p must be aligned to
// sizeof(T) * kW.
template <typename T, int kW>
__device__ __forceinline__ void LoadVec(const T* p, float (&out)[kW]) {
  const Pack<T, kW> v = *reinterpret_cast<const Pack<T, kW>*>(p);
#pragma unroll
  for (int k = 0; k < kW; ++k) out[k] = dtype_device::ToFloat(v.e[k]);
}

// p[k] = in[k] rounded to T (nearest even), as one store.
template <typename T, int kW>
__device__ __forceinline__ void StoreVec(T* p, const float (&in)[kW]) {
  Pack<T, kW> v;
#pragma unroll
  for (int k = 0; k < kW; ++k) v.e[k] = dtype_device::FromFloat<T>(in[k]);
  *reinterpret_cast<Pack<T, kW>*>(p) = v;
}

// True when every pointer given is 16-byte aligned (null counts as aligned).
inline bool Aligned16(std::initializer_list<const void*> ps) {
  for (const void* p : ps) {
    if ((reinterpret_cast<uintptr_t>(p) & (kVecBytes - 1)) != 0) return false;
  }
  return true;
}

// Streaming multiprocessors of the current device (132 on an H100 SXM);
// 132 if the query fails. Grids are sized from it so that every SM has
// blocks to run. Remembered per device (the first 64), so a launch costs
// one cudaGetDevice.
inline int SmCount() {
  static std::atomic<int> known[64];
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 132;
  if (dev >= 0 && dev < 64) {
    if (const int k = known[dev].load(std::memory_order_relaxed); k > 0) return k;
  }
  if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
      sms <= 0) {
    return 132;
  }
  if (dev >= 0 && dev < 64) known[dev].store(sms, std::memory_order_relaxed);
  return sms;
}

// Sum over a group of `group` consecutive threads of the block (group a
// power of two, 32 <= group <= 1024, dividing blockDim.x): warp shuffles,
// then one shared-memory step across the group's warps. Every thread of the
// block must call it (it synchronizes the block); every thread gets its
// group's sum.
__device__ __forceinline__ float GroupSum(float v, int group) {
  __shared__ float partial[32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = group >> 5, first = (warp / warps) * warps;
  float total = 0;
  for (int i = 0; i < warps; ++i) total += partial[first + i];
  __syncthreads();
  return total;
}

inline unsigned Blocks(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace baton::ops_internal

#endif  // BATON_OPS_CUDA_UTIL_CUH_
