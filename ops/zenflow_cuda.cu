// CUDA kernels of ops/zenflow_stream.h; the index arithmetic (virtual rows,
// slot table, packed index) is ops/zenflow_kernels.h's, with its closed
// forms.
//
// Element kernels (split, gather, scatter, copy): 256-thread blocks, at most
// SMs x 16 blocks, grid-stride over groups of kGroup = 4 consecutive
// elements. A thread divides once per group (p / cols) and steps the
// column across the group. Split and copy move a full group as one vector
// (f32: 16 bytes; bf16: 8 bytes) when the pointers are aligned to the
// group (checked on the host; otherwise the same kernel runs with scalar
// accesses); a vector store only when all four elements are the thread's
// to write, else scalar stores of those that are. Copies move bits (bf16
// as uint16_t), never converting. Gather and scatter are scalar: the
// selected elements of a group are not contiguous in the dense buffer, nor
// aligned in the packed one. Scatter rounds to bf16 (nearest even) for a
// bf16 destination.
//
// Column squares: one thread per (chunk of 64 rows, column), consecutive
// threads on consecutive columns; then, with several chunks, one thread per
// column adds the chunk sums in order. __fmul_rn / __fadd_rn: no
// contraction into FMA, so the one-chunk case rounds as the host loop.
//
// Not yet run on a GPU: written and compiled (sm_90) without one; the index
// arithmetic is checked on the host (ops/zenflow_stream_test.cc), the kernels
// by that test's GPU cases where a GPU is present.
#include "baton/ops/cuda_util.cuh"
#include "baton/ops/zenflow_kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 4;
constexpr int64_t kChunk = kZenFlowRowsPerChunk;

__device__ __forceinline__ int64_t ThreadIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ int64_t GridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

// The block's selection view, read once per thread: K and prefix[c0].
struct Slots {
  const int32_t* table;
  int64_t k, base;
};
__device__ __forceinline__ Slots ReadSlots(const int32_t* table, int64_t cols, int64_t c0) {
  return {table, table[cols], ZenFlowPrefix(table[c0])};
}

// For the group starting at element i0: t[e] = table[column of i0 + e] and
// the packed index of that element when selected (t[e] >= 0). The column
// wraps within the group; elements past n get valid (unused) entries.
__device__ __forceinline__ void GroupSlots(const Slots& s, int64_t c0, int64_t cols,
                                           int64_t i0, int32_t (&t)[kGroup],
                                           int64_t (&k)[kGroup]) {
  const int64_t p = c0 + i0;
  int64_t r = p / cols;
  int64_t c = p - r * cols;
#pragma unroll
  for (int e = 0; e < kGroup; ++e) {
    t[e] = s.table[c];
    k[e] = ZenFlowPackedIndex(r, t[e], s.k, s.base);
    if (++c == cols) {
      c = 0;
      ++r;
    }
  }
}

// f(i0, t, k) with GroupSlots' arrays for every group of the block's n
// elements this thread owns (grid-stride): the loop of the element kernels.
template <typename F>
__device__ __forceinline__ void ForEachGroup(const int32_t* table, int64_t c0, int64_t n,
                                             int64_t cols, F f) {
  const Slots s = ReadSlots(table, cols, c0);
  const int64_t groups = (n + kGroup - 1) / kGroup;
  for (int64_t g = ThreadIndex(); g < groups; g += GridStride()) {
    const int64_t i0 = g * kGroup;
    int32_t t[kGroup];
    int64_t k[kGroup];
    GroupSlots(s, c0, cols, i0, t, k);
    f(i0, t, k);
  }
}

// kRest false: `rest` is null, only the selected elements are read and
// written (kVec is then false).
template <typename T, bool kVec, bool kRest>
__global__ void __launch_bounds__(kThreads)
    Split(const T* __restrict__ grad, const int32_t* __restrict__ table,
          float* __restrict__ selected, float* __restrict__ rest, int64_t c0, int64_t n,
          int64_t cols, float scale) {
  ForEachGroup(table, c0, n, cols,
               [&](int64_t i0, const int32_t(&t)[kGroup], const int64_t(&k)[kGroup]) {
    if (kVec && kRest && i0 + kGroup <= n) {
      float gv[kGroup], rv[kGroup];
      LoadVec<T, kGroup>(grad + i0, gv);
      LoadVec<float, kGroup>(rest + i0, rv);
      bool all_rest = true;
#pragma unroll
      for (int e = 0; e < kGroup; ++e) {
        gv[e] = __fmul_rn(gv[e], scale);
        if (t[e] >= 0) {
          selected[k[e]] = gv[e];
          all_rest = false;
        } else {
          rv[e] = __fadd_rn(rv[e], gv[e]);
        }
      }
      if (all_rest) {
        StoreVec<float, kGroup>(rest + i0, rv);
      } else {
#pragma unroll
        for (int e = 0; e < kGroup; ++e) {
          if (t[e] < 0) rest[i0 + e] = rv[e];
        }
      }
    } else {
#pragma unroll
      for (int e = 0; e < kGroup; ++e) {
        const int64_t i = i0 + e;
        if (i >= n) break;
        if (!kRest && t[e] < 0) continue;
        const float v = __fmul_rn(dtype_device::ToFloat(grad[i]), scale);
        if (t[e] >= 0) {
          selected[k[e]] = v;
        } else {
          rest[i] = __fadd_rn(rest[i], v);
        }
      }
    }
  });
}

__global__ void __launch_bounds__(kThreads)
    Gather(const float* __restrict__ src, const int32_t* __restrict__ table,
           float* __restrict__ packed, int64_t c0, int64_t n, int64_t cols) {
  ForEachGroup(table, c0, n, cols,
               [&](int64_t i0, const int32_t(&t)[kGroup], const int64_t(&k)[kGroup]) {
#pragma unroll
    for (int e = 0; e < kGroup; ++e) {
      if (i0 + e < n && t[e] >= 0) packed[k[e]] = src[i0 + e];
    }
  });
}

template <typename D>
__global__ void __launch_bounds__(kThreads)
    Scatter(const float* __restrict__ packed, const int32_t* __restrict__ table,
            D* __restrict__ dst, int64_t c0, int64_t n, int64_t cols) {
  ForEachGroup(table, c0, n, cols,
               [&](int64_t i0, const int32_t(&t)[kGroup], const int64_t(&k)[kGroup]) {
#pragma unroll
    for (int e = 0; e < kGroup; ++e) {
      if (i0 + e < n && t[e] >= 0) dst[i0 + e] = dtype_device::FromFloat<D>(packed[k[e]]);
    }
  });
}

// Bit copies: W is uint32_t (f32) or uint16_t (bf16), never converted.
template <typename W, bool kVec>
__global__ void __launch_bounds__(kThreads)
    Copy(const W* src, W* dst,  // may alias (a no-op then)
         const int32_t* __restrict__ table, int64_t c0, int64_t n, int64_t cols,
         bool want_selected) {
  // Copies need no packed index.
  ForEachGroup(table, c0, n, cols,
               [&](int64_t i0, const int32_t(&t)[kGroup], const int64_t(&)[kGroup]) {
    bool own[kGroup];
    bool all = true;
#pragma unroll
    for (int e = 0; e < kGroup; ++e) {
      own[e] = (t[e] >= 0) == want_selected;
      all = all && own[e];
    }
    if (kVec && i0 + kGroup <= n) {
      const Pack<W, kGroup> v = *reinterpret_cast<const Pack<W, kGroup>*>(src + i0);
      if (all) {
        *reinterpret_cast<Pack<W, kGroup>*>(dst + i0) = v;
      } else {
#pragma unroll
        for (int e = 0; e < kGroup; ++e) {
          if (own[e]) dst[i0 + e] = v.e[e];
        }
      }
    } else {
#pragma unroll
      for (int e = 0; e < kGroup; ++e) {
        if (i0 + e < n && own[e]) dst[i0 + e] = src[i0 + e];
      }
    }
  });
}

// Work item w = q * cols + c: column c's rows of chunk q, summed in row
// order. One chunk: onto norms[c] directly (the host's order); several:
// into part[w], added by FinishSquares.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    Squares(const T* __restrict__ grad, float* __restrict__ norms, float* __restrict__ part,
            int64_t c0, int64_t n, int64_t cols, int64_t chunks, float scale) {
  const int64_t items = chunks * cols;
  for (int64_t w = ThreadIndex(); w < items; w += GridStride()) {
    const int64_t q = w / cols, c = w - q * cols;
    const ZenFlowRows rows = ZenFlowRowsOf(c0, n, cols, c);
    const int64_t lo = rows.lo > q * kChunk ? rows.lo : q * kChunk;
    const int64_t hi = rows.hi < (q + 1) * kChunk ? rows.hi : (q + 1) * kChunk;
    if (chunks == 1 && lo >= hi) continue;  // nothing to add: leave norms[c]
    float acc = chunks == 1 ? norms[c] : 0.0f;
    // Element r * cols + c - c0 (>= 0: r >= 1 whenever c < c0).
    for (int64_t r = lo; r < hi; ++r) {
      const float v = __fmul_rn(dtype_device::ToFloat(grad[r * cols + c - c0]), scale);
      acc = __fadd_rn(acc, __fmul_rn(v, v));
    }
    if (chunks == 1) {
      norms[c] = acc;
    } else {
      part[w] = acc;
    }
  }
}

// norms[c] += part[q * cols + c] for the chunks q holding rows of column c
// (rows [lo, hi): chunks lo / 64 .. (hi - 1) / 64), in chunk order.
__global__ void __launch_bounds__(kThreads)
    FinishSquares(const float* __restrict__ part, float* __restrict__ norms, int64_t c0,
                  int64_t n, int64_t cols) {
  for (int64_t c = ThreadIndex(); c < cols; c += GridStride()) {
    const ZenFlowRows rows = ZenFlowRowsOf(c0, n, cols, c);
    if (rows.lo >= rows.hi) continue;
    float acc = norms[c];
    for (int64_t q = rows.lo / kChunk; q <= (rows.hi - 1) / kChunk; ++q) {
      acc = __fadd_rn(acc, part[q * cols + c]);
    }
    norms[c] = acc;
  }
}

unsigned GridFor(int64_t items, int per_sm) {
  int64_t blocks = (items + kThreads - 1) / kThreads;
  const int64_t cap = int64_t{SmCount()} * per_sm;
  if (blocks > cap) blocks = cap;
  if (blocks < 1) blocks = 1;
  return static_cast<unsigned>(blocks);
}

constexpr int kElementBlocksPerSm = 16;
// Fewer for the squares: a thread walks up to 64 rows.
constexpr int kSquareBlocksPerSm = 4;

template <typename T>
int SquaresTyped(const T* grad, int64_t c0, int64_t n, int64_t cols, float scale,
                 float* norms, float* scratch, cudaStream_t s) {
  const int64_t chunks = (ZenFlowVirtualRows(c0, n, cols) + kChunk - 1) / kChunk;
  const unsigned grid = GridFor(chunks * cols, kSquareBlocksPerSm);
  if (chunks == 1) {
    Squares<T><<<grid, kThreads, 0, s>>>(grad, norms, nullptr, c0, n, cols, 1, scale);
    return static_cast<int>(cudaGetLastError());
  }
  float* part = scratch;  // the caller's, or one of this call's own
  if (part == nullptr) {
    if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&part),
                                        static_cast<size_t>(chunks * cols) * sizeof(float), s);
        e != cudaSuccess) {
      return e;
    }
  }
  auto release = [&]() { return scratch == nullptr ? cudaFreeAsync(part, s) : cudaSuccess; };
  Squares<T><<<grid, kThreads, 0, s>>>(grad, norms, part, c0, n, cols, chunks, scale);
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    release();
    return e;
  }
  FinishSquares<<<GridFor(cols, kElementBlocksPerSm), kThreads, 0, s>>>(part, norms, c0, n,
                                                                       cols);
  const cudaError_t launched = cudaGetLastError();
  const cudaError_t freed = release();
  return launched != cudaSuccess ? launched : freed;
}

bool AlignedTo(const void* p, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(p) & (bytes - 1)) == 0;
}

template <typename W>
int CopyTyped(const void* src, void* dst, int64_t c0, int64_t n, int64_t cols,
              const int32_t* table, bool selected_columns, cudaStream_t s) {
  const unsigned grid = GridFor((n + kGroup - 1) / kGroup, kElementBlocksPerSm);
  auto* st = static_cast<const W*>(src);
  auto* dt = static_cast<W*>(dst);
  if (AlignedTo(src, kGroup * sizeof(W)) && AlignedTo(dst, kGroup * sizeof(W))) {
    Copy<W, true><<<grid, kThreads, 0, s>>>(st, dt, table, c0, n, cols, selected_columns);
  } else {
    Copy<W, false><<<grid, kThreads, 0, s>>>(st, dt, table, c0, n, cols, selected_columns);
  }
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int SplitTyped(const T* grad, int64_t c0, int64_t n, int64_t cols, const int32_t* table,
               float scale, float* selected, float* rest, cudaStream_t s) {
  const unsigned grid = GridFor((n + kGroup - 1) / kGroup, kElementBlocksPerSm);
  if (rest == nullptr) {
    Split<T, false, false>
        <<<grid, kThreads, 0, s>>>(grad, table, selected, rest, c0, n, cols, scale);
  } else if (AlignedTo(grad, kGroup * sizeof(T)) && Aligned16({rest})) {
    Split<T, true, true><<<grid, kThreads, 0, s>>>(grad, table, selected, rest, c0, n, cols, scale);
  } else {
    Split<T, false, true>
        <<<grid, kThreads, 0, s>>>(grad, table, selected, rest, c0, n, cols, scale);
  }
  return static_cast<int>(cudaGetLastError());
}

}  // namespace

int LaunchZenFlowColumnSquares(const void* grad, int dtype, int64_t c0, int64_t n,
                               int64_t cols, float scale, float* norms, float* scratch,
                               void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    return SquaresTyped(static_cast<const __nv_bfloat16*>(grad), c0, n, cols, scale, norms,
                        scratch, s);
  }
  return SquaresTyped(static_cast<const float*>(grad), c0, n, cols, scale, norms, scratch, s);
}

int LaunchZenFlowSplit(const void* grad, int dtype, int64_t c0, int64_t n, int64_t cols,
                       const int32_t* table, float scale, float* selected, float* rest,
                       void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    return SplitTyped(static_cast<const __nv_bfloat16*>(grad), c0, n, cols, table, scale,
                      selected, rest, s);
  }
  return SplitTyped(static_cast<const float*>(grad), c0, n, cols, table, scale, selected,
                    rest, s);
}

int LaunchZenFlowGather(const float* src, int64_t c0, int64_t n, int64_t cols,
                        const int32_t* table, float* packed, void* stream) {
  Gather<<<GridFor((n + kGroup - 1) / kGroup, kElementBlocksPerSm), kThreads, 0,
           static_cast<cudaStream_t>(stream)>>>(src, table, packed, c0, n, cols);
  return static_cast<int>(cudaGetLastError());
}

int LaunchZenFlowScatter(const float* packed, int64_t c0, int64_t n, int64_t cols,
                         const int32_t* table, void* dst, int dst_dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  const unsigned grid = GridFor((n + kGroup - 1) / kGroup, kElementBlocksPerSm);
  if (dst_dtype == dtype_device::kBF16) {
    Scatter<__nv_bfloat16><<<grid, kThreads, 0, s>>>(
        packed, table, static_cast<__nv_bfloat16*>(dst), c0, n, cols);
  } else {
    Scatter<float><<<grid, kThreads, 0, s>>>(packed, table, static_cast<float*>(dst), c0, n,
                                             cols);
  }
  return static_cast<int>(cudaGetLastError());
}

int LaunchZenFlowCopy(const void* src, void* dst, int dtype, int64_t c0, int64_t n,
                      int64_t cols, const int32_t* table, bool selected_columns,
                      void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    return CopyTyped<uint16_t>(src, dst, c0, n, cols, table, selected_columns, s);
  }
  return CopyTyped<uint32_t>(src, dst, c0, n, cols, table, selected_columns, s);
}

}  // namespace baton::ops_internal
