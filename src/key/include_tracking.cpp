#include "key/include_tracking.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "common/sha256.hpp"
#include "key/conditional_scan.hpp"
#include "key/header_memo.hpp"
#include "key/include_scanner.hpp"
#include "key/macro_text.hpp"
#include "key/walk_manifest.hpp"

namespace cucore::detail {

// -----------------------------------------------------------------------------------------------
// The walk: NVRTC's lookup of every name the program and its headers may include (the memo of
// each file's scan: header_memo.hpp; the stat answers a walk rested on: walk_manifest.hpp).

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
    out_.time_macros.merge(data.time_macros);
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
        const auto args = macro_call_arguments(text, open, end);
        if (!args) return false;
        for (const auto* f : functions) {
          std::string substituted;
          if (!substitute_macro_call(*f, *args, substituted)) return false;
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
        auto name = header_name_of(e);
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
  // Before the first stat: a file changed after this shows a newer stamp (store_problem_of).
  const std::int64_t started = now_ns();
  const std::string inputs = walk_inputs(code, search, current_directory());
  if (auto m = manifests().find(inputs)) {
    if (still_valid(*m, search)) return {m->closure, 0, true, m, started};
  }
  header_digest_memo& digests = memo != nullptr ? *memo : header_memo_for(std::nullopt);
  // A persistent cache: the manifest an earlier process left, before the memo is even loaded.
  std::optional<manifest_location> persistent;
  if (digests.file()) persistent = manifest_for(*digests.file(), inputs);
  if (persistent) {
    if (std::shared_ptr<const walk_manifest> m = load_manifest(*persistent);
        m && still_valid(*m, search)) {
      std::shared_ptr<const include_closure> closure = m->closure;
      manifests().put(inputs, m);
      return {std::move(closure), 0, true, std::move(m), started};
    }
  }
  walker w(search, digests);
  tracked_includes out;
  out.started_ns = started;
  include_closure closure = w.run(code);
  closure.digest = digest_of(closure.entries);
  out.closure = std::make_shared<const include_closure>(std::move(closure));
  out.hashed = w.hashed();
  // The checks are kept whether or not the walk may be reused: a compile is stored only if they
  // still hold when it has finished.
  auto m = std::make_shared<walk_manifest>();
  m->checks = w.take_checks();
  m->closure = out.closure;
  m->nvrtc_directory = w.nvrtc_directory();
  group_checks(*m);
  if (w.manifest_ok()) {
    if (persistent) save_manifest(*persistent, *m);
    manifests().put(inputs, m);
  }
  out.checks = std::move(m);
  return out;
}

}  // namespace cucore::detail
