// The filesystem classification that picks the SQLite cache's journal mode: WAL where it is
// safe, a rollback journal on network filesystems.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string_view>

namespace cucore::detail::sqlite {

// What statfs says about the filesystem holding the cache.
struct filesystem_kind {
  std::string_view name;  // "nfs", "cifs", ..., or "local"
  bool network = false;   // true where SQLite's WAL mode is unsafe
};

// Classifies a statfs f_type. Network and cluster filesystems, where WAL's shared-memory index
// does not work across hosts: NFS, SMB, CIFS, SMB2, 9p, AFS (both), Coda, Ceph, Lustre, GPFS,
// GFS2, OCFS2, BeeGFS, OrangeFS, Panasas, NCP, VirtualBox shared folders, and FUSE (sshfs, s3fs,
// gcsfuse, ... cannot be told apart from local FUSE filesystems; a rollback journal is correct on
// both).
filesystem_kind classify_filesystem(std::uint32_t statfs_magic) noexcept;
// statfs() of `directory`; nullopt when it fails.
std::optional<filesystem_kind> filesystem_of(const std::filesystem::path& directory) noexcept;
// Tests only: filesystem_of reports `kind` for every directory until called with nullopt.
void override_filesystem_for_testing(std::optional<filesystem_kind> kind) noexcept;

}  // namespace cucore::detail::sqlite
