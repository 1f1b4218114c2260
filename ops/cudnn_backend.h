// Internal to ops/cudnn_attention.cc: libcudnn.so.9 loaded with dlopen, and
// a small builder over the cuDNN 9 backend descriptor API (tensors,
// pointwise / matmul / reduction / reshape operations, an operation graph,
// an execution plan found by cuDNN's heuristics). Only built when the cuDNN
// headers were found (BATON_HAVE_CUDNN).
#ifndef BATON_OPS_CUDNN_BACKEND_H_
#define BATON_OPS_CUDNN_BACKEND_H_

#include <cudnn_graph.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "baton/runtime/status.h"

namespace baton::ops_internal::cudnn {

// The entry points baton uses, resolved from libcudnn.so.9.
struct Api {
  size_t (*GetVersion)();
  const char* (*GetErrorString)(cudnnStatus_t);
  cudnnStatus_t (*Create)(cudnnHandle_t*);
  cudnnStatus_t (*SetStream)(cudnnHandle_t, cudaStream_t);
  cudnnStatus_t (*CreateDescriptor)(cudnnBackendDescriptorType_t,
                                    cudnnBackendDescriptor_t*);
  cudnnStatus_t (*DestroyDescriptor)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*Finalize)(cudnnBackendDescriptor_t);
  cudnnStatus_t (*SetAttribute)(cudnnBackendDescriptor_t,
                                cudnnBackendAttributeName_t,
                                cudnnBackendAttributeType_t, int64_t,
                                const void*);
  cudnnStatus_t (*GetAttribute)(cudnnBackendDescriptor_t,
                                cudnnBackendAttributeName_t,
                                cudnnBackendAttributeType_t, int64_t,
                                int64_t*, void*);
  cudnnStatus_t (*Execute)(cudnnHandle_t, cudnnBackendDescriptor_t,
                           cudnnBackendDescriptor_t);
};

// The loaded API, or Unavailable saying why (no library, an entry point
// missing, a version below 9, BATON_CUDNN=0). Loaded once per process.
StatusOr<const Api*> LoadApi();

// One backend descriptor, destroyed with its owner.
class Descriptor {
 public:
  Descriptor(const Api* api, cudnnBackendDescriptor_t d) : api_(api), d_(d) {}
  ~Descriptor() { if (d_ != nullptr) api_->DestroyDescriptor(d_); }
  Descriptor(const Descriptor&) = delete;
  Descriptor& operator=(const Descriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return d_; }

 private:
  const Api* api_;
  cudnnBackendDescriptor_t d_;
};

using Dims = std::array<int64_t, 4>;

// Builds one operation graph. Every call records the first failure (which
// call, which attribute, cuDNN's status string) and turns the rest into
// no-ops, so a graph is written as straight-line code and checked once with
// status(). Tensors are identified by the descriptor pointer returned.
class GraphBuilder {
 public:
  explicit GraphBuilder(const Api* api) : api_(api) {}

  // A tensor with a unique id (the variant pack's key; virtual tensors get
  // ids from 1000 up when uid is 0).
  cudnnBackendDescriptor_t Tensor(int64_t uid, cudnnDataType_t type, Dims dims,
                                  Dims strides, bool is_virtual,
                                  bool by_value = false);
  // A virtual tensor of the given type and shape.
  cudnnBackendDescriptor_t Virtual(cudnnDataType_t type, Dims dims, Dims strides) {
    return Tensor(0, type, dims, strides, true);
  }

  // y = mode(x[, b[, t]]) with math precision `prec`; axis for GEN_INDEX.
  void Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                 cudnnBackendDescriptor_t y,
                 cudnnDataType_t prec = CUDNN_DATA_FLOAT, int64_t axis = -1);
  void Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t c);
  void Reduction(cudnnReduceTensorOp_t op, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y);
  void Reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y);

  // Finalizes the graph of the operations added so far on `handle`, asks
  // cuDNN's heuristics (mode A, then the fallback list) for engine configs
  // and finalizes the first execution plan that cuDNN accepts.
  StatusOr<std::unique_ptr<Descriptor>> BuildPlan(cudnnHandle_t handle,
                                                  int64_t* workspace_bytes);

  const Status& status() const { return status_; }

 private:
  cudnnBackendDescriptor_t New(cudnnBackendDescriptorType_t type, const char* what);
  void Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           const char* what, cudnnBackendAttributeType_t type, int64_t n,
           const void* value);
  void Finalize(cudnnBackendDescriptor_t d, const char* what);
  void Fail(const char* call, const char* what, cudnnStatus_t s);

  const Api* api_;
  Status status_;
  int64_t next_virtual_uid_ = 1000;
  std::vector<std::unique_ptr<Descriptor>> owned_;
  std::vector<cudnnBackendDescriptor_t> ops_;
};

}  // namespace baton::ops_internal::cudnn

#endif  // BATON_OPS_CUDNN_BACKEND_H_
