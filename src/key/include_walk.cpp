// The include walk (include_walker.hpp): the closure's files, found as NVRTC looks them up, and
// the groups never entered that the walk skips until a header that joins may enter them.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "key/include_walker.hpp"

namespace cucore::detail {
namespace {

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

}  // namespace

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

include_closure include_walker::run(std::string_view code) {
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

void include_walker::drain() {
  while (next_ < nodes_.size()) process(next_++);
}

void include_walker::process(std::size_t index) {
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

void include_walker::revisit_skipped() {
  if (skipped_version_ == defined_version_) return;
  skipped_version_ = defined_version_;
  std::vector<pending_reference> still;
  std::unordered_map<std::size_t, conditional_pruner> pruners;
  for (auto& p : skipped_) {
    const node& n = node_at(p.node_index);
    auto it = pruners.find(p.node_index);
    if (it == pruners.end()) {
      it = pruners
               .emplace(p.node_index, conditional_pruner(n.data->conditionals, may_be_defined_fn()))
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

void include_walker::handle(const node& from, std::size_t from_index,
                            const include_reference& ref) {
  if (ref.form == include_form::computed) {
    computed_.push_back({from_index, ref});
    return;
  }
  resolve_name(from, ref, ref.name, ref.form);
}

void include_walker::note_defined(const scanned_file& data) {
  out_.time_macros.merge(data.time_macros);
  for (const auto& name : data.defined) {
    if (defined_.insert(name).second) ++defined_version_;
  }
}

std::function<bool(std::string_view)> include_walker::may_be_defined_fn() {
  return [this](std::string_view name) { return may_be_defined(name); };
}

bool include_walker::may_be_defined(std::string_view name) {
  if (reserved_name(name)) return true;
  if (defined_.count(std::string(name)) != 0) return true;
  const auto* builtin = builtin_macros();
  return builtin == nullptr || builtin->count(std::string(name)) != 0;
}

const std::unordered_set<std::string>* include_walker::builtin_macros() {
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

const include_header* include_walker::in_memory_named(const std::string& name) const {
  if (search_.headers == nullptr) return nullptr;
  for (const auto& h : *search_.headers) {
    if (h.name == name) return &h;
  }
  return nullptr;
}

bool include_walker::try_in(const std::string& dir, const std::string& name, int search_index) {
  const std::string path = join_path(dir, name);
  if (try_candidate(path, search_index)) return true;
  return probes_stdh(name) && try_candidate(path + ".stdh", search_index);
}

void include_walker::resolve_name(const node& from, const include_reference& ref,
                                  const std::string& name, include_form form) {
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

void include_walker::resolve_pre_include(const std::string& name) {
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

bool include_walker::try_candidate(const std::string& path, int search_index) {
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
    if (c.special) {
      // NVRTC opens a FIFO (and waits for a writer): what it reads is nothing a key can name.
      unresolved_.insert(path + ": a FIFO or socket, which the compiler would read from");
      manifest_ok_ = false;
    }
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

void include_walker::add_in_memory(const include_header& h) {
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

std::string include_walker::absolute(const std::string& path) {
  if (!path.empty() && path.front() == '/') return path;
  return join_path(current_directory(), path);
}

const std::string& include_walker::current_directory() {
  if (cwd_.empty()) cwd_ = ::cucore::detail::current_directory();
  return cwd_;
}

std::shared_ptr<const scanned_file> include_walker::load(const std::string& path,
                                                         const header_identity& id,
                                                         bool defines_only) {
  const std::string key = (defines_only ? "defines:" : "") + absolute(path);
  if (auto known = memo_.lookup_or_claim(key, id)) return known;
  struct release_claim {
    header_digest_memo& memo;
    const std::string& key;
    ~release_claim() { memo.release(key); }
  } claim{memo_, key};
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

void include_walker::finish_unresolved() {
  out_.unresolved.assign(unresolved_.begin(), unresolved_.end());
  if (remembered_) memo_.save();
}

}  // namespace cucore::detail
