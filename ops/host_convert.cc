#include "baton/ops/host_convert.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BATON_CONVERT_X86 1
#endif

namespace baton::ops {
namespace {

void WidenBf16Scalar(const uint16_t* p, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = Bf16BitsToFloat(p[i]);
}

void NarrowBf16Scalar(const float* in, int64_t n, uint16_t* p) {
  for (int64_t i = 0; i < n; ++i) p[i] = FloatToBf16Bits(in[i]);
}

#ifdef BATON_CONVERT_X86
bool DetectAvx2() { return __builtin_cpu_supports("avx2"); }

__attribute__((target("avx2"))) void WidenBf16Avx2(const uint16_t* p, int64_t n,
                                                   float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    _mm256_storeu_ps(out + i,
                     _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)));
  }
  WidenBf16Scalar(p + i, n - i, out + i);
}

// FloatToBf16Bits on 8 lanes: NaN lanes become 0x7fc0, the others add
// 0x7fff + (bit 16) and keep the top half.
__attribute__((target("avx2"))) void NarrowBf16Avx2(const float* in, int64_t n,
                                                    uint16_t* p) {
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000),
                one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff),
                qnan = _mm256_set1_epi32(0x7fc0);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_castps_si256(_mm256_loadu_ps(in + i));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, abs_mask), inf);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), one);
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(bias, lsb)), 16);
    r = _mm256_blendv_epi8(r, qnan, nan);
    // r's lanes are < 0x10000: packus keeps them; it packs per 128-bit half.
    const __m128i packed =
        _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + i), packed);
  }
  NarrowBf16Scalar(in + i, n - i, p + i);
}
#else
bool DetectAvx2() { return false; }
#endif

bool Avx2() {
  static const bool avx2 = DetectAvx2();
  return avx2;
}

}  // namespace

bool HostConvertUsesAvx2() { return Avx2(); }

void WidenRow(const void* p, DataType t, int64_t n, float* out) {
  if (n <= 0) return;
  if (t != DataType::kBF16) {
    std::memcpy(out, p, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const auto* h = static_cast<const uint16_t*>(p);
#ifdef BATON_CONVERT_X86
  if (Avx2()) return WidenBf16Avx2(h, n, out);
#endif
  WidenBf16Scalar(h, n, out);
}

void NarrowRow(const float* in, int64_t n, DataType t, void* p) {
  if (n <= 0) return;
  if (t != DataType::kBF16) {
    std::memcpy(p, in, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  auto* h = static_cast<uint16_t*>(p);
#ifdef BATON_CONVERT_X86
  if (Avx2()) return NarrowBf16Avx2(in, n, h);
#endif
  NarrowBf16Scalar(in, n, h);
}

}  // namespace baton::ops
