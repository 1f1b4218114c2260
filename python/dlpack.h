// The DLPack exchange structs (https://dmlc.github.io/dlpack/latest/, the
// ABI of DLPack 0.6-0.8 that PyTorch >= 1.10, NumPy >= 1.22 and JAX consume
// through `__dlpack__`), written here from the public specification: Debian
// ships the header (libdlpack-dev) but nothing else of baton needs it, and
// these few plain structs are the whole contract.
//
// A producer hands out a PyCapsule named "dltensor" holding a
// DLManagedTensor*; the consumer renames the capsule "used_dltensor" and
// calls `deleter` once it no longer needs the memory. A capsule never
// consumed is released by the capsule's own destructor, which calls
// `deleter` itself.
#ifndef BATON_PYTHON_DLPACK_H_
#define BATON_PYTHON_DLPACK_H_

#include <cstdint>

namespace baton::dlpack {

// DLDeviceType values used here.
inline constexpr int32_t kDLCPU = 1;
inline constexpr int32_t kDLCUDA = 2;

// DLDataTypeCode values used here.
inline constexpr uint8_t kDLInt = 0;
inline constexpr uint8_t kDLUInt = 1;
inline constexpr uint8_t kDLFloat = 2;
inline constexpr uint8_t kDLBfloat = 4;

struct DLDevice {
  int32_t device_type;  // DLDeviceType (an enum of C int size)
  int32_t device_id;
};

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // null: compact row-major
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

}  // namespace baton::dlpack

#endif  // BATON_PYTHON_DLPACK_H_
