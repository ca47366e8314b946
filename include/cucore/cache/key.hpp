// The program cache key: a SHA-256 digest over every input that decides a compiler's output.
//
// make_program_cache_key() hashes labelled, length-prefixed fields (the label's ASCII bytes, the
// payload length as 8 big-endian bytes, the payload) in one fixed order:
//
//   schema            "cucore-key-2"
//   compiler identity of the code type's backend only:
//                     c++  → nvrtc                        (or nvrtc_probe_failed + failure kind)
//                     nvvm → nvvm                         (or nvvm_probe_failed + failure kind)
//                     ptx  → linker_backend, linker_version (or linker_probe_failed + kind)
//   code_type         "c++", "ptx" or "nvvm"
//   target_type       "ptx", "cubin" or "ltoir"
//   code              the SHA-256 of the source bytes (one pass serves the key and explain())
//   option_count, option...   exactly the flags the compiler gets: cucore::compiler_flags() with
//                     `arch` resolved (for PTX under the driver linker, after dropping the four
//                     fields the driver ignores: ftz, prec_div, prec_sqrt, fma)
//   names_count, name...      c++ only: the name expressions, sorted and deduplicated, "s:"-tagged
//   extra_sources_count, extra_source_name, extra_source_code (its SHA-256)..., use_libdevice
//                     nvvm only
//   options_name      program_options::name
//   memory_headers_count, memory_header...   c++ with in-memory headers: name + SHA-256 each
//   headers_count, header | header_absent | header_in_memory ...   c++ that can read headers:
//                     the include closure (see make_program_cache_key)
//   working_directory getcwd(), when the output embeds it (c++: --generate-line-info,
//                     --device-debug, LTO-IR, Tile IR)
//   environment...    "NAME=VALUE" of each variable the compilers read whose value can change
//                     their output and that is set (detail::compiler_environment's table)
//   untracked_include...   macro includes not worked out, accepted because of extra_digest
//   extra_digest      when given
//
// Compiler *output* is never hashed. A compiler whose identity cannot be probed gives a key that is
// stable but never equal to a working environment's ("fails closed").
//
// Inputs a key cannot see are refused with invalid_argument, naming the option and saying what to
// do instead (see make_program_cache_key).
//
// Thread safety: program_cache_key is an immutable value (copies share the explanation);
// make_program_cache_key and installed_compiler_probes() may be called from any thread.
#pragma once

#include <array>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/cache/statistics.hpp"
#include "cucore/linker.hpp"
#include "cucore/object_code.hpp"
#include "cucore/options.hpp"

namespace cucore {

// A compiler identity as it enters a key: a version string, or the kind of failure.
struct version_probe {
  bool ok = false;
  std::string value;  // ok: the identity ("13.0", ...); not ok: the failure kind, e.g.
                      // "library_not_found"
};

// The linker a PTX program would use, and its identity.
struct linker_probe {
  bool ok = false;
  linker_backend backend{};
  std::string version;  // ok: nvJitLink "13.0..." or the driver's "13000..." (cuDriverGetVersion)
  std::string failure;  // not ok: the failure kind
};

// Where compiler identities come from. installed_compiler_probes() asks the installed libraries;
// tests and tools can substitute fixed values. Implementations must be thread-safe and give the
// same answer on every call in a process.
class compiler_probes {
 public:
  virtual ~compiler_probes() = default;
  virtual version_probe nvrtc() const = 0;  // "13.0" (major.minor), possibly followed by
                                            // ";release=...;build=..."
  virtual version_probe nvvm() const = 0;   // "lib=2.0;ir=2.0.3.2", possibly followed by
                                            // ";release=...;build=..."
  virtual linker_probe linker() const = 0;  // nvJitLink + "13.0...", or driver + "13000..."
  // Where digests of header files are remembered across processes (by path and file identity),
  // so that the key of code with includes costs stats rather than hashing in a fresh process;
  // nullopt: only within this process. compiler_probes_for(cache) gives the cache's own memo.
  virtual std::optional<std::filesystem::path> header_digest_memo() const { return std::nullopt; }
};

// The probes of the libraries cucore loads (see cucore/toolkit.hpp). Each library is probed once
// per process, on first use. Besides the version calls, the NVRTC, libNVVM and nvJitLink probes
// read the toolkit release and build from the output of a tiny fixed compile (version calls only
// give major.minor, and libNVVM reports 2.0 across many toolkit releases), and the driver probe
// adds the driver library's file name (libcuda.so.580.65.06): compilers of one major.minor release
// can differ in output.
const compiler_probes& installed_compiler_probes();

class program_cache;
// The probes to derive keys for `cache` with: answered from the cache's compiler version memo
// (program_cache::compiler_version_memo) when it has one, so a hit in a fresh process loads no
// compiler; else installed_compiler_probes(). program::compile(..., cache) uses these; use them too
// when deriving keys yourself for a persistent cache.
const compiler_probes& compiler_probes_for(const program_cache& cache);

// One labelled field of a key, for people: `payload` is the payload as is when it is short
// printable ASCII, else "<N bytes: hex>" (short binary) or "<N bytes, sha256 0123456789ab...>".
// Source code (code, extra_source_code) shows as text when short and printable, else as
// "<N bytes, sha256 HEX>" with the full digest of the source (what `sha256sum FILE` prints).
struct key_field {
  std::string label;
  std::string payload;
  friend bool operator==(const key_field&, const key_field&) = default;
};

struct program_cache_key_inputs;

namespace detail {
struct observed_inputs;  // what a compile was observed reading (src/observe/)
}

enum class cache_skip_reason : std::uint8_t;  // cucore/cache/statistics.hpp

// Why the output of a compile must not be stored under the key it was compiled for
// (program_cache_key::check_store).
struct store_refusal {
  // header_changed: a path the key tracked answers otherwise now; header_too_new: a file was
  // modified within its timestamp granularity before the key was made.
  cache_skip_reason reason;
  std::string path;     // that path, as the key spells it
  std::string message;  // for people: the path, what was found, and that the result is not stored
};

// What include tracking did for a key (c++ only): how many headers entered it and how.
struct include_report {
  bool tracked = false;       // the code or options could read headers, and the closure was walked
  std::size_t files = 0;      // header files hashed into the key
  std::size_t absent = 0;     // search-path candidates checked and found absent
  std::size_t in_memory = 0;  // in-memory headers (all of them: NVRTC is given every one)
  std::size_t hashed = 0;     // files read and hashed; the others came from the digest memo
  // Whether the closure was an earlier walk's (in this process, or from the manifest a persistent
  // cache keeps beside its digest memo), reused because one stat of every path that walk checked
  // found each as before (no include resolved again).
  bool reused_walk = false;
  std::vector<std::string> vouched;  // macro includes not worked out, covered by extra_digest
  // References not followed because they sit in #if groups that can never be entered (their
  // conditions need macros that nothing the compile reads defines).
  std::size_t skipped = 0;
  // Whether every file was answered from the digest memo by its identity (stat only).
  bool stat_fast_path() const noexcept { return tracked && hashed == 0; }
};

// Why a compile must go without a cache although its key could be made: its output depends on
// something no key can name (the clock), or the compile has side effects a hit would skip (an
// environment variable that makes the compiler write a file). program::compile(..., cache),
// `cucore compile` and the drop-ins then compile uncached and count the skip.
struct cache_bypass {
  cache_skip_reason reason;
  std::string why;  // for people: what was found and what to do instead
};

// A 32-byte SHA-256 digest naming one compilation. Compares and hashes by digest only.
class program_cache_key {
 public:
  static constexpr std::size_t size = 32;

  explicit program_cache_key(const std::array<std::byte, size>& digest);
  // Parses 64 hexadecimal digits (either case); throws invalid_argument naming the bad input.
  static program_cache_key from_hex(std::string_view hex);

  std::span<const std::byte, size> bytes() const noexcept { return digest_; }
  std::string hex() const;  // 64 lowercase hex digits

  // The labelled fields the key was built from, in hashing order (schema first); empty for a key
  // made from a digest or from_hex. Headers show as "header" (path, size, digest),
  // "header_absent" (a search-path candidate that did not exist), "memory_header".
  // Header lines are rendered on the first call (a cache hit need not pay for them).
  const std::vector<key_field>& explain() const;
  // Include tracking's summary; empty (tracked = false) for keys without headers.
  const include_report& includes() const noexcept;
  // Set when a cache must not serve or store this compile (cache_bypass); nullopt for keys made
  // from a digest or from_hex.
  const std::optional<cache_bypass>& bypass() const noexcept;

  // Whether the output of a compile that ran after this key was made may be stored under it;
  // call it once the compile has finished, before put(). The compiler read the headers after the
  // key hashed them, and content digests cannot see a header rewritten with the same bytes (or
  // changed and changed back) meanwhile; file identities can. So: nullopt (store it) when every
  // path the key's include walk stat'd is now what it was at the walk — the same file (device,
  // inode, size, mtime and ctime to the nanosecond), still absent, the same link — and no such
  // file was modified (mtime or ctime) less than its timestamp granularity before the walk began
  // (a later change could leave every stat field as it was: the coarse clock's tick, plus what
  // the file system keeps — 2 s for whole-second stamps). Else the refusal: the result is still
  // good to use, not to store. A walk reused from a manifest is checked against the identities
  // the manifest recorded (and the start of this key's derivation). One fstatat per path. Keys
  // without tracked headers (and keys made from a digest) have nothing to check: nullopt. Not
  // seen (docs/cache-keys.md): a write through a mapping whose page was dirty already, and a
  // file created and removed again at an absent candidate while the compiler ran.
  std::optional<store_refusal> check_store() const;
  // The store gate cucore's own compiles go through (program::compile, `cucore compile`, the
  // drop-ins, the compile server's clients): check_store(), then whether the key covers every
  // input the compile was observed reading (docs/cache-keys.md, "Observed inputs"): a file or
  // probe its include walk checked, a variable of the compilers' table, the working directory.
  // Else unkeyed_input, or process_view_input for a pseudo or per-process
  // file or a side effect. An input the key's model misses then costs a store, never a hit.
  // `output` (the bytes to store): one holding the compile's own __DATE__ or __TIME__ text is
  // refused too (time_macros: the clock used however the name was spelled).
  std::optional<store_refusal> check_store(const detail::observed_inputs& seen,
                                           std::span<const std::byte> output = {}) const;

  friend bool operator==(const program_cache_key& a, const program_cache_key& b) noexcept {
    return a.digest_ == b.digest_;
  }
  friend std::strong_ordering operator<=>(const program_cache_key& a,
                                          const program_cache_key& b) noexcept;

 private:
  friend program_cache_key make_program_cache_key(const program_cache_key_inputs&,
                                                  const compiler_probes&);
  struct details;  // the fields and include report (key.cpp)
  program_cache_key(const std::array<std::byte, size>& digest,
                    std::shared_ptr<const details> details) noexcept;

  std::array<std::byte, size> digest_;
  std::shared_ptr<const details> details_;
};

// Everything that decides the compiler's output.
struct program_cache_key_inputs {
  std::string_view code;  // c++ and ptx: text (no NUL); nvvm: text or bitcode
  source_type code_type = source_type::cxx;
  program_options options;  // arch unset: the current device's (resolve_arch)
  cucore::code_type target = cucore::code_type::cubin;
  // c++ only (ignored for ptx and nvvm): the name expressions compile() resolves. Order and
  // duplicates do not matter.
  std::vector<std::string> name_expressions;
  // c++ only: name expressions a language binding received as byte strings (Python's bytes)
  // rather than text. Resolved like name_expressions, but keyed apart from the same text there
  // ("b:" tags instead of "s:", as cuda.core's make_program_cache_key does): such a binding keys
  // the symbol mapping it returns by the type it was given. C++ callers leave this empty.
  std::vector<std::string> byte_name_expressions;
  // Arbitrary caller bytes mixed into the key: required when the compile reads files the key cannot
  // see (a fingerprint of those files), allowed for anything else.
  std::optional<std::string> extra_digest;
};

// The key of `inputs`, with compiler identities from `probes`.
//
// c++ code that can read headers (an #include or __has_include, pre_include, in-memory headers)
// has its include closure tracked: every file the compile can read (a superset: every #include of
// every reachable file, except those in #if groups that can never be entered) enters the key as
// its spelled path and SHA-256, every search-path candidate that was checked and absent as its
// path, and every in-memory header as its name and SHA-256 — after options_name, before
// extra_digest. Searched as NVRTC 13 does (traced: docs/cache-keys.md): quoted names beside the
// including file (the program: the directory of options.name, unless no_source_include), then
// include_path, then the toolkit's include directories (unless toolkit_include_path is false);
// <names> in the directories only; NAME.stdh after NAME in each directory for names whose last
// component has no '.'; #include_next from where this route found the includer. Macro-named
// includes (object-like and function-like) are resolved with every definition visible in the
// closure or define_macro. Digests are memoised by file identity (probes.header_digest_memo(),
// else in this process). See docs/cache-keys.md for what is trusted.
//
// Throws invalid_argument (naming the option and what to do instead) — its subclass
// extra_digest_required where an extra_digest would make the inputs keyable — for:
// - a target the code type does not compile to (check_target), an unknown code type, empty code,
//   an empty options.name, a NUL byte in c++ or ptx code;
// - c++: options with compile-time side effects (create_pch, time, fdevice_time_trace), even with
//   an extra_digest: a cache hit would skip the side effect; likewise extra_nvrtc_options that
//   pass options to a tool inside NVRTC (-Xcudafe, -Xnvvm), which may read or write any file,
//   that NVRTC's option table (docs/compilation.md) does not list, or --use-bundled-headers=DIR
//   (NVRTC installs headers into DIR and reads them there);
// - c++ without extra_digest: pch, use_pch, pch_dir (precompiled headers), and an #include whose
//   macro-named header cannot be worked out (with an extra_digest it is accepted and listed as
//   untracked_include);
// - nvvm without extra_digest: use_libdevice=true (libdevice.10.bc is a file);
// - extra_sources outside nvvm; empty or NUL-containing name expressions;
// - ptx under the driver linker: time, ptxas_options, split_compile (they need nvJitLink);
// - no arch and no GPU (resolve_arch), and anything compiler_flags() refuses.
program_cache_key make_program_cache_key(
    const program_cache_key_inputs& inputs,
    const compiler_probes& probes = installed_compiler_probes());

}  // namespace cucore

template <>
struct std::hash<cucore::program_cache_key> {
  std::size_t operator()(const cucore::program_cache_key& key) const noexcept;
};
