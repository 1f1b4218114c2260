#include "ops/rmsnorm.h"

#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

#ifdef BATON_HAVE_CUDA
#include <cuda_runtime.h>

#include "ops/rmsnorm_kernel.h"
#include "runtime/cuda_check.h"
#endif

namespace baton::ops {
namespace {

float Load(const void* p, DataType t, int64_t i) {
  return t == DataType::kBF16 ? Bf16ToFloat(static_cast<const uint16_t*>(p)[i])
                              : static_cast<const float*>(p)[i];
}

void Store(void* p, DataType t, int64_t i, float v) {
  if (t == DataType::kBF16) {
    static_cast<uint16_t*>(p)[i] = FloatToBf16(v);
  } else {
    static_cast<float*>(p)[i] = v;
  }
}

Status CheckShape(const RmsNormShape& s, const char* op) {
  if (s.tokens <= 0 || s.hidden <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": tokens and hidden must be positive, got ", s.tokens, " x ",
        s.hidden));
  }
  if (s.dtype != DataType::kF32 && s.dtype != DataType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": dtype must be float or bfloat16, got ", DataTypeName(s.dtype)));
  }
  if (!(s.eps > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": eps must be positive"));
  }
  return absl::OkStatus();
}

Status CheckPointers(const char* op, std::initializer_list<const void*> ptrs) {
  int i = 0;
  for (const void* p : ptrs) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": pointer argument ", i, " is null"));
    }
    ++i;
  }
  return absl::OkStatus();
}

}  // namespace

void RmsNormForwardCpu(const RmsNormShape& s, const void* x, const void* w,
                       void* y, float* rstd) {
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t row = t * s.hidden;
    float sum = 0;
    for (int64_t i = 0; i < s.hidden; ++i) {
      const float v = Load(x, s.dtype, row + i);
      sum += v * v;
    }
    const float r = 1.0f / std::sqrt(sum / static_cast<float>(s.hidden) + s.eps);
    rstd[t] = r;
    for (int64_t i = 0; i < s.hidden; ++i) {
      Store(y, s.dtype, row + i,
            Load(x, s.dtype, row + i) * r * Load(w, s.dtype, i));
    }
  }
}

void RmsNormBackwardCpu(const RmsNormShape& s, const void* dy, const void* x,
                        const void* w, const float* rstd, void* dx, void* dw,
                        DataType dw_dtype, bool accumulate_dw) {
  std::vector<float> dw_acc(s.hidden, 0.0f);
  for (int64_t t = 0; t < s.tokens; ++t) {
    const int64_t row = t * s.hidden;
    const float r = rstd[t];
    float c = 0;
    for (int64_t i = 0; i < s.hidden; ++i) {
      c += Load(dy, s.dtype, row + i) * Load(w, s.dtype, i) *
           Load(x, s.dtype, row + i);
    }
    c /= static_cast<float>(s.hidden);
    for (int64_t i = 0; i < s.hidden; ++i) {
      const float xv = Load(x, s.dtype, row + i);
      const float g = Load(dy, s.dtype, row + i);
      Store(dx, s.dtype, row + i,
            r * (g * Load(w, s.dtype, i) - xv * r * r * c));
      dw_acc[i] += g * xv * r;
    }
  }
  for (int64_t i = 0; i < s.hidden; ++i) {
    const float prev = accumulate_dw ? Load(dw, dw_dtype, i) : 0.0f;
    Store(dw, dw_dtype, i, prev + dw_acc[i]);
  }
}

Status RmsNormForward(Stream& stream, const RmsNormShape& s, const void* x,
                      const void* w, void* y, float* rstd) {
  BATON_RETURN_IF_ERROR(CheckShape(s, "RmsNormForward"));
  BATON_RETURN_IF_ERROR(CheckPointers("RmsNormForward", {x, w, y, rstd}));
  if (stream.kind() == DeviceKind::kHost) {
    return stream.Enqueue([s, x, w, y, rstd]() {
      RmsNormForwardCpu(s, x, w, y, rstd);
      return absl::OkStatus();
    });
  }
#ifdef BATON_HAVE_CUDA
  BATON_CUDA_CHECK(static_cast<cudaError_t>(ops_internal::LaunchRmsNormForward(
      x, w, y, rstd, s.tokens, s.hidden, static_cast<int>(s.dtype), s.eps,
      stream.native_handle())));
  return absl::OkStatus();
#else
  return absl::UnimplementedError("baton was built without CUDA");
#endif
}

Status RmsNormBackward(Stream& stream, const RmsNormShape& s, const void* dy,
                       const void* x, const void* w, const float* rstd,
                       void* dx, void* dw, DataType dw_dtype,
                       bool accumulate_dw) {
  BATON_RETURN_IF_ERROR(CheckShape(s, "RmsNormBackward"));
  BATON_RETURN_IF_ERROR(
      CheckPointers("RmsNormBackward", {dy, x, w, rstd, dx, dw}));
  if (dw_dtype != DataType::kF32 && dw_dtype != DataType::kBF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RmsNormBackward: dw dtype must be float or bfloat16, got ",
        DataTypeName(dw_dtype)));
  }
  if (stream.kind() == DeviceKind::kHost) {
    return stream.Enqueue(
        [s, dy, x, w, rstd, dx, dw, dw_dtype, accumulate_dw]() {
          RmsNormBackwardCpu(s, dy, x, w, rstd, dx, dw, dw_dtype, accumulate_dw);
          return absl::OkStatus();
        });
  }
#ifdef BATON_HAVE_CUDA
  BATON_CUDA_CHECK(static_cast<cudaError_t>(ops_internal::LaunchRmsNormBackward(
      dy, x, w, rstd, dx, dw, static_cast<int>(dw_dtype), accumulate_dw,
      s.tokens, s.hidden, static_cast<int>(s.dtype), stream.native_handle())));
  return absl::OkStatus();
#else
  return absl::UnimplementedError("baton was built without CUDA");
#endif
}

}  // namespace baton::ops
