// //bench:kernels' output: measured passes (bench/op_suite.h) as a kernel
// table in the format sim/kernel_table.h reads, so `simulate
// --kernel-table=FILE` or `--calibration=FILE` takes a table measured on the
// user's own GPU (or, on the host runtime, on the CPU).
//
// Mapping (bf16 throughout):
//   gemm         linear forward at (m, n, k): {"m","n","k","s","tflops"}
//   sdpa         attention fwd + bwd at (batch, seq, heads, kv_heads,
//                head_dim): {"batch","heads","kv_heads","seq","head_dim",
//                "causal": true,"fwd_s","bwd_s"} (a shape whose backward was
//                skipped is left out)
//   elementwise  rmsnorm, swiglu, rotary, embedding: {"op","rows","cols",
//                "bytes_fwd","fwd_s","bwd_s"} with bytes_fwd the forward's
//                bytes (bench/op_cases.h); cross_entropy: fwd_s the
//                loss-only pass, bwd_s what the fused pass adds to it
//                (fused - loss, at least 1% of the fused pass: baton
//                computes the gradient inside its forward)
//   adamw        {"params","s"}
//   launch_overhead_us, copy_gbps from the run's limits; "gemm_tflops" (the
//   square GEMM, for the reader; the simulator ignores it). peak_tflops and
//   hbm_gbps are not written: the simulator then takes the table as
//   measured on the simulated GPU and does not rescale it.
#ifndef BATON_BENCH_KERNEL_TABLE_JSON_H_
#define BATON_BENCH_KERNEL_TABLE_JSON_H_

#include <string>
#include <vector>

#include "nlohmann/json.hpp"
#include "baton/bench/op_suite.h"
#include "baton/bench/op_timing.h"
#include "baton/runtime/status.h"

namespace baton::bench {

// FailedPrecondition naming the section when `rows` leave one of gemm,
// sdpa, elementwise (rmsnorm, swiglu and cross_entropy each) or adamw
// empty: the simulator needs all of them.
StatusOr<nlohmann::json> KernelTableJson(const std::string& gpu,
                                         const std::string& provenance,
                                         const Limits& limits,
                                         const std::vector<Measured>& rows);

}  // namespace baton::bench

#endif  // BATON_BENCH_KERNEL_TABLE_JSON_H_
