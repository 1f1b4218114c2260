#include "baton/runtime/crc32c.h"

#include <array>
#include <cstring>

namespace baton {
namespace {

constexpr uint32_t kPoly = 0x82F63B78u;  // reflected Castagnoli

// Tables for slicing by 8: t[k][b] is the CRC of byte b followed by k zero
// bytes.
struct Tables {
  std::array<std::array<uint32_t, 256>, 8> t{};
  Tables() {
    for (uint32_t b = 0; b < 256; ++b) {
      uint32_t c = b;
      for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPoly : 0);
      t[0][b] = c;
    }
    for (int k = 1; k < 8; ++k) {
      for (int b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xFF];
    }
  }
};

const Tables& GetTables() {
  static const Tables* const tables = new Tables();
  return *tables;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t ExtendSse42(uint32_t crc, const uint8_t* p,
                                                       size_t n) {
  uint64_t c = ~crc;
  while (n > 0 && (reinterpret_cast<uintptr_t>(p) & 7) != 0) {
    c = __builtin_ia32_crc32qi(static_cast<uint32_t>(c), *p++);
    --n;
  }
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  while (n > 0) {
    c = __builtin_ia32_crc32qi(static_cast<uint32_t>(c), *p++);
    --n;
  }
  return ~static_cast<uint32_t>(c);
}

bool HaveSse42() {
  static const bool have = __builtin_cpu_supports("sse4.2");
  return have;
}
#endif

}  // namespace

uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n) {
  const auto& t = GetTables().t;
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = ~crc;
  while (n >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian byte order (x86, arm64 Linux)
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^
        t[3][hi & 0xFF] ^ t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0) c = (c >> 8) ^ t[0][(c ^ *p++) & 0xFF];
  return ~c;
}

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
#if defined(__x86_64__)
  if (HaveSse42()) return ExtendSse42(crc, static_cast<const uint8_t*>(data), n);
#endif
  return Crc32cExtendPortable(crc, data, n);
}

}  // namespace baton
