#include "baton/ops/cudnn_attention.h"

#include <atomic>
#include <cmath>
#include <cstdio>

#include "absl/strings/str_cat.h"

#ifdef BATON_HAVE_CUDNN
#include <cuda_runtime.h>

#include <map>
#include <string>
#include <mutex>
#include <tuple>

#include "baton/ops/cudnn_backend.h"
#endif

namespace baton::ops {
namespace {

std::atomic<bool> g_enabled{true};

constexpr int64_t kMaxHeadDim = 128;

Status CheckShape(const Stream& stream, const AttentionShape& s) {
  if (stream.kind() != DeviceKind::kCuda) {
    return absl::InvalidArgumentError("cuDNN attention: needs a CUDA stream");
  }
  if (s.dtype != DataType::kBF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuDNN attention: takes bf16, got ", DataTypeName(s.dtype)));
  }
  if (s.batch <= 0 || s.seq <= 0 || s.heads <= 0 || s.kv_heads <= 0 ||
      s.heads % s.kv_heads != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuDNN attention: bad shape batch ", s.batch, " seq ", s.seq, " heads ", s.heads,
        " kv_heads ", s.kv_heads));
  }
  if (s.head_dim < 8 || s.head_dim > kMaxHeadDim || s.head_dim % 8 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "cuDNN attention: head_dim must be a multiple of 8 in [8, ", kMaxHeadDim, "], got ",
        s.head_dim));
  }
  return absl::OkStatus();
}

}  // namespace

void SetCudnnAttentionEnabled(bool enabled) { g_enabled = enabled; }
bool CudnnAttentionEnabled() { return g_enabled; }

#ifndef BATON_HAVE_CUDNN

Status CudnnAttentionAvailable() {
  return absl::UnavailableError("cuDNN attention: built without cuDNN headers");
}

Status CudnnAttentionApplies(const Stream& stream, const AttentionShape& shape) {
  BATON_RETURN_IF_ERROR(CheckShape(stream, shape));
  return CudnnAttentionAvailable();
}

Status CudnnAttentionCheckOps(const AttentionShape&) { return CudnnAttentionAvailable(); }

Status CudnnAttentionForward(Stream&, const AttentionShape&, const void*, const void*,
                             const void*, void*, float*) {
  return CudnnAttentionAvailable();
}

Status CudnnAttentionBackward(Stream&, const AttentionShape&, const void*, const void*,
                              const void*, const void*, const void*, const float*, void*,
                              void*, void*) {
  return CudnnAttentionAvailable();
}

#else  // BATON_HAVE_CUDNN

namespace {

using ops_internal::cudnn::Api;
using ops_internal::cudnn::Descriptor;
using ops_internal::cudnn::Dims;
using ops_internal::cudnn::GraphBuilder;

// Unique ids of the tensors a call binds.
enum Uid : int64_t {
  kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV,
  kScale, kNegInf, kOne,  // by-value scalars (host floats)
  kSoftmaxSum, kDQAccum,  // fp32 scratch in the workspace (backward)
};

struct Plan {
  std::unique_ptr<Descriptor> plan;
  int64_t workspace = 0;  // cuDNN's own, then baton's scratch after it
  int64_t softmax_sum_offset = 0, dq_accum_offset = 0, dq_accum_bytes = 0, total = 0;
};

struct Handle {
  cudnnHandle_t handle = nullptr;
  std::mutex mu;  // SetStream + Execute of one call at a time
};

// Strides of the token-major layouts: [b, h, s, d] dims over
// [batch * seq, heads * head_dim] rows.
Dims Bshd(int64_t s, int64_t h, int64_t d) { return {s * h * d, d, h * d, 1}; }
Dims BshdT(int64_t s, int64_t h, int64_t d) { return {s * h * d, d, 1, h * d}; }  // [b,h,d,s]

// Causal mask over scores `x` ([b, h, s, s] with `stride`): keeps row >=
// col, writes -inf elsewhere; returns the masked virtual tensor.
cudnnBackendDescriptor_t CausalMask(GraphBuilder& g, cudnnBackendDescriptor_t x,
                                    cudnnBackendDescriptor_t neg_inf, const Dims& dims,
                                    const Dims& stride) {
  auto ri = g.Virtual(CUDNN_DATA_INT32, dims, stride);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, ri, CUDNN_DATA_FLOAT, 2);
  auto ci = g.Virtual(CUDNN_DATA_INT32, dims, stride);
  g.Pointwise(CUDNN_POINTWISE_GEN_INDEX, x, nullptr, nullptr, ci, CUDNN_DATA_FLOAT, 3);
  auto keep = g.Virtual(CUDNN_DATA_BOOLEAN, dims, stride);
  g.Pointwise(CUDNN_POINTWISE_CMP_GE, ri, ci, nullptr, keep, CUDNN_DATA_BOOLEAN);
  auto y = g.Virtual(CUDNN_DATA_FLOAT, dims, stride);
  g.Pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, neg_inf, keep, y);
  return y;
}

void BuildForward(GraphBuilder& g, const AttentionShape& sh) {
  const int64_t b = sh.batch, s = sh.seq, hq = sh.heads, hk = sh.kv_heads, d = sh.head_dim;
  const Dims scalar{1, 1, 1, 1};
  const Dims scores{b, hq, s, s}, scores_stride{hq * s * s, s * s, s, 1};
  const Dims row{b, hq, s, 1}, row_stride{hq * s, s, 1, 1};
  auto q = g.Tensor(kQ, CUDNN_DATA_BFLOAT16, {b, hq, s, d}, Bshd(s, hq, d), false);
  auto kt = g.Tensor(kK, CUDNN_DATA_BFLOAT16, {b, hk, d, s}, BshdT(s, hk, d), false);
  auto v = g.Tensor(kV, CUDNN_DATA_BFLOAT16, {b, hk, s, d}, Bshd(s, hk, d), false);
  auto o = g.Tensor(kO, CUDNN_DATA_BFLOAT16, {b, hq, s, d}, Bshd(s, hq, d), false);
  auto stats = g.Tensor(kStats, CUDNN_DATA_FLOAT, row, row_stride, false);
  auto scale = g.Tensor(kScale, CUDNN_DATA_FLOAT, scalar, scalar, false, true);
  auto neg_inf = g.Tensor(kNegInf, CUDNN_DATA_FLOAT, scalar, scalar, false, true);

  auto s0 = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Matmul(q, kt, s0);
  auto s1 = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_MUL, s0, scale, nullptr, s1);
  auto s2 = CausalMask(g, s1, neg_inf, scores, scores_stride);
  // Softmax with its statistics: lse = max + log(sum exp(s - max)).
  auto mx = g.Virtual(CUDNN_DATA_FLOAT, row, row_stride);
  g.Reduction(CUDNN_REDUCE_TENSOR_MAX, s2, mx);
  auto centered = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_SUB, s2, mx, nullptr, centered);
  auto e = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_EXP, centered, nullptr, nullptr, e);
  auto sum = g.Virtual(CUDNN_DATA_FLOAT, row, row_stride);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
  auto log_sum = g.Virtual(CUDNN_DATA_FLOAT, row, row_stride);
  g.Pointwise(CUDNN_POINTWISE_LOG, sum, nullptr, nullptr, log_sum);
  g.Pointwise(CUDNN_POINTWISE_ADD, mx, log_sum, nullptr, stats);
  // The second matmul takes p in the i/o type (cuDNN's requirement).
  auto p = g.Virtual(CUDNN_DATA_BFLOAT16, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_DIV, e, sum, nullptr, p);
  g.Matmul(p, v, o);
}

void BuildBackward(GraphBuilder& g, const AttentionShape& sh) {
  const int64_t b = sh.batch, s = sh.seq, hq = sh.heads, hk = sh.kv_heads, d = sh.head_dim;
  const Dims scalar{1, 1, 1, 1};
  const Dims scores{b, hq, s, s}, scores_stride{hq * s * s, s * s, s, 1};
  const Dims scores_t_stride{hq * s * s, s * s, 1, s};  // the transpose, as a view
  const Dims row{b, hq, s, 1}, row_stride{hq * s, s, 1, 1};
  const Dims full{b, hq, s, d}, full_stride{hq * s * d, s * d, d, 1};
  auto q = g.Tensor(kQ, CUDNN_DATA_BFLOAT16, {b, hq, s, d}, Bshd(s, hq, d), false);
  auto kt = g.Tensor(kK, CUDNN_DATA_BFLOAT16, {b, hk, d, s}, BshdT(s, hk, d), false);
  auto vt = g.Tensor(kV, CUDNN_DATA_BFLOAT16, {b, hk, d, s}, BshdT(s, hk, d), false);
  auto o = g.Tensor(kO, CUDNN_DATA_BFLOAT16, {b, hq, s, d}, Bshd(s, hq, d), false);
  auto dout = g.Tensor(kDO, CUDNN_DATA_BFLOAT16, {b, hq, s, d}, Bshd(s, hq, d), false);
  auto stats = g.Tensor(kStats, CUDNN_DATA_FLOAT, row, row_stride, false);
  auto dq = g.Tensor(kDQ, CUDNN_DATA_BFLOAT16, {b, hq, s, d}, Bshd(s, hq, d), false);
  auto dk = g.Tensor(kDK, CUDNN_DATA_BFLOAT16, {b, hk, s, d}, Bshd(s, hk, d), false);
  auto dv = g.Tensor(kDV, CUDNN_DATA_BFLOAT16, {b, hk, s, d}, Bshd(s, hk, d), false);
  auto scale = g.Tensor(kScale, CUDNN_DATA_FLOAT, scalar, scalar, false, true);
  auto neg_inf = g.Tensor(kNegInf, CUDNN_DATA_FLOAT, scalar, scalar, false, true);
  auto one = g.Tensor(kOne, CUDNN_DATA_FLOAT, scalar, scalar, false, true);
  auto softmax_sum = g.Tensor(kSoftmaxSum, CUDNN_DATA_FLOAT, row, row_stride, false);
  auto dq_accum = g.Tensor(kDQAccum, CUDNN_DATA_FLOAT, full, full_stride, false);

  // D_i = dout_i . out_i
  auto prod = g.Virtual(CUDNN_DATA_FLOAT, {b, hq, s, d}, {hq * s * d, s * d, hq * d, 1});
  g.Pointwise(CUDNN_POINTWISE_MUL, dout, o, nullptr, prod);
  auto dot = g.Virtual(CUDNN_DATA_FLOAT, row, row_stride);
  g.Reduction(CUDNN_REDUCE_TENSOR_ADD, prod, dot);
  g.Pointwise(CUDNN_POINTWISE_MUL, dot, one, nullptr, softmax_sum);
  // p = exp(c * q k^T - lse), causal.
  auto s0 = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Matmul(q, kt, s0);
  auto s1 = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_MUL, s0, scale, nullptr, s1);
  auto s2 = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_SUB, s1, stats, nullptr, s2);
  auto s3 = CausalMask(g, s2, neg_inf, scores, scores_stride);
  auto p = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_EXP, s3, nullptr, nullptr, p);
  // dv = p^T dout (summed over the group's query heads for GQA).
  auto pt = g.Virtual(CUDNN_DATA_BFLOAT16, {b, hq, s, s}, scores_t_stride);
  g.Reshape(p, pt);
  if (hq == hk) {
    g.Matmul(pt, dout, dv);
  } else {
    auto dv_full = g.Virtual(CUDNN_DATA_BFLOAT16, full, full_stride);
    g.Matmul(pt, dout, dv_full);
    g.Reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
  }
  // ds = c * p * (dout v^T - D)
  auto dp = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Matmul(dout, vt, dp);
  auto t1 = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_SUB, dp, softmax_sum, nullptr, t1);
  auto t2 = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_MUL, t1, p, nullptr, t2);
  auto ds = g.Virtual(CUDNN_DATA_FLOAT, scores, scores_stride);
  g.Pointwise(CUDNN_POINTWISE_MUL, t2, scale, nullptr, ds);
  // dk = ds^T q (group-summed), dq = ds k (fp32 accumulator, then bf16).
  auto dst = g.Virtual(CUDNN_DATA_BFLOAT16, {b, hq, s, s}, scores_t_stride);
  g.Reshape(ds, dst);
  if (hq == hk) {
    g.Matmul(dst, q, dk);
  } else {
    auto dk_full = g.Virtual(CUDNN_DATA_BFLOAT16, full, full_stride);
    g.Matmul(dst, q, dk_full);
    g.Reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
  }
  auto k = g.Virtual(CUDNN_DATA_FLOAT, {b, hk, s, d}, Bshd(s, hk, d));
  g.Reshape(kt, k);
  g.Matmul(ds, k, dq_accum);
  g.Pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, nullptr, nullptr, dq);
}

int64_t Align(int64_t n) { return (n + 255) / 256 * 256; }

class Cache {
 public:
  static Cache& Get() {
    static Cache* cache = new Cache;  // plans live for the process
    return *cache;
  }

  StatusOr<Handle*> HandleFor(const Api* api, int device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto& h = handles_[device];
    if (h == nullptr) {
      int previous = 0;
      cudaGetDevice(&previous);
      cudaSetDevice(device);
      cudnnHandle_t handle = nullptr;
      const cudnnStatus_t s = api->Create(&handle);
      cudaSetDevice(previous);
      if (s != CUDNN_STATUS_SUCCESS) {
        return absl::InternalError(
            absl::StrCat("cuDNN cudnnCreate: ", api->GetErrorString(s)));
      }
      h = std::make_unique<Handle>();
      h->handle = handle;
    }
    return h.get();
  }

  StatusOr<const Plan*> PlanFor(const Api* api, Handle* handle, int device,
                                const AttentionShape& s, bool backward) {
    const auto key = std::make_tuple(device, backward, s.batch, s.seq, s.heads, s.kv_heads,
                                     s.head_dim);
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
    if (auto it = failed_.find(key); it != failed_.end()) return it->second;
    GraphBuilder g(api);
    backward ? BuildBackward(g, s) : BuildForward(g, s);
    auto plan = std::make_unique<Plan>();
    Status st = g.status();
    if (st.ok()) {
      auto built = g.BuildPlan(handle->handle, &plan->workspace);
      if (built.ok()) {
        plan->plan = *std::move(built);
      } else {
        st = built.status();
      }
    }
    if (!st.ok()) {  // remembered: the shape goes to baton's kernels from now on
      const Status unimplemented = absl::UnimplementedError(absl::StrCat(
          "cuDNN attention ", backward ? "backward" : "forward", " for batch ", s.batch,
          " seq ", s.seq, " heads ", s.heads, "/", s.kv_heads, " head_dim ", s.head_dim,
          ": ", st.message()));
      std::fprintf(stderr, "baton: %s; using baton's attention kernels\n",
                   std::string(unimplemented.message()).c_str());
      failed_.emplace(key, unimplemented);
      return unimplemented;
    }
    plan->total = Align(plan->workspace);
    if (backward) {
      plan->softmax_sum_offset = plan->total;
      plan->total += Align(s.batch * s.heads * s.seq * int64_t{sizeof(float)});
      plan->dq_accum_offset = plan->total;
      plan->dq_accum_bytes = s.batch * s.heads * s.seq * s.head_dim * int64_t{sizeof(float)};
      plan->total += Align(plan->dq_accum_bytes);
    }
    return (plans_[key] = std::move(plan)).get();
  }

 private:
  std::mutex mu_;
  std::map<int, std::unique_ptr<Handle>> handles_;
  using Key = std::tuple<int, bool, int64_t, int64_t, int64_t, int64_t, int64_t>;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<Key, Status> failed_;
};

Status CudaStatus(const char* what, cudaError_t e) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("cuDNN attention: ", what, ": ",
                                          cudaGetErrorString(e)));
}

// Binds the call's pointers and runs the cached plan on the stream.
Status Run(Stream& stream, const AttentionShape& s, bool backward,
           std::vector<std::pair<int64_t, void*>> bindings) {
  BATON_RETURN_IF_ERROR(CheckShape(stream, s));
  BATON_ASSIGN_OR_RETURN(const Api* api, ops_internal::cudnn::LoadApi());
  auto cu = static_cast<cudaStream_t>(stream.native_handle());
  int device = 0;
  BATON_RETURN_IF_ERROR(CudaStatus("cudaStreamGetDevice", cudaStreamGetDevice(cu, &device)));
  Cache& cache = Cache::Get();
  BATON_ASSIGN_OR_RETURN(Handle* handle, cache.HandleFor(api, device));
  BATON_ASSIGN_OR_RETURN(const Plan* plan, cache.PlanFor(api, handle, device, s, backward));

  char* workspace = nullptr;
  if (plan->total > 0) {
    BATON_RETURN_IF_ERROR(CudaStatus(
        "cudaMallocAsync",
        cudaMallocAsync(reinterpret_cast<void**>(&workspace), plan->total, cu)));
  }
  float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  float neg_inf = -INFINITY, one = 1.0f;
  bindings.emplace_back(kScale, &scale);
  bindings.emplace_back(kNegInf, &neg_inf);
  if (backward) {
    bindings.emplace_back(kOne, &one);
    bindings.emplace_back(kSoftmaxSum, workspace + plan->softmax_sum_offset);
    bindings.emplace_back(kDQAccum, workspace + plan->dq_accum_offset);
  }
  std::vector<int64_t> uids;
  std::vector<void*> pointers;
  for (auto& [uid, ptr] : bindings) {
    uids.push_back(uid);
    pointers.push_back(ptr);
  }
  Status st;
  if (backward) {  // cuDNN before 9.6 expects the dq accumulator zeroed
    st = CudaStatus("cudaMemsetAsync",
                    cudaMemsetAsync(workspace + plan->dq_accum_offset, 0, plan->dq_accum_bytes, cu));
  }
  if (st.ok()) {
    cudnnBackendDescriptor_t pack = nullptr;
    cudnnStatus_t cs = api->CreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack);
    Descriptor owned(api, cs == CUDNN_STATUS_SUCCESS ? pack : nullptr);
    void* ws = workspace;
    const int64_t n = static_cast<int64_t>(uids.size());
    if (cs == CUDNN_STATUS_SUCCESS) {
      cs = api->SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n,
                             uids.data());
    }
    if (cs == CUDNN_STATUS_SUCCESS) {
      cs = api->SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
                             n, pointers.data());
    }
    if (cs == CUDNN_STATUS_SUCCESS) {
      cs = api->SetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1,
                             &ws);
    }
    if (cs == CUDNN_STATUS_SUCCESS) cs = api->Finalize(pack);
    if (cs == CUDNN_STATUS_SUCCESS) {
      std::lock_guard<std::mutex> lock(handle->mu);
      cs = api->SetStream(handle->handle, cu);
      if (cs == CUDNN_STATUS_SUCCESS) cs = api->Execute(handle->handle, plan->plan->get(), pack);
    }
    if (cs != CUDNN_STATUS_SUCCESS) {
      st = absl::InternalError(absl::StrCat("cuDNN attention ",
                                            backward ? "backward" : "forward", ": ",
                                            api->GetErrorString(cs)));
    }
  }
  if (workspace != nullptr) {
    const Status freed = CudaStatus("cudaFreeAsync", cudaFreeAsync(workspace, cu));
    if (st.ok()) st = freed;
  }
  return st;
}

}  // namespace

Status CudnnAttentionAvailable() {
  return ops_internal::cudnn::LoadApi().status();
}

Status CudnnAttentionApplies(const Stream& stream, const AttentionShape& shape) {
  BATON_RETURN_IF_ERROR(CheckShape(stream, shape));
  return CudnnAttentionAvailable();
}

Status CudnnAttentionCheckOps(const AttentionShape& s) {
  BATON_ASSIGN_OR_RETURN(const Api* api, ops_internal::cudnn::LoadApi());
  for (bool backward : {false, true}) {
    GraphBuilder g(api);
    backward ? BuildBackward(g, s) : BuildForward(g, s);
    BATON_RETURN_IF_ERROR(g.status());
  }
  return absl::OkStatus();
}

Status CudnnAttentionForward(Stream& stream, const AttentionShape& s, const void* q,
                             const void* k, const void* v, void* out, float* lse) {
  return Run(stream, s, false,
             {{kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)},
              {kV, const_cast<void*>(v)}, {kO, out}, {kStats, lse}});
}

Status CudnnAttentionBackward(Stream& stream, const AttentionShape& s, const void* dout,
                              const void* q, const void* k, const void* v, const void* out,
                              const float* lse, void* dq, void* dk, void* dv) {
  return Run(stream, s, true,
             {{kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)},
              {kV, const_cast<void*>(v)}, {kO, const_cast<void*>(out)},
              {kDO, const_cast<void*>(dout)}, {kStats, const_cast<float*>(lse)},
              {kDQ, dq}, {kDK, dk}, {kDV, dv}});
}

#endif  // BATON_HAVE_CUDNN

}  // namespace baton::ops
