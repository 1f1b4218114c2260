// The CUDA launchers of ops/zenflow_stream.h (called by zenflow_stream.cc, which
// holds the checks) and the index arithmetic they share. Plain header:
// included by nvcc and by host code; the index functions are host and
// device functions, so ops/zenflow_stream_test.cc checks them on the host
// against ops/zenflow.h's element-by-element enumeration.
//
// Coordinates. A block is elements [first, first + n) of a row-major
// matrix with `cols` columns; c0 = first % cols. Element i of the block
// (0 <= i < n) has the virtual position p = c0 + i, the virtual row
// r = p / cols (row 0 is the block's first, possibly partial, row) and the
// column c = p % cols. Conversely, column c's elements in the block are the
// rows r in [RowsOf(c).lo, RowsOf(c).hi) with i = r * cols + c - c0:
//   lo = (c < c0) ? 1 : 0                     (row 0 starts at column c0)
//   hi = ceil((n + c0 - c) / cols)            (r * cols + c - c0 < n)
//      = (n + c0 - c + cols - 1) / cols       (numerator >= n + c0 >= 0
//                                              since c <= cols - 1)
//
// Slot table (ops/zenflow_stream.h, WriteColumnSlotTable): cols + 1 int32,
//   table[c]    = prefix[c]       when column c is selected (its slot:
//                                 its index among the selected columns)
//               = -1 - prefix[c]  when it is not (negative)
//   table[cols] = K, the number of selected columns,
// with prefix[c] = the number of selected columns < c. So one load gives
// both "selected?" and prefix[c]: prefix[c] = t >= 0 ? t : -1 - t.
//
// Packed index of a selected element at (r, c): the number of selected
// elements of the block before it,
//   k = (K - prefix[c0])           selected elements of row 0 (cols >= c0)
//     + (r - 1) * K                full rows 1 .. r-1
//     + prefix[c]                  row r, columns < c
//     = r * K + prefix[c] - prefix[c0]           (also right for r = 0)
// closed form, no atomics, no search: the table's entry for c0 is read once
// per thread.
#ifndef BATON_OPS_ZENFLOW_KERNELS_H_
#define BATON_OPS_ZENFLOW_KERNELS_H_

#include <cstdint>

#ifdef __CUDACC__
#define BATON_ZF_HD __host__ __device__ __forceinline__
#else
#define BATON_ZF_HD inline
#endif

namespace baton::ops_internal {

// Rows per chunk of AccumulateColumnSquares (ops/zenflow_stream.h): a
// column's squares are summed in chunks of this many rows, then the chunk
// sums in chunk order. A constant, so the order depends on the shape only.
constexpr int64_t kZenFlowRowsPerChunk = 64;

struct ZenFlowRows {
  int64_t lo, hi;  // [lo, hi): empty when lo >= hi
};

// The virtual rows holding column c's elements of the block (c0, n, cols).
BATON_ZF_HD ZenFlowRows ZenFlowRowsOf(int64_t c0, int64_t n, int64_t cols, int64_t c) {
  return {c < c0 ? 1 : 0, (n + c0 - c + cols - 1) / cols};
}

// Virtual rows the block touches: ceil((c0 + n) / cols).
BATON_ZF_HD int64_t ZenFlowVirtualRows(int64_t c0, int64_t n, int64_t cols) {
  return (c0 + n + cols - 1) / cols;
}

// prefix[c] from the table entry t = table[c].
BATON_ZF_HD int64_t ZenFlowPrefix(int32_t t) { return t >= 0 ? t : -1 - int64_t{t}; }

// The packed index of the selected element at virtual row r whose column
// has slot t (>= 0), given K = table[cols] and base = prefix[c0].
BATON_ZF_HD int64_t ZenFlowPackedIndex(int64_t r, int32_t t, int64_t k, int64_t base) {
  return r * k + t - base;
}

// Launchers: dtype codes are DataType's values (0 f32, 1 bf16); each
// returns a cudaError_t value. `stream` is a cudaStream_t. n >= 1 (the .cc
// returns before launching for an empty block). LaunchZenFlowSplit's
// `rest` may be null (the selected side only).
int LaunchZenFlowColumnSquares(const void* grad, int dtype, int64_t c0, int64_t n,
                               int64_t cols, float scale, float* norms, float* scratch,
                               void* stream);
int LaunchZenFlowSplit(const void* grad, int dtype, int64_t c0, int64_t n, int64_t cols,
                       const int32_t* table, float scale, float* selected, float* rest,
                       void* stream);
int LaunchZenFlowGather(const float* src, int64_t c0, int64_t n, int64_t cols,
                        const int32_t* table, float* packed, void* stream);
int LaunchZenFlowScatter(const float* packed, int64_t c0, int64_t n, int64_t cols,
                         const int32_t* table, void* dst, int dst_dtype, void* stream);
int LaunchZenFlowCopy(const void* src, void* dst, int dtype, int64_t c0, int64_t n,
                      int64_t cols, const int32_t* table, bool selected_columns,
                      void* stream);

}  // namespace baton::ops_internal

#undef BATON_ZF_HD

#endif  // BATON_OPS_ZENFLOW_KERNELS_H_
