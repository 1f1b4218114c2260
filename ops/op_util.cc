#include "baton/ops/op_util.h"

#if defined(__SSE__)
#include <xmmintrin.h>
#endif

#include "absl/strings/str_cat.h"
#include "baton/runtime/stream_ops.h"

namespace baton::ops {

const float* AsFloats(const void* p, DataType t, int64_t n,
                      std::vector<float>& scratch) {
  if (t == DataType::kF32) return static_cast<const float*>(p);
  scratch.resize(n);
  for (int64_t i = 0; i < n; ++i) scratch[i] = LoadF(p, t, i);
  return scratch.data();
}

Status CheckFloatType(const char* op, const char* what, DataType t) {
  if (t == DataType::kF32 || t == DataType::kBF16) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      op, ": ", what, " must be float or bfloat16, got ", DataTypeName(t)));
}

Status CheckNotNull(
    const char* op,
    std::initializer_list<std::pair<const char*, const void*>> pointers) {
  for (const auto& [name, p] : pointers) {
    if (p == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(op, ": ", name, " is null"));
    }
  }
  return absl::OkStatus();
}

Status CheckPositive(
    const char* op, std::initializer_list<std::pair<const char*, int64_t>> sizes) {
  for (const auto& [name, v] : sizes) {
    if (v <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(op, ": ", name, " must be positive, got ", v));
    }
  }
  return absl::OkStatus();
}

Status OnStream(Stream& stream, const char* op, std::function<Status()> cpu,
                std::function<int(void*)> cuda) {
  // The dispatch is runtime's; the ops add FTZ/DAZ around their CPU code.
  return RunOnStream(
      stream, op,
      [cpu = std::move(cpu)]() {
#if defined(__SSE__)
        const unsigned int saved = _mm_getcsr();
        _mm_setcsr(saved | 0x8040);  // flush-to-zero (bit 15), denormals-are-zero (bit 6)
        Status s = cpu();
        _mm_setcsr(saved);
        return s;
#else
        return cpu();
#endif
      },
      std::move(cuda));
}

}  // namespace baton::ops
