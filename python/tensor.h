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
// Host memory only today: __dlpack_device__ is (kDLCPU, 0) and a stream
// argument other than None raises BufferError.
#ifndef BATON_PYTHON_TENSOR_H_
#define BATON_PYTHON_TENSOR_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>
#include <vector>

#include "baton/runtime/dtype.h"

namespace baton::python {

struct PyTensor {
  void* data = nullptr;
  std::vector<int64_t> shape;
  DataType dtype = DataType::kF32;
  std::string name;
  pybind11::object owner;  // keeps `data` allocated

  int64_t numel() const;
};

// Registers baton.Tensor (Python name "Tensor") in `m`.
void BindTensor(pybind11::module_& m);

}  // namespace baton::python

#endif  // BATON_PYTHON_TENSOR_H_
