#pragma once
// The drop-ins' side of the one cached compile (cached/cached_compile.hpp): how they speak of it
// (through note(), at the levels a program under `cucore run` heard before: CUCORE_LOG=info, one
// line per compile), and what they make of its result.

#include <string>
#include <string_view>

#include "cached/cached_compile.hpp"
#include "dropin/support.hpp"
#include "key/miss_explanation.hpp"

namespace cucore::dropin {

class cached_compile_notes final : public detail::cached_compile_voice {
 public:
  // `what` names the compile in each line: the program's name, "an NVVM compile", "a link"; it
  // outlives the notes (a hit builds no string).
  explicit cached_compile_notes(std::string_view what) : what_(what) {}

  void bypassed(const cache_bypass& bypass) override {
    note(log_level::info, "bypass " + std::string(what_) + ": " + bypass.why);
  }
  void explained(const miss_explanation& miss) override {
    if (log_enabled(log_level::debug)) {
      note(log_level::debug,
           "miss " + std::string(what_) + " explained: " + detail::describe_reasons(miss));
    }
  }
  void not_stored(const store_refusal& refusal) override {
    note(log_level::info, "not storing " + std::string(what_) + ": " + refusal.message);
  }
  void store_failed(const std::exception& e) override {
    note(log_level::warning, "could not store " + std::string(what_) + ": " + e.what());
  }
  void stored(const std::optional<std::filesystem::path>&) override {}

 private:
  std::string_view what_;
};

// What the result leaves the program with: a miss (the real program holds its outputs), a hit
// (`hit` holds the entry, decoded), or a damaged entry (erased, so the next process misses too:
// the caller compiles with the real library). `what` names the compile in the info line.
enum class cached_answer { miss, hit, damaged };

template <class Entry, class Decode>
cached_answer take_cached(program_cache& cache, cache_key_ref key,
                          const detail::cached_compile_result& result, std::optional<Entry>& hit,
                          Decode decode, std::string_view what) {
  if (!result.from_cache()) {
    if (log_enabled(log_level::info)) note(log_level::info, "miss " + std::string(what));
    return cached_answer::miss;
  }
  try {
    hit = decode(result.code->code());
  } catch (const format_error&) {
    try {
      cache.erase(key);
    } catch (...) {
    }
    return cached_answer::damaged;
  }
  if (log_enabled(log_level::info)) note(log_level::info, "hit " + std::string(what));
  return cached_answer::hit;
}

}  // namespace cucore::dropin
