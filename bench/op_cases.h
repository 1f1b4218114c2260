// baton's ops as benchmark cases: each factory allocates and fills the
// buffers of one op at one shape on a device (inputs random, token ids in
// range, saved statistics from a forward run) and returns the calls to time,
// with the bytes or FLOPs that the ops' speed is judged by. Shared by
// //bench:ops and //bench:kernels.
//
// Accounting (e = bytes per element of the case's dtype; what a call must
// move or compute at the least, not what the kernel happens to do):
//   rmsnorm    [T, h]   fwd 2Th e (read x, write y)     bwd 3Th e (dy, x, dx)
//   swiglu     [T, F]   fwd 3TF e (g, u -> h)           bwd 5TF e (dh, g, u -> dg, du)
//   rotary     [b s, H d] in place, fwd = bwd 2 bsHd e
//   embedding  T ids, [V, h] table
//                       fwd 2Th e (gather, write)      bwd Th e + Vh e
//                       (dtable in the case's dtype, assigned: untouched
//                       rows are zeroed)
//   cross_entropy [T, V]   loss   TV e (read the logits)
//                          fused  2TV e (read, write dlogits in place)
//   adamw      P params: fp32 master, moments and gradient, bf16 parameter
//                       out: 30P bytes (read 16P, write 14P)
//   linear     y[m,n] = x[m,k] w[n,k]^T: fwd 2mnk FLOPs, bwd (dx and dw) 4mnk
//   attention  causal, b batch, H heads, s seq, d head dim: fwd 2bHs^2 d
//              FLOPs (the causal half of 4bHs^2 d), bwd 2.5x that (the
//              kernel-table convention, sim/kernel_table.h)
// For bf16 the forward bytes equal the kernel table's "bytes_fwd" of
// rmsnorm (T h 4), swiglu (T F 6) and cross_entropy (T V 2).
//
// Cases own their buffers (shared between the passes of one factory) and
// free them when the last case of the factory is destroyed, so a bench can
// build, time and drop one shape at a time. Not thread-safe.
#ifndef BATON_BENCH_OP_CASES_H_
#define BATON_BENCH_OP_CASES_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"

namespace baton::bench {

enum class Bound { kMemory, kMatmul };

struct OpCase {
  std::string op;     // "rmsnorm", "attention", ...
  std::string pass;   // "fwd", "bwd", "loss", "fused", "step"
  std::string shape;  // e.g. "4096x8192", "b4 s4096 h32/8 d128"
  Bound bound = Bound::kMemory;
  double bytes = 0;   // kMemory: bytes per call (accounting above)
  double flops = 0;   // kMatmul: FLOPs per call
  // Enqueues one call on the stream the factory was given.
  std::function<Status()> run;
  // The buffers `run` uses (shared by the cases of one factory call).
  std::shared_ptr<void> buffers;
};

// Allocating and filling device memory for the cases.
class Filler {
 public:
  Filler(Device& device, Stream& stream) : device_(device), stream_(stream) {}
  // `count` elements of dtype t (f32 or bf16), standard normal x scale,
  // from a seeded 1 MiB pattern tiled by device copies (so gigabyte
  // buffers fill at the device's copy rate).
  StatusOr<DeviceBuffer> Random(int64_t count, DataType t, double scale,
                                uint64_t seed);
  // `count` int32 values in [0, bound), seeded.
  StatusOr<DeviceBuffer> Ids(int64_t count, int64_t bound, uint64_t seed);
  // `bytes` bytes of zeros.
  StatusOr<DeviceBuffer> Zeros(size_t bytes);
  Device& device() { return device_; }
  Stream& stream() { return stream_; }

 private:
  Device& device_;
  Stream& stream_;
};

// Each returns its passes in the order listed; InvalidArgument (from the
// op's own checks, naming the op) for a shape it refuses, ResourceExhausted
// when memory runs out. The forward runs once while building a backward's
// inputs (rstd, lse, out).
StatusOr<std::vector<OpCase>> RmsNormCases(Filler& f, int64_t tokens,
                                           int64_t hidden, DataType t);  // fwd, bwd
StatusOr<std::vector<OpCase>> SwiGluCases(Filler& f, int64_t rows,
                                          int64_t width, DataType t);    // fwd, bwd
StatusOr<std::vector<OpCase>> RotaryCases(Filler& f, int64_t batch,
                                          int64_t seq, int64_t heads,
                                          int64_t head_dim, DataType t); // fwd, bwd
StatusOr<std::vector<OpCase>> EmbeddingCases(Filler& f, int64_t tokens,
                                             int64_t vocab, int64_t hidden,
                                             DataType t);                // fwd, bwd
StatusOr<std::vector<OpCase>> CrossEntropyCases(Filler& f, int64_t tokens,
                                                int64_t vocab,
                                                DataType t);  // loss, fused
StatusOr<std::vector<OpCase>> AttentionCases(Filler& f, int64_t batch,
                                             int64_t seq, int64_t heads,
                                             int64_t kv_heads, int64_t head_dim,
                                             DataType t);                // fwd, bwd
// ops::LinearForward / LinearBackward with rows = m, in = k, out = n; dw
// in the inputs' dtype. `with_backward` false: the forward only (a GEMM of
// the kernel table).
StatusOr<std::vector<OpCase>> LinearCases(Filler& f, int64_t m, int64_t n,
                                          int64_t k, DataType t,
                                          bool with_backward);           // fwd[, bwd]
StatusOr<std::vector<OpCase>> AdamWCases(Filler& f, int64_t params);     // step

}  // namespace baton::bench

#endif  // BATON_BENCH_OP_CASES_H_
