#include "baton/comm/bootstrap/sealed_value.h"

#include <cstdint>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace baton {
namespace {

constexpr absl::string_view kMagic = "BTNV";
constexpr uint8_t kVersion = 1;

uint64_t Fnv1a(uint64_t h, absl::string_view bytes) {
  for (char c : bytes) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  return h;
}
constexpr uint64_t kFnvBasis = 0xcbf29ce484222325ull;

void Put(std::string* out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) {
    out->push_back(static_cast<char>(v >> (8 * i)));
  }
}
uint64_t Get(absl::string_view s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) {
    v = (v << 8) | static_cast<unsigned char>(s[at + i]);
  }
  return v;
}

}  // namespace

std::string SealValue(absl::string_view kind, int rank,
                      absl::string_view payload) {
  if (kind.size() > 255) kind = kind.substr(0, 255);
  std::string out(kMagic);
  Put(&out, kVersion, 1);
  Put(&out, kind.size(), 1);
  out.append(kind.data(), kind.size());
  Put(&out, static_cast<uint32_t>(rank), 4);
  Put(&out, static_cast<uint32_t>(payload.size()), 4);
  Put(&out, Fnv1a(Fnv1a(kFnvBasis, out), payload), 8);
  out.append(payload.data(), payload.size());
  return out;
}

StatusOr<std::string> OpenSealedValue(absl::string_view key,
                                      absl::string_view kind, int rank,
                                      absl::string_view sealed) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the value under store key '", absl::CHexEscape(key),
        "' is not rank ", rank, "'s ", kind, ": ", why,
        " (garbled, or written by something else than this job's ranks)"));
  };
  if (sealed.size() < kMagic.size() + 2 ||
      sealed.substr(0, kMagic.size()) != kMagic) {
    return bad(absl::StrCat("no seal (", sealed.size(), " bytes, starting '",
                            absl::CHexEscape(sealed.substr(0, 8)), "')"));
  }
  size_t at = kMagic.size();
  const uint64_t version = Get(sealed, at, 1);
  if (version != kVersion) {
    return bad(absl::StrCat("seal version ", version, ", expected ",
                            kVersion));
  }
  const size_t klen = Get(sealed, at + 1, 1);
  at += 2;
  if (sealed.size() < at + klen + 16) {
    return bad(absl::StrCat("truncated seal (", sealed.size(), " bytes)"));
  }
  const absl::string_view their_kind = sealed.substr(at, klen);
  at += klen;
  const uint64_t their_rank = Get(sealed, at, 4);
  const uint64_t len = Get(sealed, at + 4, 4);
  const uint64_t sum = Get(sealed, at + 8, 8);
  const absl::string_view header = sealed.substr(0, at + 8);
  at += 16;
  if (their_kind != kind) {
    return bad(absl::StrCat("it holds a ", absl::CHexEscape(their_kind)));
  }
  if (their_rank != static_cast<uint32_t>(rank)) {
    return bad(absl::StrCat("it was published by rank ", their_rank));
  }
  if (sealed.size() - at != len) {
    return bad(absl::StrCat("its seal announces ", len, " bytes but ",
                            sealed.size() - at, " follow"));
  }
  const absl::string_view payload = sealed.substr(at);
  if (Fnv1a(Fnv1a(kFnvBasis, header), payload) != sum) {
    return bad("checksum mismatch");
  }
  return std::string(payload);
}

}  // namespace baton
