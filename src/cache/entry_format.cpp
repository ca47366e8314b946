#include "cache/entry_format.hpp"

#include "cache/checksum.hpp"
#include "common/enum_names.hpp"

#include <algorithm>
#include <cstring>
#include <limits>

namespace cucore::detail {
namespace {

constexpr std::uint8_t kCodeTypeCount = 7;
constexpr std::uint8_t kFlagTileIr = 1;

// Appends to a buffer sized up front (the exact entry size is known before writing).
class writer {
 public:
  explicit writer(std::size_t size) : out_(size) {}
  void u8(std::uint8_t v) { out_[pos_++] = static_cast<std::byte>(v); }
  void u32(std::uint32_t v) { little_endian(v); }
  void u64(std::uint64_t v) { little_endian(v); }
  template <class Unsigned>
  void little_endian(Unsigned v) {
    for (std::size_t i = 0; i < sizeof v; ++i) {
      out_[pos_++] = static_cast<std::byte>((v >> (8 * i)) & 0xff);
    }
  }
  void raw(std::span<const std::byte> bytes) {
    if (!bytes.empty()) std::memcpy(out_.data() + pos_, bytes.data(), bytes.size());
    pos_ += bytes.size();
  }
  void sized(std::span<const std::byte> bytes) {
    if (bytes.size() > std::numeric_limits<std::uint32_t>::max()) {
      throw std::length_error("cache entry field over 4 GiB");
    }
    u32(static_cast<std::uint32_t>(bytes.size()));
    raw(bytes);
  }
  void text(std::string_view t) { sized(std::as_bytes(std::span<const char>(t.data(), t.size()))); }
  std::size_t pos() const { return pos_; }
  std::vector<std::byte> take() { return std::move(out_); }
  std::vector<std::byte>& buffer() { return out_; }

 private:
  std::vector<std::byte> out_;
  std::size_t pos_ = 0;
};

// A bounds-checked little-endian reader over the entry.
class reader {
 public:
  explicit reader(std::span<const std::byte> data) : data_(data) {}
  bool u8(std::uint8_t& v) {
    if (remaining() < 1) return false;
    v = static_cast<std::uint8_t>(data_[pos_++]);
    return true;
  }
  bool u32(std::uint32_t& v) { return little_endian(v); }
  bool u64(std::uint64_t& v) { return little_endian(v); }
  template <class Unsigned>
  bool little_endian(Unsigned& v) {
    if (remaining() < sizeof v) return false;
    v = 0;
    for (std::size_t i = 0; i < sizeof v; ++i)
      v |= static_cast<Unsigned>(data_[pos_ + i]) << (8 * i);
    pos_ += sizeof v;
    return true;
  }
  bool bytes(std::size_t n, std::span<const std::byte>& out) {
    if (remaining() < n) return false;
    out = data_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool text(std::string& out) {
    std::uint32_t n = 0;
    std::span<const std::byte> b;
    if (!u32(n) || !bytes(n, b)) return false;
    out.assign(reinterpret_cast<const char*>(b.data()), b.size());
    return true;
  }
  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return data_.size() - pos_; }

 private:
  std::span<const std::byte> data_;
  std::size_t pos_ = 0;
};

struct parsed {
  entry_status status = entry_status::malformed;
  entry_header header;
  std::span<const std::byte> key;  // into the data parsed
  symbol_map symbols;
  std::uint64_t checksum = 0;
  std::size_t checksum_offset = 0;
  std::span<const std::byte> tile_ir;  // into the data parsed; empty without the flag
};

// A decode needs the symbols but compares the key in place; a header read wants a copy of the key.
parsed parse(std::span<const std::byte> data, bool with_symbols, bool with_key_copy) {
  parsed p;
  reader r(data);
  std::span<const std::byte> magic;
  if (!r.bytes(kEntryMagic.size(), magic)) {
    p.status = data.empty() ? entry_status::truncated : entry_status::bad_magic;
    if (!data.empty() && std::memcmp(data.data(), kEntryMagic.data(),
                                     std::min(data.size(), kEntryMagic.size())) == 0) {
      p.status = entry_status::truncated;
    }
    return p;
  }
  if (std::memcmp(magic.data(), kEntryMagic.data(), kEntryMagic.size()) != 0) {
    p.status = entry_status::bad_magic;
    return p;
  }
  std::uint32_t version = 0;
  if (!r.u32(version)) return p.status = entry_status::truncated, p;
  if (version != kEntryFormatVersion) return p.status = entry_status::bad_version, p;
  std::uint8_t type = 0;
  std::uint8_t reserved[3] = {};
  if (!r.u8(type) || !r.u8(reserved[0]) || !r.u8(reserved[1]) || !r.u8(reserved[2])) {
    return p.status = entry_status::truncated, p;
  }
  const std::uint8_t flags = reserved[0];
  if (type >= kCodeTypeCount || (flags & ~kFlagTileIr) != 0 || reserved[1] || reserved[2]) return p;
  // Tile IR carries no Tile IR alongside.
  if ((flags & kFlagTileIr) != 0 && type == static_cast<std::uint8_t>(code_type::tile_ir)) return p;
  p.header.type = static_cast<code_type>(type);

  std::uint32_t key_length = 0;
  std::span<const std::byte> key;
  if (!r.u32(key_length) || !r.bytes(key_length, key)) return p.status = entry_status::truncated, p;
  p.key = key;
  if (with_key_copy) p.header.key.assign(key.begin(), key.end());
  if (!r.text(p.header.name)) return p.status = entry_status::truncated, p;
  std::uint32_t symbol_count = 0;
  if (!r.u32(symbol_count)) return p.status = entry_status::truncated, p;
  p.header.symbol_count = symbol_count;
  // The encoder writes the symbols in symbol_map order, each once: anything else is not an entry
  // it wrote (and would decode to a map that encodes to other bytes).
  std::string previous;
  for (std::uint32_t i = 0; i < symbol_count; ++i) {
    std::string expr;
    std::string mangled;
    if (!r.text(expr) || !r.text(mangled)) return p.status = entry_status::truncated, p;
    if (i > 0 && !(previous < expr)) return p;  // out of order or repeated: malformed
    if (with_symbols) {
      previous = expr;
      p.symbols.emplace_hint(p.symbols.end(), std::move(expr), std::move(mangled));
    } else {
      previous = std::move(expr);
    }
  }
  if ((flags & kFlagTileIr) != 0) {
    std::uint64_t tile_length = 0;
    if (!r.u64(tile_length)) return p.status = entry_status::truncated, p;
    if (tile_length == 0) return p;  // the flag says there is some
    if (r.remaining() < tile_length) return p.status = entry_status::truncated, p;
    if (!r.bytes(static_cast<std::size_t>(tile_length), p.tile_ir)) {
      return p.status = entry_status::truncated, p;
    }
  }
  if (!r.u64(p.header.payload_length)) return p.status = entry_status::truncated, p;
  p.checksum_offset = r.pos();
  if (!r.u64(p.checksum)) return p.status = entry_status::truncated, p;
  p.header.payload_offset = r.pos();
  if (r.remaining() < p.header.payload_length) return p.status = entry_status::truncated, p;
  if (r.remaining() != p.header.payload_length) return p;  // trailing bytes: malformed
  p.status = entry_status::ok;
  return p;
}

std::uint64_t checksum_of(std::span<const std::byte> data, std::size_t checksum_offset,
                          std::size_t payload_offset) {
  return xxh3_64(data.first(checksum_offset), data.subspan(payload_offset));
}

}  // namespace

constexpr auto kEntryStatusNames = detail::name_each<entry_status::key_mismatch>(
    "ok", "truncated", "not a cucore entry", "unsupported format version", "malformed",
    "checksum mismatch", "key mismatch");

std::string_view to_string(entry_status status) noexcept {
  return kEntryStatusNames(status);
}

std::vector<std::byte> encode_entry(std::span<const std::byte> key, const object_code& code) {
  std::size_t symbols_size = 0;
  for (const auto& [expr, mangled] : code.symbol_mapping()) {
    symbols_size += 8 + expr.size() + mangled.size();
  }
  const std::optional<object_code> tile_ir = code.tile_ir();
  const std::size_t tile_size = tile_ir ? 8 + tile_ir->size() : 0;
  const std::size_t header_size = kEntryFixedHeaderSize + key.size() + 4 + code.name().size() + 4 +
                                  symbols_size + tile_size + 16;
  writer w(header_size + code.size());
  w.raw(std::as_bytes(std::span<const char>(kEntryMagic.data(), kEntryMagic.size())));
  w.u32(kEntryFormatVersion);
  w.u8(static_cast<std::uint8_t>(code.type()));
  w.u8(tile_ir ? kFlagTileIr : 0);
  w.u8(0);
  w.u8(0);
  w.sized(key);
  w.text(code.name());
  w.u32(static_cast<std::uint32_t>(code.symbol_mapping().size()));
  for (const auto& [expr, mangled] : code.symbol_mapping()) {
    w.text(expr);
    w.text(mangled);
  }
  if (tile_ir) {
    w.u64(tile_ir->size());
    w.raw(tile_ir->code());
  }
  w.u64(code.size());
  const std::size_t checksum_offset = w.pos();
  w.u64(0);
  const std::size_t payload_offset = w.pos();
  w.raw(code.code());
  auto out = w.take();
  const std::uint64_t sum = checksum_of(out, checksum_offset, payload_offset);
  for (int i = 0; i < 8; ++i) {
    out[checksum_offset + i] = static_cast<std::byte>((sum >> (8 * i)) & 0xff);
  }
  return out;
}

namespace {

// Decodes the entry in `view` (the valid bytes of `buffer`), adopting `buffer` into the code.
template <typename Buffer>
decoded_entry decode(Buffer&& buffer, std::span<const std::byte> view,
                     std::optional<std::span<const std::byte>> expected_key) {
  decoded_entry result;
  parsed p = parse(view, /*with_symbols=*/true, /*with_key_copy=*/false);
  if (p.status != entry_status::ok) {
    result.status = p.status;
    return result;
  }
  if (checksum_of(view, p.checksum_offset, p.header.payload_offset) != p.checksum) {
    result.status = entry_status::bad_checksum;
    return result;
  }
  if (expected_key &&
      !std::equal(expected_key->begin(), expected_key->end(), p.key.begin(), p.key.end())) {
    result.status = entry_status::key_mismatch;
    return result;
  }
  const std::size_t offset = p.header.payload_offset;
  const auto length = static_cast<std::size_t>(p.header.payload_length);
  // The Tile IR (a few KB next to its cubin) is copied out; the payload adopts the buffer.
  std::optional<object_code> tile_ir;
  if (!p.tile_ir.empty()) {
    tile_ir.emplace(code_type::tile_ir, std::vector<std::byte>(p.tile_ir.begin(), p.tile_ir.end()),
                    p.header.name);
  }
  result.code.emplace(p.header.type, std::forward<Buffer>(buffer), offset, length,
                      std::move(p.header.name), std::move(p.symbols));
  if (tile_ir) result.code = result.code->with_tile_ir(*tile_ir);
  result.status = entry_status::ok;
  return result;
}

}  // namespace

decoded_entry decode_entry(std::vector<std::byte> data,
                           std::optional<std::span<const std::byte>> expected_key) {
  const std::span<const std::byte> view(data);
  return decode(std::move(data), view, expected_key);
}

decoded_entry decode_entry(uninitialized_bytes data, std::size_t length,
                           std::optional<std::span<const std::byte>> expected_key) {
  const std::span<const std::byte> view(data.data, std::min(length, data.size));
  return decode(std::move(data), view, expected_key);
}

cache_entry_info entry_info(entry_header header, std::uint64_t stored_bytes) {
  cache_entry_info info;
  info.key = std::move(header.key);
  info.type = header.type;
  info.name = std::move(header.name);
  info.symbol_count = header.symbol_count;
  info.payload_bytes = header.payload_length;
  info.stored_bytes = stored_bytes;
  return info;
}

std::optional<entry_header> read_entry_header(std::span<const std::byte> data) {
  parsed p = parse(data, /*with_symbols=*/false, /*with_key_copy=*/true);
  if (p.status != entry_status::ok) return std::nullopt;
  return std::move(p.header);
}

}  // namespace cucore::detail
