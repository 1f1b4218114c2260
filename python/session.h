// baton.Session in Python (python/session.cc): scheduler/session.h's hooks
// over a communicator made from the launch environment, every view handed
// out as a baton.Tensor (python/tensor.h, DLPack).
//
// Ranks: with no launch variables (comm/bootstrap/launch_env.h) the session
// is one rank (inproc); under a launcher (RANK, WORLD_SIZE, ... as set by
// //comm/bootstrap:launch or torchrun) each process is one rank of a ucx
// job. device "cpu" (host memory; backends inproc, ucx) or "cuda" (one GPU
// per process, the launcher's LOCAL_RANK; backends inproc: one rank, or
// nccl: the launched ranks). A CUDA session on a machine without a GPU, or
// from a build without CUDA, raises RuntimeError saying why.
//
// Host streams run baton's work on their own threads: each Pre hook waits
// for the compute stream before it returns, so the caller may use the
// views at once with synchronous CPU code (PyTorch on CPU) until the
// matching Post hook; the Post hook orders what baton does next after it.
// CUDA: nothing blocks the host. A view's __dlpack__(stream) makes the
// consumer's stream wait for the view's producing work (python/tensor.h),
// and post_forward / post_backward(u, stream) make baton's compute stream
// wait for the consumer's stream (None: the legacy default stream, -1: no
// order). A Python optimizer's work (finish_step_with) is taken to be on
// the legacy default stream.
//
// Pipeline stages: a policy with pipeline_parallel > 1 makes each rank's
// session the session of its stage's graph (python/pipeline.h; backends
// inproc and ucx); the views carry the activations the stages exchange
// (pipeline_input / pipeline_output and their gradients, None elsewhere)
// and under zb-h1 the deferred weight pass has its own hooks
// (pre_backward_weight / post_backward_weight). Tensor and context
// parallelism raise ValueError.
//
// Errors: InvalidArgument and NotFound raise ValueError, everything else
// (calls out of plan order, a failed collective) RuntimeError, with the
// status message. The GIL is released while baton waits or communicates.
// One Python thread drives a Session.
#ifndef BATON_PYTHON_SESSION_H_
#define BATON_PYTHON_SESSION_H_

#include <pybind11/pybind11.h>

namespace baton::python {

// Registers the class "_Session" in `m` (python/baton/__init__.py wraps it).
void BindSession(pybind11::module_& m);

}  // namespace baton::python

#endif  // BATON_PYTHON_SESSION_H_
