#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "baton/comm/inproc/reduce_kernel.h"
#include "baton/runtime/dtype_device.cuh"

namespace baton::inproc_internal {
namespace {

using dtype_device::FromFloat;
using dtype_device::ToFloat;

struct Pointers {
  const void* p[kMaxReduceSources];
};

struct ReduceArgs {
  Pointers srcs;
  Pointers outs;
  int nsrc;
  int nout;
  size_t count;
  size_t total;  // nblocks * count
  int all_outputs;
  int divisor;
  int max;  // the maximum instead of the sum
};

template <typename T>
__global__ void ReduceFloat(ReduceArgs a) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       e < a.total; e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    float acc = a.max ? ToFloat(static_cast<const T*>(a.srcs.p[0])[e]) : 0.f;
    for (int q = a.max ? 1 : 0; q < a.nsrc; ++q) {
      const float x = ToFloat(static_cast<const T*>(a.srcs.p[q])[e]);
      if (!a.max) {
        acc += x;
      } else if (x != x || x > acc) {
        if (acc == acc) acc = x;  // NaN propagates
      }
    }
    if (!a.max && a.divisor != 1) acc /= static_cast<float>(a.divisor);
    const T v = FromFloat<T>(acc);
    if (a.all_outputs) {
      for (int o = 0; o < a.nout; ++o) {
        const_cast<T*>(static_cast<const T*>(a.outs.p[o]))[e] = v;
      }
    } else {
      const size_t b = e / a.count;
      const_cast<T*>(static_cast<const T*>(a.outs.p[b]))[e - b * a.count] = v;
    }
  }
}

__global__ void ReduceInt(ReduceArgs a) {
  for (size_t e = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x;
       e < a.total; e += static_cast<size_t>(gridDim.x) * blockDim.x) {
    unsigned acc = 0;
    int hi = static_cast<const int*>(a.srcs.p[0])[e];
    for (int q = 0; q < a.nsrc; ++q) {
      const int x = static_cast<const int*>(a.srcs.p[q])[e];
      acc += static_cast<unsigned>(x);
      hi = x > hi ? x : hi;
    }
    int v = a.max ? hi : static_cast<int>(acc);
    if (!a.max && a.divisor != 1) v /= a.divisor;
    if (a.all_outputs) {
      for (int o = 0; o < a.nout; ++o) {
        const_cast<int*>(static_cast<const int*>(a.outs.p[o]))[e] = v;
      }
    } else {
      const size_t b = e / a.count;
      const_cast<int*>(static_cast<const int*>(a.outs.p[b]))[e - b * a.count] =
          v;
    }
  }
}

struct CopyArgs {
  void* dst[kMaxCopies];
  const void* src[kMaxCopies];
  size_t bytes[kMaxCopies];
};

// blockIdx.y picks the copy; x-blocks stride over it, 16 bytes at a time
// where both ends are 16-byte aligned, byte by byte otherwise.
__global__ void Copies(CopyArgs a) {
  const int k = blockIdx.y;
  char* dst = static_cast<char*>(a.dst[k]);
  const char* src = static_cast<const char*>(a.src[k]);
  const size_t bytes = a.bytes[k];
  const size_t start = blockIdx.x * static_cast<size_t>(blockDim.x) +
                       threadIdx.x;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  const bool aligned = ((reinterpret_cast<uintptr_t>(dst) |
                         reinterpret_cast<uintptr_t>(src)) & 15) == 0;
  size_t done = 0;
  if (aligned) {
    const size_t vecs = bytes / 16;
    for (size_t v = start; v < vecs; v += stride) {
      reinterpret_cast<uint4*>(dst)[v] = reinterpret_cast<const uint4*>(src)[v];
    }
    done = vecs * 16;
  }
  for (size_t b = done + start; b < bytes; b += stride) dst[b] = src[b];
}

int Blocks(size_t work, int threads, int cap) {
  const size_t want = (work + threads - 1) / threads;
  return static_cast<int>(want < static_cast<size_t>(cap) ? want : cap);
}

}  // namespace

int LaunchReduce(void* const* outs, int nout, const void* const* srcs,
                 int nsrc, size_t count, int nblocks, int all_outputs,
                 int dtype, int divisor, int max, void* stream) {
  if (count == 0 || nblocks == 0) return 0;
  if (nsrc < 1 || nsrc > kMaxReduceSources || nout < 1 ||
      nout > kMaxReduceSources || (!all_outputs && nout != nblocks)) {
    return cudaErrorInvalidValue;
  }
  ReduceArgs a{};
  for (int q = 0; q < nsrc; ++q) a.srcs.p[q] = srcs[q];
  for (int o = 0; o < nout; ++o) a.outs.p[o] = outs[o];
  a.nsrc = nsrc;
  a.nout = nout;
  a.count = count;
  a.total = count * static_cast<size_t>(nblocks);
  a.all_outputs = all_outputs;
  a.divisor = divisor;
  a.max = max;
  const int threads = 256;
  const int blocks = Blocks(a.total, threads, 4096);
  auto st = static_cast<cudaStream_t>(stream);
  switch (dtype) {
    case 0:
      ReduceFloat<float><<<blocks, threads, 0, st>>>(a);
      break;
    case 1:
      ReduceFloat<__nv_bfloat16><<<blocks, threads, 0, st>>>(a);
      break;
    case 2:
      ReduceFloat<__half><<<blocks, threads, 0, st>>>(a);
      break;
    case 3:
      ReduceInt<<<blocks, threads, 0, st>>>(a);
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return static_cast<int>(cudaGetLastError());
}

int LaunchCopies(void* const* dst, const void* const* src,
                 const size_t* bytes, int n, void* stream) {
  if (n == 0) return 0;
  if (n < 0 || n > kMaxCopies) return cudaErrorInvalidValue;
  CopyArgs a{};
  size_t largest = 0;
  for (int k = 0; k < n; ++k) {
    a.dst[k] = dst[k];
    a.src[k] = src[k];
    a.bytes[k] = bytes[k];
    if (bytes[k] > largest) largest = bytes[k];
  }
  if (largest == 0) return 0;
  const int threads = 256;
  // Enough x-blocks for the largest copy in 16-byte steps, spread so that
  // all copies together fill the device.
  const int bx = Blocks((largest + 15) / 16, threads, 1024 / n + 1);
  Copies<<<dim3(bx, n), threads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace baton::inproc_internal
