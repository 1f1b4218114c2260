// CUDA kernels of ops/rmsnorm.h (math and conventions there).
//
// Launch shape (forward and backward alike): a row is owned by a group of
// `group` threads (a power of two, 32..512, the smallest with group * kCache
// >= the row's vectors), and a block of max(group, 256) threads holds
// block / group rows, so short rows (hidden 512..4096) still fill the SM with
// 256-thread blocks and long rows (8192) get a whole block each. Each thread
// keeps up to kCache vectors of its row in registers between the reduction
// and the write, so x (and dy) is read from memory once. Vector width: 16
// bytes (8 bf16 / 4 f32) when every pointer is 16-byte aligned and the row
// is a multiple of 16 bytes; otherwise the same kernels with one element per
// access. Math in fp32; the group's sum is a warp-shuffle + shared-memory
// reduction (cuda_util.cuh, GroupSum).
//
// The backward fuses dw with dx: a persistent grid (SMs x resident blocks,
// the occupancy asked once per device and shape) walks the rows; each thread sums dy * x * rstd for its columns over its
// rows in registers, the block's row slots are added in shared memory, and
// one partial row per block is written; FinishDw adds the partial rows in a
// fixed order: deterministic run to run on one GPU model, though the
// number of partial rows (and so the rounding) follows its SM count. Rows too long for the register cache (more
// than 512 * kCache vectors) take the unfused path: dx alone, then a
// column-sliced dw pass writing the same partial rows.
#include <map>
#include <mutex>
#include <tuple>

#include "baton/ops/cuda_util.cuh"
#include "baton/ops/kernels.h"

namespace baton::ops_internal {
namespace {

constexpr int kCache = 4;        // vectors per thread held in registers
constexpr int kMaxGroup = 512;   // threads per row at most
constexpr int kMinBlock = 256;   // threads per block at least

int GroupFor(int64_t nvec) {
  int g = 32;
  while (g < kMaxGroup && int64_t{g} * kCache < nvec) g *= 2;
  return g;
}

template <typename T, int kW>
__global__ void __launch_bounds__(kMaxGroup)
    Forward(const T* __restrict__ x, const T* __restrict__ w, T* __restrict__ y,
            float* __restrict__ rstd, int64_t tokens, int64_t hidden, int group,
            float eps) {
  const int lane = threadIdx.x % group;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / group) +
                      threadIdx.x / group;
  const bool active = row < tokens;
  const int64_t nvec = hidden / kW;  // exact: kW divides hidden (launcher)
  const T* xr = x + (active ? row : 0) * hidden;
  float v[kCache][kW];
  float sum = 0;
#pragma unroll
  for (int c = 0; c < kCache; ++c) {
    const int64_t j = lane + int64_t{c} * group;
    if (active && j < nvec) {
      LoadVec<T, kW>(xr + j * kW, v[c]);
#pragma unroll
      for (int k = 0; k < kW; ++k) sum += v[c][k] * v[c][k];
    }
  }
  for (int64_t j = lane + int64_t{kCache} * group; active && j < nvec; j += group) {
    float t[kW];
    LoadVec<T, kW>(xr + j * kW, t);
#pragma unroll
    for (int k = 0; k < kW; ++k) sum += t[k] * t[k];
  }
  // Every thread of the block reaches the reduction (it synchronizes).
  const float r = rsqrtf(GroupSum(sum, group) / static_cast<float>(hidden) + eps);
  if (!active) return;
  if (lane == 0) rstd[row] = r;
  T* yr = y + row * hidden;
#pragma unroll
  for (int c = 0; c < kCache; ++c) {
    const int64_t j = lane + int64_t{c} * group;
    if (j < nvec) {
      float wv[kW], o[kW];
      LoadVec<T, kW>(w + j * kW, wv);
#pragma unroll
      for (int k = 0; k < kW; ++k) o[k] = v[c][k] * r * wv[k];
      StoreVec<T, kW>(yr + j * kW, o);
    }
  }
  for (int64_t j = lane + int64_t{kCache} * group; j < nvec; j += group) {
    float xv[kW], wv[kW], o[kW];
    LoadVec<T, kW>(xr + j * kW, xv);
    LoadVec<T, kW>(w + j * kW, wv);
#pragma unroll
    for (int k = 0; k < kW; ++k) o[k] = xv[k] * r * wv[k];
    StoreVec<T, kW>(yr + j * kW, o);
  }
}

// dx for rows base + slot, base stepping over the grid (uniform across the
// block, so every thread reaches each GroupSum). kFused: the row fits the
// register cache (nvec <= group * kCache) and dw partial rows are written to
// part[blockIdx.x * hidden ...]; dynamic shared memory then holds
// (block / group) * hidden floats when block / group > 1.
template <typename T, int kW, bool kFused>
__global__ void __launch_bounds__(kMaxGroup)
    Backward(const T* __restrict__ dy, const T* __restrict__ x,
             const T* __restrict__ w, const float* __restrict__ rstd,
             T* __restrict__ dx, bool accumulate_dx, float* __restrict__ part,
             int64_t tokens, int64_t hidden, int group) {
  extern __shared__ float slots[];
  const int rpb = blockDim.x / group;
  const int lane = threadIdx.x % group, slot = threadIdx.x / group;
  const int64_t nvec = hidden / kW;
  float dw[kCache][kW];
#pragma unroll
  for (int c = 0; c < kCache; ++c) {
#pragma unroll
    for (int k = 0; k < kW; ++k) dw[c][k] = 0;
  }
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * rpb; base < tokens;
       base += static_cast<int64_t>(gridDim.x) * rpb) {
    const int64_t row = base + slot;
    const bool active = row < tokens;
    const int64_t off = (active ? row : 0) * hidden;
    float gv[kCache][kW], xv[kCache][kW];
    float dot = 0;
#pragma unroll
    for (int c = 0; c < kCache; ++c) {
      const int64_t j = lane + int64_t{c} * group;
      if (active && j < nvec) {
        float wv[kW];
        LoadVec<T, kW>(dy + off + j * kW, gv[c]);
        LoadVec<T, kW>(x + off + j * kW, xv[c]);
        LoadVec<T, kW>(w + j * kW, wv);
#pragma unroll
        for (int k = 0; k < kW; ++k) dot += gv[c][k] * wv[k] * xv[c][k];
      }
    }
    if (!kFused) {
      for (int64_t j = lane + int64_t{kCache} * group; active && j < nvec; j += group) {
        float g[kW], xx[kW], wv[kW];
        LoadVec<T, kW>(dy + off + j * kW, g);
        LoadVec<T, kW>(x + off + j * kW, xx);
        LoadVec<T, kW>(w + j * kW, wv);
#pragma unroll
        for (int k = 0; k < kW; ++k) dot += g[k] * wv[k] * xx[k];
      }
    }
    const float c_row = GroupSum(dot, group) / static_cast<float>(hidden);
    if (active) {
      const float r = rstd[row];
#pragma unroll
      for (int c = 0; c < kCache; ++c) {
        const int64_t j = lane + int64_t{c} * group;
        if (j < nvec) {
          float wv[kW], prev[kW], o[kW];
          LoadVec<T, kW>(w + j * kW, wv);
          if (accumulate_dx) {
            LoadVec<T, kW>(dx + off + j * kW, prev);
          } else {
#pragma unroll
            for (int k = 0; k < kW; ++k) prev[k] = 0;
          }
#pragma unroll
          for (int k = 0; k < kW; ++k) {
            o[k] = prev[k] + r * (gv[c][k] * wv[k] - xv[c][k] * r * r * c_row);
            if (kFused) dw[c][k] += gv[c][k] * xv[c][k] * r;
          }
          StoreVec<T, kW>(dx + off + j * kW, o);
        }
      }
      if (!kFused) {
        for (int64_t j = lane + int64_t{kCache} * group; j < nvec; j += group) {
          float g[kW], xx[kW], wv[kW], prev[kW], o[kW];
          LoadVec<T, kW>(dy + off + j * kW, g);
          LoadVec<T, kW>(x + off + j * kW, xx);
          LoadVec<T, kW>(w + j * kW, wv);
          if (accumulate_dx) {
            LoadVec<T, kW>(dx + off + j * kW, prev);
          } else {
#pragma unroll
            for (int k = 0; k < kW; ++k) prev[k] = 0;
          }
#pragma unroll
          for (int k = 0; k < kW; ++k) o[k] = prev[k] + r * (g[k] * wv[k] - xx[k] * r * r * c_row);
          StoreVec<T, kW>(dx + off + j * kW, o);
        }
      }
    }
  }
  if (!kFused) return;
  // This block's dw partial row: slot 0's sums plus the other slots', in
  // slot order, through shared memory when the block holds several rows.
  float* out = part + static_cast<int64_t>(blockIdx.x) * hidden;
  if (rpb == 1) {
#pragma unroll
    for (int c = 0; c < kCache; ++c) {
      const int64_t j = lane + int64_t{c} * group;
      if (j < nvec) {
#pragma unroll
        for (int k = 0; k < kW; ++k) out[j * kW + k] = dw[c][k];
      }
    }
    return;
  }
#pragma unroll
  for (int c = 0; c < kCache; ++c) {
    const int64_t j = lane + int64_t{c} * group;
    if (j < nvec) {
#pragma unroll
      for (int k = 0; k < kW; ++k) slots[slot * hidden + j * kW + k] = dw[c][k];
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x) {
    float s = slots[i];
    for (int q = 1; q < rpb; ++q) s += slots[q * hidden + i];
    out[i] = s;
  }
}

// Unfused dw: part[slice * hidden + i] = sum over the slice's tokens of
// dy * x * rstd (column i), one thread per column.
template <typename T>
__global__ void DwSlices(const T* __restrict__ dy, const T* __restrict__ x,
                         const float* __restrict__ rstd, float* __restrict__ part,
                         int64_t tokens, int64_t hidden, int64_t per_slice) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= hidden) return;
  const int64_t t0 = static_cast<int64_t>(blockIdx.y) * per_slice;
  const int64_t t1 = t0 + per_slice < tokens ? t0 + per_slice : tokens;
  float sum = 0;
  for (int64_t t = t0; t < t1; ++t) {
    sum += dtype_device::ToFloat(dy[t * hidden + i]) *
           dtype_device::ToFloat(x[t * hidden + i]) * rstd[t];
  }
  part[static_cast<int64_t>(blockIdx.y) * hidden + i] = sum;
}

// dw[i] = (accumulate ? dw[i] : 0) + sum over parts of part[p][i]. Block of
// 32 columns x 8 part lanes; each lane adds every 8th part in order, then
// lane 0 adds the 8 lane sums in order (a fixed order: deterministic).
constexpr int kFinishCols = 32, kFinishLanes = 8;
__global__ void FinishDw(const float* __restrict__ part, int64_t parts,
                         void* __restrict__ dw, int64_t hidden, int dw_dtype,
                         bool accumulate) {
  __shared__ float sums[kFinishLanes][kFinishCols];
  const int col = threadIdx.x % kFinishCols, lane = threadIdx.x / kFinishCols;
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kFinishCols + col;
  float s = 0;
  if (i < hidden) {
    for (int64_t p = lane; p < parts; p += kFinishLanes) s += part[p * hidden + i];
  }
  sums[lane][col] = s;
  __syncthreads();
  if (lane != 0 || i >= hidden) return;
  float total = sums[0][col];
  for (int q = 1; q < kFinishLanes; ++q) total += sums[q][col];
  Store(dw, i, dw_dtype, (accumulate ? Load(dw, i, dw_dtype) : 0.0f) + total);
}

template <typename T>
int ForwardTyped(const void* x, const void* w, void* y, float* rstd,
                 int64_t tokens, int64_t hidden, float eps, cudaStream_t s) {
  const bool vec = hidden % VecWidth<T>() == 0 && Aligned16({x, w, y});
  const int64_t nvec = vec ? hidden / VecWidth<T>() : hidden;
  const int group = GroupFor(nvec);
  const int block = group > kMinBlock ? group : kMinBlock;
  const int64_t rpb = block / group;
  const unsigned grid = static_cast<unsigned>((tokens + rpb - 1) / rpb);
  auto* xt = static_cast<const T*>(x);
  auto* wt = static_cast<const T*>(w);
  auto* yt = static_cast<T*>(y);
  if (vec) {
    Forward<T, VecWidth<T>()><<<grid, block, 0, s>>>(xt, wt, yt, rstd, tokens, hidden,
                                                     group, eps);
  } else {
    Forward<T, 1><<<grid, block, 0, s>>>(xt, wt, yt, rstd, tokens, hidden, group, eps);
  }
  return static_cast<int>(cudaGetLastError());
}

// Resident blocks per SM (at least 1) of the fused backward kernel at
// (block, smem) on the current device. The occupancy query runs once per
// (device, block, smem) and is remembered: a process sees a few row shapes,
// and a backward costs one cudaGetDevice and a map lookup, not a query.
template <typename T, int kW>
cudaError_t FusedBlocksPerSm(int block, size_t smem, int* per_sm) {
  static std::mutex mu;
  static std::map<std::tuple<int, int, size_t>, int> known;  // guarded by mu
  int dev = 0;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess) return e;
  const auto key = std::make_tuple(dev, block, smem);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = known.find(key); it != known.end()) {
      *per_sm = it->second;
      return cudaSuccess;
    }
  }
  int n = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &n, Backward<T, kW, true>, block, smem);
      e != cudaSuccess) {
    return e;
  }
  if (n < 1) n = 1;
  std::lock_guard<std::mutex> lock(mu);
  known.emplace(key, n);
  *per_sm = n;
  return cudaSuccess;
}

template <typename T, int kW>
int BackwardTyped(const T* dy, const T* x, const T* w, const float* rstd, T* dx,
                  bool accumulate_dx, void* dw, int dw_dtype, bool accumulate_dw,
                  int64_t tokens, int64_t hidden, cudaStream_t s) {
  const int64_t nvec = hidden / kW;
  const int group = GroupFor(nvec);
  const int block = group > kMinBlock ? group : kMinBlock;
  const int64_t rpb = block / group;
  const int64_t row_blocks = (tokens + rpb - 1) / rpb;
  const bool fused = nvec <= int64_t{group} * kCache;
  int64_t parts = 0;
  float* part = nullptr;
  if (fused) {
    const size_t smem = rpb > 1 ? static_cast<size_t>(rpb * hidden) * sizeof(float) : 0;
    int per_sm = 0;
    if (cudaError_t e = FusedBlocksPerSm<T, kW>(block, smem, &per_sm); e != cudaSuccess) {
      return e;
    }
    const int64_t resident = int64_t{SmCount()} * per_sm;
    parts = row_blocks < resident ? row_blocks : resident;
    if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&part),
                                        parts * hidden * sizeof(float), s);
        e != cudaSuccess) {
      return e;
    }
    Backward<T, kW, true><<<static_cast<unsigned>(parts), block, smem, s>>>(
        dy, x, w, rstd, dx, accumulate_dx, part, tokens, hidden, group);
  } else {
    Backward<T, kW, false><<<static_cast<unsigned>(row_blocks), block, 0, s>>>(
        dy, x, w, rstd, dx, accumulate_dx, nullptr, tokens, hidden, group);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    parts = tokens < 128 ? tokens : 128;
    const int64_t per_slice = (tokens + parts - 1) / parts;
    parts = (tokens + per_slice - 1) / per_slice;  // every slice non-empty
    if (cudaError_t e = cudaMallocAsync(reinterpret_cast<void**>(&part),
                                        parts * hidden * sizeof(float), s);
        e != cudaSuccess) {
      return e;
    }
    DwSlices<T><<<dim3(Blocks(hidden, 256), static_cast<unsigned>(parts)), 256, 0, s>>>(
        dy, x, rstd, part, tokens, hidden, per_slice);
  }
  if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
    cudaFreeAsync(part, s);
    return e;
  }
  FinishDw<<<Blocks(hidden, kFinishCols), kFinishCols * kFinishLanes, 0, s>>>(
      part, parts, dw, hidden, dw_dtype, accumulate_dw);
  cudaFreeAsync(part, s);
  return static_cast<int>(cudaGetLastError());
}

template <typename T>
int BackwardDispatch(const void* dy, const void* x, const void* w,
                     const float* rstd, void* dx, bool accumulate_dx, void* dw,
                     int dw_dtype, bool accumulate_dw, int64_t tokens,
                     int64_t hidden, cudaStream_t s) {
  auto* dyt = static_cast<const T*>(dy);
  auto* xt = static_cast<const T*>(x);
  auto* wt = static_cast<const T*>(w);
  auto* dxt = static_cast<T*>(dx);
  if (hidden % VecWidth<T>() == 0 && Aligned16({dy, x, w, dx})) {
    return BackwardTyped<T, VecWidth<T>()>(dyt, xt, wt, rstd, dxt, accumulate_dx, dw,
                                           dw_dtype, accumulate_dw, tokens, hidden, s);
  }
  return BackwardTyped<T, 1>(dyt, xt, wt, rstd, dxt, accumulate_dx, dw, dw_dtype,
                             accumulate_dw, tokens, hidden, s);
}

}  // namespace

int LaunchRmsNormForward(const void* x, const void* w, void* y, float* rstd,
                         int64_t tokens, int64_t hidden, int dtype, float eps,
                         void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    return ForwardTyped<__nv_bfloat16>(x, w, y, rstd, tokens, hidden, eps, s);
  }
  return ForwardTyped<float>(x, w, y, rstd, tokens, hidden, eps, s);
}

int LaunchRmsNormBackward(const void* dy, const void* x, const void* w,
                          const float* rstd, void* dx, bool accumulate_dx,
                          void* dw, int dw_dtype,
                          bool accumulate_dw, int64_t tokens, int64_t hidden,
                          int dtype, void* stream) {
  auto s = static_cast<cudaStream_t>(stream);
  if (dtype == dtype_device::kBF16) {
    return BackwardDispatch<__nv_bfloat16>(dy, x, w, rstd, dx, accumulate_dx, dw,
                                           dw_dtype, accumulate_dw, tokens, hidden, s);
  }
  return BackwardDispatch<float>(dy, x, w, rstd, dx, accumulate_dx, dw, dw_dtype,
                                 accumulate_dw, tokens, hidden, s);
}

}  // namespace baton::ops_internal
