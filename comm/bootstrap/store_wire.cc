#include "baton/comm/bootstrap/store_wire.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace baton::store_wire {
namespace {

void PutU32(std::string* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out->push_back(static_cast<char>(v >> (8 * i)));
}
uint32_t GetU32(const char* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}
uint64_t GetU64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

}  // namespace

std::string EncodeRequest(Op op, absl::string_view key,
                          absl::string_view value, int64_t arg) {
  std::string m;
  m.reserve(kRequestHeader + key.size() + value.size());
  m.push_back(static_cast<char>(op));
  PutU32(&m, static_cast<uint32_t>(key.size()));
  PutU32(&m, static_cast<uint32_t>(value.size()));
  PutU64(&m, static_cast<uint64_t>(arg));
  m.append(key.data(), key.size());
  m.append(value.data(), value.size());
  return m;
}

std::string EncodeResponse(Code code, absl::string_view payload) {
  std::string m;
  m.reserve(kResponseHeader + payload.size());
  m.push_back(static_cast<char>(code));
  PutU32(&m, static_cast<uint32_t>(payload.size()));
  m.append(payload.data(), payload.size());
  return m;
}

Parse ParseRequest(absl::string_view buf, const Limits& limits, Request* req,
                   size_t* used, std::string* why) {
  if (buf.empty()) return Parse::kNeedMore;
  const uint8_t op = static_cast<uint8_t>(buf[0]);
  if (op < kHello || op > kAdd) {
    *why = absl::StrCat("unknown request type ", op);
    return Parse::kBad;
  }
  if (buf.size() < kRequestHeader) return Parse::kNeedMore;
  const uint64_t klen = GetU32(buf.data() + 1);
  const uint64_t vlen = GetU32(buf.data() + 5);
  if (klen > limits.max_key) {
    *why = absl::StrCat("key of ", klen, " bytes (the limit is ",
                        limits.max_key, ")");
    return Parse::kBad;
  }
  if (vlen > limits.max_value) {
    *why = absl::StrCat("value of ", vlen, " bytes (the limit is ",
                        limits.max_value, ")");
    return Parse::kBad;
  }
  if (op != kSet && vlen != 0 && op != kHello) {
    *why = "a value on a request that takes none";
    return Parse::kBad;
  }
  const uint64_t total = kRequestHeader + klen + vlen;
  if (buf.size() < total) return Parse::kNeedMore;
  req->op = static_cast<Op>(op);
  req->arg = static_cast<int64_t>(GetU64(buf.data() + 9));
  req->key.assign(buf.data() + kRequestHeader, klen);
  req->value.assign(buf.data() + kRequestHeader + klen, vlen);
  *used = total;
  return Parse::kDone;
}

Parse ParseResponse(absl::string_view buf, size_t max_payload, Code* code,
                    std::string* payload, size_t* used, std::string* why) {
  if (buf.empty()) return Parse::kNeedMore;
  const uint8_t c = static_cast<uint8_t>(buf[0]);
  if (c > kFull) {
    *why = absl::StrCat("unknown response code ", c);
    return Parse::kBad;
  }
  if (buf.size() < kResponseHeader) return Parse::kNeedMore;
  const uint64_t len = GetU32(buf.data() + 1);
  if (len > max_payload) {
    *why = absl::StrCat("response of ", len, " bytes (the limit is ",
                        max_payload, ")");
    return Parse::kBad;
  }
  if (buf.size() < kResponseHeader + len) return Parse::kNeedMore;
  *code = static_cast<Code>(c);
  payload->assign(buf.data() + kResponseHeader, len);
  *used = kResponseHeader + len;
  return Parse::kDone;
}

}  // namespace baton::store_wire
