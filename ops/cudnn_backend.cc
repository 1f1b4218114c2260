#include "baton/ops/cudnn_backend.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"

#ifndef BATON_CUDA_PATH
#define BATON_CUDA_PATH ""
#endif

namespace baton::ops_internal::cudnn {
namespace {

template <typename F>
bool Resolve(void* lib, const char* name, F*& out) {
  out = reinterpret_cast<F*>(dlsym(lib, name));
  return out != nullptr;
}

StatusOr<const Api*> Load() {
  if (const char* env = std::getenv("BATON_CUDNN"); env != nullptr && std::strcmp(env, "0") == 0) {
    return absl::UnavailableError("cuDNN attention: turned off (BATON_CUDNN=0)");
  }
  // libcudnn.so.9 is the cuDNN 9 entry library; it loads its sub-libraries
  // (graph, engines) itself. Looked for by the loader's search (the
  // LD_LIBRARY_PATH, ld.so.cache), then beside $CUDA_HOME's and the build's
  // toolkit. Never unloaded.
  std::vector<std::string> candidates = {"libcudnn.so.9"};
  for (const char* root : {static_cast<const char*>(std::getenv("CUDA_HOME")),
                           static_cast<const char*>(BATON_CUDA_PATH)}) {
    if (root == nullptr || *root == '\0') continue;
    for (const char* sub : {"/lib64/", "/lib/", "/targets/x86_64-linux/lib/"}) {
      candidates.push_back(absl::StrCat(root, sub, "libcudnn.so.9"));
    }
  }
  void* lib = nullptr;
  std::string why;
  for (const std::string& path : candidates) {
    if ((lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (why.empty()) {
      const char* e = dlerror();
      why = e != nullptr ? e : "?";
    }
  }
  if (lib == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cuDNN attention: cannot load libcudnn.so.9: ", why));
  }
  static Api api;
  bool ok = Resolve(lib, "cudnnGetVersion", api.GetVersion) &&
            Resolve(lib, "cudnnGetErrorString", api.GetErrorString) &&
            Resolve(lib, "cudnnCreate", api.Create) &&
            Resolve(lib, "cudnnSetStream", api.SetStream) &&
            Resolve(lib, "cudnnBackendCreateDescriptor", api.CreateDescriptor) &&
            Resolve(lib, "cudnnBackendDestroyDescriptor", api.DestroyDescriptor) &&
            Resolve(lib, "cudnnBackendFinalize", api.Finalize) &&
            Resolve(lib, "cudnnBackendSetAttribute", api.SetAttribute) &&
            Resolve(lib, "cudnnBackendGetAttribute", api.GetAttribute) &&
            Resolve(lib, "cudnnBackendExecute", api.Execute);
  if (!ok) {
    return absl::UnavailableError(
        "cuDNN attention: libcudnn.so.9 lacks a backend API entry point");
  }
  const size_t version = api.GetVersion();
  // cuDNN 9.x: major * 10000 + minor * 100 + patch. Graphs with GEN_INDEX
  // masks and -inf fills need 9.1 (cuDNN's frontend uses the same limit);
  // dQ's fp32 accumulator is zeroed here, so older 9.x would also do.
  if (version < 90100) {
    return absl::UnavailableError(
        absl::StrCat("cuDNN attention: libcudnn ", version, " is older than 9.1"));
  }
  return &api;
}

}  // namespace

StatusOr<const Api*> LoadApi() {
  static const StatusOr<const Api*>* loaded = new StatusOr<const Api*>(Load());
  return *loaded;
}

void GraphBuilder::Fail(const char* call, const char* what, cudnnStatus_t s) {
  if (!status_.ok()) return;
  status_ = absl::InternalError(absl::StrCat("cuDNN ", call, "(", what, "): ",
                                             api_->GetErrorString(s), " (", s, ")"));
}

cudnnBackendDescriptor_t GraphBuilder::New(cudnnBackendDescriptorType_t type,
                                           const char* what) {
  if (!status_.ok()) return nullptr;
  cudnnBackendDescriptor_t d = nullptr;
  if (cudnnStatus_t s = api_->CreateDescriptor(type, &d); s != CUDNN_STATUS_SUCCESS) {
    Fail("cudnnBackendCreateDescriptor", what, s);
    return nullptr;
  }
  owned_.push_back(std::make_unique<Descriptor>(api_, d));
  return d;
}

void GraphBuilder::Set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                       const char* what, cudnnBackendAttributeType_t type, int64_t n,
                       const void* value) {
  if (!status_.ok()) return;
  if (cudnnStatus_t s = api_->SetAttribute(d, name, type, n, value); s != CUDNN_STATUS_SUCCESS) {
    Fail("cudnnBackendSetAttribute", what, s);
  }
}

void GraphBuilder::Finalize(cudnnBackendDescriptor_t d, const char* what) {
  if (!status_.ok()) return;
  if (cudnnStatus_t s = api_->Finalize(d); s != CUDNN_STATUS_SUCCESS) {
    Fail("cudnnBackendFinalize", what, s);
  }
}

#define BATON_SET(d, attr, type, n, value) Set(d, attr, #attr, type, n, value)

cudnnBackendDescriptor_t GraphBuilder::Tensor(int64_t uid, cudnnDataType_t type, Dims dims,
                                              Dims strides, bool is_virtual, bool by_value) {
  cudnnBackendDescriptor_t t = New(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
  if (t == nullptr) return nullptr;
  if (uid == 0) uid = next_virtual_uid_++;
  const int64_t alignment = 16;
  BATON_SET(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
  BATON_SET(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type);
  BATON_SET(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data());
  BATON_SET(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data());
  BATON_SET(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
  BATON_SET(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  if (by_value) BATON_SET(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
  Finalize(t, "tensor");
  return t;
}

void GraphBuilder::Pointwise(cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t x,
                             cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                             cudnnBackendDescriptor_t y, cudnnDataType_t prec, int64_t axis) {
  cudnnBackendDescriptor_t pw = New(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "pointwise");
  if (pw == nullptr) return;
  BATON_SET(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
  BATON_SET(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
  if (axis >= 0) BATON_SET(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
  Finalize(pw, "pointwise");
  cudnnBackendDescriptor_t op = New(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "pointwise op");
  if (op == nullptr) return;
  BATON_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
  BATON_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  if (b != nullptr) BATON_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  if (t != nullptr) BATON_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
  BATON_SET(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  Finalize(op, "pointwise op");
  if (status_.ok()) ops_.push_back(op);
}

void GraphBuilder::Matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                          cudnnBackendDescriptor_t c) {
  cudnnBackendDescriptor_t mm = New(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "matmul");
  if (mm == nullptr) return;
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  BATON_SET(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  Finalize(mm, "matmul");
  cudnnBackendDescriptor_t op = New(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "matmul op");
  if (op == nullptr) return;
  BATON_SET(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
  BATON_SET(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
  BATON_SET(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
  BATON_SET(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
  Finalize(op, "matmul op");
  if (status_.ok()) ops_.push_back(op);
}

void GraphBuilder::Reduction(cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                             cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t red = New(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "reduction");
  if (red == nullptr) return;
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  BATON_SET(red, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
  BATON_SET(red, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
  Finalize(red, "reduction");
  cudnnBackendDescriptor_t op = New(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "reduction op");
  if (op == nullptr) return;
  BATON_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  BATON_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  BATON_SET(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &red);
  Finalize(op, "reduction op");
  if (status_.ok()) ops_.push_back(op);
}

void GraphBuilder::Reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
  cudnnBackendDescriptor_t op = New(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "reshape op");
  if (op == nullptr) return;
  BATON_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
  BATON_SET(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
  Finalize(op, "reshape op");
  if (status_.ok()) ops_.push_back(op);
}

StatusOr<std::unique_ptr<Descriptor>> GraphBuilder::BuildPlan(cudnnHandle_t handle,
                                                              int64_t* workspace_bytes) {
  cudnnBackendDescriptor_t graph = New(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "graph");
  if (graph != nullptr) {
    BATON_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &handle);
    BATON_SET(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
              static_cast<int64_t>(ops_.size()), ops_.data());
    Finalize(graph, "operation graph");
  }
  BATON_RETURN_IF_ERROR(status_);
  std::string tried;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    cudnnBackendDescriptor_t heur = New(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    BATON_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    BATON_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    Finalize(heur, "heuristics");
    BATON_RETURN_IF_ERROR(status_);
    int64_t count = 0;
    if (cudnnStatus_t s = api_->GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr);
        s != CUDNN_STATUS_SUCCESS) {
      Fail("cudnnBackendGetAttribute", "CUDNN_ATTR_ENGINEHEUR_RESULTS count", s);
      return status_;
    }
    std::vector<cudnnBackendDescriptor_t> configs;
    for (int64_t i = 0; i < count; ++i) {
      configs.push_back(New(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config"));
    }
    BATON_RETURN_IF_ERROR(status_);
    int64_t got = 0;
    if (count > 0) {
      if (cudnnStatus_t s = api_->GetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                                               configs.data());
          s != CUDNN_STATUS_SUCCESS) {
        Fail("cudnnBackendGetAttribute", "CUDNN_ATTR_ENGINEHEUR_RESULTS", s);
        return status_;
      }
    }
    for (int64_t i = 0; i < got; ++i) {
      cudnnBackendDescriptor_t plan = nullptr;
      if (api_->CreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan) !=
          CUDNN_STATUS_SUCCESS) {
        continue;
      }
      auto owned = std::make_unique<Descriptor>(api_, plan);
      cudnnStatus_t s = api_->SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                                           CUDNN_TYPE_HANDLE, 1, &handle);
      if (s == CUDNN_STATUS_SUCCESS) {
        s = api_->SetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &configs[i]);
      }
      if (s == CUDNN_STATUS_SUCCESS) s = api_->Finalize(plan);
      if (s != CUDNN_STATUS_SUCCESS) {  // this engine does not take the graph
        absl::StrAppend(&tried, tried.empty() ? "" : ", ", api_->GetErrorString(s));
        continue;
      }
      int64_t bytes = 0, n = 0;
      s = api_->GetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64,
                             1, &n, &bytes);
      if (s != CUDNN_STATUS_SUCCESS) {
        Fail("cudnnBackendGetAttribute", "CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE", s);
        return status_;
      }
      *workspace_bytes = bytes;
      return owned;
    }
  }
  return absl::InternalError(absl::StrCat(
      "cuDNN: no engine takes the attention graph (", tried.empty() ? "no candidates" : tried,
      "); set CUDNN_LOGLEVEL_DBG=2 for cuDNN's reasons"));
}

#undef BATON_SET

}  // namespace baton::ops_internal::cudnn
