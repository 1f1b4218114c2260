// baton.Session in Python (python/session.cc): scheduler/session.h's hooks
// over a communicator made from the launch environment, every view handed
// out as a baton.Tensor (python/tensor.h, DLPack).
//
// Ranks: with no launch variables (comm/bootstrap/launch_env.h) the session
// is one rank (inproc); under a launcher (RANK, WORLD_SIZE, ... as set by
// //comm/bootstrap:launch or torchrun) each process is one rank of a ucx
// job. Host device (CPU) only today.
//
// Host streams run baton's work on their own threads: each Pre hook waits
// for the compute stream before it returns, so the caller may use the
// views at once with synchronous CPU code (PyTorch on CPU) until the
// matching Post hook; the Post hook orders what baton does next after it.
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
