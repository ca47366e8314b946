#include "key/header_memo.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <utility>

#include "cache/checksum.hpp"
#include "cache/key_files.hpp"

namespace cucore::detail {

namespace {

bool ident_char_c(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// Only called on text read from a file (memoised) or on a program that has directives.
wrapper_info find_wrappers(std::string_view text) {
  wrapper_info out;
  if (text.find("__has_include") == std::string_view::npos &&
      text.find('(') == std::string_view::npos) {
    return out;
  }
  // Function-like #defines whose body applies __has_include/__has_include_next to a parameter.
  for (std::size_t pos = text.find("define"); pos != std::string_view::npos;
       pos = text.find("define", pos + 6)) {
    // A directive: only spaces and '#' between the line start and "define".
    std::size_t b = pos;
    while (b > 0 && (text[b - 1] == ' ' || text[b - 1] == '\t')) --b;
    if (b == 0 || text[b - 1] != '#') continue;
    std::size_t i = pos + 6;
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
    const std::size_t name_start = i;
    while (i < text.size() && ident_char_c(text[i])) ++i;
    if (i == name_start || i >= text.size() || text[i] != '(') continue;
    const std::size_t close = text.find(')', i);
    if (close == std::string_view::npos) break;
    std::vector<std::string> params;
    for (std::size_t k = i + 1; k < close;) {
      while (k < close && !ident_char_c(text[k])) ++k;
      const std::size_t p0 = k;
      while (k < close && ident_char_c(text[k])) ++k;
      if (k > p0) params.emplace_back(text.substr(p0, k - p0));
    }
    // The body: to the end of the logical line (splices continue it).
    std::size_t end = close;
    for (;;) {
      end = text.find('\n', end + 1);
      if (end == std::string_view::npos) {
        end = text.size();
        break;
      }
      std::size_t back = end;
      if (back > 0 && text[back - 1] == '\r') --back;
      if (back == 0 || text[back - 1] != '\\') break;
    }
    const std::string_view body = text.substr(close + 1, end - close - 1);
    for (std::size_t h = body.find("__has_include"); h != std::string_view::npos;
         h = body.find("__has_include", h + 13)) {
      std::size_t k = h + 13;
      if (body.substr(k, 5) == "_next") k += 5;
      while (k < body.size() && (body[k] == ' ' || body[k] == '\t' || body[k] == '\\' ||
                                 body[k] == '\n' || body[k] == '\r')) {
        ++k;
      }
      if (k >= body.size() || body[k] != '(') continue;
      ++k;
      while (k < body.size() && (body[k] == ' ' || body[k] == '\t')) ++k;
      const std::size_t a0 = k;
      while (k < body.size() && ident_char_c(body[k])) ++k;
      const std::string arg(body.substr(a0, k - a0));
      if (std::find(params.begin(), params.end(), arg) != params.end()) {
        out.wrapper_parameters.push_back(arg);
      }
    }
  }
  // Call-shaped header names anywhere: IDENT ( "name" ) or IDENT ( <name> ).
  std::uint32_t line = 1;
  std::size_t counted = 0;
  for (std::size_t open = text.find('('); open != std::string_view::npos;
       open = text.find('(', open + 1)) {
    std::size_t b = open;
    while (b > 0 && (text[b - 1] == ' ' || text[b - 1] == '\t')) --b;
    if (b == 0 || !ident_char_c(text[b - 1])) continue;
    std::size_t k = open + 1;
    while (k < text.size() && (text[k] == ' ' || text[k] == '\t')) ++k;
    if (k >= text.size() || (text[k] != '"' && text[k] != '<')) continue;
    const char close_char = text[k] == '"' ? '"' : '>';
    const std::size_t close = text.find(close_char, k + 1);
    if (close == std::string_view::npos) continue;
    const std::string_view name = text.substr(k + 1, close - k - 1);
    if (name.empty() || name.size() > 255 ||
        name.find_first_of("\n\"<>()") != std::string_view::npos) {
      continue;
    }
    std::size_t after = close + 1;
    while (after < text.size() && (text[after] == ' ' || text[after] == '\t')) ++after;
    if (after >= text.size() || text[after] != ')') continue;
    // A quoted argument is a header name only if it looks like one (printf("%d\n") is not).
    if (close_char == '"' && (name.find_first_of(" %\\") != std::string_view::npos ||
                              name.find_first_of("./") == std::string_view::npos)) {
      continue;
    }
    line +=
        static_cast<std::uint32_t>(std::count(text.begin() + static_cast<std::ptrdiff_t>(counted),
                                              text.begin() + static_cast<std::ptrdiff_t>(k), '\n'));
    counted = k;
    out.header_calls.push_back({include_kind::has_include,
                                close_char == '"' ? include_form::quoted : include_form::angle,
                                std::string(name), line});
  }
  return out;
}

void derive(scanned_file& file) {
  file.continues_search = std::any_of(
      file.scan.references.begin(), file.scan.references.end(), [](const include_reference& r) {
        return r.kind == include_kind::include_next || r.kind == include_kind::has_include_next;
      });
}

}  // namespace

std::shared_ptr<scanned_file> make_scanned(std::string_view text) {
  auto file = std::make_shared<scanned_file>();
  file->size = text.size();
  file->digest = sha256(std::as_bytes(std::span<const char>(text.data(), text.size())));
  file->scan = scan_includes(text);
  file->wrappers = find_wrappers(text);
  file->conditionals = scan_conditionals(text);
  file->defined = defined_names(text);
  file->time_macros = scan_time_tokens(text);
  derive(*file);
  return file;
}

// Everything left to read from `fd` (which stays open); false on a read error.
bool read_all(int fd, std::string& data) {
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    data.append(buffer, static_cast<std::size_t>(n));
  }
}

// Writes `bytes` to a temp file beside `file` and renames it over `file` (its directory created
// first): readers see the old file or the new one, never a torn one. False when that failed (the
// temp file is removed). mkostemp creates it 0600 (O_EXCL: nothing planted is followed or
// reused); `mode`, when given, is set on it before the rename.
bool replace_file(const std::filesystem::path& file, std::string_view bytes,
                  std::optional<mode_t> mode) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  std::string temp = file.string() + ".tmp-XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = !mode || ::fchmod(fd, *mode) == 0;
  for (std::size_t done = 0; ok && done < bytes.size();) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    ok = n > 0;
    if (ok) done += static_cast<std::size_t>(n);
  }
  ok = (::close(fd) == 0) && ok;
  if (!ok || ::rename(temp.c_str(), file.c_str()) != 0) {
    ::unlink(temp.c_str());
    return false;
  }
  return true;
}

void put_identity(record_writer& w, const header_identity& id) {
  w.u64(id.dev);
  w.u64(id.ino);
  w.u64(id.size);
  w.u64(static_cast<std::uint64_t>(id.mtime_ns));
  w.u64(static_cast<std::uint64_t>(id.ctime_ns));
}

header_identity get_identity(record_reader& r) {
  header_identity id;
  id.dev = r.u64();
  id.ino = r.u64();
  id.size = r.u64();
  id.mtime_ns = static_cast<std::int64_t>(r.u64());
  id.ctime_ns = static_cast<std::int64_t>(r.u64());
  return id;
}

std::uint64_t checksum_of(std::string_view bytes) {
  return xxh3_64(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), {});
}

namespace {

// The memo file: magic, format version, records, then an XXH3 of everything before it. A file that
// does not parse or check is ignored (and replaced on the next save).
constexpr std::string_view kMemoMagic = "CUCOREHM";
// 4: the conditional structure as issue 31 reads it (unsigned #if arithmetic, true/false,
// #elifdef, ASCII identifiers, every --std); a version 3 memo holds structures read the old way,
// which could skip a group NVRTC enters, so it is ignored.
// 5: each record also says whether the file names __TIME__, __DATE__ or __TIMESTAMP__.
// 6: ... and its paste operators and identifier pieces of those names (scan_time_tokens).
constexpr std::uint32_t kMemoVersion = 6;
constexpr std::size_t kMemoMaxRecords = 200'000;

using memo_map =
    std::unordered_map<std::string,
                       std::pair<header_identity, std::shared_ptr<const scanned_file>>>;

void parse_memo(std::string_view data, memo_map& into) {
  if (data.size() < kMemoMagic.size() + 8 + 8) return;
  const std::string_view body = data.substr(0, data.size() - 8);
  std::uint64_t stored = 0;
  std::memcpy(&stored, data.data() + body.size(), 8);
  if (checksum_of(body) != stored) return;
  record_reader r(body);
  char magic[8];
  r.raw(magic, sizeof magic);
  if (!r.ok() || std::string_view(magic, 8) != kMemoMagic || r.u32() != kMemoVersion) return;
  const std::uint64_t count = r.u64();
  memo_map parsed;
  for (std::uint64_t i = 0; i < count && r.ok(); ++i) {
    std::string path = r.str();
    const header_identity id = get_identity(r);
    auto file = std::make_shared<scanned_file>();
    r.raw(file->digest.data(), file->digest.size());
    file->size = r.u64();
    const std::uint32_t refs = r.u32();
    for (std::uint32_t k = 0; k < refs && r.ok(); ++k) {
      include_reference ref{};
      ref.kind = static_cast<include_kind>(r.u8());
      ref.form = static_cast<include_form>(r.u8());
      ref.line = r.u32();
      ref.name = r.str();
      if (static_cast<unsigned>(ref.kind) > static_cast<unsigned>(include_kind::has_embed) ||
          static_cast<unsigned>(ref.form) > static_cast<unsigned>(include_form::computed)) {
        return;
      }
      file->scan.references.push_back(std::move(ref));
    }
    const std::uint32_t defs = r.u32();
    for (std::uint32_t k = 0; k < defs && r.ok(); ++k) {
      macro_definition def;
      def.name = r.str();
      def.body = r.str();
      def.line = r.u32();
      file->scan.definitions.push_back(std::move(def));
    }
    file->wrappers.wrapper_parameters = r.strs();
    const std::uint32_t calls = r.u32();
    for (std::uint32_t k = 0; k < calls && r.ok(); ++k) {
      include_reference c{};
      c.kind = include_kind::has_include;
      c.form = static_cast<include_form>(r.u8());
      c.line = r.u32();
      c.name = r.str();
      if (c.form == include_form::computed) return;
      file->wrappers.header_calls.push_back(std::move(c));
    }
    const std::uint32_t functions = r.u32();
    for (std::uint32_t k = 0; k < functions && r.ok(); ++k) {
      function_macro_definition f;
      f.name = r.str();
      f.parameters = r.strs();
      f.body = r.str();
      f.line = r.u32();
      file->scan.function_definitions.push_back(std::move(f));
    }
    file->conditionals.known = r.u8() != 0;
    const std::uint32_t groups = r.u32();
    for (std::uint32_t k = 0; k < groups && r.ok(); ++k) {
      conditional_group g;
      g.first_line = r.u32();
      g.last_line = r.u32();
      g.chain = r.u32();
      g.condition = r.str();
      g.names = r.strs();
      g.when_undefined = r.u8();
      if (g.when_undefined > 2) return;
      file->conditionals.groups.push_back(std::move(g));
    }
    file->defined = r.strs();
    const std::uint8_t time_macros = r.u8();
    if (!r.ok() || time_macros > 3) return;
    file->time_macros.literal = (time_macros & 1) != 0;
    file->time_macros.paste = (time_macros & 2) != 0;
    file->time_macros.pieces[0] = r.u64();
    file->time_macros.pieces[1] = r.u64();
    derive(*file);
    parsed.emplace(std::move(path), std::make_pair(id, std::move(file)));
  }
  if (!r.ok() || !r.at_end()) return;
  for (auto& [path, rec] : parsed) into.emplace(path, std::move(rec));
}

std::string serialize_memo(const memo_map& records) {
  record_writer w;
  w.raw(kMemoMagic.data(), kMemoMagic.size());
  w.u32(kMemoVersion);
  w.u64(records.size());
  for (const auto& [path, rec] : records) {
    const auto& [id, file] = rec;
    w.str(path);
    put_identity(w, id);
    w.raw(file->digest.data(), file->digest.size());
    w.u64(file->size);
    w.u32(static_cast<std::uint32_t>(file->scan.references.size()));
    for (const auto& ref : file->scan.references) {
      w.u8(static_cast<std::uint8_t>(ref.kind));
      w.u8(static_cast<std::uint8_t>(ref.form));
      w.u32(ref.line);
      w.str(ref.name);
    }
    w.u32(static_cast<std::uint32_t>(file->scan.definitions.size()));
    for (const auto& def : file->scan.definitions) {
      w.str(def.name);
      w.str(def.body);
      w.u32(def.line);
    }
    w.strs(file->wrappers.wrapper_parameters);
    w.u32(static_cast<std::uint32_t>(file->wrappers.header_calls.size()));
    for (const auto& c : file->wrappers.header_calls) {
      w.u8(static_cast<std::uint8_t>(c.form));
      w.u32(c.line);
      w.str(c.name);
    }
    w.u32(static_cast<std::uint32_t>(file->scan.function_definitions.size()));
    for (const auto& f : file->scan.function_definitions) {
      w.str(f.name);
      w.strs(f.parameters);
      w.str(f.body);
      w.u32(f.line);
    }
    w.u8(file->conditionals.known ? 1 : 0);
    w.u32(static_cast<std::uint32_t>(file->conditionals.groups.size()));
    for (const auto& g : file->conditionals.groups) {
      w.u32(g.first_line);
      w.u32(g.last_line);
      w.u32(g.chain);
      w.str(g.condition);
      w.strs(g.names);
      w.u8(g.when_undefined);
    }
    w.strs(file->defined);
    w.u8(static_cast<std::uint8_t>((file->time_macros.literal ? 1 : 0) |
                                   (file->time_macros.paste ? 2 : 0)));
    w.u64(file->time_macros.pieces[0]);
    w.u64(file->time_macros.pieces[1]);
  }
  const std::uint64_t sum = checksum_of(w.out);
  w.u64(sum);
  return std::move(w.out);
}

// The memo at `file`, when it is one this user may trust (see header_memo_file_beside).
std::optional<std::string> read_memo(const std::filesystem::path& file) {
  return read_key_file(file, kMemoMaxBytes, owned_privately);
}

}  // namespace

void header_digest_memo::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  if (!file_) return;
  auto data = read_memo(*file_);
  if (!data) return;
  memo_map parsed;
  parse_memo(*data, parsed);
  for (auto& [path, rec] : parsed) {
    records_.emplace(path, record{rec.first, std::move(rec.second)});
  }
}

void header_digest_memo::save() noexcept {
  try {
    std::lock_guard lock(mutex_);
    if (!dirty_ || !file_) return;
    dirty_ = false;
    memo_map merged;
    for (const auto& [path, rec] : records_) merged.emplace(path, std::make_pair(rec.id, rec.data));
    if (auto data = read_memo(*file_)) parse_memo(*data, merged);  // ours win
    // Bounded: past the caps, the other processes' records go first (this process's stay).
    for (auto it = merged.begin(); merged.size() > kMemoMaxRecords && it != merged.end();) {
      it = records_.count(it->first) ? std::next(it) : merged.erase(it);
    }
    std::string bytes = serialize_memo(merged);
    // Bounded in bytes too (readers ignore a larger file): a tenth of the records at a time go,
    // the other processes' first, until it fits.
    while (bytes.size() > kMemoMaxBytes && !merged.empty()) {
      std::size_t drop = std::max<std::size_t>(1, merged.size() / 10);
      for (const bool theirs_only : {true, false}) {
        for (auto it = merged.begin(); drop > 0 && it != merged.end();) {
          if (theirs_only && records_.count(it->first) != 0) {
            ++it;
            continue;
          }
          it = merged.erase(it);
          --drop;
        }
      }
      bytes = serialize_memo(merged);
    }
    if (replace_file(*file_, bytes)) sweep_key_temps(file_->parent_path());
  } catch (...) {
    // Best effort (see above).
  }
}

header_digest_memo& header_memo_for(const std::optional<std::filesystem::path>& file) {
  static std::mutex mutex;
  static auto* memos =
      new std::map<std::filesystem::path, std::unique_ptr<header_digest_memo>>();  // leaked
  static auto* in_process = new header_digest_memo(std::nullopt);                  // leaked
  if (!file) return *in_process;
  std::lock_guard lock(mutex);
  auto& slot = (*memos)[*file];
  if (!slot) slot = std::make_unique<header_digest_memo>(*file);
  return *slot;
}

}  // namespace cucore::detail
