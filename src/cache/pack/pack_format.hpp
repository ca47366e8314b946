// The cache pack format (docs/cache-packs.md): its writer and its reader. All integers
// little-endian.
//
// header   "CUCOREPK", u32 format version, u32 header size H, i64 creation time (Unix seconds),
//          u32 length + the writing cucore's version, u64 XXH3-64 of the header's other bytes
// records  from byte H on, back to back: one zstd frame each (content size and zstd checksum in
//          the frame), whose content is u32 I, I bytes of compiler identity, then the entry in
//          the cache's entry format (cache/entry_format.hpp)
// index    one row per record, in file order: u32 key length + key, u64 offset, u64 compressed
//          size, u64 content size, u64 XXH3-64 of the compressed frame, u8 code type, u8 flags
//          (bit 0: identity recorded), u32 symbol count, u64 code bytes, i64 last use (ns since
//          the epoch; INT64_MIN: none), u32 length + program name
// trailer  40 bytes: u64 index offset, u64 entry count, u64 XXH3-64 of the index, u32 format
//          version, u32 zero, "CUPKEND1"
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "cache/posix_file.hpp"
#include "cucore/cache/pack.hpp"
#include "cucore/object_code.hpp"

struct ZSTD_CCtx_s;  // zstd.h's ZSTD_CCtx

namespace cucore::detail::pack {

inline constexpr std::string_view kMagic = "CUCOREPK";
inline constexpr std::string_view kTrailerMagic = "CUPKEND1";
inline constexpr std::size_t kTrailerSize = 40;
inline constexpr std::size_t kMaxHeaderSize = 4096;
inline constexpr std::uint8_t kFlagIdentity = 1;

// One index row: where a record is and what list() shows of it.
struct row {
  std::string key;
  std::uint64_t offset = 0;
  std::uint64_t compressed = 0;
  std::uint64_t content = 0;
  std::uint64_t digest = 0;
  code_type type{};
  std::uint8_t flags = 0;
  std::uint32_t symbols = 0;
  std::uint64_t code_bytes = 0;
  std::optional<std::chrono::system_clock::time_point> last_used;
  std::string name;
};

// A record read back and checked. `error` empty: `code` holds the entry.
struct record {
  std::string error;
  std::string identity;
  std::optional<object_code> code;
};

// Writes a pack to a temporary file beside `path`, renamed over it by commit(); destroyed
// uncommitted, the temporary file is removed.
class writer {
 public:
  explicit writer(std::filesystem::path path);
  writer(const writer&) = delete;
  writer& operator=(const writer&) = delete;

  // Appends one record; returns its compressed size.
  std::uint64_t add(std::string_view key, const object_code& code, std::string_view identity,
                    std::optional<std::chrono::system_clock::time_point> last_used);
  // Writes the index and trailer, syncs, renames; returns the pack's size.
  std::uint64_t commit();

 private:
  void write(std::span<const std::byte> bytes);
  // Removes the temporary file unless committed, also when the constructor throws.
  struct temporary {
    std::filesystem::path path;
    bool committed = false;
    ~temporary();
  };
  struct cctx_free {
    void operator()(ZSTD_CCtx_s* c) const noexcept;
  };
  std::filesystem::path path_;
  temporary temp_;
  posix::unique_fd fd_;
  std::unique_ptr<ZSTD_CCtx_s, cctx_free> cctx_;
  std::uint64_t offset_ = 0;
  std::vector<row> rows_;
  std::vector<std::byte> buffer_;  // one compressed record, reused
};

// An open pack: header, trailer and index read and checked (the constructor throws pack_error);
// records read one at a time.
class reader {
 public:
  explicit reader(std::filesystem::path path);

  const std::filesystem::path& path() const noexcept { return path_; }
  const pack_info& info() const noexcept { return info_; }
  const std::vector<row>& rows() const noexcept { return rows_; }
  // The row of `key`, or nullptr.
  const row* find(std::string_view key) const;
  // Reads record `index` and checks everything (digest, frame, sizes, entry checksum, the key
  // echoed). `with_code` false: checked, but the entry is not kept. Never throws for what it
  // finds: record::error says it.
  record read(std::size_t index, bool with_code) const;
  // A pack_error for record `index`.
  pack_error error_at(std::size_t index, const std::string& reason) const;

 private:
  std::filesystem::path path_;
  posix::unique_fd fd_;
  pack_info info_;
  std::vector<row> rows_;
  std::unordered_map<std::string_view, std::size_t> by_key_;
};

}  // namespace cucore::detail::pack
