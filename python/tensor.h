// baton.Tensor: a view of baton memory handed to Python through the DLPack
// protocol (python/dlpack.h), so that torch.from_dlpack, numpy.from_dlpack
// or jax.dlpack wrap it without a copy and baton links none of them.
//
// A Tensor holds a pointer, a shape and a dtype, plus `owner`: the Python
// object that keeps the memory allocated (the Session for its views, a
// capsule owning a copy for read_master). Every capsule `__dlpack__` makes
// holds its own reference to the owner, released by the DLManagedTensor's
// deleter (which takes the GIL: consumers may free from any thread), so a
// consumer's tensor keeps the memory alive however long it lives. What the
// memory holds is the owner's contract (a session view is valid until the
// next hook; see docs/python.md).
//
// Host memory (stream == nullptr): __dlpack_device__ is (kDLCPU, 0) and a
// stream argument other than None raises BufferError.
// CUDA memory (stream set: the baton stream whose work produces it; the
// owner keeps that stream alive): __dlpack_device__ is (kDLCUDA, device_id)
// and __dlpack__(stream=s) follows the DLPack stream handshake: s is the
// consumer's stream (python/cuda_order.h), which baton makes wait for the
// view's producing work before it returns; None means the legacy default
// stream (1), -1 no order at all (the consumer synchronizes itself); 0 and
// other values raise BufferError.
#ifndef BATON_PYTHON_TENSOR_H_
#define BATON_PYTHON_TENSOR_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "baton/runtime/device.h"
#include "baton/runtime/dtype.h"

namespace baton::python {

struct PyTensor {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DataType dtype = DataType::kF32;
  std::string name;
  pybind11::object owner;  // keeps `data` (and `stream`) allocated
  Stream* stream = nullptr;  // CUDA memory: its producing stream; null: host
  int device_id = 0;         // CUDA memory: the device ordinal

  int64_t numel() const;
};

// Registers baton.Tensor (Python name "Tensor") in `m`.
void BindTensor(pybind11::module_& m);

}  // namespace baton::python

#endif  // BATON_PYTHON_TENSOR_H_
