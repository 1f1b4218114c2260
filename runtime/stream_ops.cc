#include "baton/runtime/stream_ops.h"

#include <utility>

#include "absl/strings/str_cat.h"
#ifdef BATON_HAVE_CUDA
#include <cuda_runtime.h>

#include "baton/runtime/stream_kernels.h"
#endif

namespace baton {
namespace {

Status CheckElementwise(const char* op, const void* dst, const void* src,
                        DataType t) {
  if (t != DataType::kF32 && t != DataType::kBF16 && t != DataType::kF16) {
    return absl::InvalidArgumentError(absl::StrCat(
        op, ": type must be float, bfloat16 or half, got ", DataTypeName(t)));
  }
  if (dst == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": dst is null"));
  if (src == nullptr) return absl::InvalidArgumentError(absl::StrCat(op, ": src is null"));
  return absl::OkStatus();
}

}  // namespace

Status RunOnStream(Stream& stream, const char* op, std::function<Status()> host,
                   std::function<int(void*)> cuda) {
  if (stream.kind() == DeviceKind::kHost) return stream.Enqueue(std::move(host));
  if (!cuda) {
    return absl::UnimplementedError(
        absl::StrCat(op, ": baton was built without CUDA"));
  }
  const int rc = cuda(stream.native_handle());
  if (rc == 0) return absl::OkStatus();
#ifdef BATON_HAVE_CUDA
  return absl::InternalError(absl::StrCat(
      op, ": CUDA error ", rc, " (",
      cudaGetErrorString(static_cast<cudaError_t>(rc)), ")"));
#else
  return absl::InternalError(absl::StrCat(op, ": CUDA error ", rc));
#endif
}

Status CastFromF32(Stream& stream, void* dst, const float* src, DataType t,
                   size_t count) {
  if (count == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckElementwise("CastFromF32", dst, src, t));
  std::function<int(void*)> cuda;
#ifdef BATON_HAVE_CUDA
  cuda = [=](void* s) {
    return runtime_internal::LaunchCastFromF32(dst, src, count,
                                               static_cast<int>(t), s);
  };
#endif
  return RunOnStream(
      stream, "CastFromF32",
      [=]() {
        NarrowFromF32(dst, src, t, count);
        return absl::OkStatus();
      },
      std::move(cuda));
}

Status AccumulateInto(Stream& stream, void* dst, const void* src, DataType t,
                      size_t count) {
  if (count == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckElementwise("AccumulateInto", dst, src, t));
  std::function<int(void*)> cuda;
#ifdef BATON_HAVE_CUDA
  cuda = [=](void* s) {
    return runtime_internal::LaunchAccumulate(dst, src, count,
                                              static_cast<int>(t), s);
  };
#endif
  return RunOnStream(
      stream, "AccumulateInto",
      [=]() {
        AddInto(dst, dst, src, t, count);
        return absl::OkStatus();
      },
      std::move(cuda));
}

}  // namespace baton
