// Cache packs: a program cache's entries in one file (docs/cache-packs.md has the format, the
// guarantees and the limits).
//
//   export_pack(cache, "kernels.cupack");          // every entry, streamed, one at a time
//   import_pack(other, "kernels.cupack");          // verifies all, then adds what is missing
//   pack_program_cache tier("kernels.cupack");     // a read-only cache over the file
//
// A pack is a header, one zstd frame per entry (the entry in the cache's own entry format and
// the compiler identity it was made with, where the source cache still knew it), an index (key,
// offset, sizes, digest, and what list() shows) and a fixed-size trailer that locates the index.
// Writers stream; readers seek: no operation holds more than one entry in memory (the index is
// held by a reader: about 100 bytes plus the key and program name per entry).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/error.hpp"

namespace cucore {

// The pack format this cucore writes and the only one it reads.
inline constexpr std::uint32_t pack_format_version = 1;

// A pack that is not one (another file, another format version) or is damaged. The message names
// the pack, what is wrong and where: the record (0-based, in file order) and its byte offset.
class pack_error : public invalid_argument {
 public:
  pack_error(std::filesystem::path pack, std::string reason, std::optional<std::size_t> record = {},
             std::optional<std::uint64_t> offset = {});
  const std::filesystem::path& pack() const noexcept { return pack_; }
  const std::string& reason() const noexcept { return reason_; }
  const std::optional<std::size_t>& record() const noexcept { return record_; }
  const std::optional<std::uint64_t>& offset() const noexcept { return offset_; }

 private:
  std::filesystem::path pack_;
  std::string reason_;
  std::optional<std::size_t> record_;
  std::optional<std::uint64_t> offset_;
};

// Which entries export_pack writes. All unset or empty: every entry the cache lists.
struct pack_selection {
  // These keys exactly (each must be in the cache, else export_pack throws and writes nothing).
  std::vector<std::vector<std::byte>> keys;
  // Entries last used (read or written) at or after this time; entries whose backend keeps no
  // time (cache_entry_info::last_used unset) are left out.
  std::optional<std::chrono::system_clock::time_point> since;
  // Entries whose program name (cache_entry_info::name) matches this shell pattern (fnmatch:
  // "kernels/*", "saxpy.cu").
  std::optional<std::string> match;
};

// Where an export, import or verification is, for a progress bar.
struct pack_progress {
  enum class stage { exporting, verifying, importing };
  stage what = stage::exporting;
  std::size_t done = 0;  // entries
  std::size_t total = 0;
  std::uint64_t bytes_done = 0;   // pack bytes (compressed records) read or written
  std::uint64_t bytes_total = 0;  // 0 while an export does not know it yet
};
using pack_progress_callback = std::function<void(const pack_progress&)>;

// What a pack's header and trailer say (verify_pack, pack_program_cache::info).
struct pack_info {
  std::uint32_t format_version = 0;
  std::string cucore_version;  // of the cucore that wrote it
  std::chrono::system_clock::time_point created;
  std::size_t entries = 0;
  std::uint64_t file_bytes = 0;
  std::uint64_t code_bytes = 0;  // the entries' code, uncompressed
};

struct pack_export_result {
  std::size_t entries = 0;  // written
  // Listed but gone or damaged when read (another process removed it; a damaged entry is a miss):
  // left out.
  std::size_t skipped = 0;
  std::size_t with_compiler_identity = 0;  // records that carry the compiler identity
  std::uint64_t code_bytes = 0;
  std::uint64_t file_bytes = 0;  // the pack's size
};

struct pack_import_result {
  std::size_t entries = 0;          // in the pack
  std::size_t added = 0;            // put into the cache
  std::size_t already_present = 0;  // left as they were (an entry is never replaced)
  std::uint64_t bytes_added = 0;    // code bytes of the added entries
};

// Writes the entries `selection` picks from `from` to `pack`: read, encoded and compressed one at
// a time, into a temporary file beside `pack` renamed over it at the end (a failed or killed
// export leaves no partial pack under that name; an existing file is replaced only then).
// `notes_directory`: where the cache keeps its programs' notes, whose compiler identities the
// records carry (default: from.statistics()'s directory; in-process notes for caches without
// one). Throws invalid_argument for a key of `selection.keys` the cache does not hold, error for
// a pack that cannot be written.
pack_export_result export_pack(program_cache& from, const std::filesystem::path& pack,
                               const pack_selection& selection = {},
                               const pack_progress_callback& progress = {},
                               std::optional<std::filesystem::path> notes_directory = {});

// Verifies every record of `pack` (header, trailer, index, each record's digest, zstd frame and
// entry checksum) without adding anything; throws pack_error naming the first problem.
pack_info verify_pack(const std::filesystem::path& pack,
                      const pack_progress_callback& progress = {});

// Adds `pack`'s entries to `into`: first verifies the whole pack (as verify_pack: a damaged or
// foreign pack throws pack_error and adds nothing), then puts each entry whose key `into` does
// not hold (get() misses); one that is there is left as it is.
pack_import_result import_pack(program_cache& into, const std::filesystem::path& pack,
                               const pack_progress_callback& progress = {});

// A pack as a read-only cache (a tier to mount: the index is read when it opens, each get() reads
// one record). get() checks the record's digest, frame and entry checksum: a damaged record is a
// miss (logged once per record, counted in stats().errors), never a wrong result. put(), erase(),
// clear() and trim() throw invalid_argument naming the pack. Thread-safe.
class pack_program_cache final : public program_cache {
 public:
  // Throws pack_error for a file that is not a readable pack of this format version.
  explicit pack_program_cache(std::filesystem::path pack);
  ~pack_program_cache() override;

  std::optional<object_code> get(cache_key_ref key) override;
  void put(cache_key_ref key, const object_code& code) override;
  bool erase(cache_key_ref key) override;
  std::size_t size() override;
  std::uint64_t size_bytes() override;  // the records' compressed bytes
  void clear() override;
  cache_stats stats() const override;
  std::vector<cache_entry_info> list() override;
  // Checks every record; nothing is removed (notes name the damaged records).
  cache_verify_report verify(bool remove_bad) override;
  std::size_t trim(std::uint64_t max_size_bytes) override;
  std::string description() const override;  // "pack /path/file.cupack"
  bool read_only() const noexcept override { return true; }

  const std::filesystem::path& file() const noexcept;
  const pack_info& info() const noexcept;
  // The compiler identity recorded with `key`'s entry ("nvrtc\t13.0.88\n" lines, as the key's
  // explain() names them); nullopt when the pack has no such entry or recorded none.
  std::optional<std::string> compiler_identity(cache_key_ref key);

 private:
  struct state;
  std::unique_ptr<state> state_;
};

}  // namespace cucore
