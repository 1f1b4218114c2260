#include "baton/python/tensor.h"

#include <Python.h>
#include <pybind11/stl.h>

#include <memory>
#include <utility>

#include "baton/python/dlpack.h"

namespace py = pybind11;

namespace baton::python {
namespace {

using dlpack::DLManagedTensor;

// What one capsule's DLManagedTensor owns: its shape array and a strong
// reference to the memory's owner.
struct Context {
  DLManagedTensor managed{};
  std::vector<int64_t> shape;
  PyObject* owner = nullptr;
};

void DeleteManaged(DLManagedTensor* self) {
  auto* ctx = static_cast<Context*>(self->manager_ctx);
  // The consumer may free its tensor on any thread, with or without the GIL;
  // at interpreter exit the owner goes with everything else.
  if (ctx->owner != nullptr && Py_IsInitialized()) {
    PyGILState_STATE gil = PyGILState_Ensure();
    Py_DECREF(ctx->owner);
    PyGILState_Release(gil);
  }
  delete ctx;
}

// The capsule's destructor: only a capsule nobody consumed still carries
// the name "dltensor" (a consumer renames it "used_dltensor").
void DeleteCapsule(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed != nullptr) managed->deleter(managed);
}

dlpack::DLDataType DlType(DataType t) {
  switch (t) {
    case DataType::kF32: return {dlpack::kDLFloat, 32, 1};
    case DataType::kBF16: return {dlpack::kDLBfloat, 16, 1};
    case DataType::kF16: return {dlpack::kDLFloat, 16, 1};
    case DataType::kI32: return {dlpack::kDLInt, 32, 1};
  }
  return {dlpack::kDLFloat, 32, 1};
}

py::capsule ToDlpack(const PyTensor& t, const py::object& stream) {
  if (!stream.is_none()) {
    throw py::buffer_error("baton.Tensor.__dlpack__: host memory takes stream=None, got " +
                           std::string(py::repr(stream)));
  }
  if (t.data == nullptr && t.numel() > 0) {
    throw py::value_error("baton.Tensor.__dlpack__: the tensor " + t.name + " has no memory");
  }
  auto ctx = std::make_unique<Context>();
  ctx->shape = t.shape;
  ctx->owner = t.owner.ptr();
  Py_XINCREF(ctx->owner);
  DLManagedTensor& m = ctx->managed;
  m.dl_tensor.data = t.data;
  m.dl_tensor.device = {dlpack::kDLCPU, 0};
  m.dl_tensor.ndim = static_cast<int32_t>(ctx->shape.size());
  m.dl_tensor.dtype = DlType(t.dtype);
  m.dl_tensor.shape = ctx->shape.data();
  m.dl_tensor.strides = nullptr;  // compact row-major
  m.dl_tensor.byte_offset = 0;
  m.manager_ctx = ctx.get();
  m.deleter = &DeleteManaged;
  PyObject* capsule = PyCapsule_New(&m, "dltensor", &DeleteCapsule);
  if (capsule == nullptr) throw py::error_already_set();  // ctx freed by unique_ptr
  ctx.release();
  return py::reinterpret_steal<py::capsule>(capsule);
}

}  // namespace

int64_t PyTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void BindTensor(py::module_& m) {
  py::class_<PyTensor>(m, "Tensor",
                       "A view of baton memory; wrap it with torch.from_dlpack or "
                       "numpy.from_dlpack (no copy).")
      .def("__dlpack__", &ToDlpack, py::arg("stream") = py::none())
      .def("__dlpack_device__",
           [](const PyTensor&) { return py::make_tuple(dlpack::kDLCPU, 0); })
      .def_readonly("name", &PyTensor::name)
      .def_readonly("shape", &PyTensor::shape)
      .def_property_readonly("dtype", [](const PyTensor& t) { return DataTypeName(t.dtype); })
      .def_property_readonly("numel", &PyTensor::numel)
      .def_property_readonly("data_ptr",
                             [](const PyTensor& t) { return reinterpret_cast<uintptr_t>(t.data); })
      .def("__repr__", [](const PyTensor& t) {
        std::string s = "baton.Tensor(" + t.name + ", [";
        for (size_t i = 0; i < t.shape.size(); ++i) {
          s += (i ? ", " : "") + std::to_string(t.shape[i]);
        }
        return s + "], " + DataTypeName(t.dtype) + ")";
      });
}

}  // namespace baton::python
