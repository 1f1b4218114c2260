#include "baton/ops/linear.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>
#endif

namespace baton::ops {
namespace {

constexpr int64_t kBlockK = 128;  // rows of b kept hot per pass
constexpr int64_t kBlockN = 512;  // columns of c per pass (one L1-sized row)

// Transposes a [rows, cols] matrix of dtype t into fp32 [cols, rows].
std::vector<float> TransposeToFloat(const void* p, DataType t, int64_t rows,
                                    int64_t cols) {
  std::vector<float> out(rows * cols);
  constexpr int64_t kTile = 32;
  for (int64_t r0 = 0; r0 < rows; r0 += kTile) {
    for (int64_t c0 = 0; c0 < cols; c0 += kTile) {
      const int64_t r1 = std::min(rows, r0 + kTile), c1 = std::min(cols, c0 + kTile);
      for (int64_t r = r0; r < r1; ++r) {
        for (int64_t c = c0; c < c1; ++c) out[c * rows + r] = LoadF(p, t, r * cols + c);
      }
    }
  }
  return out;
}

// Writes an fp32 result into `dst` (dtype t), assigning or adding.
void StoreResult(const std::vector<float>& r, void* dst, DataType t,
                 bool accumulate) {
  const int64_t n = static_cast<int64_t>(r.size());
  for (int64_t i = 0; i < n; ++i) {
    StoreF(dst, t, i, (accumulate ? LoadF(dst, t, i) : 0.0f) + r[i]);
  }
}

// c (+)= a b with c of dtype t: computed in fp32, rounded once.
void GemmInto(int64_t m, int64_t n, int64_t k, const float* a, const float* b,
              void* c, DataType t, bool accumulate) {
  if (t == DataType::kF32) {
    GemmCpu(m, n, k, a, b, static_cast<float*>(c), accumulate);
    return;
  }
  std::vector<float> tmp(m * n);
  GemmCpu(m, n, k, a, b, tmp.data(), false);
  StoreResult(tmp, c, t, accumulate);
}

Status Check(const char* op, const LinearShape& s) {
  BATON_RETURN_IF_ERROR(
      CheckPositive(op, {{"rows", s.rows}, {"in", s.in}, {"out", s.out}}));
  return CheckFloatType(op, "dtype", s.dtype);
}

#ifdef BATON_HAVE_CUDA
cudaDataType_t CudaType(DataType t) {
  return t == DataType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;
}

// One handle per thread and device (cuBLAS handles are not to be shared
// between threads that set different streams on them).
StatusOr<cublasHandle_t> Handle() {
  thread_local std::vector<cublasHandle_t> handles;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    return absl::InternalError("cuBLAS: cudaGetDevice failed");
  }
  if (static_cast<int>(handles.size()) <= device) handles.resize(device + 1, nullptr);
  if (handles[device] == nullptr) {
    cublasStatus_t st = cublasCreate(&handles[device]);
    if (st != CUBLAS_STATUS_SUCCESS) {
      return absl::InternalError(absl::StrCat("cublasCreate failed: ",
                                              cublasGetStatusString(st)));
    }
  }
  return handles[device];
}

// Column-major GEMM on `stream`: C = alpha op(A) op(B) + beta C.
int Gemm(void* stream, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
         const void* a, DataType at, int64_t lda, const void* b, int64_t ldb,
         void* c, DataType ct, int64_t ldc, bool accumulate) {
  auto handle = Handle();
  if (!handle.ok()) return static_cast<int>(cudaErrorUnknown);
  cublasSetStream(*handle, static_cast<cudaStream_t>(stream));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  cublasStatus_t st = cublasGemmEx(
      *handle, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(m), static_cast<int>(n), static_cast<int>(k), &alpha, a,
      CudaType(at), static_cast<int>(lda), b, CudaType(at),
      static_cast<int>(ldb), &beta, c, CudaType(ct), static_cast<int>(ldc),
      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  // Report cuBLAS failures through the CUDA error channel of OnStream.
  return st == CUBLAS_STATUS_SUCCESS ? 0 : static_cast<int>(cudaErrorUnknown);
}
#endif

}  // namespace

void GemmCpu(int64_t m, int64_t n, int64_t k, const float* a, const float* b,
             float* c, bool accumulate) {
  if (!accumulate) std::fill(c, c + m * n, 0.0f);
  // For each block of c's columns and of the inner dimension, stream a's
  // rows; the inner loop is a contiguous axpy that the compiler vectorizes.
  for (int64_t j0 = 0; j0 < n; j0 += kBlockN) {
    const int64_t j1 = std::min(n, j0 + kBlockN);
    for (int64_t p0 = 0; p0 < k; p0 += kBlockK) {
      const int64_t p1 = std::min(k, p0 + kBlockK);
      for (int64_t i = 0; i < m; ++i) {
        float* __restrict__ crow = c + i * n;
        const float* arow = a + i * k;
        int64_t p = p0;
        for (; p + 4 <= p1; p += 4) {
          const float a0 = arow[p], a1 = arow[p + 1], a2 = arow[p + 2],
                      a3 = arow[p + 3];
          const float* __restrict__ b0 = b + p * n;
          const float* __restrict__ b1 = b0 + n;
          const float* __restrict__ b2 = b1 + n;
          const float* __restrict__ b3 = b2 + n;
          for (int64_t j = j0; j < j1; ++j) {
            crow[j] += a0 * b0[j] + a1 * b1[j] + a2 * b2[j] + a3 * b3[j];
          }
        }
        for (; p < p1; ++p) {
          const float av = arow[p];
          const float* __restrict__ brow = b + p * n;
          for (int64_t j = j0; j < j1; ++j) crow[j] += av * brow[j];
        }
      }
    }
  }
}

Status LinearForward(Stream& stream, const LinearShape& s, const void* x,
                     const void* w, void* y, bool accumulate_y) {
  constexpr const char* kOp = "LinearForward";
  BATON_RETURN_IF_ERROR(Check(kOp, s));
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"x", x}, {"w", w}, {"y", y}}));
  return OnStream(
      stream, kOp,
      [=]() {
        std::vector<float> xs;
        const float* xf = AsFloats(x, s.dtype, s.rows * s.in, xs);
        const std::vector<float> wt = TransposeToFloat(w, s.dtype, s.out, s.in);
        GemmInto(s.rows, s.out, s.in, xf, wt.data(), y, s.dtype, accumulate_y);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        // Row-major y[rows,out] is column-major y^T = w x^T.
        return Gemm(st, true, false, s.out, s.rows, s.in, w, s.dtype, s.in, x,
                    s.in, y, s.dtype, s.out, accumulate_y);
      }));
}

Status LinearBackward(Stream& stream, const LinearShape& s, const void* dy,
                      const void* x, const void* w, void* dx,
                      bool accumulate_dx, void* dw, DataType dw_dtype,
                      bool accumulate_dw) {
  constexpr const char* kOp = "LinearBackward";
  BATON_RETURN_IF_ERROR(Check(kOp, s));
  BATON_RETURN_IF_ERROR(
      CheckNotNull(kOp, {{"dy", dy}, {"x", x}, {"w", w}}));
  if (dx == nullptr && dw == nullptr) {
    return absl::InvalidArgumentError("LinearBackward: dx and dw are both null: nothing to do");
  }
  BATON_RETURN_IF_ERROR(CheckFloatType(kOp, "dw dtype", dw_dtype));
  if (dw_dtype == DataType::kBF16 && s.dtype != DataType::kBF16) {
    return absl::InvalidArgumentError(
        "LinearBackward: a bfloat16 dw needs bfloat16 inputs");
  }
  return OnStream(
      stream, kOp,
      [=]() {
        std::vector<float> dys, xs, ws;
        const float* dyf = AsFloats(dy, s.dtype, s.rows * s.out, dys);
        if (dx != nullptr) {
          const float* wf = AsFloats(w, s.dtype, s.out * s.in, ws);
          GemmInto(s.rows, s.in, s.out, dyf, wf, dx, s.dtype, accumulate_dx);
        }
        if (dw == nullptr) return absl::OkStatus();
        const std::vector<float> dyt = TransposeToFloat(dy, s.dtype, s.rows, s.out);
        const float* xf = AsFloats(x, s.dtype, s.rows * s.in, xs);
        GemmInto(s.out, s.in, s.rows, dyt.data(), xf, dw, dw_dtype, accumulate_dw);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        if (dx != nullptr) {
          // dx^T [in, rows] = w^T dy^T: column-major w is w^T, dy is dy^T.
          const int rc = Gemm(st, false, false, s.in, s.rows, s.out, w, s.dtype,
                              s.in, dy, s.out, dx, s.dtype, s.in, accumulate_dx);
          if (rc != 0) return rc;
        }
        if (dw == nullptr) return 0;
        // dw^T [in, out] = x^T dy: column-major x is x^T, dy^T transposed.
        return Gemm(st, false, true, s.in, s.out, s.rows, x, s.dtype, s.in, dy,
                    s.out, dw, dw_dtype, s.in, accumulate_dw);
      }));
}

}  // namespace baton::ops
