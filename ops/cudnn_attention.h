// Attention (ops/attention.h's math: causal, grouped key/value heads, lse in
// fp32) through cuDNN's fused scaled-dot-product attention, built with the
// cuDNN 9 backend (graph) API: the forward as matmul - scale - causal mask -
// softmax (with its statistics) - matmul, the backward as the graph cuDNN's
// flash-attention backward engines take. bf16 tensors only (cuDNN's SDPA
// takes fp16/bf16), head_dim a multiple of 8 and at most 128.
//
// cuDNN is optional twice over: a build without its headers compiles this
// to stubs, and a build with them loads libcudnn.so.9 with dlopen on first
// use, so a machine without cuDNN still runs (Unavailable, and
// AttentionForward/Backward use baton's own kernels). BATON_CUDNN=0 in the
// environment turns it off too.
//
// Execution plans are built once per (GPU, shape, direction) and cached for
// the life of the process; each call then enqueues one cuDNN execution on
// the stream, with its workspace allocated stream-ordered (cudaMallocAsync,
// so it is legal inside CUDA graph capture).
//
// The tensors' layouts are those of ops/attention.h (token-major rows:
// [batch * seq, heads * head_dim]; lse [batch, heads, seq]), so a forward
// here and a backward in baton's kernel (or the reverse) agree.
#ifndef BATON_OPS_CUDNN_ATTENTION_H_
#define BATON_OPS_CUDNN_ATTENTION_H_

#include "baton/ops/attention.h"
#include "baton/runtime/device.h"
#include "baton/runtime/status.h"

namespace baton::ops {

// Ok when cuDNN attention can run in this process (built with cuDNN,
// libcudnn.so.9 loaded, version >= 9.0, not turned off); otherwise
// Unavailable saying why. Cheap after the first call.
Status CudnnAttentionAvailable();

// Ok when `shape` on `stream` is something cuDNN attention takes (a CUDA
// stream, bf16, 8 <= head_dim <= 128 and a multiple of 8) and it is
// available; else the reason (InvalidArgument or Unavailable).
Status CudnnAttentionApplies(const Stream& stream, const AttentionShape& shape);

// The ops of ops/attention.h through cuDNN. Errors: as CudnnAttentionApplies;
// Unimplemented when cuDNN builds no plan for the shape (said once on
// stderr, remembered: AttentionForward/Backward then use baton's kernels);
// Internal naming the cuDNN or CUDA call when an execution fails.
Status CudnnAttentionForward(Stream& stream, const AttentionShape& shape,
                             const void* q, const void* k, const void* v,
                             void* out, float* lse);
Status CudnnAttentionBackward(Stream& stream, const AttentionShape& shape,
                              const void* dout, const void* q, const void* k,
                              const void* v, const void* out, const float* lse,
                              void* dq, void* dk, void* dv);

// Builds and finalizes every descriptor of the forward and backward graphs
// for `shape` (tensors, operations) short of the operation graph and its
// plan, which need a GPU: cuDNN's own checks of the graphs' shapes, types
// and attributes, runnable on a machine with cuDNN but no GPU. Errors as
// CudnnAttentionForward's.
Status CudnnAttentionCheckOps(const AttentionShape& shape);

// Whether AttentionForward/Backward may use cuDNN when it applies (default
// true). Tests set false to reach baton's own CUDA kernels. Process-wide.
void SetCudnnAttentionEnabled(bool enabled);
bool CudnnAttentionEnabled();

}  // namespace baton::ops

#endif  // BATON_OPS_CUDNN_ATTENTION_H_
