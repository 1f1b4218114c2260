// Reading a whole file that a user named on a command line or in a config.
//
// ReadInputFile refuses, with a Status naming `what` and the path, anything
// that is not a readable regular file (a directory, a FIFO, a device, a
// missing path) and a file larger than `max_bytes`, so a caller never
// blocks on a pipe, reads without bound, or meets a stream exception.
// Stateless; thread-safe.
#ifndef BATON_RUNTIME_INPUT_FILE_H_
#define BATON_RUNTIME_INPUT_FILE_H_

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"
#include "baton/runtime/status.h"

namespace baton {

// NotFound for a path that cannot be opened; InvalidArgument for a
// non-regular file or one over `max_bytes`; the file's bytes otherwise.
StatusOr<std::string> ReadInputFile(const std::string& path,
                                    absl::string_view what, size_t max_bytes);

}  // namespace baton

#endif  // BATON_RUNTIME_INPUT_FILE_H_
