#pragma once
// The files a key keeps beside a persistent cache (the compiler version memo, the header digest
// memo, the walk manifests) are input like any other: whoever can write the cache's directory can
// put anything there. These are the rules they are read, trusted and cleaned up by
// (docs/cache-keys.md, "The key's own files").

#include <sys/stat.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace cucore::detail {

// The persistent header digest memo beside a cache's compiler version memo (this user's own where
// others can write the directory).
std::filesystem::path header_memo_file_beside(const std::filesystem::path& version_memo);

// Caps, from real sizes: the digest memo of a CUB block_reduce walk (732 headers) is 672 KB, of
// the whole test corpus (1000 headers: CUB, CuTe, CUTLASS, libcu++, CuPy) 1.16 MB; the largest
// corpus manifest is 122 KB; a version memo holds a few records of ~100 bytes. A file over its
// cap is ignored (and a writer never writes one).
constexpr std::uint64_t kMemoMaxBytes = std::uint64_t{64} << 20;
constexpr std::uint64_t kManifestMaxBytes = std::uint64_t{512} << 10;  // a shard's whole bound
constexpr std::uint64_t kVersionMemoMaxBytes = std::uint64_t{64} << 10;

// A temp file (NAME.tmp-XXXXXX) left by a writer that was killed before its rename goes once it
// is this old (no writer takes anywhere near as long).
constexpr std::int64_t kStaleTempNs = 600'000'000'000;  // 10 minutes

// True when only this user (or root) can replace names in `dir`: it is owned by the effective
// uid or root and writable by nobody else. False for a cache shared by a group (or anything
// else), where a file there may be anyone's who can write the directory.
bool only_this_user_writes(const std::filesystem::path& dir) noexcept;

// A file owned by the effective uid or root and writable by nobody else (a manifest, a memo).
bool owned_privately(const struct stat& st) noexcept;

// The contents of `file` (posix::read_small_file: no link followed, no blocking, a regular file
// of at most `max_bytes` that `accept` takes); nullopt when there is none such.
std::optional<std::string> read_key_file(const std::filesystem::path& file, std::uint64_t max_bytes,
                                         const std::function<bool(const struct stat&)>& accept);

// Whether `name` is a temp file of a key file: a version memo's ("...compiler-versions.tmp-X"),
// a digest memo's ("...header-digests.tmp-X", "...header-digests.UID.tmp-X") or a manifest's
// (64 hex digits, ".tmp-X"), X being mkstemp's 6 characters.
bool is_key_temp(std::string_view name);

// Removes the key files' temp files in `dir` older than kStaleTempNs. Best effort.
void sweep_key_temps(const std::filesystem::path& dir) noexcept;

// For a cache's verify() and clear(): sweeps the temp files beside its compiler version memo
// `version_memo` (every user's) and in this user's manifest directories. Best effort.
void sweep_key_files(const std::filesystem::path& version_memo) noexcept;

}  // namespace cucore::detail
