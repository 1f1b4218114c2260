#include "baton/comm/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace baton {

const char* ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kAvg: return "avg";
    case ReduceOp::kMax: return "max";
  }
  return "?";
}

StatusOr<ReduceOp> ParseReduceOp(absl::string_view name) {
  const std::string n = absl::AsciiStrToLower(name);
  if (n == "sum") return ReduceOp::kSum;
  if (n == "avg") return ReduceOp::kAvg;
  if (n == "max") return ReduceOp::kMax;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown reduction '", name, "' (sum, avg, max)"));
}



void DivideInPlace(void* x, DataType t, size_t count, int divisor) {
  if (divisor == 1) return;
  switch (t) {
    case DataType::kF32: {
      auto* p = static_cast<float*>(x);
      const float d = static_cast<float>(divisor);
      for (size_t i = 0; i < count; ++i) p[i] /= d;
      return;
    }
    case DataType::kI32: {
      auto* p = static_cast<int32_t*>(x);
      for (size_t i = 0; i < count; ++i) p[i] /= divisor;
      return;
    }
    case DataType::kBF16:
    case DataType::kF16: {
      auto* p = static_cast<uint16_t*>(x);
      const float d = static_cast<float>(divisor);
      const bool bf = t == DataType::kBF16;
      for (size_t i = 0; i < count; ++i) {
        const float v = (bf ? Bf16ToFloat(p[i]) : F16ToFloat(p[i])) / d;
        p[i] = bf ? FloatToBf16(v) : FloatToF16(v);
      }
      return;
    }
  }
}

namespace {

// Whether [a, a + bytes) and [b, b + bytes) share a byte.
bool Overlaps(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

// Large fp32 reductions run as one fused pass (sum the sources, divide,
// store) instead of the general path's copy-through-a-buffer. When `out`
// overlaps no source, the stores are non-temporal: an ordinary store would
// first read each destination line (read-for-ownership), a third more
// memory traffic for two sources. In place, `out` is one of the sources and
// its lines are already in the cache, so ordinary stores are used. Same
// additions in the same order as the general path: bit-identical results.
// Returns false when it does not apply (small or unaligned).
bool FusedSumF32(void* out, const void* const* srcs, int nsrc, size_t count,
                 int divisor) {
#if defined(__SSE2__)
  constexpr size_t kMinBytes = size_t{1} << 20;
  const size_t bytes = count * sizeof(float);
  if (bytes < kMinBytes || reinterpret_cast<uintptr_t>(out) % 16 != 0) {
    return false;
  }
  bool overlaps = false;
  for (int q = 0; q < nsrc; ++q) overlaps = overlaps || Overlaps(out, srcs[q], bytes);
  auto* o = static_cast<float*>(out);
  auto in = [srcs](int q) { return static_cast<const float*>(srcs[q]); };
  const __m128 d = _mm_set1_ps(static_cast<float>(divisor));
  size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    __m128 a = _mm_loadu_ps(in(0) + i), b = _mm_loadu_ps(in(0) + i + 4);
    for (int q = 1; q < nsrc; ++q) {
      a = _mm_add_ps(a, _mm_loadu_ps(in(q) + i));
      b = _mm_add_ps(b, _mm_loadu_ps(in(q) + i + 4));
    }
    if (divisor != 1) {
      a = _mm_div_ps(a, d);
      b = _mm_div_ps(b, d);
    }
    if (overlaps) {
      _mm_store_ps(o + i, a);
      _mm_store_ps(o + i + 4, b);
    } else {
      _mm_stream_ps(o + i, a);
      _mm_stream_ps(o + i + 4, b);
    }
  }
  for (; i < count; ++i) {
    float s = in(0)[i];
    for (int q = 1; q < nsrc; ++q) s += in(q)[i];
    o[i] = divisor != 1 ? s / static_cast<float>(divisor) : s;
  }
  if (!overlaps) _mm_sfence();  // streamed stores visible before "done"
  return true;
#else
  return false;
#endif
}

}  // namespace

void CopyBytes(void* dst, const void* src, size_t bytes) {
#if defined(__SSE2__)
  if (bytes >= (size_t{1} << 20) && !Overlaps(dst, src, bytes)) {
    // Align the destination to 16 bytes, stream 64-byte blocks, then the tail.
    const size_t head = (16 - reinterpret_cast<uintptr_t>(dst) % 16) % 16;
    std::memcpy(dst, src, head);
    auto* o = reinterpret_cast<__m128i*>(static_cast<char*>(dst) + head);
    auto* in = reinterpret_cast<const __m128i*>(static_cast<const char*>(src) + head);
    const size_t blocks = (bytes - head) / 64;
    for (size_t k = 0; k < blocks * 4; k += 4) {
      const __m128i a = _mm_loadu_si128(in + k), b = _mm_loadu_si128(in + k + 1);
      const __m128i c = _mm_loadu_si128(in + k + 2), e = _mm_loadu_si128(in + k + 3);
      _mm_stream_si128(o + k, a);
      _mm_stream_si128(o + k + 1, b);
      _mm_stream_si128(o + k + 2, c);
      _mm_stream_si128(o + k + 3, e);
    }
    const size_t done = head + blocks * 64;
    std::memcpy(static_cast<char*>(dst) + done, static_cast<const char*>(src) + done,
                bytes - done);
    _mm_sfence();  // streamed stores visible before the copy reports done
    return;
  }
#endif
  if (bytes != 0) std::memmove(dst, src, bytes);
}

void ReduceSources(void* out, const void* const* srcs, int nsrc, size_t count,
                   DataType t, bool accumulate_fp32, int divisor) {
  if (t == DataType::kF32 && FusedSumF32(out, srcs, nsrc, count, divisor)) {
    return;
  }
  constexpr size_t kPiece = 8192;
  alignas(64) float acc[kPiece];  // also holds int32 or 16-bit values
  const size_t esize = DataTypeSize(t);
  const bool wide = accumulate_fp32 && esize == 2;
  for (size_t begin = 0; begin < count; begin += kPiece) {
    const size_t n = std::min(kPiece, count - begin);
    const size_t off = begin * esize;
    auto src = [&](int q) { return static_cast<const char*>(srcs[q]) + off; };
    if (wide) {
      WidenToF32(acc, src(0), t, n);
      for (int q = 1; q < nsrc; ++q) AccumulateF32(acc, src(q), t, n);
      if (divisor != 1) DivideInPlace(acc, DataType::kF32, n, divisor);
      NarrowFromF32(static_cast<char*>(out) + off, acc, t, n);
    } else {
      std::memcpy(acc, src(0), n * esize);
      for (int q = 1; q < nsrc; ++q) AddInto(acc, acc, src(q), t, n);
      DivideInPlace(acc, t, n, divisor);
      std::memcpy(static_cast<char*>(out) + off, acc, n * esize);
    }
  }
}

namespace {

template <typename T>
T MaxOf(T a, T b) {
  if (a != a) return a;  // NaN propagates
  if (b != b) return b;
  return a < b ? b : a;
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float)>
void Max16(uint16_t* out, const uint16_t* a, const uint16_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Store(MaxOf(Load(a[i]), Load(b[i])));
}

}  // namespace

void MaxInto(void* dst, const void* a, const void* b, DataType t, size_t count) {
  switch (t) {
    case DataType::kF32:
      for (size_t i = 0; i < count; ++i) {
        static_cast<float*>(dst)[i] =
            MaxOf(static_cast<const float*>(a)[i], static_cast<const float*>(b)[i]);
      }
      return;
    case DataType::kI32:
      for (size_t i = 0; i < count; ++i) {
        static_cast<int32_t*>(dst)[i] =
            MaxOf(static_cast<const int32_t*>(a)[i], static_cast<const int32_t*>(b)[i]);
      }
      return;
    case DataType::kBF16:
      Max16<Bf16ToFloat, FloatToBf16>(static_cast<uint16_t*>(dst),
                                      static_cast<const uint16_t*>(a),
                                      static_cast<const uint16_t*>(b), count);
      return;
    case DataType::kF16:
      Max16<F16ToFloat, FloatToF16>(static_cast<uint16_t*>(dst),
                                    static_cast<const uint16_t*>(a),
                                    static_cast<const uint16_t*>(b), count);
      return;
  }
}

void MaxSources(void* out, const void* const* srcs, int nsrc, size_t count, DataType t) {
  constexpr size_t kPiece = 8192;
  alignas(64) float acc[kPiece];  // also holds int32 or 16-bit values
  const size_t esize = DataTypeSize(t);
  for (size_t begin = 0; begin < count; begin += kPiece) {
    const size_t n = std::min(kPiece, count - begin);
    const size_t off = begin * esize;
    std::memcpy(acc, static_cast<const char*>(srcs[0]) + off, n * esize);
    for (int q = 1; q < nsrc; ++q) {
      MaxInto(acc, acc, static_cast<const char*>(srcs[q]) + off, t, n);
    }
    std::memcpy(static_cast<char*>(out) + off, acc, n * esize);
  }
}

}  // namespace baton
