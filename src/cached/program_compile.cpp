// program::compile: the library's front end to the one cached compile (cached/cached_compile.hpp).
// Without a cache it is program/'s compile with what this layer lends NVRTC (the compile server,
// automatic PCH: cached/nvrtc_services.hpp); with one, the flow around it, then verify mode.
#include <string>

#include "cached/cached_compile.hpp"
#include "cached/nvrtc_services.hpp"
#include "common/enum_names.hpp"
#include "common/trace.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/program.hpp"
#include "key/miss_explanation.hpp"
#include "verify/hit_verifier.hpp"
#include "verify/program_recipes.hpp"

namespace cucore {
namespace {

// The library speaks through cucore::log.
class library_voice final : public detail::cached_compile_voice {
 public:
  library_voice(const program_cache& cache, const program& prog, const program_cache_key& key,
                const program_cache_key_inputs* key_inputs, code_type target,
                std::span<const std::string> name_expressions)
      : cache_(cache),
        prog_(prog),
        key_(key),
        key_inputs_(key_inputs),
        target_(target),
        name_expressions_(name_expressions) {}

  void bypassed(const cache_bypass& bypass) override {
    cucore::log(log_level::info, "not using the " + cache_.description() + " cache: " + bypass.why);
  }
  void explained(const miss_explanation& miss) override {
    cucore::log(log_level::debug, "miss " + prog_.options().name + " (" + key_.hex().substr(0, 16) +
                                      "): " + detail::describe_reasons(miss));
  }
  void not_stored(const store_refusal& refusal) override {
    cucore::log(log_level::warning, "not storing the compiled program in the " +
                                        cache_.description() + " cache: " + refusal.message);
  }
  void store_failed(const std::exception& e) override {
    cucore::log(log_level::warning, "could not store the compiled program in the " +
                                        cache_.description() + " cache: " + e.what());
  }
  // What `cucore cache verify --recompile` compiles again (only where recipes are on).
  void stored(const std::optional<std::filesystem::path>& notes) override {
    if (key_inputs_) {
      detail::record_program_recipe(notes, key_.hex(), *key_inputs_);
    } else {
      detail::record_program_recipe(notes, key_.hex(), prog_.code(), prog_.type(), prog_.options(),
                                    target_, name_expressions_);
    }
  }

 private:
  const program_cache& cache_;
  const program& prog_;
  const program_cache_key& key_;
  const program_cache_key_inputs* key_inputs_;
  code_type target_;
  std::span<const std::string> name_expressions_;
};

}  // namespace

constexpr auto kCacheOutcomeNames = detail::name_each<cache_outcome::miss>("off", "hit", "miss");

std::string_view to_string(cache_outcome outcome) noexcept {
  return kCacheOutcomeNames(outcome);
}

object_code program::compile(code_type target, std::span<const std::string> name_expressions,
                             program_cache* cache) {
  return compile(target, name_expressions, {}, cache);
}

object_code program::compile(code_type target, std::span<const std::string> text_names,
                             std::span<const std::string> byte_names, program_cache* cache) {
  const std::vector<std::string> all_names = begin_compile(target, text_names, byte_names);
  const std::span<const std::string> name_expressions(all_names);
  if (cache == nullptr) {
    detail::library_nvrtc_services services;
    return compile_uncached(target, name_expressions, &services);
  }
  program_cache_key_inputs inputs;
  inputs.code = code_;
  inputs.code_type = type_;
  inputs.options = options_;
  inputs.target = target;
  inputs.name_expressions.assign(text_names.begin(), text_names.end());
  inputs.byte_name_expressions.assign(byte_names.begin(), byte_names.end());
  try {
    detail::trace_span span("key", "key");
    span.arg("program", options_.name);
    cache_key_ = make_program_cache_key(inputs, compiler_probes_for(*cache));
  } catch (const extra_digest_required& e) {
    throw extra_digest_required(
        std::string(e.what()) +
        " [program::compile(..., cache) derives the key itself and cannot take "
        "an extra_digest: build the key with cucore::make_program_cache_key(..., "
        "extra_digest) and pass it to program::compile(target, names, cache, key), or compile "
        "without the cache]");
  }
  return compile_cached(target, name_expressions, *cache, &inputs);
}

object_code program::compile(code_type target, std::span<const std::string> name_expressions,
                             program_cache& cache, const program_cache_key& key) {
  const std::vector<std::string> all_names = begin_compile(target, name_expressions, {});
  cache_key_ = key;
  return compile_cached(target, all_names, cache, nullptr);
}

object_code program::compile_cached(code_type target, std::span<const std::string> name_expressions,
                                    program_cache& cache,
                                    const program_cache_key_inputs* key_inputs) {
  // Automatic PCH's prefix keys read the digests and scans the program's key left in this cache's
  // header memo.
  detail::library_nvrtc_services services(compiler_probes_for(cache).header_digest_memo());
  library_voice voice(cache, *this, *cache_key_, key_inputs, target, name_expressions);
  auto compile = [&] { return compile_uncached(target, name_expressions, &services); };
  cache_outcome_ = cache_outcome::miss;  // unless the flow finds it
  detail::cached_compile_result result;
  const auto keep = [&] {  // what the flow found, also when the compile threw
    miss_explanation_ = std::move(result.miss);
    store_refusal_ = std::move(result.refusal);
    stored_ = result.stored;
  };
  try {
    detail::cached_compile({cache, *cache_key_, &*cache_key_, options_.name, compile, voice},
                           result);
  } catch (...) {
    keep();
    throw;
  }
  keep();
  if (result.bypassed) {
    cache_outcome_ = cache_outcome::off;
    detail::trace_span compiling("compiler", "compile");
    return compile_uncached(target, name_expressions, &services);
  }
  flight_outcome_ = result.flight;
  cache_outcome_ = result.from_cache() ? cache_outcome::hit : cache_outcome::miss;
  if (result.from_cache()) {
    if (const double rate = detail::verify_rate(options_); detail::sampled(rate)) {
      // Rate 1 (every hit, CI's "verified" suites): on this thread, the fresh bytes returned on a
      // mismatch. Below 1: in the background, the hit returned now.
      if (!options_.verify_in_background.value_or(rate < 1.0)) {
        return verify_hit(target, name_expressions, cache, std::move(*result.code), &services);
      }
      try {  // a check that cannot be queued (no thread, no memory) never fails the hit
        queue_hit_check(target, name_expressions, cache, *result.code, key_inputs);
      } catch (const std::exception& e) {
        cucore::log(log_level::debug, std::string("verify: a sampled hit not queued: ") + e.what());
      }
    }
  }
  return std::move(*result.code);
}

}  // namespace cucore
