// A value that one rank publishes in the store for the others to read back
// (a UCX worker address, an NCCL unique id), sealed so that the reader can
// tell the real value from a garbled, truncated, misplaced or foreign one
// before handing it to a library that would crash on it.
//
// Layout: "BTNV" | version (1 byte) | kind length (1) | kind | rank (u32) |
// payload length (u32) | checksum (u64, FNV-1a over everything before it
// and the payload) | payload. Integers little-endian.
//
// The checksum catches corruption and values written by anything but
// SealValue; it is not a signature: a process that holds the job's store
// token can still write a well-formed lie (store.h, "Trust").
#ifndef BATON_COMM_BOOTSTRAP_SEALED_VALUE_H_
#define BATON_COMM_BOOTSTRAP_SEALED_VALUE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"

namespace baton {

// `kind` names what the payload is (at most 255 bytes), e.g. "ucx-address".
std::string SealValue(absl::string_view kind, int rank,
                      absl::string_view payload);

// The payload of `sealed`, read from store key `key`, which rank `rank`
// should have published as `kind`. InvalidArgument naming the key, the rank
// and what is wrong (bad magic or version, another kind or rank, a length
// that does not match, a checksum mismatch).
StatusOr<std::string> OpenSealedValue(absl::string_view key,
                                      absl::string_view kind, int rank,
                                      absl::string_view sealed);

}  // namespace baton

#endif  // BATON_COMM_BOOTSTRAP_SEALED_VALUE_H_
