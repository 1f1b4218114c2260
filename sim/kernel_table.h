// Measured kernel times for the simulator's compute model: one GPU's table
// of GEMM, attention, memory-bound and optimizer kernels by shape, read from
// the JSON that sim/data/h100_kernels.json holds (PyTorch 2.11 on one H100
// SXM; its provenance is kept in the file and in KernelTable::provenance).
//
// Format (every listed field required, numbers positive unless noted):
//   {"gpu": str, "provenance": str (optional), "launch_overhead_us": >= 0,
//    "gemm": [{"m","n","k","s"}...],                C[m,n] = A[m,k] B[k,n]
//    "sdpa": [{"batch","heads","kv_heads","seq","head_dim","fwd_s","bwd_s"}],
//    "elementwise": [{"op": str, "bytes_fwd", "fwd_s", "bwd_s"}...],
//    "adamw": [{"params","s"}...],
//    "peak_tflops", "hbm_gbps", "copy_gbps" (optional: the GPU the table
//    was measured on, for scaling; copy_gbps counts read + write),
//    "entry_gap_us" (optional, >= 0: time each entry holds beyond its
//    kernels, e.g. an event-to-launch gap; subtracted from every entry,
//    see SubtractEntryGap)}
// Other fields are ignored. Nesting deeper than kMaxKernelTableDepth is
// refused before parsing.
//
// Lookups never extrapolate a rate upward:
//   Gemm          the achieved FLOP rate of the fastest of the 4 measured
//                 shapes nearest in (log m, log n, log k) (an exact shape is
//                 one of them). The fastest, not a mean: a kernel timed
//                 alone is only ever slowed by what surrounds it (the
//                 event-to-launch gap, a clock not at its steady state,
//                 another process), never sped up, and the shipped table
//                 shows it in groups: the rows of one model and token
//                 count, measured together, are slow together (llama3-8b's
//                 2048-token QKV at 187 TFLOP/s beside 571 at 4096 tokens;
//                 llama2-13b's 4096-token rows 10-20% below its 2048- and
//                 8192-token rows). A mean carried that noise into the
//                 step; the fastest nearby rate is the kernel's
//                 (sim/block_fidelity_test checks ten measured blocks).
//   Attention*    log of the achieved FLOP rate over (log seq,
//                 log batch x heads, log heads / kv heads, log head dim),
//                 inverse-distance weighted over the 4 nearest measured
//                 shapes (an exact shape returns its measurement; the
//                 attention rows show no such groups, and rows at other
//                 head dims are other kernels, not noise); FLOPs 2 b h s^2 d
//                 forward (causal half of 4 b h s^2 d), 2.5x that backward
//                 (the table's convention).
//                 The head dim is the one the kernel runs at (the caller
//                 pads it: compute_model.h KernelHeadDim).
// Beyond the measured range every lookup takes the rate of the nearest
// measured shapes (a weighted mean or the largest of their rates, never more): a long sequence
// or small head dim the table lacks runs at its neighbours' rate, not
// faster. The shipped table measures head dim 128
// only, so a 64 runs at 128's rate, which is optimistic where the kernel
// is slower at small head dims; measure the model's own shapes
// (//bench:kernels) for those. A non-positive dimension returns 0 (the
// callers validate shapes first).
//   Elementwise   per op, time by bytes, piecewise linear in log-log between
//                 measured sizes, proportional to bytes beyond the ends. A
//                 point slower than a larger one of the same op is dropped
//                 as noise (the table's 4096 x 14336 SwiGLU forward).
//   Adamw         time by parameter count, as Elementwise.
// Times are in seconds on the table's GPU; scaling to another GPU and the
// per-kernel launch cost are the caller's (sim/compute_model.h).
//
// Plain data; copyable; lookups are const and thread-safe.
#ifndef BATON_SIM_KERNEL_TABLE_H_
#define BATON_SIM_KERNEL_TABLE_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"

namespace baton::sim {

constexpr int kMaxKernelTableDepth = 8;

// A monotone time curve: (size, seconds), sorted by size.
struct TimeCurve {
  std::vector<std::pair<double, double>> points;
  double Seconds(double size) const;
};

struct KernelTable {
  std::string gpu;
  std::string provenance;
  double launch_us = 0;
  // The GPU the table was measured on; 0: unknown (then the simulator takes
  // the table as measured on the simulated GPU and does not scale it).
  double peak_tflops = 0;
  double hbm_gbps = 0;
  double copy_gbps = 0;  // device copy, read + write; 0: use hbm_gbps
  // What each entry held beyond its kernels, already subtracted from the
  // rows below (SubtractEntryGap): 0 for a table timed back to back.
  double entry_gap_us = 0;

  struct Gemm {
    double m, n, k, s;
  };
  struct Attention {
    double batch, heads, kv_heads, seq, head_dim, fwd_s, bwd_s;
  };
  std::vector<Gemm> gemm;
  std::vector<Attention> attention;
  // By op name ("rmsnorm", "swiglu", "cross_entropy", ...): forward and
  // backward curves by forward bytes.
  std::map<std::string, std::pair<TimeCurve, TimeCurve>> elementwise;
  TimeCurve adamw;  // by parameters

  double GemmSeconds(double m, double n, double k) const;
  double AttentionSeconds(double batch, double heads, double kv_heads,
                          double seq, double head_dim, bool backward) const;
  // InvalidArgument naming the op and the ops the table has.
  StatusOr<double> ElementwiseSeconds(const std::string& op, double bytes,
                                      bool backward) const;
  double AdamwSeconds(double params) const { return adamw.Seconds(params); }
};

// Subtracts `gap_us` from every entry's time (gemm, sdpa, elementwise and
// adamw rows) and adds it to t.entry_gap_us: for a table that timed each op
// alone between two events after a synchronize, whose entries then hold
// the host's gap from the start event to the op's first launch, which an
// eager step hides behind the kernels before it (sim/compute_model.h
// charges each kernel at least the launch cost instead). InvalidArgument
// naming `source` when an entry is not longer than the gap (t is then
// left with its rows reduced: discard it).
Status SubtractEntryGap(KernelTable& t, double gap_us, const std::string& source);

// Parses a table. InvalidArgument naming the source and the field (with
// its row) for malformed JSON, too deep nesting, a missing field, a field
// of the wrong JSON type, or a non-positive or non-finite number.
StatusOr<KernelTable> ParseKernelTable(absl::string_view json_text,
                                       const std::string& source);

// Reads the file, then as above; NotFound naming an unreadable path.
StatusOr<KernelTable> ReadKernelTable(const std::string& path);

// The shipped H100 table (sim/data/h100_kernels.json, embedded at build
// time), with its reference GPU set to the "h100" cluster preset's
// peak_tflops and hbm_gbps (989 TFLOP/s, 3000 GB/s device copy), and its
// entries' event-to-launch gap (each op was timed alone after a
// synchronize) taken as one eager launch, launch_overhead_us: entry_gap_us
// 8.93. An error
// only if the embedded file were broken (//sim:kernel_table_test checks it).
const StatusOr<KernelTable>& H100KernelTable();

// `given`, or the shipped H100 table when it is null (a simulation's
// options.kernels); H100KernelTable's error otherwise.
StatusOr<const KernelTable*> KernelTableOrH100(const KernelTable* given);

// The embedded file's text (for tests).
absl::string_view H100KernelTableJson();

}  // namespace baton::sim

#endif  // BATON_SIM_KERNEL_TABLE_H_
