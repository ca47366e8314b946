#pragma once
// Descriptors cucore keeps are never 0, 1 or 2. A program started with a standard stream closed
// (`prog <&-`) would otherwise find cucore's file (a cache's claims file, a lock) where the stream
// was: its own reads and writes, and what NVRTC finds at /dev/stdin or /proc/self/fd/0, would
// differ from a run without cucore. SQLite keeps its own files above 2 likewise.
#include <fcntl.h>
#include <unistd.h>

namespace cucore::detail {

// `fd` itself when it is above 2 or negative; else a close-on-exec duplicate above 2, the
// original closed (and -1 with errno set if no descriptor is left).
inline int off_standard_streams(int fd) noexcept {
  if (fd < 0 || fd > 2) return fd;
  const int moved = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  return moved;
}

}  // namespace cucore::detail
