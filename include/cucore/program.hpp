// Run-time compilation of CUDA C++ (NVRTC), PTX (nvJitLink or the driver linker) and NVVM IR
// (libNVVM).
#pragma once

#include <cstddef>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/cache/key.hpp"
#include "cucore/cache/single_flight.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/object_code.hpp"
#include "cucore/options.hpp"

namespace cucore {

class program_cache;
namespace detail {
class nvrtc_services;  // what the cached-compile layer lends an NVRTC compile (server, auto PCH)
}

// Whether the last compile went through a cache, and what it found there.
enum class cache_outcome { off, hit, miss };
std::string_view to_string(cache_outcome outcome) noexcept;  // "off", "hit", "miss"

// What verify mode (program_options::verify; docs/verify.md) found of the last compile's hit:
// not_verified (no hit, or not sampled), verified (compiled again: the same bytes, NVRTC's
// per-process names masked), mismatch (not the same: a stale hit caught, the entry removed, the
// fresh result returned), queued (sampled below rate 1: the cached bytes returned now, the check
// left to the process's background thread, whose findings go to the cache's statistics, the log
// and a report; wait_for_background_verification() waits for it).
enum class verify_outcome { not_verified, verified, mismatch, queued };
std::string_view to_string(verify_outcome outcome) noexcept;  // "not_verified", ...

// Waits until every hit queued for verification in the background (verify_outcome::queued) has
// been checked: for a test, or a program that wants the findings before it exits (at exit, only
// the check in progress is waited for; those still queued are dropped).
void wait_for_background_verification();

// What became of a precompiled header request on the last NVRTC compile.
enum class pch_status { not_requested, created, not_attempted, failed };
std::string_view to_string(pch_status status) noexcept;

// What cucore's automatic precompiled headers did on the last NVRTC compile (program_options::
// auto_pch; docs/compilation.md, "Precompiled headers"). Whatever it did, the output and the log
// are those of a compile without them.
enum class auto_pch_status {
  // Not used: auto_pch=false, the caller's own PCH options, not c++, no compile (a cache hit),
  // NVRTC_DISABLE_PCH, or turned off for the process (its debug log says why).
  off,
  // The code does not start with #include lines (nothing to precompile), or they have no cache
  // key (an #include cucore cannot follow, an option with side effects).
  no_prefix,
  // The first compile of these leading #include lines in this process: compiled from the headers
  // (making a PCH costs more than a plain compile, and nothing may reuse it).
  first_seen,
  // This compile made the PCH of its leading #include lines.
  created,
  // This compile started from the PCH of its leading #include lines.
  used,
  // NVRTC makes no PCH of these lines, or making it logged diagnostics: compiled from the
  // headers, as every later compile of them in this process.
  unusable,
  // A PCH was expected but its file had changed, a header changed during the compile, NVRTC's PCH
  // heap was too small (grown for the next one), or PCH mode failed and the compile ran again
  // without it: compiled from the headers (the debug log says why).
  discarded,
};
std::string_view to_string(auto_pch_status status) noexcept;

// A program: source code, its type and options. compile() may be called many times (each call is an
// independent compilation); a program is not meant to be compiled from two threads at once, but
// distinct programs compile concurrently. The program owns every string it hands to a compiler.
class program {
 public:
  program(std::string code, source_type type, program_options options = {});

  // Compiles to `target`. For c++, each name expression (e.g. "my_kernel<float>") is resolved to
  // its mangled name in the result's symbol_mapping(). Throws compile_error with the log when the
  // compiler rejects the code; invalid_argument for an unsupported target or option.
  //
  // With a cache: derives the key (make_program_cache_key with the cache's compiler version memo
  // and header digest memo), returns the cached object_code on a hit (symbol mapping included, so
  // name expressions work), and on a miss compiles and stores the result. Concurrent misses of one
  // key coalesce (single-flight, per the cache's single_flight()): one process or thread
  // compiles, the others wait for its entry; last_flight_outcome() says which this one was. Headers
  // the code can read (#include beside options.name, include_path, the toolkit's directories,
  // pre_include, in-memory headers) are tracked by the key; after a miss the result is stored only
  // if program_cache_key::check_store() allows it (every tracked header the same file as at the
  // walk, none modified just before it, and every input the compile was observed reading covered
  // by the key: docs/cache-keys.md, "Observed inputs"), else returned unstored:
  // last_store_refusal() says why,
  // and a warning is logged and counted in the cache's statistics. A failure to store is
  // logged and never fails the compile. Inputs whose key needs an extra_digest (PCH options,
  // use_libdevice, an #include through a macro whose value cannot be worked out) and options with
  // side effects (create_pch, time, fdevice_time_trace) are refused with invalid_argument: derive
  // the key with make_program_cache_key(..., extra_digest) and pass it to the overload below.
  object_code compile(code_type target, std::span<const std::string> name_expressions = {},
                      program_cache* cache = nullptr);
  // As above, for a language binding that tells text name expressions from byte strings
  // (Python's str and bytes): both are resolved, and the cache key tells them apart
  // (program_cache_key_inputs::byte_name_expressions).
  object_code compile(code_type target, std::span<const std::string> name_expressions,
                      std::span<const std::string> byte_name_expressions, program_cache* cache);
  object_code compile(code_type target, program_cache& cache) {
    return compile(target, {}, &cache);
  }
  // As compile(target, name_expressions, &cache), with a key the caller derived from this
  // program's inputs (make_program_cache_key, e.g. with an extra_digest): the same bypass,
  // single-flight, observed store gate and statistics. The key must be of this program, target
  // and names; it is not checked.
  object_code compile(code_type target, std::span<const std::string> name_expressions,
                      program_cache& cache, const program_cache_key& key);

  // The log of the last compile (warnings on success; also carried by compile_error).
  const std::string& log() const noexcept { return log_; }
  // The backend that compiles this program (for ptx: nvJitLink, or the driver when it is missing).
  compiler_backend backend() const;
  pch_status last_pch_status() const noexcept { return pch_status_; }
  auto_pch_status last_auto_pch() const noexcept { return auto_pch_; }
  cache_outcome last_cache_outcome() const noexcept { return cache_outcome_; }
  // What single-flight did on the last compile through a cache (nullopt without a cache): hit,
  // compiled, waited (another process's compile was read: also a cache_outcome::hit), took_over,
  // gave_up or unclaimed. See cache/single_flight.hpp.
  const std::optional<flight_outcome>& last_flight_outcome() const noexcept {
    return flight_outcome_;
  }
  // The key of the last compile through a cache.
  const std::optional<program_cache_key>& last_cache_key() const noexcept { return cache_key_; }
  // Why the last compile's result was not stored, when it was a miss that check_store() refused
  // (a header changed during the compile, or had been modified just before it); nullopt otherwise.
  const std::optional<store_refusal>& last_store_refusal() const noexcept { return store_refusal_; }
  // Whether the last compile's result was put into the cache (a miss the gate allowed, whose put
  // did not fail).
  bool last_stored() const noexcept { return stored_; }
  // Verify mode's finding on the last compile (docs/verify.md); the mismatch report's path.
  verify_outcome last_verify() const noexcept { return verify_; }
  const std::optional<std::string>& last_verify_report() const noexcept { return verify_report_; }
  // Why the last compile missed (a miss this process compiled): what differs from the last key
  // stored for the same program (name, else source; same target), or first_compile.
  const std::optional<miss_explanation>& last_miss_explanation() const noexcept {
    return miss_explanation_;
  }

  const std::string& code() const noexcept { return code_; }
  source_type type() const noexcept { return type_; }
  const program_options& options() const noexcept { return options_; }

 private:
  std::vector<std::string> begin_compile(code_type target, std::span<const std::string> text_names,
                                         std::span<const std::string> byte_names);
  // key_inputs: what the key was made from (nullptr: a key the caller derived).
  object_code compile_cached(code_type target, std::span<const std::string> name_expressions,
                             program_cache& cache, const program_cache_key_inputs* key_inputs);
  object_code compile_uncached(code_type target, std::span<const std::string> name_expressions,
                               detail::nvrtc_services* services);
  // Verify mode (src/verify/program_verify.cpp): the hit checked on this thread, or queued for
  // the background thread; replay_hit is the fresh compile both judge by.
  object_code verify_hit(code_type target, std::span<const std::string> name_expressions,
                         program_cache& cache, object_code cached,
                         detail::nvrtc_services* services);
  void queue_hit_check(code_type target, std::span<const std::string> name_expressions,
                       program_cache& cache, const object_code& cached,
                       const program_cache_key_inputs* key_inputs);
  struct replayed_compile;
  replayed_compile replay_hit(code_type target, std::span<const std::string> name_expressions,
                              const object_code& cached);
  object_code compile_nvrtc(code_type target, std::span<const std::string> name_expressions,
                            detail::nvrtc_services* services);
  object_code compile_nvvm(code_type target);
  object_code compile_ptx(code_type target);

  std::string code_;
  source_type type_;
  program_options options_;
  std::string log_;
  pch_status pch_status_ = pch_status::not_requested;
  auto_pch_status auto_pch_ = auto_pch_status::off;
  cache_outcome cache_outcome_ = cache_outcome::off;
  std::optional<flight_outcome> flight_outcome_;
  std::optional<program_cache_key> cache_key_;
  std::optional<store_refusal> store_refusal_;
  bool stored_ = false;
  verify_outcome verify_ = verify_outcome::not_verified;
  std::optional<std::string> verify_report_;
  std::optional<miss_explanation> miss_explanation_;
};

// NVRTC's process-wide precompiled-header heap size (nvrtcGetPCHHeapSize / nvrtcSetPCHHeapSize).
// compile() grows it on its own when a PCH does not fit. Setting it waits for a compile that holds
// the heap, and drops every automatic PCH made before (NVRTC can use none of them afterwards).
std::size_t nvrtc_pch_heap_size();
void set_nvrtc_pch_heap_size(std::size_t bytes);

// Removes this process's automatic precompiled headers (their files) and forgets which leading
// #include lines it has compiled, as in a fresh process. Waits for a compile that holds the heap.
void clear_auto_pch();

}  // namespace cucore
