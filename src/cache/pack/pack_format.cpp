// The cache pack format's writer and reader (pack_format.hpp).
#include "cache/pack/pack_format.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>
#include <random>

#include "cache/checksum.hpp"
#include "cache/entry_format.hpp"

#ifndef CUCORE_PACK_WRITER_VERSION
#define CUCORE_PACK_WRITER_VERSION "unknown"
#endif

namespace cucore {

namespace {

std::string where(const std::filesystem::path& pack, std::optional<std::size_t> record,
                  std::optional<std::uint64_t> offset) {
  std::string out = "pack " + pack.string();
  if (record) out += ": record " + std::to_string(*record);
  if (offset) out += (record ? " at byte " : ": at byte ") + std::to_string(*offset);
  return out;
}

}  // namespace

pack_error::pack_error(std::filesystem::path pack, std::string reason,
                       std::optional<std::size_t> record, std::optional<std::uint64_t> offset)
    : invalid_argument(where(pack, record, offset) + ": " + reason),
      pack_(std::move(pack)),
      reason_(std::move(reason)),
      record_(record),
      offset_(offset) {}

}  // namespace cucore

namespace cucore::detail::pack {
namespace {

// Zstandard level 3 (its default): entries are mostly cubins, which compress 3-5x at level 3;
// higher levels cost export time for a few percent.
constexpr int kLevel = 3;
// Records are at most this large uncompressed: a length field of the entry format is u32, and a
// damaged index must not make a reader allocate without bound.
constexpr std::uint64_t kMaxRecord = std::uint64_t{1} << 34;

struct dctx_deleter {
  void operator()(ZSTD_DCtx* d) const noexcept { ZSTD_freeDCtx(d); }
};

std::span<const std::byte> as_bytes(std::string_view s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

void put_u32(std::vector<std::byte>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
void put_u64(std::vector<std::byte>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>((v >> (8 * i)) & 0xff));
}
void put_text(std::vector<std::byte>& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  const auto b = as_bytes(s);
  out.insert(out.end(), b.begin(), b.end());
}

std::uint64_t get_le(std::span<const std::byte> in, std::size_t at, int n) {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(in[at + i]) << (8 * i);
  return v;
}

// A bounds-checked cursor over the header or the index.
class cursor {
 public:
  explicit cursor(std::span<const std::byte> data) : data_(data) {}
  bool u8(std::uint8_t& v) {
    return take(1, [&] { v = static_cast<std::uint8_t>(data_[pos_]); });
  }
  bool u32(std::uint32_t& v) {
    return take(4, [&] { v = static_cast<std::uint32_t>(get_le(data_, pos_, 4)); });
  }
  bool u64(std::uint64_t& v) {
    return take(8, [&] { v = get_le(data_, pos_, 8); });
  }
  bool text(std::string& out) {
    std::uint32_t n = 0;
    if (!u32(n)) return false;
    return take(n, [&] { out.assign(reinterpret_cast<const char*>(data_.data() + pos_), n); });
  }
  std::size_t pos() const { return pos_; }
  std::size_t remaining() const { return data_.size() - pos_; }

 private:
  template <class F>
  bool take(std::size_t n, F&& f) {
    if (remaining() < n) return false;
    f();
    pos_ += n;
    return true;
  }
  std::span<const std::byte> data_;
  std::size_t pos_ = 0;
};

std::int64_t to_ns(std::optional<std::chrono::system_clock::time_point> t) {
  if (!t) return std::numeric_limits<std::int64_t>::min();
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t->time_since_epoch()).count();
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// writer

writer::writer(std::filesystem::path path) : path_(std::move(path)) {
  const std::filesystem::path dir = path_.has_parent_path() ? path_.parent_path() : ".";
  // Beside the pack, so that the final rename stays on one file system; created 0644 less the
  // umask, as the pack will be (mkstemp's 0600 would need the process-wide umask changed).
  std::random_device random;
  for (int attempt = 0; !fd_; ++attempt) {
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, ".tmp-%d-%08x", static_cast<int>(::getpid()), random());
    const std::filesystem::path temp = dir / ("." + path_.filename().string() + suffix);
    std::error_code ec;
    fd_ = posix::open_file(temp.string(), O_WRONLY | O_CREAT | O_EXCL, 0644, ec);
    if (fd_) temp_.path = temp;
    if (!fd_ && (ec != std::errc::file_exists || attempt == 100)) {
      throw error("cannot write the pack " + path_.string() + ": cannot create a file in " +
                  dir.string() + ": " + ec.message());
    }
  }
  cctx_.reset(ZSTD_createCCtx());
  if (!cctx_) throw std::bad_alloc();
  ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_compressionLevel, kLevel);
  ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_checksumFlag, 1);
  ZSTD_CCtx_setParameter(cctx_.get(), ZSTD_c_contentSizeFlag, 1);

  std::vector<std::byte> header;
  const auto magic = as_bytes(kMagic);
  header.insert(header.end(), magic.begin(), magic.end());
  put_u32(header, pack_format_version);
  put_u32(header, 0);  // the size, below
  const auto now = std::chrono::duration_cast<std::chrono::seconds>(
      std::chrono::system_clock::now().time_since_epoch());
  put_u64(header, static_cast<std::uint64_t>(now.count()));
  put_text(header, CUCORE_PACK_WRITER_VERSION);
  const auto size = static_cast<std::uint32_t>(header.size() + 8);
  for (int i = 0; i < 4; ++i) header[12 + i] = static_cast<std::byte>((size >> (8 * i)) & 0xff);
  put_u64(header, xxh3_64(header, {}));
  write(header);
}

writer::temporary::~temporary() {
  if (!committed && !path.empty()) ::unlink(path.c_str());
}

void writer::cctx_free::operator()(ZSTD_CCtx_s* c) const noexcept {
  ZSTD_freeCCtx(c);
}

void writer::write(std::span<const std::byte> bytes) {
  if (const auto ec = posix::write_fully(fd_.get(), bytes)) {
    throw error("cannot write the pack " + path_.string() + " (" + temp_.path.string() +
                "): " + ec.message());
  }
  offset_ += bytes.size();
}

std::uint64_t writer::add(std::string_view key, const object_code& code, std::string_view identity,
                          std::optional<std::chrono::system_clock::time_point> last_used) {
  const std::vector<std::byte> entry = encode_entry(as_bytes(key), code);
  std::vector<std::byte> prefix;
  put_text(prefix, identity);
  const std::size_t content = prefix.size() + entry.size();
  if (content > kMaxRecord) throw invalid_argument("a cache entry too large for a pack");
  ZSTD_CCtx* cctx = cctx_.get();
  ZSTD_CCtx_reset(cctx, ZSTD_reset_session_only);
  ZSTD_CCtx_setPledgedSrcSize(cctx, content);
  buffer_.resize(ZSTD_compressBound(content));
  ZSTD_outBuffer out{buffer_.data(), buffer_.size(), 0};
  // The identity and the entry as one frame's content, without joining them in memory.
  const std::vector<std::byte>* parts[] = {&prefix, &entry};
  for (const std::vector<std::byte>* part : parts) {
    ZSTD_inBuffer in{part->data(), part->size(), 0};
    const bool last = part == &entry;
    for (;;) {
      const std::size_t left =
          ZSTD_compressStream2(cctx, &out, &in, last ? ZSTD_e_end : ZSTD_e_continue);
      if (ZSTD_isError(left)) {
        throw error(std::string("zstd could not compress a pack record: ") +
                    ZSTD_getErrorName(left));
      }
      if (last ? left == 0 : in.pos == in.size) break;
    }
  }
  const std::span<const std::byte> frame(buffer_.data(), out.pos);
  row r;
  r.key.assign(key);
  r.offset = offset_;
  r.compressed = frame.size();
  r.content = content;
  r.digest = xxh3_64(frame, {});
  r.type = code.type();
  r.flags = identity.empty() ? 0 : kFlagIdentity;
  r.symbols = static_cast<std::uint32_t>(code.symbol_mapping().size());
  r.code_bytes = code.size();
  r.last_used = last_used;
  r.name = code.name();
  write(frame);
  rows_.push_back(std::move(r));
  return frame.size();
}

std::uint64_t writer::commit() {
  const std::uint64_t index_offset = offset_;
  std::vector<std::byte> index;
  std::uint64_t index_digest = 0;
  {
    for (const row& r : rows_) {
      put_text(index, r.key);
      put_u64(index, r.offset);
      put_u64(index, r.compressed);
      put_u64(index, r.content);
      put_u64(index, r.digest);
      index.push_back(static_cast<std::byte>(r.type));
      index.push_back(static_cast<std::byte>(r.flags));
      put_u32(index, r.symbols);
      put_u64(index, r.code_bytes);
      put_u64(index, static_cast<std::uint64_t>(to_ns(r.last_used)));
      put_text(index, r.name);
    }
    index_digest = xxh3_64(index, {});
    write(index);
  }
  std::vector<std::byte> trailer;
  put_u64(trailer, index_offset);
  put_u64(trailer, rows_.size());
  put_u64(trailer, index_digest);
  put_u32(trailer, pack_format_version);
  put_u32(trailer, 0);
  const auto magic = as_bytes(kTrailerMagic);
  trailer.insert(trailer.end(), magic.begin(), magic.end());
  write(trailer);
  if (const auto ec = posix::sync_file(fd_.get(), /*data_only=*/true)) {
    throw error("cannot write the pack " + path_.string() + ": " + ec.message());
  }
  if (const auto ec = fd_.close()) {
    throw error("cannot write the pack " + path_.string() + ": " + ec.message());
  }
  if (const auto ec = posix::rename_path(temp_.path.string(), path_.string())) {
    throw error("cannot write the pack " + path_.string() + ": rename from " + temp_.path.string() +
                ": " + ec.message());
  }
  temp_.committed = true;
  (void)posix::sync_directory(
      (path_.has_parent_path() ? path_.parent_path() : std::filesystem::path(".")).string());
  return offset_;
}

// ---------------------------------------------------------------------------------------------
// reader

reader::reader(std::filesystem::path path) : path_(std::move(path)) {
  std::error_code ec;
  fd_ = posix::open_file(path_.string(), O_RDONLY, 0, ec);
  if (!fd_) throw pack_error(path_, "cannot open it: " + ec.message());
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw pack_error(path_, "not a regular file");
  }
  const auto size = static_cast<std::uint64_t>(st.st_size);
  info_.file_bytes = size;
  const auto read_at = [&](std::uint64_t offset, std::size_t n, const char* what) {
    std::vector<std::byte> out(n);
    std::size_t got = 0;
    if (const auto e = posix::pread_fully(fd_.get(), out, offset, got)) {
      throw pack_error(path_, std::string("cannot read the ") + what + ": " + e.message(),
                       std::nullopt, offset);
    }
    if (got != n) {
      throw pack_error(path_, std::string("truncated: the ") + what + " ends past the file's end",
                       std::nullopt, offset);
    }
    return out;
  };

  // The header: a foreign file is named as such before anything else is judged.
  const std::vector<std::byte> head =
      read_at(0, static_cast<std::size_t>(std::min<std::uint64_t>(size, kMaxHeaderSize)), "header");
  if (head.size() < kMagic.size() || std::memcmp(head.data(), kMagic.data(), kMagic.size()) != 0) {
    throw pack_error(path_,
                     "not a cucore cache pack (it does not start with \"CUCOREPK\"): write one "
                     "with `cucore cache export`",
                     std::nullopt, 0);
  }
  std::uint32_t version = 0, header_size = 0;
  std::uint64_t created = 0;
  cursor h(std::span<const std::byte>(head).subspan(kMagic.size()));
  if (!h.u32(version) || !h.u32(header_size)) {
    throw pack_error(path_, "truncated: the header ends past the file's end", std::nullopt, 8);
  }
  if (version != pack_format_version) {
    throw pack_error(path_,
                     "format version " + std::to_string(version) +
                         ", but this cucore reads "
                         "version " +
                         std::to_string(pack_format_version) +
                         ": export it again with this cucore, or import it with the cucore that "
                         "wrote it",
                     std::nullopt, 8);
  }
  if (header_size < kMagic.size() + 28 || header_size > head.size()) {
    throw pack_error(path_,
                     header_size > head.size() && header_size <= kMaxHeaderSize
                         ? "truncated: the header ends past the file's end"
                         : "damaged header (its size field is " + std::to_string(header_size) + ")",
                     std::nullopt, 12);
  }
  const std::span<const std::byte> header(head.data(), header_size);
  if (xxh3_64(header.first(header_size - 8), {}) != get_le(header, header_size - 8, 8)) {
    throw pack_error(path_, "damaged header (digest mismatch)", std::nullopt, 0);
  }
  h = cursor(header.subspan(16, header_size - 16 - 8));
  if (!h.u64(created) || !h.text(info_.cucore_version) || h.remaining() != 0) {
    throw pack_error(path_, "damaged header (malformed fields)", std::nullopt, 16);
  }
  info_.format_version = version;
  info_.created = std::chrono::system_clock::time_point(
      std::chrono::seconds(static_cast<std::int64_t>(created)));

  // The trailer locates and vouches for the index.
  if (size < header_size + kTrailerSize) {
    throw pack_error(path_, "truncated: no trailer (an export that did not finish?)", std::nullopt,
                     size);
  }
  const std::uint64_t trailer_at = size - kTrailerSize;
  const std::vector<std::byte> trailer = read_at(trailer_at, kTrailerSize, "trailer");
  if (std::memcmp(trailer.data() + 32, kTrailerMagic.data(), kTrailerMagic.size()) != 0) {
    throw pack_error(path_, "truncated or damaged: no trailer at the end of the file", std::nullopt,
                     trailer_at);
  }
  const std::uint64_t index_offset = get_le(trailer, 0, 8);
  const std::uint64_t count = get_le(trailer, 8, 8);
  const std::uint64_t index_digest = get_le(trailer, 16, 8);
  if (get_le(trailer, 24, 4) != pack_format_version || get_le(trailer, 28, 4) != 0) {
    throw pack_error(path_, "damaged trailer (format version or reserved field)", std::nullopt,
                     trailer_at + 24);
  }
  if (index_offset < header_size || index_offset > trailer_at) {
    throw pack_error(path_, "damaged trailer (index offset " + std::to_string(index_offset) + ")",
                     std::nullopt, trailer_at);
  }
  const std::vector<std::byte> index =
      read_at(index_offset, static_cast<std::size_t>(trailer_at - index_offset), "index");
  if (xxh3_64(index, {}) != index_digest) {
    throw pack_error(path_, "damaged index (digest mismatch)", std::nullopt, index_offset);
  }
  // Rows: back to back from the header to the index, each key once.
  cursor c(index);
  std::uint64_t expected = header_size;
  rows_.reserve(static_cast<std::size_t>(std::min<std::uint64_t>(count, index.size() / 60 + 1)));
  for (std::uint64_t i = 0; i < count; ++i) {
    row r;
    std::uint8_t type = 0;
    std::uint64_t last_used = 0;
    if (!c.text(r.key) || !c.u64(r.offset) || !c.u64(r.compressed) || !c.u64(r.content) ||
        !c.u64(r.digest) || !c.u8(type) || !c.u8(r.flags) || !c.u32(r.symbols) ||
        !c.u64(r.code_bytes) || !c.u64(last_used) || !c.text(r.name)) {
      throw pack_error(path_, "damaged index (row " + std::to_string(i) + " is cut short)",
                       std::nullopt, index_offset + c.pos());
    }
    if (r.offset != expected || r.compressed == 0 || r.compressed > index_offset - r.offset ||
        r.content > kMaxRecord || type > static_cast<std::uint8_t>(code_type::tile_ir) ||
        (r.flags & ~kFlagIdentity) != 0) {
      throw pack_error(path_, "damaged index (its row is inconsistent)", i, r.offset);
    }
    expected = r.offset + r.compressed;
    r.type = static_cast<code_type>(type);
    if (last_used != static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::min())) {
      r.last_used = std::chrono::system_clock::time_point(
          std::chrono::duration_cast<std::chrono::system_clock::duration>(
              std::chrono::nanoseconds(static_cast<std::int64_t>(last_used))));
    }
    info_.code_bytes += r.code_bytes;
    rows_.push_back(std::move(r));
  }
  if (c.remaining() != 0) {
    throw pack_error(path_, "damaged index (bytes after its last row)", std::nullopt,
                     index_offset + c.pos());
  }
  if (expected != index_offset) {
    throw pack_error(path_, "damaged index (the records do not end where the index begins)",
                     std::nullopt, expected);
  }
  info_.entries = rows_.size();
  for (std::size_t i = 0; i < rows_.size(); ++i) {
    if (!by_key_.emplace(rows_[i].key, i).second) {
      throw pack_error(path_, "damaged index (a key appears twice)", i, rows_[i].offset);
    }
  }
}

const row* reader::find(std::string_view key) const {
  const auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : &rows_[it->second];
}

pack_error reader::error_at(std::size_t index, const std::string& reason) const {
  return pack_error(path_, reason, index, rows_[index].offset);
}

record reader::read(std::size_t index, bool with_code) const {
  record out;
  const row& r = rows_[index];
  std::vector<std::byte> frame(static_cast<std::size_t>(r.compressed));
  std::size_t got = 0;
  if (const auto ec = posix::pread_fully(fd_.get(), frame, r.offset, got)) {
    out.error = "cannot read it: " + ec.message();
    return out;
  }
  if (got != frame.size()) return out.error = "truncated (the file ends inside it)", out;
  if (xxh3_64(frame, {}) != r.digest) {
    return out.error = "damaged (its digest does not match the index's)", out;
  }
  if (ZSTD_findFrameCompressedSize(frame.data(), frame.size()) != frame.size() ||
      ZSTD_getFrameContentSize(frame.data(), frame.size()) != r.content) {
    return out.error = "damaged (not one zstd frame of the size the index gives)", out;
  }
  std::unique_ptr<ZSTD_DCtx, dctx_deleter> dctx(ZSTD_createDCtx());
  if (!dctx) throw std::bad_alloc();
  ZSTD_inBuffer in{frame.data(), frame.size(), 0};
  // The identity into a small buffer, the entry straight into the buffer the code adopts.
  std::byte length_bytes[4];
  std::size_t last_rc = 1;  // 0 once the frame is decoded, flushed and its checksum checked
  const auto decompress = [&](void* to, std::size_t n) {
    ZSTD_outBuffer o{to, n, 0};
    while (o.pos < o.size) {
      const std::size_t rc = last_rc = ZSTD_decompressStream(dctx.get(), &o, &in);
      if (ZSTD_isError(rc)) {
        out.error = std::string("damaged (zstd: ") + ZSTD_getErrorName(rc) + ")";
        return false;
      }
      if (rc == 0 && o.pos < o.size) return out.error = "damaged (its content is short)", false;
    }
    return true;
  };
  if (r.content < 4 || !decompress(length_bytes, 4)) {
    if (out.error.empty()) out.error = "damaged (its content is short)";
    return out;
  }
  const std::uint64_t identity_length = get_le(length_bytes, 0, 4);
  if (identity_length > r.content - 4) return out.error = "damaged (identity length)", out;
  out.identity.resize(static_cast<std::size_t>(identity_length));
  if (!decompress(out.identity.data(), out.identity.size())) return out;
  const auto entry_length = static_cast<std::size_t>(r.content - 4 - identity_length);
  uninitialized_bytes entry(entry_length);
  if (!decompress(entry.data, entry_length)) return out;
  // The frame ends here, its zstd checksum checked: nothing may follow.
  while (last_rc != 0) {
    std::byte extra[1];
    ZSTD_outBuffer o{extra, 1, 0};
    const std::size_t before = in.pos;
    const std::size_t rc = ZSTD_decompressStream(dctx.get(), &o, &in);
    if (ZSTD_isError(rc)) {
      return out.error = std::string("damaged (zstd: ") + ZSTD_getErrorName(rc) + ")", out;
    }
    if (o.pos != 0) return out.error = "damaged (content past its end)", out;
    last_rc = rc;
    if (rc != 0 && in.pos == before) return out.error = "damaged (the frame is cut short)", out;
  }
  decoded_entry decoded = decode_entry(std::move(entry), entry_length, as_bytes(r.key));
  if (decoded.status != entry_status::ok) {
    return out.error = "damaged entry (" + std::string(to_string(decoded.status)) + ")", out;
  }
  const object_code& code = *decoded.code;
  if (code.type() != r.type || code.size() != r.code_bytes || code.name() != r.name ||
      code.symbol_mapping().size() != r.symbols) {
    return out.error = "damaged (the entry does not match its index row)", out;
  }
  if (with_code) out.code = std::move(decoded.code);
  return out;
}

}  // namespace cucore::detail::pack
