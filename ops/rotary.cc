#include "baton/ops/rotary.h"

#include <cmath>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

Status Check(const char* op, const RotaryShape& s, const void* x) {
  BATON_RETURN_IF_ERROR(CheckPositive(op, {{"batch", s.batch},
                                           {"seq", s.seq},
                                           {"heads", s.heads},
                                           {"head_dim", s.head_dim}}));
  if (s.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op, ": head_dim must be even, got ", s.head_dim));
  }
  if (!(s.theta > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": theta must be positive"));
  }
  BATON_RETURN_IF_ERROR(CheckFloatType(op, "dtype", s.dtype));
  return CheckNotNull(op, {{"x", x}});
}

// cos and sin (as float) of the angle of every (position p < seq, pair
// i < half) for one (seq, head_dim, theta, sign), computed in float64 as
// the plain loop computes them: a = sign * p * theta^(-2i / head_dim).
struct AngleTable {
  int64_t seq = 0, head_dim = 0;
  double theta = 0, sign = 0;
  std::vector<float> cos, sin;  // [p * half + i]
};

// The table for a shape, kept for the next calls (every layer's forward and
// backward rotate with the same one): the last kKeep tables, up to
// kMaxCachedEntries angles each; bigger ones are computed per call.
std::shared_ptr<const AngleTable> Angles(int64_t seq, int64_t head_dim, double theta,
                                         double sign) {
  constexpr size_t kKeep = 8;
  constexpr int64_t kMaxCachedEntries = int64_t{1} << 22;
  static std::mutex mu;
  static std::vector<std::shared_ptr<const AngleTable>>* cache =
      new std::vector<std::shared_ptr<const AngleTable>>();  // never destroyed
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& t : *cache) {
      if (t->seq == seq && t->head_dim == head_dim && t->theta == theta && t->sign == sign) {
        return t;
      }
    }
  }
  auto table = std::make_shared<AngleTable>();
  table->seq = seq;
  table->head_dim = head_dim;
  table->theta = theta;
  table->sign = sign;
  const int64_t half = head_dim / 2;
  std::vector<double> inv(half);
  for (int64_t i = 0; i < half; ++i) {
    inv[i] = std::pow(theta, -2.0 * i / static_cast<double>(head_dim));
  }
  table->cos.resize(seq * half);
  table->sin.resize(seq * half);
  for (int64_t p = 0; p < seq; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double a = sign * static_cast<double>(p) * inv[i];
      table->cos[p * half + i] = static_cast<float>(std::cos(a));
      table->sin[p * half + i] = static_cast<float>(std::sin(a));
    }
  }
  if (seq * half <= kMaxCachedEntries) {
    std::lock_guard<std::mutex> lock(mu);
    if (cache->size() == kKeep) cache->erase(cache->begin());
    cache->push_back(table);
  }
  return table;
}

// Head rows widened to float (AVX2 when the CPU has it, ops/host_convert.h),
// rotated with the table's cos and sin, narrowed back: per element the
// operations of the plain loop, so the results are bit-identical to it.
void RotateCpu(const RotaryShape& s, void* x, double sign) {
  const int64_t half = s.head_dim / 2;
  const std::shared_ptr<const AngleTable> table = Angles(s.seq, s.head_dim, s.theta, sign);
  std::vector<float> in(s.head_dim), out(s.head_dim);
  for (int64_t t = 0; t < s.batch * s.seq; ++t) {
    const float* c = table->cos.data() + (t % s.seq) * half;
    const float* sn = table->sin.data() + (t % s.seq) * half;
    for (int64_t h = 0; h < s.heads; ++h) {
      void* row = ElementAt(x, s.dtype, (t * s.heads + h) * s.head_dim);
      WidenRow(row, s.dtype, s.head_dim, in.data());
      const float* x1 = in.data();
      const float* x2 = in.data() + half;
      for (int64_t i = 0; i < half; ++i) {
        out[i] = x1[i] * c[i] - x2[i] * sn[i];
        out[i + half] = x2[i] * c[i] + x1[i] * sn[i];
      }
      NarrowRow(out.data(), s.head_dim, s.dtype, row);
    }
  }
}

Status Rotate(const char* op, Stream& stream, const RotaryShape& s, void* x,
              double sign) {
  BATON_RETURN_IF_ERROR(Check(op, s, x));
  return OnStream(
      stream, op,
      [=]() {
        RotateCpu(s, x, sign);
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchRotary(x, s.batch * s.seq, s.seq, s.heads,
                                          s.head_dim, s.theta, sign,
                                          static_cast<int>(s.dtype), st);
      }));
}

}  // namespace

Status RotaryForward(Stream& stream, const RotaryShape& s, void* x) {
  return Rotate("RotaryForward", stream, s, x, 1.0);
}

Status RotaryBackward(Stream& stream, const RotaryShape& s, void* dx) {
  return Rotate("RotaryBackward", stream, s, dx, -1.0);
}

}  // namespace baton::ops
