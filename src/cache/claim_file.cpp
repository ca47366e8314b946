#include "cache/claim_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <utility>

#include "cache/posix_file.hpp"
#include "common/sha256.hpp"

namespace cucore::detail {
namespace {

// Offsets below 2^40 keep clear of off_t limits on every file system.
constexpr std::uint64_t kOffsetMask = (std::uint64_t{1} << 40) - 1;

class fd_claim final : public cache_claim {
 public:
  explicit fd_claim(posix::unique_fd fd) noexcept : fd_(std::move(fd)) {}
  // Closing the descriptor drops its lock.

 private:
  posix::unique_fd fd_;
};

}  // namespace

claim_result claim_file::try_claim(cache_key_ref key) const noexcept {
  try {
    std::error_code ec;
    // O_NOFOLLOW: a symlink planted at the path is not followed. O_NONBLOCK: a FIFO cannot hang
    // the open (and is refused below).
    posix::unique_fd fd =
        posix::open_file(path_, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK, mode_, ec);
    if (!fd) return {};
    struct stat st {};
    if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) return {};
    // Ours and not in the cache's mode (just created under a umask that changed it): set it, so
    // that the claims file is as private, or as shared, as the cache's other files.
    if (exact_ && st.st_uid == ::geteuid() && (st.st_mode & 0777) != mode_) {
      (void)::fchmod(fd.get(), mode_);
    }
    const sha256_digest digest = sha256(key.bytes());
    std::uint64_t offset = 0;
    for (int i = 0; i < 8; ++i) offset = (offset << 8) | std::to_integer<std::uint64_t>(digest[i]);
    struct flock lock {};
    lock.l_type = F_WRLCK;
    lock.l_whence = SEEK_SET;
    lock.l_start = static_cast<off_t>(offset & kOffsetMask);
    lock.l_len = 1;
    int rc = 0;
    do {
      rc = ::fcntl(fd.get(), F_OFD_SETLK, &lock);
    } while (rc != 0 && errno == EINTR);
    if (rc == 0) {
      claim_result result;
      result.status = claim_status::owned;
      result.claim = std::make_unique<fd_claim>(std::move(fd));
      return result;
    }
    if (errno == EAGAIN || errno == EACCES) return {claim_status::held_elsewhere, nullptr};
    return {};  // EINVAL (no OFD locks here), ENOLCK: no claims, every miss compiles
  } catch (...) {
    return {};  // out of memory: compile without a claim
  }
}

}  // namespace cucore::detail
