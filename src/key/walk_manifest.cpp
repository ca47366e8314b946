#include "key/walk_manifest.hpp"

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

#include "cache/key_files.hpp"
#include "common/hex.hpp"

namespace cucore::detail {

// lstat first: one call for the usual regular file. `keep_path` false: for comparisons only.
stat_check probe(const std::string& path, bool keep_path) {
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
  c.special = S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode);
  if (c.regular) c.id = identity_of(st);
  return c;
}

// A listing check of `path` (through links: the directory a listing of the path reads).
stat_check probe_listing(const std::string& path, bool keep_path) {
  stat_check c;
  if (keep_path) c.path = path;
  c.listing = true;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return c;
  c.regular = true;
  c.id = identity_of(st);
  return c;
}

namespace {

stat_check reprobe(const stat_check& c) {
  return c.listing ? probe_listing(c.path, false) : probe(c.path, false);
}

}  // namespace

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

namespace {

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

}  // namespace

// The first check of `m` that answers otherwise now, by its path. fstatat(dir, name) on a
// descriptor opened now resolves exactly as lstat(dir/name) does now; a directory that cannot be
// opened holds no regular file.
std::optional<std::string> first_difference(const walk_manifest& m) {
  for (const std::size_t i : m.links) {
    if (!reprobe(m.checks[i]).same_answer(m.checks[i])) return m.checks[i].path;
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
      const bool regular = found && S_ISREG(st.st_mode);
      // A link now (where there was none: links are re-probed by path above) differs too.
      if ((found && S_ISLNK(st.st_mode)) || regular != c.regular ||
          (regular && !(identity_of(st) == c.id))) {
        return group.dir + name;
      }
    }
  }
  return std::nullopt;
}

// Whether every check of `m` answers as when it was made, and the NVRTC the walk read predefined
// macros from is the one `search` names now.
bool still_valid(const walk_manifest& m, const include_search& search) {
  if (!m.nvrtc_directory.empty() &&
      (!search.nvrtc_directory || search.nvrtc_directory() != m.nvrtc_directory)) {
    return false;
  }
  return !first_difference(m);
}

std::int64_t coarse_clock_resolution_ns() {
  static const std::int64_t resolution = [] {
    struct timespec r {};
    // Linux stamps files from the coarse clock (one tick: 1 to 10 ms); where it cannot say, 10 ms.
    if (::clock_getres(CLOCK_REALTIME_COARSE, &r) != 0 || ns_of(r) <= 0)
      return std::int64_t{10'000'000};
    return ns_of(r);
  }();
  return resolution;
}

std::int64_t timestamp_granularity_ns(const header_identity& id) {
  constexpr std::int64_t kSecond = 1'000'000'000;
  const std::int64_t m = ((id.mtime_ns % kSecond) + kSecond) % kSecond;
  const std::int64_t c = ((id.ctime_ns % kSecond) + kSecond) % kSecond;
  // Whole seconds in both stamps: a file system that keeps seconds (ext3's small inodes, HFS+,
  // some NFS servers) or FAT's two seconds.
  std::int64_t kept = 2 * kSecond;
  if (m != 0 || c != 0) {
    // Else the coarsest power of ten both stamps are multiples of (exFAT keeps 10 ms, NTFS
    // 100 ns; a nanosecond file system gives the coarse clock's digits, almost always 1 ns). By
    // chance a finer one can look coarser: then a file waits longer to count as settled.
    kept = 1;
    while (kept < kSecond / 10 && m % (kept * 10) == 0 && c % (kept * 10) == 0) kept *= 10;
  }
  return kept + coarse_clock_resolution_ns();
}

std::optional<store_problem> store_problem_of(const walk_manifest& m,
                                              std::int64_t walk_started_ns) {
  // Both rules are checked; a change is the stronger reason, so it is the one reported.
  if (auto changed = first_difference(m)) return store_problem{true, std::move(*changed), {}};
  const auto too_new = [&](const stat_check& c) {
    return c.regular && !c.listing &&
           std::max(c.id.mtime_ns, c.id.ctime_ns) >=
               walk_started_ns - timestamp_granularity_ns(c.id);
  };
  for (const std::size_t i : m.links) {
    if (too_new(m.checks[i])) return store_problem{false, m.checks[i].path, m.checks[i].id};
  }
  for (const auto& group : m.by_directory) {
    for (const auto& [i, name] : group.names) {
      if (too_new(m.checks[i])) return store_problem{false, group.dir + name, m.checks[i].id};
    }
  }
  return std::nullopt;
}

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
// 2: time_macros; 3: time_macros as paste flag and identifier pieces too (scan_time_tokens)
constexpr std::uint32_t kManifestVersion = 3;
constexpr std::size_t kManifestShardFiles = 8;
constexpr std::uint64_t kManifestShardBytes = 512 * 1024;

namespace {

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

}  // namespace

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
  out.name = to_hex(out.hash);
  out.shard = std::filesystem::path(memo.string() + ".manifests") / out.name.substr(0, 2);
  return out;
}

namespace {

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
  record_writer body;
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
  body.u8(static_cast<std::uint8_t>((closure.time_macros.literal ? 1 : 0) |
                                    (closure.time_macros.paste ? 2 : 0)));
  body.u64(closure.time_macros.pieces[0]);
  body.u64(closure.time_macros.pieces[1]);
  body.raw(closure.digest.data(), closure.digest.size());

  record_writer w;
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
  record_reader r(body);
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
  const std::uint8_t time_macros = r.u8();
  if (time_macros > 3) return nullptr;
  closure->time_macros.literal = (time_macros & 1) != 0;
  closure->time_macros.paste = (time_macros & 2) != 0;
  closure->time_macros.pieces[0] = r.u64();
  closure->time_macros.pieces[1] = r.u64();
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

}  // namespace

// The manifest at `where`, when there is a valid one for its inputs. Only a file this user (or
// root) wrote, that nobody else may write, is read (the directories are this user's, see
// save_manifest, but a cache's root may be shared with a group), and none over a shard's bound
// (key_files.hpp: no link followed, no FIFO waited on).
std::shared_ptr<walk_manifest> load_manifest(const manifest_location& where) {
  const auto data = read_key_file(where.shard / where.name, kManifestMaxBytes, owned_privately);
  return data ? parse_manifest(*data, where.hash) : nullptr;
}

namespace {

// A directory save_manifest may write into: this user's, writable by nobody else, not a link
// (one swapped in by someone who can write the cache's root would take this user's manifests
// elsewhere).
bool private_directory(const std::filesystem::path& dir) {
  struct stat st {};
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
         (st.st_mode & (S_IWGRP | S_IWOTH)) == 0;
}

}  // namespace

// Best effort: a manifest that cannot be written costs a walk later. The directories are made
// private to this user (mode 0700 whatever the umask; files are 0600): nobody else's manifest can
// be planted where this process reads. One over a shard's bound is not written (the walk's
// files are in the digest memo all the same).
void save_manifest(const manifest_location& where, const walk_manifest& m) noexcept {
  try {
    ::mkdir(where.shard.parent_path().c_str(), 0700);
    ::mkdir(where.shard.c_str(), 0700);
    if (!private_directory(where.shard.parent_path()) || !private_directory(where.shard)) return;
    const std::string bytes = serialize_manifest(m, where.hash);
    if (bytes.size() > kManifestMaxBytes) return;
    if (replace_file(where.shard / where.name, bytes)) {
      trim_shard(where.shard, where.name, bytes.size());
    }
  } catch (...) {
    // Best effort (see above).
  }
}

}  // namespace cucore::detail
