// The shapes //bench:ops and //bench:kernels time, and the loop that times
// them: each spec builds one op's cases at one shape (bench/op_cases.h),
// every pass is timed (bench/op_timing.h) and rated against the run's
// limits, and the buffers are dropped before the next spec.
//
// Shapes:
//   OpsBenchSpecs, CUDA: the Llama shapes of sim/data/h100_kernels.json
//     (PyTorch 2.11 on one H100; embedded at build time): its RMSNorm,
//     SwiGLU and cross-entropy rows, its attention rows (and rotary on
//     their queries), embedding at its cross-entropy rows' tokens and
//     vocabularies with hidden 4096, its AdamW sizes, and linear at its
//     llama3-8b forward GEMMs; each with PyTorch's H100 time at that shape
//     where the table has one (reference_s).
//   OpsBenchSpecs, host: one small shape per op, so a run takes seconds
//     (written in the .cc and in docs/benchmarks.md).
//   KernelTableSpecs: per model and token count, the GEMMs of a Llama block
//     and LM head (forward, input gradient, weight gradient: the shapes of
//     sim/compute_model.cc), RMSNorm, SwiGLU, cross-entropy, rotary and
//     embedding; attention per model at each sequence length with
//     batch = attention_tokens / seq; AdamW per parameter count. Shapes are
//     de-duplicated.
#ifndef BATON_BENCH_OP_SUITE_H_
#define BATON_BENCH_OP_SUITE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "baton/bench/op_cases.h"
#include "baton/bench/op_timing.h"
#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"
#include "baton/runtime/status.h"
#include "baton/scheduler/model.h"

namespace baton::bench {

struct CaseSpec {
  std::string op;                 // for messages
  std::vector<int64_t> dims;      // the factory's size arguments, in order
  std::function<StatusOr<std::vector<OpCase>>(Filler&)> build;
  std::map<std::string, double> reference_s;  // pass -> seconds (PyTorch, H100)
};

StatusOr<std::vector<CaseSpec>> OpsBenchSpecs(DeviceKind kind, DataType dtype);

struct KernelTableShapes {
  std::vector<scheduler::ModelSpec> models;
  std::vector<int64_t> tokens;      // per micro-batch (batch x seq)
  std::vector<int64_t> seqs;        // attention sequence lengths
  int64_t attention_tokens = 0;     // batch x seq of each attention call
  std::vector<int64_t> adamw_params;
};
// bf16 throughout (the kernel table's convention).
std::vector<CaseSpec> KernelTableSpecs(const KernelTableShapes& shapes);

// One timed pass.
struct Measured {
  std::string op, pass, shape;
  std::vector<int64_t> dims;  // the spec's
  Bound bound = Bound::kMemory;
  double bytes = 0, flops = 0;
  double seconds = 0;
  double rate = 0;    // GB/s (memory) or TFLOP/s (matmul)
  double ratio = 0;   // rate / the run's copy rate or GEMM rate
  double reference_s = 0;  // 0: none
};

// Times every pass of every spec. A spec whose build or first call is
// refused by the op (InvalidArgument, e.g. a sequence past a kernel's
// limit) or runs out of memory is skipped: `on_skip(spec, status)`; any
// other error stops the run. `on_row` is called as each pass is measured.
StatusOr<std::vector<Measured>> RunSpecs(
    Device& device, Stream& stream, const std::vector<CaseSpec>& specs,
    const Limits& limits, const TimingOptions& options,
    const std::function<void(const Measured&)>& on_row,
    const std::function<void(const CaseSpec&, const Status&)>& on_skip);

}  // namespace baton::bench

#endif  // BATON_BENCH_OP_SUITE_H_
