#include "baton/runtime/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace baton {

StatusOr<std::string> ReadInputFile(const std::string& path,
                                    absl::string_view what, size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return absl::NotFoundError(absl::StrCat("cannot read ", what, " ", path,
                                            ": ", std::strerror(errno)));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " is not a regular file"));
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, " has ", st.st_size,
                     " bytes, over the limit of ", max_bytes));
  }
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          "cannot read ", what, " ", path, ": ", std::strerror(err)));
    }
    if (n == 0) break;
    if (text.size() + static_cast<size_t>(n) > max_bytes) {  // grew meanwhile
      ::close(fd);
      return absl::InvalidArgumentError(absl::StrCat(
          what, " ", path, " is over the limit of ", max_bytes, " bytes"));
    }
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return text;
}

}  // namespace baton
