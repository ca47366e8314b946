// The on-disk entry format shared by the persistent backends (directory and SQLite).
//
//   offset  size  field
//   0       8     magic "CUCOREPC"
//   8       4     format version (little-endian u32), currently 1
//   12      1     code type (0 ptx, 1 cubin, 2 ltoir, 3 fatbin, 4 object, 5 library, 6 tile_ir)
//   13      1     flags: bit 0 = Tile IR alongside (object_code::tile_ir()); other bits zero
//   14      2     reserved, zero
//   16      4     key length K, then K key bytes (the full key, echoed so a hash collision of
//                 file names or a misplaced file is detected)
//   ...     4     name length N, then N bytes
//   ...     4     symbol count S, then S × (u32 length + expression, u32 length + mangled name)
//   (flag 0) 8    Tile IR length T (u64, > 0), then T bytes
//   ...     8     payload length P (u64)
//   ...     8     XXH3-64 of every byte before this field, then of the payload
//   ...     P     payload: the code, contiguous, so `cucore cache export` can write it as is
//
// All integers little-endian. Decoding verifies everything; any mismatch is a miss. An entry
// without Tile IR is byte for byte what cucore wrote before the flag existed; a cucore that
// predates it reads an entry with the flag or code type 6 as malformed (a miss), never as another
// code.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/object_code.hpp"

namespace cucore::detail {

inline constexpr std::string_view kEntryMagic = "CUCOREPC";
inline constexpr std::uint32_t kEntryFormatVersion = 1;
// Fixed part: magic, version, code type, reserved, key length.
inline constexpr std::size_t kEntryFixedHeaderSize = 20;

std::vector<std::byte> encode_entry(std::span<const std::byte> key, const object_code& code);

enum class entry_status {
  ok,
  truncated,     // shorter than its header says
  bad_magic,     // not a cucore entry
  bad_version,   // written by another format version
  malformed,     // lengths or fields that cannot be right (trailing bytes, bad code type)
  bad_checksum,  // bit rot, torn write
  key_mismatch,  // a valid entry, but for another key
};
std::string_view to_string(entry_status status) noexcept;

struct decoded_entry {
  entry_status status = entry_status::malformed;
  std::optional<object_code> code;  // set when status == ok
};

// Decodes `data` (adopted, so the payload is not copied). When `expected_key` is given, the key
// echoed in the entry must equal it.
decoded_entry decode_entry(std::vector<std::byte> data,
                           std::optional<std::span<const std::byte>> expected_key);
// The same for a buffer read without zero-filling it, of which the first `length` bytes are valid.
decoded_entry decode_entry(uninitialized_bytes data, std::size_t length,
                           std::optional<std::span<const std::byte>> expected_key);

// Checks the header and returns where the payload starts and the echoed key, without the
// checksum pass (for listing). nullopt when the header is unreadable.
struct entry_header {
  std::vector<std::byte> key;
  code_type type{};
  std::string name;
  std::size_t symbol_count = 0;
  std::size_t payload_offset = 0;
  std::uint64_t payload_length = 0;
};
std::optional<entry_header> read_entry_header(std::span<const std::byte> data);
// What list() shows of an entry: its header's fields, and `stored_bytes` (last_used is left to the
// backend that knows it).
cache_entry_info entry_info(entry_header header, std::uint64_t stored_bytes);

}  // namespace cucore::detail
