#include "baton/ops/host_adamw.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define BATON_HOST_X86 1
#endif

namespace baton::ops {
namespace {

// Elements per task: whole cache lines of every array, large enough that a
// task costs far more than claiming it.
constexpr int64_t kChunk = 1 << 14;

// The per-call constants, each computed as AdamWStep computes it.
struct Consts {
  float scale, beta1, one_minus_beta1, beta2, one_minus_beta2, decay, lr,
      bc1, bc2, eps;
};

Consts MakeConsts(const AdamWConfig& c, const AdamWArgs& a) {
  Consts k;
  k.scale = a.grad_scale;
  k.beta1 = c.beta1;
  k.one_minus_beta1 = 1.0f - c.beta1;
  k.beta2 = c.beta2;
  k.one_minus_beta2 = 1.0f - c.beta2;
  k.decay = 1.0f - c.lr * c.weight_decay;
  k.lr = c.lr;
  k.bc1 = 1.0f - static_cast<float>(std::pow(c.beta1, a.step));
  k.bc2 = 1.0f - static_cast<float>(std::pow(c.beta2, a.step));
  k.eps = c.eps;
  return k;
}

enum class P { kNone, kF32, kBF16 };  // the param output

// One element, in AdamWStep's order of operations.
template <bool kBf16Grad, P kParam>
inline void Element(const Consts& k, int64_t i, const void* grad,
                    float* master, float* m1, float* m2, void* param) {
  const float raw = kBf16Grad ? Bf16ToFloat(static_cast<const uint16_t*>(grad)[i])
                              : static_cast<const float*>(grad)[i];
  const float g = raw * k.scale;
  const float m = k.beta1 * m1[i] + k.one_minus_beta1 * g;
  const float v = k.beta2 * m2[i] + k.one_minus_beta2 * g * g;
  m1[i] = m;
  m2[i] = v;
  const float p = master[i] * k.decay - k.lr * (m / k.bc1) / (std::sqrt(v / k.bc2) + k.eps);
  master[i] = p;
  if constexpr (kParam == P::kF32) static_cast<float*>(param)[i] = p;
  if constexpr (kParam == P::kBF16) static_cast<uint16_t*>(param)[i] = FloatToBf16(p);
}

template <bool kBf16Grad, P kParam>
void RangePortable(const Consts& k, int64_t begin, int64_t end,
                   const AdamWArgs& a) {
  for (int64_t i = begin; i < end; ++i) {
    Element<kBf16Grad, kParam>(k, i, a.grad, a.master, a.moment1, a.moment2, a.param);
  }
}

#ifdef BATON_HOST_X86
bool CpuHasAvx2() { return __builtin_cpu_supports("avx2"); }

// AVX2 only (no FMA target): every multiply and add stays a separate,
// correctly rounded operation, as in the scalar code.
__attribute__((target("avx2"))) inline __m128i PackBf16(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(0x7f800000));
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  __m256i r = _mm256_add_epi32(bits, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
  r = _mm256_srli_epi32(r, 16);
  r = _mm256_blendv_epi8(r, _mm256_set1_epi32(0x7fc0), nan);
  return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}

template <bool kBf16Grad, P kParam>
__attribute__((target("avx2"))) void RangeAvx2(const Consts& k, int64_t begin,
                                               int64_t end, const AdamWArgs& a) {
  const __m256 scale = _mm256_set1_ps(k.scale), beta1 = _mm256_set1_ps(k.beta1),
               omb1 = _mm256_set1_ps(k.one_minus_beta1), beta2 = _mm256_set1_ps(k.beta2),
               omb2 = _mm256_set1_ps(k.one_minus_beta2), decay = _mm256_set1_ps(k.decay),
               lr = _mm256_set1_ps(k.lr), bc1 = _mm256_set1_ps(k.bc1),
               bc2 = _mm256_set1_ps(k.bc2), eps = _mm256_set1_ps(k.eps);
  float* __restrict__ master = a.master;
  float* __restrict__ m1 = a.moment1;
  float* __restrict__ m2 = a.moment2;
  int64_t i = begin;
  for (; i + 8 <= end; i += 8) {
    __m256 raw;
    if constexpr (kBf16Grad) {
      const __m128i h = _mm_loadu_si128(
          reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(a.grad) + i));
      raw = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    } else {
      raw = _mm256_loadu_ps(static_cast<const float*>(a.grad) + i);
    }
    const __m256 g = _mm256_mul_ps(raw, scale);
    const __m256 m = _mm256_add_ps(_mm256_mul_ps(beta1, _mm256_loadu_ps(m1 + i)),
                                   _mm256_mul_ps(omb1, g));
    const __m256 v = _mm256_add_ps(_mm256_mul_ps(beta2, _mm256_loadu_ps(m2 + i)),
                                   _mm256_mul_ps(_mm256_mul_ps(omb2, g), g));
    _mm256_storeu_ps(m1 + i, m);
    _mm256_storeu_ps(m2 + i, v);
    const __m256 step = _mm256_div_ps(
        _mm256_mul_ps(lr, _mm256_div_ps(m, bc1)),
        _mm256_add_ps(_mm256_sqrt_ps(_mm256_div_ps(v, bc2)), eps));
    const __m256 p = _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(master + i), decay), step);
    _mm256_storeu_ps(master + i, p);
    if constexpr (kParam == P::kF32) _mm256_storeu_ps(static_cast<float*>(a.param) + i, p);
    if constexpr (kParam == P::kBF16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(static_cast<uint16_t*>(a.param) + i),
                       PackBf16(p));
    }
  }
  for (; i < end; ++i) {
    Element<kBf16Grad, kParam>(k, i, a.grad, a.master, a.moment1, a.moment2, a.param);
  }
}
#else
bool CpuHasAvx2() { return false; }
#endif

using RangeFn = void (*)(const Consts&, int64_t, int64_t, const AdamWArgs&);

template <bool kBf16Grad, P kParam>
RangeFn Pick(bool avx2) {
#ifdef BATON_HOST_X86
  if (avx2) return &RangeAvx2<kBf16Grad, kParam>;
#endif
  return &RangePortable<kBf16Grad, kParam>;
}

RangeFn PickRange(const AdamWArgs& a, bool avx2) {
  const bool bf16 = a.grad_dtype == DataType::kBF16;
  const P p = a.param == nullptr ? P::kNone
              : a.param_dtype == DataType::kBF16 ? P::kBF16 : P::kF32;
  switch (p) {
    case P::kNone:
      return bf16 ? Pick<true, P::kNone>(avx2) : Pick<false, P::kNone>(avx2);
    case P::kF32:
      return bf16 ? Pick<true, P::kF32>(avx2) : Pick<false, P::kF32>(avx2);
    case P::kBF16:
      return bf16 ? Pick<true, P::kBF16>(avx2) : Pick<false, P::kBF16>(avx2);
  }
  return nullptr;
}

// Runs fn with subnormals flushed (FTZ/DAZ), as ops/op_util.h's OnStream
// runs AdamWStep's CPU code.
template <typename Fn>
void Flushed(Fn&& fn) {
#ifdef BATON_HOST_X86
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040);
  fn();
  _mm_setcsr(saved);
#else
  fn();
#endif
}

}  // namespace

const char* HostSimdName() { return CpuHasAvx2() ? "avx2" : "portable"; }

namespace {

struct Skip {
  const uint8_t* column = nullptr;  // null: skip nothing
  int64_t first = 0, cols = 1;
};

Status Run(const char* op, const AdamWConfig& config, const AdamWArgs& args,
           const Skip& skip, HostPool* pool, HostSimd simd) {
  BATON_RETURN_IF_ERROR(CheckAdamWArgs(op, config, args));
  if (simd == HostSimd::kAvx2 && !CpuHasAvx2()) {
    return absl::FailedPreconditionError(
        absl::StrCat(op, ": AVX2 asked for, but this CPU lacks it"));
  }
  if (args.n == 0) return absl::OkStatus();
  const bool avx2 = simd != HostSimd::kPortable && CpuHasAvx2();
  const RangeFn range = PickRange(args, avx2);
  const Consts k = MakeConsts(config, args);
  const int64_t tasks = (args.n + kChunk - 1) / kChunk;
  auto task = [&](int64_t t) {
    const int64_t begin = t * kChunk;
    const int64_t end = begin + kChunk < args.n ? begin + kChunk : args.n;
    Flushed([&] {
      if (skip.column == nullptr) {
        range(k, begin, end, args);
        return;
      }
      // Maximal runs of elements whose column is not skipped.
      int64_t col = (skip.first + begin) % skip.cols;
      int64_t i = begin;
      while (i < end) {
        if (skip.column[col]) {
          ++i;
          if (++col == skip.cols) col = 0;
          continue;
        }
        int64_t j = i;
        while (j < end && !skip.column[col]) {
          ++j;
          if (++col == skip.cols) col = 0;
        }
        range(k, i, j, args);
        i = j;
      }
    });
  };
  if (pool == nullptr) {
    for (int64_t t = 0; t < tasks; ++t) task(t);
  } else {
    pool->ParallelFor(tasks, task);
  }
  return absl::OkStatus();
}

}  // namespace

Status HostAdamW(const AdamWConfig& config, const AdamWArgs& args,
                 HostPool* pool, HostSimd simd) {
  return Run("HostAdamW", config, args, Skip{}, pool, simd);
}

Status HostAdamWSkipping(const AdamWConfig& config, const AdamWArgs& args,
                         const uint8_t* skip_column, int64_t first,
                         int64_t cols, HostPool* pool, HostSimd simd) {
  constexpr const char* kOp = "HostAdamWSkipping";
  if (cols < 1 || first < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOp, ": need cols >= 1 and first >= 0, got ", cols, " and ", first));
  }
  if (skip_column == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(kOp, ": skip_column is null"));
  }
  return Run(kOp, config, args, Skip{skip_column, first, cols}, pool, simd);
}

Status HostAdamWOnStream(Stream& stream, const AdamWConfig& config,
                         const AdamWArgs& args, HostPool* pool) {
  BATON_RETURN_IF_ERROR(CheckAdamWArgs("HostAdamW", config, args));
  return stream.Enqueue([config, args, pool]() { return HostAdamW(config, args, pool); });
}

}  // namespace baton::ops
