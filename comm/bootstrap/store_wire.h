// The TCP store's wire format (internal to comm/bootstrap; the store tests
// and the protocol fuzzer use it directly).
//
// Request:  op (1 byte) | key length (u32) | value length (u32) | arg (i64)
//           | key | value                      (integers little-endian)
// Response: code (1 byte) | payload length (u32) | payload
//
// Both lengths of a request are in its fixed 17-byte header, so a reader
// refuses an oversized request as soon as the header is in, before
// buffering any of it. Parsers never read past the buffer they are given
// and never allocate more than the limits allow.
#ifndef BATON_COMM_BOOTSTRAP_STORE_WIRE_H_
#define BATON_COMM_BOOTSTRAP_STORE_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace baton::store_wire {

enum Op : uint8_t { kHello = 1, kSet = 2, kGet = 3, kAdd = 4 };
enum Code : uint8_t {
  kOk = 0,
  kTimeout = 1,   // payload: the key that did not appear
  kInvalid = 2,   // payload: why
  kExists = 3,    // payload: why (a rank connected twice)
  kDenied = 4,    // payload: why (no hello, wrong token)
  kFull = 5,      // payload: why (the store's byte budget is spent)
};

// The hello's key: the protocol name and version.
inline constexpr absl::string_view kProtocol = "baton-store/2";

inline constexpr size_t kRequestHeader = 17;
inline constexpr size_t kResponseHeader = 5;

struct Limits {
  size_t max_key = 4096;
  size_t max_value = size_t{16} << 20;
  size_t max_request() const { return kRequestHeader + max_key + max_value; }
  // Payloads are values, keys or error sentences.
  size_t max_response_payload() const {
    return (max_value > max_key ? max_value : max_key) + 1024;
  }
};

struct Request {
  Op op = kHello;
  std::string key;
  std::string value;
  int64_t arg = 0;
};

std::string EncodeRequest(Op op, absl::string_view key,
                          absl::string_view value, int64_t arg);
std::string EncodeResponse(Code code, absl::string_view payload);

enum class Parse { kNeedMore, kDone, kBad };

// Parses one request from the front of `buf`. kDone: *req and *used (bytes
// consumed) are set. kBad: *why says what is wrong (unknown op, a length
// over the limits); the connection cannot be resynchronized.
Parse ParseRequest(absl::string_view buf, const Limits& limits, Request* req,
                   size_t* used, std::string* why);

// The same for a response; `max_payload` bounds the payload length.
Parse ParseResponse(absl::string_view buf, size_t max_payload, Code* code,
                    std::string* payload, size_t* used, std::string* why);

}  // namespace baton::store_wire

#endif  // BATON_COMM_BOOTSTRAP_STORE_WIRE_H_
