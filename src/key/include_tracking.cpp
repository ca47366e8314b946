#include "key/include_tracking.hpp"

#include <dirent.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "cache/checksum.hpp"
#include "key/conditional_scan.hpp"
#include "key/include_scanner.hpp"
#include "common/sha256.hpp"

namespace cucore::detail {

// -----------------------------------------------------------------------------------------------
// File identities and the digest memo.

namespace {

// Files changed more recently than this are hashed on every walk and never memoised: two versions
// written within one timestamp tick (coarse kernel clock, 1 s or 2 s on some file systems) would
// have equal identities.
constexpr std::int64_t kSettleNs = 2'000'000'000;

struct header_identity {
  std::uint64_t dev = 0;
  std::uint64_t ino = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;
  friend bool operator==(const header_identity&, const header_identity&) = default;
};

std::int64_t ns_of(const struct timespec& t) {
  return static_cast<std::int64_t>(t.tv_sec) * 1'000'000'000 + t.tv_nsec;
}

header_identity identity_of(const struct stat& st) {
  return {static_cast<std::uint64_t>(st.st_dev), static_cast<std::uint64_t>(st.st_ino),
          static_cast<std::uint64_t>(st.st_size), ns_of(st.st_mtim), ns_of(st.st_ctim)};
}

std::int64_t now_ns() {
  struct timespec t {};
  ::clock_gettime(CLOCK_REALTIME, &t);
  return ns_of(t);
}

bool settled(const header_identity& id) {
  return std::max(id.mtime_ns, id.ctime_ns) < now_ns() - kSettleNs;
}

}  // namespace

// __has_include through function-like macros: CCCL writes
//   #define _CCCL_HAS_INCLUDE(_X) __has_include(_X)      and then _CCCL_HAS_INCLUDE(<cuda_fp16.h>)
// The scanner sees __has_include(_X); the names are in the wrapper's calls, possibly in other
// files and through other macros that forward to it. So: the parameters such wrappers pass to
// __has_* are noted per file, and every call-shaped IDENT("name") / IDENT(<name>) in the closure
// is taken as a possible __has_include once any wrapper exists (a superset, forwarders included).
struct wrapper_info {
  std::vector<std::string>
      wrapper_parameters;  // parameters a function-like macro passes to __has_*
  std::vector<include_reference>
      header_calls;  // IDENT ( "name" ) and IDENT ( <name> ), as has_include
};

// What one file holds, as far as keys care.
struct scanned_file {
  sha256_digest digest{};
  std::uint64_t size = 0;
  include_scan scan;
  wrapper_info wrappers;
  conditional_structure conditionals;  // for skipping includes in groups never entered
  std::vector<std::string> defined;    // every macro name the file may #define (a superset)
  // Derived (not stored): whether where the file was found matters to what it includes
  // (#include_next, __has_include_next continue the search from there).
  bool continues_search = false;
};

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

std::shared_ptr<scanned_file> make_scanned(std::string_view text) {
  auto file = std::make_shared<scanned_file>();
  file->size = text.size();
  file->digest = sha256(std::as_bytes(std::span<const char>(text.data(), text.size())));
  file->scan = scan_includes(text);
  file->wrappers = find_wrappers(text);
  file->conditionals = scan_conditionals(text);
  file->defined = defined_names(text);
  derive(*file);
  return file;
}

}  // namespace

class header_digest_memo {
 public:
  explicit header_digest_memo(std::optional<std::filesystem::path> file) : file_(std::move(file)) {}

  std::shared_ptr<const scanned_file> lookup(const std::string& path, const header_identity& id) {
    std::lock_guard lock(mutex_);
    load_locked();
    auto it = records_.find(path);
    if (it == records_.end() || !(it->second.id == id)) return nullptr;
    return it->second.data;
  }

  void remember(const std::string& path, const header_identity& id,
                std::shared_ptr<const scanned_file> data) {
    std::lock_guard lock(mutex_);
    load_locked();
    records_[path] = record{id, std::move(data)};
    dirty_ = true;
  }

  // Writes the memo back when this process added records: merged with what other processes wrote
  // meanwhile, then temp file + rename, so readers see an old or a new memo, never a torn one.
  // Best effort: a memo that cannot be written only costs hashing later.
  void save() noexcept;

  // The memo's file (and so whether keys made with it are for a persistent cache).
  const std::optional<std::filesystem::path>& file() const { return file_; }

 private:
  struct record {
    header_identity id;
    std::shared_ptr<const scanned_file> data;
  };
  void load_locked();

  std::optional<std::filesystem::path> file_;
  std::mutex mutex_;
  bool loaded_ = false;
  bool dirty_ = false;
  std::unordered_map<std::string, record> records_;
};

namespace {

// The memo file: magic, format version, records, then an XXH3 of everything before it. A file that
// does not parse or check is ignored (and replaced on the next save).
constexpr std::string_view kMemoMagic = "CUCOREHM";
constexpr std::uint32_t kMemoVersion = 3;
constexpr std::size_t kMemoMaxRecords = 200'000;

class writer {
 public:
  void u8(std::uint8_t v) { out.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { raw(&v, sizeof v); }
  void u64(std::uint64_t v) { raw(&v, sizeof v); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out.append(s);
  }
  void strs(const std::vector<std::string>& v) {  // a count, then each string
    u32(static_cast<std::uint32_t>(v.size()));
    for (const auto& s : v) str(s);
  }
  void raw(const void* p, std::size_t n) { out.append(static_cast<const char*>(p), n); }
  std::string out;
};

class reader {
 public:
  explicit reader(std::string_view in) : in_(in) {}
  bool ok() const { return ok_; }
  std::uint8_t u8() {
    std::uint8_t v = 0;
    raw(&v, 1);
    return v;
  }
  std::uint32_t u32() {
    std::uint32_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  std::uint64_t u64() {
    std::uint64_t v = 0;
    raw(&v, sizeof v);
    return v;
  }
  std::string str() { return std::string(view()); }
  // A count, then each string (what writer::strs wrote); stops at the first error.
  std::vector<std::string> strs() {
    std::vector<std::string> v;
    const std::uint32_t n = u32();
    for (std::uint32_t i = 0; i < n && ok_; ++i) v.push_back(str());
    return v;
  }
  // A string as a view into the input.
  std::string_view view() {
    const std::uint32_t n = u32();
    if (!ok_ || n > in_.size() - pos_) {
      ok_ = false;
      return {};
    }
    const std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  void raw(void* p, std::size_t n) {
    if (!ok_ || n > in_.size() - pos_) {
      ok_ = false;
      return;
    }
    if (n != 0) std::memcpy(p, in_.data() + pos_, n);
    pos_ += n;
  }
  bool at_end() const { return pos_ == in_.size(); }

 private:
  std::string_view in_;
  std::size_t pos_ = 0;
  bool ok_ = true;
};

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

std::optional<std::string> read_whole(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string data;
  const bool ok = read_all(fd, data);
  ::close(fd);
  if (!ok) return std::nullopt;
  return data;
}

// Writes `bytes` to a temp file beside `file` and renames it over `file` (its directory created
// first): readers see the old file or the new one, never a torn one. False when that failed (the
// temp file is removed).
bool replace_file(const std::filesystem::path& file, std::string_view bytes) {
  std::error_code ec;
  std::filesystem::create_directories(file.parent_path(), ec);
  std::string temp = file.string() + ".tmp-XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = true;
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

std::uint64_t checksum_of(std::string_view bytes) {
  return xxh3_64(std::as_bytes(std::span<const char>(bytes.data(), bytes.size())), {});
}

using memo_map =
    std::unordered_map<std::string,
                       std::pair<header_identity, std::shared_ptr<const scanned_file>>>;

void parse_memo(std::string_view data, memo_map& into) {
  if (data.size() < kMemoMagic.size() + 8 + 8) return;
  const std::string_view body = data.substr(0, data.size() - 8);
  std::uint64_t stored = 0;
  std::memcpy(&stored, data.data() + body.size(), 8);
  if (checksum_of(body) != stored) return;
  reader r(body);
  char magic[8];
  r.raw(magic, sizeof magic);
  if (!r.ok() || std::string_view(magic, 8) != kMemoMagic || r.u32() != kMemoVersion) return;
  const std::uint64_t count = r.u64();
  memo_map parsed;
  for (std::uint64_t i = 0; i < count && r.ok(); ++i) {
    std::string path = r.str();
    header_identity id;
    id.dev = r.u64();
    id.ino = r.u64();
    id.size = r.u64();
    id.mtime_ns = static_cast<std::int64_t>(r.u64());
    id.ctime_ns = static_cast<std::int64_t>(r.u64());
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
    if (!r.ok()) return;
    derive(*file);
    parsed.emplace(std::move(path), std::make_pair(id, std::move(file)));
  }
  if (!r.ok() || !r.at_end()) return;
  for (auto& [path, rec] : parsed) into.emplace(path, std::move(rec));
}

std::string serialize_memo(const memo_map& records) {
  writer w;
  w.raw(kMemoMagic.data(), kMemoMagic.size());
  w.u32(kMemoVersion);
  w.u64(records.size());
  for (const auto& [path, rec] : records) {
    const auto& [id, file] = rec;
    w.str(path);
    w.u64(id.dev);
    w.u64(id.ino);
    w.u64(id.size);
    w.u64(static_cast<std::uint64_t>(id.mtime_ns));
    w.u64(static_cast<std::uint64_t>(id.ctime_ns));
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
  }
  const std::uint64_t sum = checksum_of(w.out);
  w.u64(sum);
  return std::move(w.out);
}

}  // namespace

void header_digest_memo::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  if (!file_) return;
  auto data = read_whole(file_->string());
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
    if (auto data = read_whole(file_->string())) parse_memo(*data, merged);  // ours win
    // Bounded: past the cap, the other processes' records go first (this process's stay).
    for (auto it = merged.begin(); merged.size() > kMemoMaxRecords && it != merged.end();) {
      it = records_.count(it->first) ? std::next(it) : merged.erase(it);
    }
    (void)replace_file(*file_, serialize_memo(merged));
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

std::filesystem::path header_memo_file_beside(const std::filesystem::path& version_memo) {
  std::string name = version_memo.filename().string();
  const std::string_view suffix = "compiler-versions";
  if (name.ends_with(suffix)) {
    name.replace(name.size() - suffix.size(), suffix.size(), "header-digests");
  } else {
    name += ".header-digests";
  }
  return version_memo.parent_path() / name;
}

// -----------------------------------------------------------------------------------------------
// The walk.

namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return {};
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  if (dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

// What one stat of a search candidate found: a regular file with its identity, or not (absent, a
// directory, ...); a symlink is followed, and its own identity and resolved path kept (a link
// retargeted to a hard link of the same file elsewhere changes the directory its quoted includes
// search). A listing check is of a directory whose entries the walk read (the NVRTC library's,
// for its builtins libraries): `regular` then says it was a directory, `id` is the directory's
// own (adding, removing or renaming an entry changes its mtime and ctime).
struct stat_check {
  std::string path;
  bool listing = false;
  bool regular = false;
  bool link = false;
  header_identity id;       // the file's (through the link), when regular
  header_identity link_id;  // the link's own, when link
  std::string real;         // realpath(), when link
  bool same_answer(const stat_check& o) const {
    return listing == o.listing && regular == o.regular && link == o.link &&
           (!regular || id == o.id) && (!link || (link_id == o.link_id && real == o.real));
  }
};

// lstat first: one call for the usual regular file. `keep_path` false: for comparisons only.
stat_check probe(const std::string& path, bool keep_path = true) {
  stat_check c;
  if (keep_path) c.path = path;
  const char* p = path.c_str();
  struct stat st {};
  if (::lstat(p, &st) != 0) return c;
  if (S_ISLNK(st.st_mode)) {
    c.link = true;
    c.link_id = identity_of(st);
    if (char* real = ::realpath(p, nullptr)) {
      c.real = real;
      std::free(real);
    }
    if (::stat(p, &st) != 0) return c;
  }
  c.regular = S_ISREG(st.st_mode);
  if (c.regular) c.id = identity_of(st);
  return c;
}

// A listing check of `path` (through links: the directory a listing of the path reads).
stat_check probe_listing(const std::string& path, bool keep_path = true) {
  stat_check c;
  if (keep_path) c.path = path;
  c.listing = true;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return c;
  c.regular = true;
  c.id = identity_of(st);
  return c;
}

stat_check reprobe(const stat_check& c) {
  return c.listing ? probe_listing(c.path, false) : probe(c.path, false);
}

// A walk's closure with every stat answer it rested on (see track_includes).
struct walk_manifest {
  std::vector<stat_check> checks;
  std::shared_ptr<const include_closure> closure;
  // The NVRTC library directory the walk read predefined macros from (its builtins libraries:
  // checks too), when it asked for one and got one. A walk that got none assumed every macro may
  // be predefined: its closure holds whatever NVRTC compiles, so it is not recorded.
  std::string nvrtc_directory;
  // The checks by directory, for revalidation by fstatat on one descriptor per directory (a
  // path walk per directory instead of one per candidate: hundreds of candidates share a few
  // dozen toolkit directories).
  struct in_directory {
    std::string dir;  // "" for names without a directory part (the working directory)
    std::vector<std::pair<std::size_t, std::string>> names;  // check index, last component
  };
  std::vector<in_directory> by_directory;
  // Checks re-probed by path: symlinks (realpath, stat through the link), listings, and names
  // without a plain last component.
  std::vector<std::size_t> links;
};

// Splits a manifest's checks by directory.
void group_checks(walk_manifest& m) {
  std::unordered_map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < m.checks.size(); ++i) {
    const stat_check& c = m.checks[i];
    if (c.link || c.listing) {
      m.links.push_back(i);
      continue;
    }
    const auto slash = c.path.rfind('/');
    std::string dir = slash == std::string::npos ? std::string() : c.path.substr(0, slash + 1);
    std::string name = slash == std::string::npos ? c.path : c.path.substr(slash + 1);
    if (name.empty() || name == "." || name == "..") {  // not a plain last component
      m.links.push_back(i);
      continue;
    }
    auto [it, added] = index.try_emplace(dir, m.by_directory.size());
    if (added) m.by_directory.push_back({std::move(dir), {}});
    m.by_directory[it->second].names.emplace_back(i, std::move(name));
  }
}

// One file descriptor, closed on scope exit.
class scoped_fd {
 public:
  explicit scoped_fd(int fd) : fd_(fd) {}
  scoped_fd(const scoped_fd&) = delete;
  scoped_fd& operator=(const scoped_fd&) = delete;
  ~scoped_fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

// Whether every check of `m` answers as when it was made, and the NVRTC the walk read predefined
// macros from is the one `search` names now. fstatat(dir, name) on a descriptor opened now
// resolves exactly as lstat(dir/name) does now; a directory that cannot be opened holds no
// regular file.
bool still_valid(const walk_manifest& m, const include_search& search) {
  if (!m.nvrtc_directory.empty() &&
      (!search.nvrtc_directory || search.nvrtc_directory() != m.nvrtc_directory)) {
    return false;
  }
  for (const std::size_t i : m.links) {
    if (!reprobe(m.checks[i]).same_answer(m.checks[i])) return false;
  }
  for (const auto& group : m.by_directory) {
    const scoped_fd opened(
        group.dir.empty() ? -1 : ::open(group.dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    const int dirfd = group.dir.empty() ? AT_FDCWD : opened.get();
    const bool dir_opened = group.dir.empty() || opened.get() >= 0;
    for (const auto& [i, name] : group.names) {
      const stat_check& c = m.checks[i];
      struct stat st {};
      const bool found =
          dir_opened && ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0;
      if (found && S_ISLNK(st.st_mode)) return false;  // a link now: walk again
      const bool regular = found && S_ISREG(st.st_mode);
      if (regular != c.regular || (regular && !(identity_of(st) == c.id))) return false;
    }
  }
  return true;
}

// The manifests of this process, by the walk's exact inputs (code, search, working directory).
class manifest_store {
 public:
  std::shared_ptr<const walk_manifest> find(const std::string& inputs) {
    std::lock_guard lock(mutex_);
    auto it = manifests_.find(inputs);
    return it == manifests_.end() ? nullptr : it->second;
  }
  void put(const std::string& inputs, std::shared_ptr<const walk_manifest> m) {
    std::lock_guard lock(mutex_);
    // Bounded: a process that derives keys of endless distinct programs drops old manifests (they
    // only save stats-free re-walks).
    if (manifests_.size() >= kMaxManifests && manifests_.find(inputs) == manifests_.end()) {
      manifests_.erase(manifests_.begin());
    }
    manifests_[inputs] = std::move(m);
  }

 private:
  static constexpr std::size_t kMaxManifests = 256;
  struct fast_hash {
    std::size_t operator()(const std::string& s) const noexcept {
      return static_cast<std::size_t>(
          xxh3_64(std::as_bytes(std::span<const char>(s.data(), s.size())), {}));
    }
  };
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const walk_manifest>, fast_hash> manifests_;
};

manifest_store& manifests() {
  static auto* store = new manifest_store();  // leaked: nothing to free at exit
  return *store;
}

std::string current_directory() {
  std::string buffer(4096, '\0');
  if (::getcwd(buffer.data(), buffer.size()) == nullptr) return "?";
  buffer.resize(std::strlen(buffer.c_str()));
  return buffer;
}

// Everything a walk reads besides the file system, framed (length-prefixed) so that no two
// different input sets frame alike.
std::string walk_inputs(std::string_view code, const include_search& search,
                        const std::string& cwd) {
  std::string out;
  out.reserve(code.size() + 512);
  const auto put = [&out](std::string_view v) {
    const auto n = static_cast<std::uint64_t>(v.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof n);
    out.append(v);
  };
  put(code);
  put(cwd);
  put(search.program_dir);
  put(search.source_include ? "1" : "0");
  put(std::to_string(search.include_path.size()));
  for (const auto& d : search.include_path) put(d);
  put(std::to_string(search.pre_include.size()));
  for (const auto& n : search.pre_include) put(n);
  const std::size_t headers = search.headers != nullptr ? search.headers->size() : 0;
  put(std::to_string(headers));
  for (std::size_t i = 0; i < headers; ++i) {
    put((*search.headers)[i].name);
    put((*search.headers)[i].contents);
  }
  const std::size_t defines = search.defines != nullptr ? search.defines->size() : 0;
  put(std::to_string(defines));
  for (std::size_t i = 0; i < defines; ++i) {
    const auto& m = (*search.defines)[i];
    put(m.name);
    put(m.value ? "=" + *m.value : std::string());
  }
  const std::size_t undefines = search.undefines != nullptr ? search.undefines->size() : 0;
  put(std::to_string(undefines));
  for (std::size_t i = 0; i < undefines; ++i) put((*search.undefines)[i]);
  return out;
}

// -----------------------------------------------------------------------------------------------
// Persistent manifests: a walk's manifest in a file beside the digest memo, so that a fresh
// process reuses the walk too (docs/cache-keys.md, "Speed: the walk's manifest").
//
// MEMO.manifests/XX/HEX, HEX being the SHA-256 of this build's identity and the walk's inputs
// (walk_inputs), XX its first two digits. The file: magic, format version, that SHA-256 again,
// the NVRTC directory, a directory table, the checks, the closure, then an XXH3 of everything
// before it. A file that does not parse, check or name the same inputs is ignored (and replaced
// after the walk). Written by temp file + rename: readers see an old or a new file. Bounded per
// shard directory (kManifestShardFiles and kManifestShardBytes, so 2048 files and 128 MiB in
// all): writing one past a bound removes those written longest ago (by mtime; one still in use
// then costs a walk and is written again), and an abandoned temp file goes once it is
// kStaleTempNs old.

constexpr std::string_view kManifestMagic = "CUCOREWM";
constexpr std::uint32_t kManifestVersion = 1;
constexpr std::size_t kManifestShardFiles = 8;
constexpr std::uint64_t kManifestShardBytes = 512 * 1024;
constexpr std::int64_t kStaleTempNs = 600'000'000'000;  // 10 minutes

// The identity of the code that walks: the GNU build ID of the binary that holds this function (a
// hash of the linked code: another build, and so possibly another walk, has another). Empty when
// there is none: then nothing is persisted, since a manifest could outlive the code that made it.
struct build_id_search {
  std::uintptr_t address = 0;
  std::string id;
};

int find_build_id(struct dl_phdr_info* info, std::size_t, void* data) {
  auto* search = static_cast<build_id_search*>(data);
  bool holds = false;
  for (int i = 0; i < info->dlpi_phnum && !holds; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    const std::uintptr_t start = info->dlpi_addr + ph.p_vaddr;
    holds =
        ph.p_type == PT_LOAD && search->address >= start && search->address - start < ph.p_memsz;
  }
  if (!holds) return 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const auto& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_NOTE) continue;
    const std::size_t align = ph.p_align == 8 ? 8 : 4;
    const auto pad = [align](std::size_t n) { return (n + align - 1) & ~(align - 1); };
    const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
    const char* const end = p + ph.p_memsz;
    while (static_cast<std::size_t>(end - p) >= sizeof(ElfW(Nhdr))) {
      ElfW(Nhdr) note;
      std::memcpy(&note, p, sizeof note);
      const char* name = p + sizeof note;
      if (pad(note.n_namesz) > static_cast<std::size_t>(end - name)) break;
      const char* desc = name + pad(note.n_namesz);
      if (pad(note.n_descsz) > static_cast<std::size_t>(end - desc)) break;
      if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 &&
          std::memcmp(name, "GNU", 4) == 0 && note.n_descsz > 0) {
        search->id.assign(desc, note.n_descsz);
        return 1;
      }
      p = desc + pad(note.n_descsz);
    }
  }
  return 1;  // the binary, without a build ID
}

const std::string& build_identity() {
  static const std::string id = [] {
    build_id_search search;
    search.address = reinterpret_cast<std::uintptr_t>(&find_build_id);
    ::dl_iterate_phdr(find_build_id, &search);
    return std::move(search.id);
  }();
  return id;
}

std::string hex_of(const sha256_digest& d) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(64);
  for (const std::byte b : d) {
    out.push_back(kDigits[std::to_integer<unsigned>(b) >> 4]);
    out.push_back(kDigits[std::to_integer<unsigned>(b) & 0xF]);
  }
  return out;
}

// Where the manifest of `inputs` lives beside `memo`, and the SHA-256 it is named by; nullopt
// without a build identity.
struct manifest_location {
  sha256_digest hash{};
  std::filesystem::path shard;  // MEMO.manifests/XX
  std::string name;             // the 64 hex digits
};

std::optional<manifest_location> manifest_for(const std::filesystem::path& memo,
                                              const std::string& inputs) {
  const std::string& build = build_identity();
  if (build.empty()) return std::nullopt;
  sha256_hasher h;
  const auto put = [&h](std::string_view v) {
    const auto n = static_cast<std::uint64_t>(v.size());
    h.update(std::as_bytes(std::span<const std::uint64_t, 1>(&n, 1)));
    h.update(std::as_bytes(std::span<const char>(v.data(), v.size())));
  };
  put(kManifestMagic);
  put(build);
  put(inputs);
  manifest_location out;
  out.hash = h.finish();
  out.name = hex_of(out.hash);
  out.shard = std::filesystem::path(memo.string() + ".manifests") / out.name.substr(0, 2);
  return out;
}

void put_identity(writer& w, const header_identity& id) {
  w.u64(id.dev);
  w.u64(id.ino);
  w.u64(id.size);
  w.u64(static_cast<std::uint64_t>(id.mtime_ns));
  w.u64(static_cast<std::uint64_t>(id.ctime_ns));
}

header_identity get_identity(reader& r) {
  header_identity id;
  id.dev = r.u64();
  id.ino = r.u64();
  id.size = r.u64();
  id.mtime_ns = static_cast<std::int64_t>(r.u64());
  id.ctime_ns = static_cast<std::int64_t>(r.u64());
  return id;
}

constexpr std::uint8_t kCheckListing = 1;
constexpr std::uint8_t kCheckRegular = 2;
constexpr std::uint8_t kCheckLink = 4;

// Paths are stored as a directory (an index into a table: the part up to and including the last
// '/', as group_checks splits them) and the rest.
class directory_table {
 public:
  std::pair<std::uint32_t, std::string_view> split(std::string_view path) {
    const auto slash = path.rfind('/');
    const std::string_view dir =
        slash == std::string_view::npos ? std::string_view() : path.substr(0, slash + 1);
    const auto [it, added] = index_.try_emplace(dir, static_cast<std::uint32_t>(list_.size()));
    if (added) list_.push_back(dir);
    return {it->second, path.substr(dir.size())};
  }
  const std::vector<std::string_view>& list() const { return list_; }

 private:
  std::unordered_map<std::string_view, std::uint32_t> index_;
  std::vector<std::string_view> list_;
};

std::string serialize_manifest(const walk_manifest& m, const sha256_digest& hash) {
  directory_table dirs;  // views into m's strings, which outlive it
  writer body;
  body.u32(static_cast<std::uint32_t>(m.checks.size()));
  for (const stat_check& c : m.checks) {
    const auto [dir, name] = dirs.split(c.path);
    body.u32(dir);
    body.str(name);
    body.u8(static_cast<std::uint8_t>((c.listing ? kCheckListing : 0) |
                                      (c.regular ? kCheckRegular : 0) | (c.link ? kCheckLink : 0)));
    if (c.regular) put_identity(body, c.id);
    if (c.link) {
      put_identity(body, c.link_id);
      body.str(c.real);
    }
  }
  const include_closure& closure = *m.closure;
  body.u32(static_cast<std::uint32_t>(closure.entries.size()));
  for (const closure_entry& e : closure.entries) {
    body.u8(static_cast<std::uint8_t>(e.what));
    if (e.what == closure_entry::kind::in_memory) {
      body.str(e.path);
    } else {
      const auto [dir, name] = dirs.split(e.path);
      body.u32(dir);
      body.str(name);
    }
    if (e.what != closure_entry::kind::absent) {
      body.u64(e.size);
      body.raw(e.digest.data(), e.digest.size());
    }
  }
  body.u32(static_cast<std::uint32_t>(closure.unresolved.size()));
  for (const auto& u : closure.unresolved) body.str(u);
  body.u64(closure.files);
  body.u64(closure.absent);
  body.u64(closure.in_memory);
  body.u64(closure.skipped);
  body.raw(closure.digest.data(), closure.digest.size());

  writer w;
  w.raw(kManifestMagic.data(), kManifestMagic.size());
  w.u32(kManifestVersion);
  w.raw(hash.data(), hash.size());
  w.str(m.nvrtc_directory);
  w.u32(static_cast<std::uint32_t>(dirs.list().size()));
  for (const auto dir : dirs.list()) w.str(dir);
  w.out.append(body.out);
  const std::uint64_t sum = checksum_of(w.out);
  w.u64(sum);
  return std::move(w.out);
}

// The manifest in `data` when it is whole, of this format and of the inputs hashed as `hash`;
// else null. Grouped for still_valid as it is read.
std::shared_ptr<walk_manifest> parse_manifest(std::string_view data, const sha256_digest& hash) {
  if (data.size() < kManifestMagic.size() + 4 + hash.size() + 8) return nullptr;
  const std::string_view body = data.substr(0, data.size() - 8);
  std::uint64_t stored = 0;
  std::memcpy(&stored, data.data() + body.size(), 8);
  if (checksum_of(body) != stored) return nullptr;
  reader r(body);
  char magic[8];
  r.raw(magic, sizeof magic);
  if (!r.ok() || std::string_view(magic, 8) != kManifestMagic || r.u32() != kManifestVersion) {
    return nullptr;
  }
  sha256_digest named{};
  r.raw(named.data(), named.size());
  if (!r.ok() || named != hash) return nullptr;
  auto m = std::make_shared<walk_manifest>();
  m->nvrtc_directory = r.str();
  const std::uint32_t dir_count = r.u32();
  if (!r.ok() || dir_count > body.size()) return nullptr;
  std::vector<std::string_view> dirs(dir_count);
  for (auto& dir : dirs) dir = r.view();
  const auto joined = [](std::string_view dir, std::string_view name) {
    std::string path;
    path.reserve(dir.size() + name.size());
    path.append(dir).append(name);
    return path;
  };
  const std::uint32_t check_count = r.u32();
  if (!r.ok() || check_count > body.size()) return nullptr;
  m->checks.resize(check_count);
  std::vector<std::size_t> group_of(dir_count, SIZE_MAX);
  for (std::uint32_t i = 0; i < check_count && r.ok(); ++i) {
    stat_check& c = m->checks[i];
    const std::uint32_t dir = r.u32();
    const std::string_view name = r.view();
    const std::uint8_t flags = r.u8();
    if (!r.ok() || dir >= dir_count || flags > (kCheckListing | kCheckRegular | kCheckLink)) {
      return nullptr;
    }
    c.listing = (flags & kCheckListing) != 0;
    c.regular = (flags & kCheckRegular) != 0;
    c.link = (flags & kCheckLink) != 0;
    if (c.regular) c.id = get_identity(r);
    if (c.link) {
      c.link_id = get_identity(r);
      c.real = r.str();
    }
    // As group_checks: by path, or by directory and last component (and then, since only
    // still_valid reads a manifest that was read, without the whole path).
    if (c.link || c.listing || name.empty() || name == "." || name == "..") {
      c.path = joined(dirs[dir], name);
      m->links.push_back(i);
      continue;
    }
    if (group_of[dir] == SIZE_MAX) {
      group_of[dir] = m->by_directory.size();
      m->by_directory.push_back({std::string(dirs[dir]), {}});
    }
    m->by_directory[group_of[dir]].names.emplace_back(i, std::string(name));
  }
  auto closure = std::make_shared<include_closure>();
  const std::uint32_t entry_count = r.u32();
  if (!r.ok() || entry_count > body.size()) return nullptr;
  closure->entries.resize(entry_count);
  for (std::uint32_t i = 0; i < entry_count && r.ok(); ++i) {
    closure_entry& e = closure->entries[i];
    const std::uint8_t what = r.u8();
    if (what > static_cast<std::uint8_t>(closure_entry::kind::in_memory)) return nullptr;
    e.what = static_cast<closure_entry::kind>(what);
    if (e.what == closure_entry::kind::in_memory) {
      e.path = r.str();
      ++closure->in_memory;
    } else {
      const std::uint32_t dir = r.u32();
      const std::string_view name = r.view();
      if (!r.ok() || dir >= dir_count) return nullptr;
      e.path = joined(dirs[dir], name);
      ++(e.what == closure_entry::kind::file ? closure->files : closure->absent);
    }
    if (e.what != closure_entry::kind::absent) {
      e.size = r.u64();
      r.raw(e.digest.data(), e.digest.size());
    }
  }
  const std::uint32_t unresolved = r.u32();
  if (!r.ok() || unresolved > body.size()) return nullptr;
  for (std::uint32_t i = 0; i < unresolved && r.ok(); ++i) closure->unresolved.push_back(r.str());
  const std::uint64_t files = r.u64();
  const std::uint64_t absent = r.u64();
  const std::uint64_t in_memory = r.u64();
  closure->skipped = r.u64();
  r.raw(closure->digest.data(), closure->digest.size());
  if (!r.ok() || !r.at_end() || files != closure->files || absent != closure->absent ||
      in_memory != closure->in_memory) {
    return nullptr;
  }
  m->closure = std::move(closure);
  return m;
}

// Removes abandoned temp files and, past kManifestShardFiles manifests or kManifestShardBytes,
// the oldest ones (never `keep`, the one just written, `kept_bytes` long) from one shard
// directory. Best effort: other processes may be doing the same.
void trim_shard(const std::filesystem::path& shard, const std::string& keep,
                std::uint64_t kept_bytes) {
  DIR* listing = ::opendir(shard.c_str());
  if (listing == nullptr) return;
  const int fd = ::dirfd(listing);
  const std::int64_t now = now_ns();
  struct found {
    std::int64_t mtime_ns;
    std::string name;
    std::uint64_t bytes;
    bool operator<(const found& o) const { return mtime_ns < o.mtime_ns; }
  };
  std::vector<found> manifests;
  std::uint64_t total = kept_bytes;
  while (const struct dirent* entry = ::readdir(listing)) {
    const std::string_view name = entry->d_name;
    if (name == "." || name == ".." || name == keep) continue;
    struct stat st {};
    if (::fstatat(fd, entry->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) {
      continue;
    }
    if (name.size() == 64 + 11 && name.substr(64, 5) == ".tmp-") {
      if (ns_of(st.st_mtim) < now - kStaleTempNs) ::unlinkat(fd, entry->d_name, 0);
    } else if (name.size() == 64) {
      manifests.push_back(
          {ns_of(st.st_mtim), std::string(name), static_cast<std::uint64_t>(st.st_size)});
      total += static_cast<std::uint64_t>(st.st_size);
    }
  }
  std::sort(manifests.begin(), manifests.end());
  for (std::size_t i = 0; i < manifests.size() && (manifests.size() - i + 1 > kManifestShardFiles ||
                                                   total > kManifestShardBytes);
       ++i) {
    ::unlinkat(fd, manifests[i].name.c_str(), 0);
    total -= manifests[i].bytes;
  }
  ::closedir(listing);
}

// The manifest at `where`, when there is a valid one for its inputs (one larger than any walk
// writes is not even read).
std::shared_ptr<walk_manifest> load_manifest(const manifest_location& where) {
  constexpr std::int64_t kMaxBytes = 256 << 20;
  const int fd = ::open((where.shard / where.name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return nullptr;
  struct stat st {};
  std::string data;
  // Only a file this user (or root) wrote, that nobody else may write: the directories are this
  // user's (save_manifest), but a cache's root may be shared with a group.
  bool ok = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= kMaxBytes &&
            (st.st_uid == ::geteuid() || st.st_uid == 0) && (st.st_mode & 022) == 0;
  if (ok) {
    data.reserve(static_cast<std::size_t>(st.st_size));
    ok = read_all(fd, data);
  }
  ::close(fd);
  return ok ? parse_manifest(data, where.hash) : nullptr;
}

// Best effort: a manifest that cannot be written costs a walk later. The directories are made
// private to this user (mode 0700 whatever the umask; files are 0600): nobody else's manifest can
// be planted where this process reads.
void save_manifest(const manifest_location& where, const walk_manifest& m) noexcept {
  try {
    ::mkdir(where.shard.parent_path().c_str(), 0700);
    ::mkdir(where.shard.c_str(), 0700);
    const std::string bytes = serialize_manifest(m, where.hash);
    if (replace_file(where.shard / where.name, bytes)) {
      trim_shard(where.shard, where.name, bytes.size());
    }
  } catch (...) {
    // Best effort (see above).
  }
}

// A file or in-memory header in the closure, reached by one route, with what it includes.
struct node {
  std::string path;      // spelled path, or the in-memory name
  std::string dir;       // the directory quoted includes from it search first
  std::string real_dir;  // a symlink's target directory, searched too (which one NVRTC takes is
                         // not measured); empty for a regular file
  // The include_path index it was found in (for #include_next), -1 beside its includer (or in
  // memory), kByPath when opened by the path it was named by (an absolute #include, a pre-include
  // found as given): NVRTC's #include_next then acts as #include (traced).
  int search_index = -1;
  bool in_memory = false;
  std::shared_ptr<const scanned_file> data;
};

constexpr int kByPath = -2;

// Past this many ".." components, a spelled path is taken for a walk around a cycle of headers
// that include each other through ".." (each pass spells the same files anew: NVRTC stops at
// #pragma once or its nesting limit, the walk, which models neither, would not).
constexpr std::size_t kMaxDotDot = 16;
// Nor does a real closure reach one file by more than a few spellings (a cycle through ".."
// reached two ways doubles them at each pass).
constexpr std::size_t kMaxSpellings = 64;
// A closure this large is refused rather than walked further (the key would cost seconds).
constexpr std::size_t kMaxNodes = 100'000;

// Whether NVRTC also tries NAME.stdh for `name` (measured: docs/cache-keys.md): when the last
// path component has no '.'.
bool probes_stdh(const std::string& name) {
  const auto slash = name.rfind('/');
  const std::string_view last = slash == std::string::npos
                                    ? std::string_view(name)
                                    : std::string_view(name).substr(slash + 1);
  return last.find('.') == std::string_view::npos;
}

// How many ".." components `path` has.
std::size_t dot_dots(std::string_view path) {
  std::size_t n = 0;
  for (std::size_t at = path.find(".."); at != std::string_view::npos;
       at = path.find("..", at + 2)) {
    const bool starts = at == 0 || path[at - 1] == '/';
    const bool ends = at + 2 == path.size() || path[at + 2] == '/';
    n += starts && ends ? 1 : 0;
  }
  return n;
}

bool ident_start_c(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// Names the implementation may predefine (or a header we cannot see may define).
bool reserved_name(std::string_view id) {
  return reserved_identifier(id);
}

class walker {
 public:
  walker(const include_search& search, header_digest_memo& memo) : search_(search), memo_(memo) {}

  include_closure run(std::string_view code) {
    // The program text: quoted includes search program_dir, when it is searched at all.
    top_.path = "<program>";
    top_.data = make_scanned(code);
    top_.dir = search_.program_dir;
    note_defined(*top_.data);
    index_definitions(*top_.data);
    if (search_.defines != nullptr) {
      for (const auto& m : *search_.defines) defined_.insert(m.name);
    }

    for (const auto& name : search_.pre_include) resolve_pre_include(name);
    if (search_.headers != nullptr) {
      for (const auto& h : *search_.headers) add_in_memory(h);
    }
    process(SIZE_MAX);
    drain();
    // Until nothing new appears: macro-named includes, resolved with every visible definition (a
    // header found that way can define more alternatives), and includes skipped in groups never
    // entered, looked at again whenever a header that defines more macros joined.
    bool converged = false;
    for (int round = 0; round < 256 && !converged; ++round) {
      const std::size_t before = nodes_.size();
      resolve_computed();
      const std::size_t computed = computed_.size();
      resolve_wrapper_calls();
      revisit_skipped();
      drain();
      // A macro-named include queued by this round (an entered group, a new node) still needs
      // resolving, even when no node joined.
      converged = nodes_.size() == before && skipped_version_ == defined_version_ &&
                  computed_.size() == computed;
    }
    // Work left over could name more files: the closure is not known to be complete.
    if (!converged) unresolved_.insert("the include walk did not settle within 256 rounds");
    // NVRTC's built-in preamble includes host headers (<features.h>, <stdlib.h>, ...) from the
    // search path when these are defined on the command line: the key cannot list them.
    if (search_.defines != nullptr) {
      for (const auto& m : *search_.defines) {
        if (m.name == "__GNUC__" || m.name == "__QNX__") {
          unresolved_.insert("define_macro " + m.name +
                             ": NVRTC's built-in preamble then includes host headers from the "
                             "search path");
        }
      }
    }
    if (search_.undefines != nullptr) {
      for (const auto& name : *search_.undefines) {
        if (name == "__CUDACC_RTC__") {
          unresolved_.insert(
              "undefine_macro __CUDACC_RTC__: NVRTC's built-in preamble then "
              "includes host headers from the search path");
        }
      }
    }
    out_.skipped = skipped_.size();
    finish_unresolved();
    return std::move(out_);
  }

 private:
  struct pending_reference {
    std::size_t node_index;
    include_reference ref;
  };

  void drain() {
    while (next_ < nodes_.size()) process(next_++);
  }

  // Follows the references of one node, except those in a group the preprocessor never enters
  // with what is known now (kept aside: revisit_skipped).
  void process(std::size_t index) {
    // nodes_ is a deque: it grows while references resolve, and references to its elements stay
    // valid; the data is shared and immutable.
    const node& n = node_at(index);
    if (!n.data) return;
    const auto& refs = n.data->scan.references;
    std::optional<conditional_pruner> pruner;
    for (const auto& ref : refs) {
      if (n.data->conditionals.groups.empty()) {
        handle(n, index, ref);
        continue;
      }
      if (!pruner) pruner.emplace(n.data->conditionals, may_be_defined_fn());
      if (pruner->never_entered(ref.line)) {
        skipped_.push_back({index, ref});
        continue;
      }
      handle(n, index, ref);
    }
  }

  // The skipped references whose group may now be entered: a header that joined since defines
  // a macro their conditions name.
  void revisit_skipped() {
    if (skipped_version_ == defined_version_) return;
    skipped_version_ = defined_version_;
    std::vector<pending_reference> still;
    std::unordered_map<std::size_t, conditional_pruner> pruners;
    for (auto& p : skipped_) {
      const node& n = node_at(p.node_index);
      auto it = pruners.find(p.node_index);
      if (it == pruners.end()) {
        it = pruners
                 .emplace(p.node_index,
                          conditional_pruner(n.data->conditionals, may_be_defined_fn()))
                 .first;
      }
      if (it->second.never_entered(p.ref.line)) {
        still.push_back(std::move(p));
      } else {
        handle(n, p.node_index, p.ref);  // n stays valid: nodes_ is a deque
      }
    }
    skipped_ = std::move(still);
  }

  void handle(const node& from, std::size_t from_index, const include_reference& ref) {
    if (ref.form == include_form::computed) {
      computed_.push_back({from_index, ref});
      return;
    }
    resolve_name(from, ref, ref.name, ref.form);
  }

  const node& node_at(std::size_t index) const { return index == SIZE_MAX ? top_ : nodes_[index]; }

  // ---- Which macros may be defined (for skipping groups never entered).

  void note_defined(const scanned_file& data) {
    for (const auto& name : data.defined) {
      if (defined_.insert(name).second) ++defined_version_;
    }
  }

  std::function<bool(std::string_view)> may_be_defined_fn() {
    return [this](std::string_view name) { return may_be_defined(name); };
  }

  // A name may be defined unless it is not reserved for the implementation, nothing in the
  // closure or on the command line defines it, and NVRTC's built-in preamble does not either.
  bool may_be_defined(std::string_view name) {
    if (reserved_name(name)) return true;
    if (defined_.count(std::string(name)) != 0) return true;
    const auto* builtin = builtin_macros();
    return builtin == nullptr || builtin->count(std::string(name)) != 0;
  }

  // Every name the NVRTC builtins libraries beside the NVRTC library may #define (its built-in
  // preamble defines NULL, CUDARTAPI, va_start, ...: measured). null when they cannot be read:
  // then no name counts as undefined.
  const std::unordered_set<std::string>* builtin_macros() {
    if (builtins_loaded_) return builtins_ ? &*builtins_ : nullptr;
    builtins_loaded_ = true;
    const std::string directory = search_.nvrtc_directory ? search_.nvrtc_directory() : "";
    if (directory.empty()) return nullptr;
    nvrtc_directory_ = directory;
    // The listing: a builtins library added later (an update in place) must be read too.
    checks_.push_back(probe_listing(directory));
    if (checks_.back().regular && !settled(checks_.back().id)) manifest_ok_ = false;
    std::vector<std::string> files;
    std::error_code ec;
    for (std::filesystem::directory_iterator it(directory, ec), end; !ec && it != end;
         it.increment(ec)) {
      const std::string file = it->path().filename().string();
      // libnvrtc-builtins.so.X.Y and its links; the .alt variant serves libnvrtc.alt, which
      // cucore does not load.
      if (file.starts_with("libnvrtc-builtins") && file.find(".alt.") == std::string::npos) {
        files.push_back(it->path().string());
      }
    }
    if (ec || files.empty()) return nullptr;
    std::sort(files.begin(), files.end());
    // Each library once, whatever the number of links to it.
    std::set<std::pair<std::uint64_t, std::uint64_t>> libraries;
    std::unordered_set<std::string> names;
    for (const auto& file : files) {
      checks_.push_back(probe(file));  // a manifest reused only while these are unchanged
      const stat_check& c = checks_.back();
      if (!c.regular || !libraries.emplace(c.id.dev, c.id.ino).second) continue;
      auto data = load(file, c.id, /*defines_only=*/true);
      if (!data) return nullptr;
      names.insert(data->defined.begin(), data->defined.end());
    }
    // A library that holds none of the names its preamble is known to define is not one this
    // reading understands (compressed, another layout): nothing counts as undefined then.
    if (names.count("NULL") == 0 || names.count("CUDARTAPI") == 0) return nullptr;
    builtins_ = std::move(names);
    return &*builtins_;
  }

  // ---- Name resolution.

  const include_header* in_memory_named(const std::string& name) const {
    if (search_.headers == nullptr) return nullptr;
    for (const auto& h : *search_.headers) {
      if (h.name == name) return &h;
    }
    return nullptr;
  }

  // One directory of a search: DIR/NAME, then DIR/NAME.stdh when NVRTC tries that too.
  bool try_in(const std::string& dir, const std::string& name, int search_index) {
    const std::string path = join_path(dir, name);
    if (try_candidate(path, search_index)) return true;
    return probes_stdh(name) && try_candidate(path + ".stdh", search_index);
  }

  // Resolves one header name from `from` as NVRTC 13 does (measured: docs/cache-keys.md):
  // in-memory headers by the exact text first; then, for "quoted" names, the includer's directory
  // (the program's: that of options.name; an in-memory header's: that of its name, from the
  // current directory), unless no_source_include; then include_path in order. <angle> names skip
  // the includer's directory. #include_next goes on after the directory its includer was found in
  // by this route (from the start when that was not a search directory). In each directory NAME,
  // then NAME.stdh when the last component has no '.'. An absolute name is only itself. The
  // search stops at the first regular file; each candidate before it is recorded absent.
  void resolve_name(const node& from, const include_reference& ref, const std::string& name,
                    include_form form) {
    if (name.empty()) return;  // "#include <>": a compile error, reads nothing
    const bool next =
        ref.kind == include_kind::include_next || ref.kind == include_kind::has_include_next;
    const bool from_program = &from == &top_;
    if (const include_header* h = in_memory_named(name)) {
      add_in_memory(*h);
      // Whether #include_next consults in-memory headers is not known: the directories too.
      if (!next || from_program) return;
    }
    if (name.front() == '/') {
      (void)try_candidate(name, kByPath);
      return;
    }
    bool includer_dir = form == include_form::quoted && search_.source_include;
    std::size_t first_dir = 0;
    if (next && !from_program && from.search_index != kByPath) {
      includer_dir = false;
      if (from.search_index >= 0) first_dir = static_cast<std::size_t>(from.search_index) + 1;
    }
    if (includer_dir) {
      bool found = try_in(from.dir, name, -1);
      if (!from.real_dir.empty()) found = try_in(from.real_dir, name, -1) || found;
      if (found) return;
    }
    for (std::size_t d = first_dir; d < search_.include_path.size(); ++d) {
      if (try_in(search_.include_path[d], name, static_cast<int>(d))) return;
    }
  }

  // -include NAME (measured): in-memory headers; then NAME as given; then the current directory
  // and include_path in order, each DIR + "/" + NAME (an absolute NAME too) and its .stdh.
  void resolve_pre_include(const std::string& name) {
    if (name.empty()) return;
    if (const include_header* h = in_memory_named(name)) {
      add_in_memory(*h);
      return;
    }
    if (try_candidate(name, kByPath)) return;
    // The working directory is searched as a source directory: not with no_source_include.
    if (search_.source_include && try_in(current_directory(), name, -1)) return;
    for (std::size_t d = 0; d < search_.include_path.size(); ++d) {
      if (try_in(search_.include_path[d], name, static_cast<int>(d))) return;
    }
  }

  // Stats `path`; a regular file joins the closure (once per spelling), anything else is
  // recorded absent. A file already in the closure is walked again when this route continues
  // its search from another place (#include_next). Returns whether it was a regular file.
  bool try_candidate(const std::string& path, int search_index) {
    auto [it, inserted] = seen_.try_emplace(path);
    if (!inserted) {
      const known_file& k = it->second;
      if (k.regular && k.data->continues_search &&
          routes_.insert(path + '\n' + std::to_string(search_index)).second) {
        node n;
        n.path = path;
        n.dir = dir_of(path);
        n.real_dir = k.real_dir;
        n.search_index = search_index;
        n.data = k.data;
        nodes_.push_back(std::move(n));
      }
      return k.regular;
    }
    // Only the last component's link matters: the kernel resolves directory symlinks and ".." the
    // same way for NVRTC's spelling and ours.
    checks_.push_back(probe(path));
    const stat_check& c = checks_.back();
    const bool regular = c.regular;
    const header_identity id = c.id;
    const std::string real = c.real;
    if (!regular) {
      out_.entries.push_back({closure_entry::kind::absent, path, 0, {}});
      ++out_.absent;
      return false;
    }
    const bool respelled = ++spellings_[{id.dev, id.ino}] > kMaxSpellings;
    if (dot_dots(path) > kMaxDotDot || respelled || nodes_.size() >= kMaxNodes) {
      // Refused, not guessed: the key then needs an extra_digest, the compile bypasses the cache.
      unresolved_.insert(path + (nodes_.size() >= kMaxNodes
                                     ? ": more than 100000 headers reached"
                                     : ": headers that include each other through \"..\" (the "
                                       "walk would spell them anew forever)"));
      return true;
    }
    node n;
    n.path = path;
    n.dir = dir_of(path);
    n.search_index = search_index;
    if (!real.empty()) {
      n.real_dir = dir_of(real);
      if (n.real_dir == n.dir) n.real_dir.clear();
    }
    n.data = load(path, id, false);
    if (!n.data) {
      manifest_ok_ = false;
      // Vanished or unreadable between stat and open: recorded as such (the compile will not read
      // it either, or fail).
      out_.entries.push_back({closure_entry::kind::absent, path + " (unreadable)", 0, {}});
      ++out_.absent;
      return false;
    }
    it->second = {true, n.data, n.real_dir};
    routes_.insert(path + '\n' + std::to_string(search_index));
    out_.entries.push_back({closure_entry::kind::file, path, n.data->size, n.data->digest});
    ++out_.files;
    note_defined(*n.data);
    index_definitions(*n.data);
    nodes_.push_back(std::move(n));
    return true;
  }

  void add_in_memory(const include_header& h) {
    auto [it, inserted] = seen_memory_.insert(h.name);
    if (!inserted) return;
    std::shared_ptr<const scanned_file> data = make_scanned(h.contents);
    out_.entries.push_back({closure_entry::kind::in_memory, h.name, data->size, data->digest});
    ++out_.in_memory;
    note_defined(*data);
    index_definitions(*data);
    node n;
    n.path = h.name;
    // Quoted includes in an in-memory header search beside its name (relative to the current
    // directory) first.
    n.dir = dir_of(h.name);
    n.in_memory = true;
    n.data = std::move(data);
    nodes_.push_back(std::move(n));
  }

  std::string absolute(const std::string& path) {
    if (!path.empty() && path.front() == '/') return path;
    return join_path(current_directory(), path);
  }

  const std::string& current_directory() {
    if (cwd_.empty()) cwd_ = ::cucore::detail::current_directory();
    return cwd_;
  }

  // The file's digest and references: from the memo when its identity matches, else read, hash
  // and scan (memoised when the file has settled and did not change while it was read).
  // defines_only: a library whose macro names are all that matter (no digest, no scan).
  std::shared_ptr<const scanned_file> load(const std::string& path, const header_identity& id,
                                           bool defines_only) {
    const std::string key = (defines_only ? "defines:" : "") + absolute(path);
    if (auto known = memo_.lookup(key, id)) return known;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nullptr;
    std::string text;
    text.reserve(id.size);
    const bool ok = read_all(fd, text);
    struct stat after {};
    const bool same = ::fstat(fd, &after) == 0 && identity_of(after) == id;
    ::close(fd);
    if (!ok) return nullptr;
    std::shared_ptr<const scanned_file> data;
    if (defines_only) {
      auto file = std::make_shared<scanned_file>();
      file->size = text.size();
      file->defined = defined_names(text);
      data = std::move(file);
    } else {
      data = make_scanned(text);
    }
    ++hashed_;
    if (!(same && settled(id))) manifest_ok_ = false;
    if (same && settled(id)) {
      memo_.remember(key, id, data);
      remembered_ = true;
    }
    return data;
  }

  // The definitions of a file that joined the closure, indexed by name for expand().
  void index_definitions(const scanned_file& data) {
    for (const auto& d : data.scan.definitions) object_definitions_[d.name].push_back(&d.body);
    for (const auto& d : data.scan.function_definitions)
      function_definitions_[d.name].push_back(&d);
  }

  // Every object-like definition of `name` visible anywhere in the closure, or from -D.
  std::vector<std::string> definitions_of(const std::string& name) const {
    std::vector<std::string> bodies;
    if (search_.defines != nullptr) {
      for (const auto& m : *search_.defines) {
        if (m.name == name) bodies.push_back(m.value.value_or("1"));
      }
    }
    if (auto it = object_definitions_.find(name); it != object_definitions_.end()) {
      for (const std::string* body : it->second) bodies.push_back(*body);
    }
    return bodies;
  }

  // Every function-like definition of `name` visible anywhere in the closure.
  std::vector<const function_macro_definition*> function_definitions_of(
      const std::string& name) const {
    auto it = function_definitions_.find(name);
    return it == function_definitions_.end() ? std::vector<const function_macro_definition*>{}
                                             : it->second;
  }

  static bool ident_char(char c) { return ident_start_c(c) || (c >= '0' && c <= '9'); }

  // The arguments of a macro call whose '(' is at `open` in `text`: split at top-level commas,
  // trimmed; `end` is set past the closing ')'. nullopt when the call is not closed.
  static std::optional<std::vector<std::string>> call_arguments(const std::string& text,
                                                                std::size_t open,
                                                                std::size_t& end) {
    std::vector<std::string> args(1);
    int depth = 0;
    for (std::size_t i = open + 1; i < text.size(); ++i) {
      const char c = text[i];
      if (c == '(') ++depth;
      if (c == ')' && depth-- == 0) {
        end = i + 1;
        for (auto& a : args) {
          const auto first = a.find_first_not_of(' ');
          a = first == std::string::npos ? std::string() : a.substr(first);
          while (!a.empty() && a.back() == ' ') a.pop_back();
        }
        return args;
      }
      if (c == ',' && depth == 0) {
        args.emplace_back();
      } else {
        args.back() += c;
      }
    }
    return std::nullopt;
  }

  // The body of `macro` with its parameters replaced by `args` (# stringizes, ## pastes); false
  // when the call does not fit the parameter list.
  static bool substitute(const function_macro_definition& macro,
                         const std::vector<std::string>& args, std::string& out) {
    const auto& params = macro.parameters;
    const bool variadic = !params.empty() && params.back() == "...";
    const std::size_t named = variadic ? params.size() - 1 : params.size();
    const bool empty_call = args.size() == 1 && args[0].empty();
    if (!(args.size() == named || (variadic && args.size() >= named) ||
          (named == 0 && empty_call))) {
      return false;
    }
    auto argument = [&](const std::string& id) -> std::optional<std::string> {
      for (std::size_t p = 0; p < named; ++p) {
        if (params[p] == id) return p < args.size() ? args[p] : std::string();
      }
      if (variadic && id == "__VA_ARGS__") {
        std::string rest;
        for (std::size_t p = named; p < args.size(); ++p) rest += (p > named ? "," : "") + args[p];
        return rest;
      }
      return std::nullopt;
    };
    const std::string& body = macro.body;
    out.clear();
    for (std::size_t i = 0; i < body.size();) {
      const char c = body[i];
      if (c == '#' && i + 1 < body.size() && body[i + 1] == '#') {  // paste: drop blanks around
        while (!out.empty() && out.back() == ' ') out.pop_back();
        i += 2;
        while (i < body.size() && body[i] == ' ') ++i;
        continue;
      }
      if (c == '#') {  // stringize the next parameter
        std::size_t j = i + 1;
        while (j < body.size() && body[j] == ' ') ++j;
        std::size_t k = j;
        while (k < body.size() && ident_char(body[k])) ++k;
        const auto arg = argument(body.substr(j, k - j));
        if (!arg || arg->find_first_of("\"\\") != std::string::npos) return false;
        out += '"' + *arg + '"';
        i = k;
        continue;
      }
      if (ident_start_c(c)) {
        std::size_t k = i;
        while (k < body.size() && ident_char(body[k])) ++k;
        const std::string id = body.substr(i, k - i);
        const auto arg = argument(id);
        out += arg ? *arg : id;
        i = k;
        continue;
      }
      out += c;
      ++i;
    }
    return true;
  }

  // Expands the identifiers of `text` with every visible definition (object-like, and
  // function-like where a call follows); false when an identifier that may be a macro has no
  // visible definition we can use, or the expansion grows past its bounds.
  bool expand(const std::string& text, int depth, std::vector<std::string>& results) const {
    constexpr std::size_t kMaxAlternatives = 256;
    if (depth > 16) return false;
    std::vector<std::string> partial{std::string()};
    std::size_t i = 0;
    while (i < text.size()) {
      if (!ident_start_c(text[i])) {
        // Strings, numbers and punctuation are copied (a header name's characters).
        std::size_t j = i + 1;
        if (text[i] >= '0' && text[i] <= '9') {
          while (j < text.size() && ident_char(text[j])) ++j;
        }
        for (auto& p : partial) p.append(text, i, j - i);
        i = j;
        continue;
      }
      std::size_t j = i;
      while (j < text.size() && ident_char(text[j])) ++j;
      const std::string id = text.substr(i, j - i);
      i = j;
      std::size_t open = j;
      while (open < text.size() && text[open] == ' ') ++open;
      const bool called = open < text.size() && text[open] == '(';
      const auto bodies = definitions_of(id);
      const auto functions =
          called ? function_definitions_of(id) : decltype(function_definitions_of(id)){};
      std::vector<std::string> alternatives;
      if (!functions.empty()) {
        // Object-like definitions too would read the call's text differently: not worked out.
        if (!bodies.empty()) return false;
        std::size_t end = 0;
        const auto args = call_arguments(text, open, end);
        if (!args) return false;
        for (const auto* f : functions) {
          std::string substituted;
          if (!substitute(*f, *args, substituted)) return false;
          if (!expand(substituted, depth + 1, alternatives)) return false;
        }
        i = end;
      } else if (bodies.empty()) {
        if (reserved_name(id)) return false;  // perhaps predefined: its value is unknown here
        for (auto& p : partial) p += id;
        continue;
      } else {
        for (const auto& body : bodies) {
          if (!expand(body, depth + 1, alternatives)) return false;
        }
      }
      std::vector<std::string> grown;
      for (const auto& p : partial) {
        for (const auto& a : alternatives) {
          grown.push_back(p + a);
          if (grown.size() > kMaxAlternatives) return false;
        }
      }
      partial = std::move(grown);
    }
    for (auto& p : partial) {
      results.push_back(std::move(p));
      if (results.size() > kMaxAlternatives) return false;
    }
    return true;
  }

  // A header name from an expansion: "name" or <name> (blanks around trimmed, and blanks before
  // the '>', which NVRTC drops: measured); nullopt otherwise.
  static std::optional<std::pair<include_form, std::string>> header_name(std::string text) {
    const auto first = text.find_first_not_of(" \t");
    if (first == std::string::npos) return std::nullopt;
    const auto last = text.find_last_not_of(" \t");
    text = text.substr(first, last - first + 1);
    if (text.size() >= 2 && text.front() == '"' && text.back() == '"' &&
        text.find('"', 1) == text.size() - 1) {
      return std::make_pair(include_form::quoted, text.substr(1, text.size() - 2));
    }
    if (text.size() >= 2 && text.front() == '<' && text.back() == '>' &&
        text.find('>') == text.size() - 1) {
      std::string name = text.substr(1, text.size() - 2);
      while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
      return std::make_pair(include_form::angle, std::move(name));
    }
    return std::nullopt;
  }

  // Once any __has_include wrapper is in the closure, every call-shaped header name is a possible
  // __has_include (see wrapper_info).
  void resolve_wrapper_calls() {
    auto has_wrapper = [](const node& n) {
      return n.data && !n.data->wrappers.wrapper_parameters.empty();
    };
    bool any = bare_has_include_ || has_wrapper(top_);
    for (std::size_t i = 0; !any && i < nodes_.size(); ++i) any = has_wrapper(nodes_[i]);
    if (!any) return;
    auto resolve_calls = [&](const node& n) {
      if (!n.data) return;
      for (const auto& call : n.data->wrappers.header_calls)
        resolve_name(n, call, call.name, call.form);
    };
    if (!calls_done_top_) {
      calls_done_top_ = true;
      resolve_calls(top_);
    }
    for (; calls_done_ < nodes_.size(); ++calls_done_) {
      const node n = nodes_[calls_done_];
      resolve_calls(n);
    }
  }

  void resolve_computed() {
    for (std::size_t c = 0; c < computed_.size(); ++c) {
      const pending_reference p = computed_[c];  // copy: resolving may add more
      const node& wrapper_from = node_at(p.node_index);
      // A bare __has_include (#ifdef __has_include, or an alias #define HI __has_include): an
      // alias is called like a wrapper, so its calls are taken as wrapper calls too.
      if ((p.ref.kind == include_kind::has_include ||
           p.ref.kind == include_kind::has_include_next) &&
          p.ref.name.empty()) {
        bare_has_include_ = true;
        continue;
      }
      // __has_include(PARAM) in a function-like macro: its names come from the calls.
      if ((p.ref.kind == include_kind::has_include ||
           p.ref.kind == include_kind::has_include_next) &&
          wrapper_from.data &&
          std::find(wrapper_from.data->wrappers.wrapper_parameters.begin(),
                    wrapper_from.data->wrappers.wrapper_parameters.end(),
                    p.ref.name) != wrapper_from.data->wrappers.wrapper_parameters.end()) {
        continue;
      }
      std::vector<std::string> expansions;
      const node& from = node_at(p.node_index);  // stays valid: nodes_ is a deque
      bool ok = !p.ref.name.empty() && expand(p.ref.name, 0, expansions);
      std::vector<std::pair<include_form, std::string>> names;
      for (const auto& e : expansions) {
        auto name = header_name(e);
        if (!name) {
          ok = false;
          break;
        }
        names.push_back(std::move(*name));
      }
      const std::string where =
          (from.path == "<program>" ? std::string("the program") : from.path) + ":" +
          std::to_string(p.ref.line) + ": " + spelled(p.ref);
      if (!ok) {
        unresolved_.insert(where);
        continue;
      }
      // Once per route (node) and name: a route continues #include_next from its own place.
      const std::string route = std::to_string(p.node_index) + '\n' + where + '\n';
      for (const auto& [form, name] : names) {
        if (!resolved_computed_.insert(route + name).second) continue;
        resolve_name(from, p.ref, name, form);
      }
    }
  }

  static std::string spelled(const include_reference& ref) {
    switch (ref.kind) {
      case include_kind::include:
        return "#include " + ref.name;
      case include_kind::include_next:
        return "#include_next " + ref.name;
      case include_kind::import:
        return "#import " + ref.name;
      case include_kind::embed:
        return "#embed " + ref.name;
      case include_kind::has_include:
        return "__has_include(" + ref.name + ")";
      case include_kind::has_include_next:
        return "__has_include_next(" + ref.name + ")";
      case include_kind::has_embed:
        return "__has_embed(" + ref.name + ")";
    }
    return ref.name;
  }

  void finish_unresolved() {
    out_.unresolved.assign(unresolved_.begin(), unresolved_.end());
    if (remembered_) memo_.save();
  }

  // A path the walk has stat'd: whether it is a regular file, and then what it holds.
  struct known_file {
    bool regular = false;
    std::shared_ptr<const scanned_file> data;
    std::string real_dir;
  };

  const include_search& search_;
  header_digest_memo& memo_;
  node top_;  // the program text: not a file, so not in nodes_; resolves like one
  std::deque<node> nodes_;
  std::size_t next_ = 0;
  std::size_t calls_done_ = 0;
  bool calls_done_top_ = false;
  bool bare_has_include_ = false;
  std::unordered_map<std::string, known_file> seen_;
  std::unordered_set<std::string> routes_;  // path + '\n' + search index, walked
  std::map<std::pair<std::uint64_t, std::uint64_t>, std::size_t> spellings_;  // by device, inode
  std::set<std::string> seen_memory_;
  std::vector<pending_reference> computed_;
  std::vector<pending_reference> skipped_;   // in groups never entered, as far as is known now
  std::unordered_set<std::string> defined_;  // names the closure or the command line may define
  // Every definition in the closure by name (pointers into the nodes' shared data).
  std::unordered_map<std::string, std::vector<const std::string*>> object_definitions_;
  std::unordered_map<std::string, std::vector<const function_macro_definition*>>
      function_definitions_;
  std::size_t defined_version_ = 0;  // grows with defined_
  std::size_t skipped_version_ = 0;  // defined_version_ when skipped_ was last revisited
  bool builtins_loaded_ = false;
  std::optional<std::unordered_set<std::string>> builtins_;
  std::set<std::string> unresolved_;
  std::set<std::string> resolved_computed_;
  std::string cwd_;
  bool remembered_ = false;
  include_closure out_;
  std::size_t hashed_ = 0;
  std::vector<stat_check> checks_;
  bool manifest_ok_ = true;      // every file settled and readable: the stats tell all that matters
  std::string nvrtc_directory_;  // where the builtins libraries were listed, if they were

 public:
  std::size_t hashed() const { return hashed_; }
  bool manifest_ok() const { return manifest_ok_; }
  std::vector<stat_check> take_checks() { return std::move(checks_); }
  const std::string& nvrtc_directory() const { return nvrtc_directory_; }
};

}  // namespace

include_search search_of(const program_options& options, const std::vector<std::string>& flags) {
  include_search s;
  s.program_dir = dir_of(options.name);
  s.source_include = !options.no_source_include.value_or(false);
  constexpr std::string_view kInclude = "--include-path=";
  for (const auto& flag : flags) {
    if (flag.starts_with(kInclude)) s.include_path.push_back(flag.substr(kInclude.size()));
  }
  s.pre_include = options.pre_include;
  s.headers = &options.headers;
  s.defines = &options.define_macro;
  s.undefines = &options.undefine_macro;
  return s;
}

bool may_read_headers(std::string_view code, const program_options& options) {
  if (!options.pre_include.empty() || !options.headers.empty()) return true;
  for (const auto& m : options.define_macro) {
    if (m.name == "__GNUC__" || m.name == "__QNX__") return true;
  }
  for (const auto& name : options.undefine_macro) {
    if (name == "__CUDACC_RTC__") return true;
  }
  return may_reference_files(code);
}

namespace {

void frame(std::string& out, std::string_view label, std::string_view payload) {
  out.append(label);
  const auto n = static_cast<std::uint64_t>(payload.size());
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>(n >> (8 * i)));
  out.append(payload);
}

// include_closure::digest: hundreds of entries for CCCL, hashed in one pass once per walk.
std::array<std::byte, 32> digest_of(const std::vector<closure_entry>& entries) {
  std::string framed;
  framed.reserve(entries.size() * 112);
  std::string payload;
  for (const auto& e : entries) {
    switch (e.what) {
      case closure_entry::kind::file:
        payload.assign(e.path);
        payload.push_back('\0');
        payload.append(reinterpret_cast<const char*>(e.digest.data()), e.digest.size());
        frame(framed, "header", payload);
        break;
      case closure_entry::kind::absent:
        frame(framed, "header_absent", e.path);
        break;
      case closure_entry::kind::in_memory:
        frame(framed, "header_in_memory", e.path);
        break;
    }
  }
  return sha256(std::as_bytes(std::span<const char>(framed.data(), framed.size())));
}

}  // namespace

tracked_includes track_includes(std::string_view code, const include_search& search,
                                header_digest_memo* memo) {
  const std::string inputs = walk_inputs(code, search, current_directory());
  if (auto m = manifests().find(inputs)) {
    if (still_valid(*m, search)) return {m->closure, 0, true};
  }
  header_digest_memo& digests = memo != nullptr ? *memo : header_memo_for(std::nullopt);
  // A persistent cache: the manifest an earlier process left, before the memo is even loaded.
  std::optional<manifest_location> persistent;
  if (digests.file()) persistent = manifest_for(*digests.file(), inputs);
  if (persistent) {
    if (auto m = load_manifest(*persistent); m && still_valid(*m, search)) {
      std::shared_ptr<const include_closure> closure = m->closure;
      manifests().put(inputs, std::move(m));
      return {std::move(closure), 0, true};
    }
  }
  walker w(search, digests);
  tracked_includes out;
  include_closure closure = w.run(code);
  closure.digest = digest_of(closure.entries);
  out.closure = std::make_shared<const include_closure>(std::move(closure));
  out.hashed = w.hashed();
  if (w.manifest_ok()) {
    auto m = std::make_shared<walk_manifest>();
    m->checks = w.take_checks();
    m->closure = out.closure;
    m->nvrtc_directory = w.nvrtc_directory();
    group_checks(*m);
    if (persistent) save_manifest(*persistent, *m);
    manifests().put(inputs, std::move(m));
  }
  return out;
}

}  // namespace cucore::detail
