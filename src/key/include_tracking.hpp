// Include tracking for program cache keys: which files a CUDA C++ compile can read, and what they
// hold.
//
// NVRTC gives no dependency list, so the closure is a conservative superset worked out here: every
// #include / __has_include of every reachable file, resolved the way NVRTC searches (its lookup as
// measured by tracing it: docs/cache-keys.md), except those in #if groups that can never be
// entered because nothing the compile reads defines the macros their conditions need. Each
// search-path candidate that was checked and did not exist is recorded too, so that a header added
// earlier in the path changes the key. Includes named through macros are resolved with every
// object-like definition of the macro that the closure (or -D) holds; what cannot be resolved that
// way is reported, never guessed.
//
// Reading and hashing hundreds of toolkit headers costs milliseconds; a digest memo keyed by file
// identity (path, device, inode, size, mtime, ctime) makes a repeated walk cost stats. Files
// changed within the last seconds are never memoised (their timestamps may not yet tell two
// versions apart).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/options.hpp"
#include "key/include_scanner.hpp"
#include "key/time_macros.hpp"

namespace cucore::detail {

class header_digest_memo;
struct walk_manifest;

// One element of a closure as it enters the key.
struct closure_entry {
  enum class kind : std::uint8_t { file, absent, in_memory };
  kind what = kind::file;
  std::string path;  // file/absent: as NVRTC spells it (search directory + "/" + name); in_memory:
                     // the header's name
  std::uint64_t size = 0;
  std::array<std::byte, 32> digest{};  // SHA-256 of the contents (file, in_memory)
};

// Where and how a c++ compile searches for headers.
struct include_search {
  // Directory for quoted includes of the program text itself: the directory part of
  // options.name, or "" (the current directory) for a name without one.
  std::string program_dir;
  // Whether quoted includes search the includer's directory first (false: no_source_include,
  // which NVRTC applies to every includer, headers too).
  bool source_include = true;
  std::vector<std::string> include_path;  // -I as NVRTC gets them, toolkit directories included
  std::vector<std::string> pre_include;
  const std::vector<include_header>* headers = nullptr;
  const std::vector<macro>* defines = nullptr;
  const std::vector<std::string>* undefines = nullptr;
  // The directory of the NVRTC library that compiles: its builtins libraries there tell which
  // macros NVRTC predefines. Empty: unknown, and then no #if group counts as never entered.
  // Asked only when a condition needs it.
  std::function<std::string()> nvrtc_directory;
};

// The search of `options` (include_path from compiler_flags(), so the toolkit directories count).
include_search search_of(const program_options& options, const std::vector<std::string>& flags);

struct include_closure {
  std::vector<closure_entry> entries;  // in walk order (deterministic for one file system state)
  // Includes whose names could not be worked out ("file:line: #include TEXT"): the closure may
  // miss what they read.
  std::vector<std::string> unresolved;
  std::size_t files = 0;      // file entries
  std::size_t absent = 0;     // absent entries
  std::size_t in_memory = 0;  // in_memory entries
  // References not followed: they sit in #if groups the preprocessor never enters (a condition
  // on macros that nothing the compile reads defines, and NVRTC does not predefine).
  std::size_t skipped = 0;
  // The time-macro tokens of the program text and every file and in-memory header of the closure
  // merged (scan_time_tokens): whether the clock may decide the output.
  time_tokens time_macros;
  // SHA-256 of the entries framed as key fields are (label, 8-byte big-endian length, payload):
  // "header" path NUL digest, "header_absent" path, "header_in_memory" name. The key takes this.
  std::array<std::byte, 32> digest{};
};

// A closure as one key derivation got it.
struct tracked_includes {
  std::shared_ptr<const include_closure> closure;
  std::size_t hashed = 0;  // files this call read and hashed (the rest: memo or manifest)
  // An earlier walk's closure (this process's, or one a persistent manifest recorded), every stat
  // it made found unchanged.
  bool from_manifest = false;
  // Every stat answer the closure rests on (the walk's, or the manifest's it reused), and when
  // the derivation began (CLOCK_REALTIME, ns): what store_problem_of() compares a finished
  // compile against.
  std::shared_ptr<const walk_manifest> checks;
  std::int64_t started_ns = 0;
};

// Whether `code` (or the options: pre_include, in-memory headers, defines that make NVRTC's
// preamble include host headers) can make the compiler read any file or header at all: the fast
// path of keys of code with no directive.
bool may_read_headers(std::string_view code, const program_options& options);

// Works out the closure of `code` under `search`, reading files as needed. `memo` may be null
// (then a process-wide memo is used). Never throws for what it finds on disk (an unreadable file
// counts as absent-like: its path enters the key as unreadable); throws std::bad_alloc only.
//
// A walk whose files had all settled leaves a manifest in the process: every path it stat'd and
// what it found there (regular file and identity, symlink, or nothing). The next call with the
// same code, search and working directory re-stats those paths; if each answers as before, the
// walk would go exactly as before (it is a function of those answers and the contents the
// identities stand for), so its closure is reused without resolving a name again. When `memo`
// has a file (a persistent cache), the manifest is also written beside it, named by the SHA-256
// of this build's identity and the walk's inputs, and a fresh process with the same inputs reads
// it before anything else: a valid one answers without loading the memo (docs/cache-keys.md).
tracked_includes track_includes(std::string_view code, const include_search& search,
                                header_digest_memo* memo);

// The digest memo: process-wide per persistent file (loaded once, saved after walks that hashed
// memoisable files), or one in-memory memo for keys made without a persistent cache.
header_digest_memo& header_memo_for(const std::optional<std::filesystem::path>& file);

}  // namespace cucore::detail
