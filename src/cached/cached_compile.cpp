#include "cached/cached_compile.hpp"

#include <string>

#include "common/trace.hpp"
#include "cucore/log.hpp"
#include "key/miss_explanation.hpp"
#include "key/observation_gate.hpp"
#include "observe/compiler_observer.hpp"
#include "verify/background_verifier.hpp"

namespace cucore::detail {
namespace {

// Where this cache keeps its programs' notes: asked on a miss only (a hit pays nothing).
std::optional<std::filesystem::path> notes_of(program_cache& cache) {
  const auto stats = cache.statistics();
  return stats ? std::optional(stats->directory()) : std::nullopt;
}

void count_skip(program_cache& cache, cache_skip_reason reason) {
  if (const auto stats = cache.statistics()) stats->record_skip(reason);
}

// What differs from the last key stored for this program (docs/cache-keys.md, "Misses that
// explain themselves"), counted by kind. Asked only where this process compiles.
std::optional<miss_explanation> explain(program_cache& cache, const program_cache_key& key,
                                        const std::optional<std::filesystem::path>& notes,
                                        std::string& encoded_fields) {
  const auto& fields = key.explain();
  if (fields.empty()) return std::nullopt;  // a key made from a digest: nothing to compare
  const auto nearest = nearest_program_note(notes, note_identity_of(fields));
  encoded_fields = encode_fields(fields);
  auto miss = explain_miss(nearest ? std::string_view(nearest->fields) : "",
                           nearest ? nearest->key_hex : "", encoded_fields);
  if (const auto stats = cache.statistics()) stats->record_miss(miss.kind());
  return miss;
}

}  // namespace

void cached_compile(const cached_compile_request& request, cached_compile_result& out) {
  program_cache& cache = request.cache;
  const program_cache_key* key = request.full_key;
  // Stale entries verify mode's thread found in this cache and could not remove itself.
  for (const auto& stale : take_stale_entries(&cache)) {
    try {
      cache.erase(stale);
    } catch (const std::exception& e) {
      cucore::log(log_level::warning,
                  std::string("verify: could not remove a stale entry: ") + e.what());
    }
  }
  // The whole cached compile in the trace (docs/trace.md), named by the program, its outcome.
  trace_span span("program", request.program_name);
  if (span.on() && key != nullptr) span.arg("key", key->hex().substr(0, 16));
  // The output depends on what no key names (the clock), or the compile writes files: the front
  // end compiles without the cache, the skip counted.
  if (key != nullptr) {
    if (const auto& bypass = key->bypass()) {
      request.voice.bypassed(*bypass);
      count_skip(cache, bypass->reason);
      span.arg("outcome", "bypass");
      out.bypassed = true;
      return;
    }
  }
  // What the compile reads is observed: stored only if the key covers all of it.
  observed_inputs seen = unobserved_compile();
  std::string encoded_fields;  // the miss's key fields, as its program's note keeps them
  auto compile = [&] {
    if (key != nullptr) {
      out.miss = explain(cache, *key, notes_of(cache), encoded_fields);
      if (out.miss) request.voice.explained(*out.miss);
    }
    trace_span compiling("compiler", "compile");
    if (out.miss) compiling.arg("miss", to_string(out.miss->kind()));
    return run_observed(seen, [&] { return request.compile(); });
  };
  auto store = [&](const object_code& compiled) {
    trace_span storing("cache", "store");
    // The compiler read the headers after the key was made: stored only if each is still the file
    // the key hashed, and was settled then, and it read nothing else the key does not cover
    // (program_cache_key::check_store; a digest key covers no file: key/observation_gate.hpp).
    auto refusal =
        key != nullptr ? key->check_store(seen, compiled.code()) : check_observed_inputs(seen, {});
    if (refusal) {
      request.voice.not_stored(*refusal);
      count_skip(cache, refusal->reason);
      out.refusal = std::move(refusal);
      return;
    }
    try {
      cache.put(request.key, compiled);
      out.stored = true;
      const auto notes = notes_of(cache);
      if (key != nullptr && !key->explain().empty()) {
        record_program_note(notes, key->hex(), note_identity_of(key->explain()), encoded_fields);
      }
      request.voice.stored(notes);
    } catch (const std::exception& e) {
      // The compile succeeded; a cache that cannot store it only costs a later recompile.
      request.voice.store_failed(e);
    }
  };
  flight_result result = get_or_compile(cache, request.key, compile, store);
  span.arg("outcome", to_string(result.outcome));
  out.flight = result.outcome;
  out.code = std::move(result.code);
}

}  // namespace cucore::detail
