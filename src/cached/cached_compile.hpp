#pragma once
// The one cached compile (docs/architecture.md). The library's program::compile(..., cache), the
// CLI (through it), every `cucore run` drop-in and the compile server's clients go through
// cached_compile(): the bypass, the lookup, single-flight, the compile observed, the observation
// gate and the store check, the store, the program's note, the miss's explanation and the
// statistics, in one place. What differs between front ends is what they compile, what they say
// and where (the voice), and what they do with a hit.

#include <filesystem>
#include <optional>
#include <string_view>

#include "cucore/cache/key.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/single_flight.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/object_code.hpp"

namespace cucore::detail {

// How a front end speaks of what the flow did: the library through cucore::log, a drop-in through
// its own channel at its own levels (under `cucore run` a program sees nothing new).
class cached_compile_voice {
 public:
  virtual ~cached_compile_voice() = default;
  virtual void bypassed(const cache_bypass& bypass) = 0;
  virtual void explained(const miss_explanation& miss) = 0;
  virtual void not_stored(const store_refusal& refusal) = 0;
  virtual void store_failed(const std::exception& e) = 0;
  // After a put: where the cache keeps its programs' notes (recipes go there).
  virtual void stored(const std::optional<std::filesystem::path>& notes) = 0;
};

struct cached_compile_request {
  program_cache& cache;
  cache_key_ref key;  // what the entry is found and stored under
  // The key's inputs, where the front end made one (make_program_cache_key): its bypass, its
  // store check, the program's note and the miss's explanation. nullptr: a digest of inputs no
  // file enters (the nvJitLink and libNVVM drop-ins), stored only if the compile read no file.
  const program_cache_key* full_key = nullptr;
  std::string_view program_name;        // for the trace
  function_ref<object_code()> compile;  // the uncached compile, run on a miss (observed here)
  cached_compile_voice& voice;
};

struct cached_compile_result {
  bool bypassed = false;  // the key says the output depends on what it cannot name: compile
                          // without the cache (the flow compiled nothing; the skip is counted)
  std::optional<object_code> code;  // set unless bypassed
  flight_outcome flight = flight_outcome::hit;
  bool stored = false;
  std::optional<store_refusal> refusal;  // a miss the store check kept out of the cache
  std::optional<miss_explanation> miss;  // why a miss missed (a full key only)

  bool from_cache() const noexcept {
    return !bypassed && (flight == flight_outcome::hit || flight == flight_outcome::waited);
  }
};

// Fills `out` as it goes: what it found before a compile threw (the miss's explanation) stays.
void cached_compile(const cached_compile_request& request, cached_compile_result& out);

}  // namespace cucore::detail
