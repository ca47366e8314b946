// Which filesystem holds the cache (statfs), and whether SQLite's WAL is safe on it.
#include "cache/sqlite/filesystem.hpp"

#include <sys/statfs.h>

#include <mutex>

namespace cucore::detail::sqlite {

filesystem_kind classify_filesystem(std::uint32_t magic) noexcept {
  struct known {
    std::uint32_t magic;
    std::string_view name;
  };
  static constexpr known network[] = {
      {0x6969, "nfs"},          {0x517B, "smb"},        {0xFF534D42, "cifs"},
      {0xFE534D42, "smb2"},     {0x65735546, "fuse"},   {0x01021997, "9p"},
      {0x5346414F, "afs"},      {0x6B414653, "kafs"},   {0x73757245, "coda"},
      {0x00C36400, "ceph"},     {0x0BD00BD0, "lustre"}, {0x47504653, "gpfs"},
      {0x01161970, "gfs2"},     {0x7461636F, "ocfs2"},  {0x19830326, "beegfs"},
      {0x20030528, "orangefs"}, {0xAAD7AAEA, "panfs"},  {0x564C, "ncp"},
      {0x786F4256, "vboxsf"},
  };
  for (const auto& k : network) {
    if (k.magic == magic) return {k.name, true};
  }
  return {"local", false};
}

namespace {
std::mutex filesystem_override_mutex;
std::optional<filesystem_kind> filesystem_override;
}  // namespace

void override_filesystem_for_testing(std::optional<filesystem_kind> kind) noexcept {
  std::lock_guard lock(filesystem_override_mutex);
  filesystem_override = kind;
}

std::optional<filesystem_kind> filesystem_of(const std::filesystem::path& directory) noexcept {
  {
    std::lock_guard lock(filesystem_override_mutex);
    if (filesystem_override) return filesystem_override;
  }
  struct statfs s {};
  if (::statfs(directory.c_str(), &s) != 0) return std::nullopt;
  return classify_filesystem(static_cast<std::uint32_t>(s.f_type));
}

}  // namespace cucore::detail::sqlite
