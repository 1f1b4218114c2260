#include "baton/ops/adamw8bit.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

// The positive values of the dynamic code: for decade e = 6..0 (value
// scale 10^-e), `2^(6 - e) * per_decade0` midpoints of equal bins of
// [0.1, 1], computed in double and rounded once.
std::vector<double> PositiveValues(int first_decade_values) {
  std::vector<double> out;
  for (int e = 6; e >= 0; --e) {
    const int items = first_decade_values << (6 - e);
    const double scale = std::pow(10.0, -e);
    for (int j = 0; j < items; ++j) {
      out.push_back(scale * (0.1 + 0.9 * (j + 0.5) / items));
    }
  }
  return out;
}

std::array<float, 256> MakeCode(bool is_signed) {
  std::vector<double> v = PositiveValues(is_signed ? 1 : 2);  // 127 or 254
  if (is_signed) {
    const size_t n = v.size();
    for (size_t i = 0; i < n; ++i) v.push_back(-v[i]);
  }
  v.push_back(0.0);
  v.push_back(1.0);
  std::sort(v.begin(), v.end());
  std::array<float, 256> code{};
  for (size_t i = 0; i < code.size(); ++i) code[i] = static_cast<float>(v[i]);
  return code;
}

struct Consts {
  float scale, beta1, omb1, beta2, omb2, decay, lr, bc1, bc2, eps;
};

// One block [begin, end) on the host, in the order ops/adamw8bit.h states.
void Block(const Consts& k, const AdamW8bitArgs& a, const std::array<float, 256>& c1,
           const std::array<float, 256>& c2, int64_t block, float* m_tmp, float* v_tmp) {
  const int64_t begin = block * kAdamW8bitBlock;
  const int64_t end = std::min(a.n, begin + kAdamW8bitBlock);
  const float a1 = a.absmax1[block], a2 = a.absmax2[block];
  float max1 = 0.0f, max2 = 0.0f;
  for (int64_t i = begin; i < end; ++i) {
    const float g = LoadF(a.grad, a.grad_dtype, i) * k.scale;
    const float m = k.beta1 * (c1[a.moment1[i]] * a1) + k.omb1 * g;
    const float v = k.beta2 * (c2[a.moment2[i]] * a2) + k.omb2 * g * g;
    const float p = a.master[i] * k.decay - k.lr * (m / k.bc1) / (std::sqrt(v / k.bc2) + k.eps);
    a.master[i] = p;
    if (a.param != nullptr) StoreF(a.param, a.param_dtype, i, p);
    m_tmp[i - begin] = m;
    v_tmp[i - begin] = v;
    max1 = std::max(max1, std::fabs(m));
    max2 = std::max(max2, v);
  }
  a.absmax1[block] = max1;
  a.absmax2[block] = max2;
  const uint8_t zero1 = NearestCode(c1, 0.0f), zero2 = NearestCode(c2, 0.0f);
  for (int64_t i = begin; i < end; ++i) {
    a.moment1[i] = max1 > 0.0f ? NearestCode(c1, m_tmp[i - begin] / max1) : zero1;
    a.moment2[i] = max2 > 0.0f ? NearestCode(c2, v_tmp[i - begin] / max2) : zero2;
  }
}

}  // namespace

const std::array<float, 256>& DynamicCode(bool is_signed) {
  static const auto* const kSigned = new std::array<float, 256>(MakeCode(true));
  static const auto* const kUnsigned = new std::array<float, 256>(MakeCode(false));
  return is_signed ? *kSigned : *kUnsigned;
}

uint8_t NearestCode(const std::array<float, 256>& code, float x) {
  int lo = 0, hi = 255;  // count of midpoints below x, in [0, 255]
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (0.5f * (code[mid] + code[mid + 1]) < x) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return static_cast<uint8_t>(lo);
}

Status AdamW8bitStep(Stream& stream, const AdamWConfig& c, const AdamW8bitArgs& a) {
  constexpr const char* kOp = "AdamW8bitStep";
  // The shared checks (config, n, step, grad and param dtypes); the
  // moments are checked here.
  AdamWArgs plain;
  plain.n = a.n;
  plain.step = a.step;
  plain.master = a.master;
  plain.grad = a.grad;
  plain.grad_dtype = a.grad_dtype;
  float dummy = 0;
  plain.moment1 = plain.moment2 = &dummy;
  plain.param = a.param;
  plain.param_dtype = a.param_dtype;
  BATON_RETURN_IF_ERROR(CheckAdamWArgs(kOp, c, plain));
  if (a.n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kOp, {{"moment1", a.moment1},
                                           {"moment2", a.moment2},
                                           {"absmax1", a.absmax1},
                                           {"absmax2", a.absmax2}}));
  Consts k;
  k.scale = a.grad_scale;
  k.beta1 = c.beta1;
  k.omb1 = 1.0f - c.beta1;
  k.beta2 = c.beta2;
  k.omb2 = 1.0f - c.beta2;
  k.decay = 1.0f - c.lr * c.weight_decay;
  k.lr = c.lr;
  k.bc1 = 1.0f - static_cast<float>(std::pow(c.beta1, a.step));
  k.bc2 = 1.0f - static_cast<float>(std::pow(c.beta2, a.step));
  k.eps = c.eps;
  const std::array<float, 256>& c1 = DynamicCode(true);
  const std::array<float, 256>& c2 = DynamicCode(false);
  return OnStream(
      stream, kOp,
      [=]() {
        std::vector<float> m_tmp(kAdamW8bitBlock), v_tmp(kAdamW8bitBlock);
        for (int64_t b = 0; b < AdamW8bitBlocks(a.n); ++b) {
          Block(k, a, c1, c2, b, m_tmp.data(), v_tmp.data());
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=, &c1, &c2](void* st) {
        ops_internal::AdamW8bitHyper h{k.scale, k.beta1, k.omb1, k.beta2, k.omb2,
                                       k.decay,  k.lr,    k.bc1,  k.bc2,   k.eps};
        return ops_internal::LaunchAdamW8bit(
            a.master, a.grad, static_cast<int>(a.grad_dtype), a.moment1, a.moment2,
            a.absmax1, a.absmax2, a.param, a.param == nullptr ? -1 : static_cast<int>(a.param_dtype),
            a.n, h, c1.data(), c2.data(), st);
      }));
}

}  // namespace baton::ops
