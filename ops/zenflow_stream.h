// ZenFlow's element-wise ops as stream work: the ops of ops/zenflow.h that
// touch every element of a gradient or weight shard (the algorithm, the
// layout and ColumnBlock are explained there), enqueued on a Stream. On a
// CUDA stream they are CUDA kernels (ops/zenflow_cuda.cu); on a host stream
// the same ops run as host work, with the results of ops/zenflow.h's host
// ops. The ZenFlow driver (optim/zenflow_driver.h) issues one sequence of calls
// for either kind of device, so the host runtime's tests check the order of
// the work the GPU runs.
//
// Split of the work. The selection (top-k over one float per column) stays
// host work: the norms buffer goes to the host, the host's
// SelectTopColumns picks the columns (so the tie-break is exactly the
// host's), WriteColumnSlotTable turns the selection into a slot table and
// the table goes back to the device. Everything O(elements) runs on the
// device through the functions below.
//
// The selection need not be known when these functions are called: an
// executor enqueues them before the host work that picks the columns has
// run. So nothing here reads the selection at call time: the work reads the
// slot table (memory of the stream's device, DeviceColumnSlots) when it
// runs, and the number of selected elements of a block is known only then.
// Output buffers of packed values are sized by PackedCapacity (an upper
// bound).
//
// Contract, as every launcher (ops/op_util.h): arguments are checked first
// (InvalidArgument naming the op and the argument; nothing is enqueued
// then); then the work is enqueued on `stream` and the call returns; a CUDA
// stream in a build without CUDA: Unimplemented. Pointers are memory of the
// stream's device and must stay valid until the work has run. Results
// equal the host ops' on the same data bit for bit (scale 1, f32 buffers;
// a bf16 result is the f32 one rounded to nearest even), except the column
// squares on a CUDA stream (see AccumulateColumnSquares). Host work runs
// without FTZ/DAZ (unlike ops/op_util.h's OnStream), as the host ops do.
//
// Differences from the host ops' contract: pointers are checked for null
// whenever the block is not empty (the host ops skip the packed-side checks
// when the selection has no element in the block, which is unknown here).
//
// Concurrency: SplitGradient, ScatterColumns and CopyColumns never write an
// element they do not own (a vector store only when all four elements of
// the group are written), so two of them may write the two
// classes of columns of one buffer on different streams at once.
#ifndef BATON_OPS_ZENFLOW_STREAM_H_
#define BATON_OPS_ZENFLOW_STREAM_H_

#include <cstdint>
#include <vector>

#include "baton/ops/zenflow.h"
#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"

namespace baton::ops {

// The largest column count a slot table holds (its entries are int32).
constexpr int64_t kMaxSlotTableCols = (int64_t{1} << 31) - 2;

// int32 entries of the slot table of a matrix with `cols` columns: cols + 1.
inline int64_t ColumnSlotTableSize(int64_t cols) { return cols + 1; }

// Writes the slot table of `selection` into `table`
// (ColumnSlotTableSize(selection.cols()) int32, host memory, e.g. a pinned
// staging buffer that then goes to the device):
//   table[c]    = prefix[c] if column c is selected (its slot), else
//                 -1 - prefix[c], with prefix[c] = selected columns < c;
//   table[cols] = the number of selected columns.
// InvalidArgument for a null table or cols > kMaxSlotTableCols.
Status WriteColumnSlotTable(const ColumnSelection& selection, int32_t* table);
// The same into a new vector.
StatusOr<std::vector<int32_t>> ColumnSlotTable(const ColumnSelection& selection);

// The slot table of the union of two selections of the same matrix (a
// column is selected when either selects it). InvalidArgument for
// different column counts, besides WriteColumnSlotTable's errors.
Status WriteColumnSlotTable(const ColumnSelection& a, const ColumnSelection& b,
                            int32_t* table);

// A selection as the ops see it: a slot table in the memory of the
// stream's device (host memory on the host device).
struct DeviceColumnSlots {
  const int32_t* table = nullptr;  // ColumnSlotTableSize(cols) int32
  int64_t cols = 0;
};

// An upper bound of selection.CountIn(block) over every selection of k
// columns: min(n, k x the rows the block touches). The size (in floats)
// of the packed buffers below when the selection is not known yet.
int64_t PackedCapacity(const ColumnBlock& block, int64_t k);

// norms[e % cols] += (scale * grad[e])^2 for every element e of the block
// (grad: block.n elements, f32 or bf16; norms: block.cols floats).
//
// On a host stream: the host op's order (element order) on fl(scale *
// grad), so its bits. On a CUDA stream, deterministic: the summation order depends on the
// block's shape only, not on the grid or the GPU. Each column's squares are summed in row
// order in chunks of kZenFlowRowsPerChunk (64) rows of the block, then
// norms[c] + chunk 0 + chunk 1 + ... (one thread per column and chunk;
// consecutive threads take consecutive columns, so a warp's loads of a row
// are coalesced). No fused multiply-add. When the block touches at most 64
// rows (one chunk) the order is the host op's (norms[c] + square of row 0 +
// ...) and the result equals the host op's on the scaled gradient
// fl(scale * grad) bit for bit; with Q > 1 chunks it
// may differ: all terms are >= 0, so each result is within
// (terms - 1) * 2^-24 of the exact sum S relatively, and
//   |device - host| <= (m + 64 + Q) * 2^-24 * S   (first order)
// for a column with m elements in the block (S: norms[c] plus its squares).
// A sum over blocks (several calls) adds in call order, as on the host.
// Scratch (CUDA, Q > 1): ColumnSquaresScratch(block) floats: `scratch`
// when given (memory of the stream's device, not used by other work until
// this call's work has run), else one allocation per call
// (cudaMallocAsync / cudaFreeAsync on the stream). The host ignores it.
// InvalidArgument: bad block, grad dtype not f32/bf16, null grad or norms
// (n > 0), a scale that is not finite.
Status AccumulateColumnSquares(Stream& stream, const void* grad, DataType t,
                               const ColumnBlock& block, float scale, float* norms,
                               float* scratch = nullptr);
// Floats of AccumulateColumnSquares' scratch for `block`: Q x cols with Q
// chunks of kZenFlowRowsPerChunk rows when Q > 1, else 0 (0 for a bad or
// empty block).
int64_t ColumnSquaresScratch(const ColumnBlock& block);

// SplitGradient (ops/zenflow.h) on a stream, of the gradient times
// `scale` (g = fl(scale * grad[e]); scale 1 is the host op exactly): the
// selected elements' g in element order into `selected` (=,
// selection.CountIn(block) floats, at most PackedCapacity), the others'
// added into `rest` (block.n floats, +=; elements of selected columns are
// not written). `rest` may be null: the selected side only (the unselected
// elements are then not even read). InvalidArgument: bad block,
// slots.cols != block.cols, grad dtype not f32/bf16, a scale that is not
// finite, a null grad or selected (n > 0) or null table.
Status SplitGradient(Stream& stream, const void* grad, DataType t,
                     const ColumnBlock& block, float scale,
                     const DeviceColumnSlots& slots, float* selected, float* rest);

// GatherColumns: packed[k] = src[e] for the block's selected elements e in
// order (=; f32).
Status GatherColumns(Stream& stream, const float* src, const ColumnBlock& block,
                     const DeviceColumnSlots& slots, float* packed);
// ScatterColumns, the inverse: dst[e] = packed[k] (only selected elements
// of dst are written), dst of dtype `dst_dtype`: f32, or bf16 rounded to
// nearest even (the selected path's new fp32 values into a bf16 parameter
// shard; f32 is the host op).
Status ScatterColumns(Stream& stream, const float* packed,
                      const ColumnBlock& block, const DeviceColumnSlots& slots,
                      void* dst, DataType dst_dtype);

// CopyColumns: dst[e] = src[e] for the block's elements in selected
// columns (kSelected) or in the others (kUnselected), elements of dtype t
// (f32 or bf16, copied bit for bit); no other element of dst is written.
Status CopyColumns(Stream& stream, const void* src, void* dst, DataType t,
                   const ColumnBlock& block, const DeviceColumnSlots& slots,
                   WhichColumns which);

}  // namespace baton::ops

#endif  // BATON_OPS_ZENFLOW_STREAM_H_
