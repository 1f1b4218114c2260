#include "baton/ops/nf4.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "baton/ops/adamw8bit.h"
#include "baton/ops/op_util.h"

#ifdef BATON_HAVE_CUDA
#include "baton/ops/kernels.h"
#endif

namespace baton::ops {
namespace {

constexpr const char* kPackOp = "Nf4Pack";
constexpr const char* kDequantOp = "Nf4Dequantize";

// The stored absmax of block b: code8[q_b] * scale of its group.
float BlockScale(const uint8_t* absmax, const float* scales, int64_t b) {
  return DynamicCode(false)[absmax[b]] * scales[b / kNf4Group];
}

// Group g of a packing: its blocks' absmax bytes, its scale and its codes.
void PackGroup(const float* x, int64_t n, int64_t g, uint8_t* codes, uint8_t* absmax,
               float* scales) {
  const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
  const int64_t b0 = g * kNf4Group, b1 = std::min(blocks, b0 + kNf4Group);
  float block_max[kNf4Group];
  float scale = 0.0f;
  for (int64_t b = b0; b < b1; ++b) {
    float m = 0.0f;
    for (int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
      m = std::max(m, std::fabs(x[i]));
    }
    block_max[b - b0] = m;
    scale = std::max(scale, m);
  }
  scales[g] = scale;
  const std::array<float, 256>& code8 = DynamicCode(false);
  const uint8_t zero8 = NearestCode(code8, 0.0f), zero4 = Nf4Nearest(0.0f);
  for (int64_t b = b0; b < b1; ++b) {
    absmax[b] = scale > 0.0f ? NearestCode(code8, block_max[b - b0] / scale) : zero8;
    const float a = code8[absmax[b]] * scale;
    for (int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
      const uint8_t c = a > 0.0f ? Nf4Nearest(x[i] / a) : zero4;
      uint8_t& byte = codes[i / 2];
      byte = (i % 2 == 0) ? static_cast<uint8_t>((byte & 0xF0) | c)
                          : static_cast<uint8_t>((byte & 0x0F) | (c << 4));
    }
  }
}

Status CheckPack(const float* values, int64_t n, const void* packed) {
  if (n < 0) return absl::InvalidArgumentError("Nf4Pack: n must not be negative");
  if (n == 0) return absl::OkStatus();
  return CheckNotNull(kPackOp, {{"values", values}, {"packed", packed}});
}

}  // namespace

const std::array<float, 16>& Nf4Code() {
  // QLoRA's values as bitsandbytes lists them, rounded to float once.
  static const std::array<float, 16> kCode = {
      -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
      -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
      0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f,
      0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
      0.7229568362236023f, 1.0f};
  return kCode;
}

Nf4Layout Nf4LayoutFor(int64_t n) {
  Nf4Layout l;
  l.absmax = (n + 1) / 2;
  const int64_t blocks = (n + kNf4Block - 1) / kNf4Block;
  l.scales = (l.absmax + blocks + 3) / 4 * 4;
  l.bytes = l.scales + 4 * ((blocks + kNf4Group - 1) / kNf4Group);
  return l;
}

uint8_t Nf4Nearest(float x) {
  const std::array<float, 16>& c = Nf4Code();
  uint8_t q = 0;
  for (int i = 0; i < 15; ++i) q += (0.5f * (c[i] + c[i + 1]) < x) ? 1 : 0;
  return q;
}

Status Nf4PackHost(const float* values, int64_t n, void* packed) {
  BATON_RETURN_IF_ERROR(CheckPack(values, n, packed));
  if (n == 0) return absl::OkStatus();  // no bytes (and maybe null pointers)
  const Nf4Layout l = Nf4LayoutFor(n);
  auto* base = static_cast<uint8_t*>(packed);
  std::memset(base, 0, l.bytes);  // the odd nibble and the alignment pad
  const int64_t groups = (n + kNf4Block * kNf4Group - 1) / (kNf4Block * kNf4Group);
  auto* scales = reinterpret_cast<float*>(base + l.scales);
  for (int64_t g = 0; g < groups; ++g) PackGroup(values, n, g, base, base + l.absmax, scales);
  return absl::OkStatus();
}

Status Nf4Pack(Stream& stream, const float* values, int64_t n, void* packed) {
  BATON_RETURN_IF_ERROR(CheckPack(values, n, packed));
  if (n == 0) return absl::OkStatus();
  return OnStream(
      stream, kPackOp, [=]() { return Nf4PackHost(values, n, packed); },
      BATON_OPS_CUDA([=](void* st) {
        const Nf4Layout l = Nf4LayoutFor(n);
        return ops_internal::LaunchNf4Pack(values, n, packed, l.absmax, l.scales, l.bytes,
                                           Nf4Code().data(), DynamicCode(false).data(), st);
      }));
}

Status Nf4Dequantize(Stream& stream, const void* packed, int64_t n, void* out,
                     DataType out_dtype) {
  if (n < 0) return absl::InvalidArgumentError("Nf4Dequantize: n must not be negative");
  BATON_RETURN_IF_ERROR(CheckFloatType(kDequantOp, "out dtype", out_dtype));
  if (n == 0) return absl::OkStatus();
  BATON_RETURN_IF_ERROR(CheckNotNull(kDequantOp, {{"packed", packed}, {"out", out}}));
  const Nf4Layout l = Nf4LayoutFor(n);
  return OnStream(
      stream, kDequantOp,
      [=]() {
        const auto* base = static_cast<const uint8_t*>(packed);
        const auto* scales = reinterpret_cast<const float*>(base + l.scales);
        const std::array<float, 16>& c4 = Nf4Code();
        for (int64_t b = 0; b * kNf4Block < n; ++b) {
          const float a = BlockScale(base + l.absmax, scales, b);
          for (int64_t i = b * kNf4Block; i < std::min(n, (b + 1) * kNf4Block); ++i) {
            const uint8_t byte = base[i / 2];
            StoreF(out, out_dtype, i, c4[i % 2 == 0 ? byte & 0xF : byte >> 4] * a);
          }
        }
        return absl::OkStatus();
      },
      BATON_OPS_CUDA([=](void* st) {
        return ops_internal::LaunchNf4Dequantize(packed, n, l.absmax, l.scales, out,
                                                 static_cast<int>(out_dtype), Nf4Code().data(),
                                                 DynamicCode(false).data(), st);
      }));
}

}  // namespace baton::ops
