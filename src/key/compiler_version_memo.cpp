#include "key/compiler_version_memo.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "cache/key_files.hpp"
#include "cache/trust.hpp"
#include "key/header_memo.hpp"

namespace cucore::detail {
namespace {

// The file: magic, format version, a count, the records (library, path, device, inode, size,
// mtime_ns, ctime_ns, version), then an XXH3 of everything before it (record_writer's format, as
// the digest memo's). A file that does not parse or check is ignored and rewritten.
constexpr std::string_view kMagic = "CUCORECV";
constexpr std::uint32_t kVersion = 2;
// Records are replaced per library and path; this many distinct ones at most (the oldest go).
constexpr std::size_t kMaxRecords = 128;

bool storable(std::string_view text) {
  return !text.empty() && text.size() <= 4096;
}

// Whom the file may come from: in a directory only this user can write, this user (or root)
// alone; in a cache shared by a group, any member, as its entries (never a world-writable file):
// the group's members share one memo, so that one probe serves them all.
bool trusted(const struct stat& st, bool private_dir) {
  return private_dir ? owned_privately(st) : trust::acceptable(st, cache_access::shared);
}

}  // namespace

compiler_version_memo::compiler_version_memo(std::filesystem::path file) : file_(std::move(file)) {}

std::vector<compiler_version_memo::record> compiler_version_memo::read_file() const {
  std::vector<record> out;
  const bool private_dir = only_this_user_writes(file_.parent_path());
  const auto data =
      read_key_file(file_, kVersionMemoMaxBytes,
                    [private_dir](const struct stat& st) { return trusted(st, private_dir); });
  if (!data || data->size() < kMagic.size() + 4 + 4 + 8) return out;
  const std::string_view body = std::string_view(*data).substr(0, data->size() - 8);
  std::uint64_t stored = 0;
  std::memcpy(&stored, data->data() + body.size(), 8);
  if (checksum_of(body) != stored) return out;
  record_reader r(body);
  char magic[8];
  r.raw(magic, sizeof magic);
  if (!r.ok() || std::string_view(magic, 8) != kMagic || r.u32() != kVersion) return out;
  const std::uint32_t count = r.u32();
  if (!r.ok() || count > kMaxRecords) return out;
  for (std::uint32_t i = 0; i < count && r.ok(); ++i) {
    record rec;
    rec.library = r.str();
    rec.file.path = r.str();
    rec.file.device = r.u64();
    rec.file.inode = r.u64();
    rec.file.size = r.u64();
    rec.file.mtime_ns = static_cast<std::int64_t>(r.u64());
    rec.file.ctime_ns = static_cast<std::int64_t>(r.u64());
    rec.version = r.str();
    if (!storable(rec.version)) return {};
    out.push_back(std::move(rec));
  }
  if (!r.ok() || !r.at_end()) return {};
  return out;
}

void compiler_version_memo::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  records_ = read_file();
}

std::optional<std::string> compiler_version_memo::lookup(std::string_view library,
                                                         const file_identity& file) {
  std::lock_guard lock(mutex_);
  load_locked();
  for (const auto& r : records_) {
    if (r.library == library && r.file == file) return r.version;
  }
  return std::nullopt;
}

void compiler_version_memo::remember(std::string_view library, const file_identity& file,
                                     std::string_view version) noexcept {
  try {
    if (!storable(library) || !storable(file.path) || !storable(version)) return;
    std::lock_guard lock(mutex_);
    load_locked();
    // What other processes remembered meanwhile, then this record (replacing the library's at
    // that path).
    std::vector<record> merged = read_file();
    const auto same_place = [&](const record& r) {
      return r.library == library && r.file.path == file.path;
    };
    std::erase_if(merged, same_place);
    merged.push_back(record{std::string(library), file, std::string(version)});
    if (merged.size() > kMaxRecords) {
      merged.erase(merged.begin(), merged.end() - static_cast<std::ptrdiff_t>(kMaxRecords));
    }
    records_ = merged;

    record_writer w;
    w.raw(kMagic.data(), kMagic.size());
    w.u32(kVersion);
    w.u32(static_cast<std::uint32_t>(merged.size()));
    for (const auto& r : merged) {
      w.str(r.library);
      w.str(r.file.path);
      w.u64(r.file.device);
      w.u64(r.file.inode);
      w.u64(r.file.size);
      w.u64(static_cast<std::uint64_t>(r.file.mtime_ns));
      w.u64(static_cast<std::uint64_t>(r.file.ctime_ns));
      w.str(r.version);
    }
    const std::uint64_t sum = checksum_of(w.out);
    w.u64(sum);
    if (w.out.size() > kVersionMemoMaxBytes) return;
    // Readable as the directory is (a group-shared cache's members read it too), never writable
    // by the world.
    mode_t mode = 0644;
    struct stat dir {};
    if (::stat(file_.parent_path().empty() ? "." : file_.parent_path().c_str(), &dir) == 0) {
      mode = ((dir.st_mode & 0666) | 0600) & ~mode_t{S_IWOTH};
    }
    if (replace_file(file_, w.out, mode)) sweep_key_temps(file_.parent_path());
  } catch (...) {
    // Best effort: the next process probes again.
  }
}

}  // namespace cucore::detail
