#include "cache_spec.hpp"

#include "cucore/cache/key.hpp"
#include "cucore/cache/open.hpp"

namespace cucore::cli {

std::string cache_spec_from(const arguments& args) {
  const std::string spec = args.last(cache_option.name).value_or("");
  (void)parsed_cache_spec(spec);
  return spec;
}

cache_spec parsed_cache_spec(std::string_view spec) {
  try {
    return parse_cache_spec(spec);
  } catch (const cache_spec_error& e) {
    if (!e.variable().empty()) throw usage_error(e.what());
    throw usage_error("--cache " + e.spec() + ": " + e.reason());
  }
}

bool is_no_cache(std::string_view spec) {
  const cache_spec parsed = parsed_cache_spec(spec);
  return parsed.local == cache_spec::local_kind::none && !parsed.remote;
}

bool is_memory_cache(std::string_view spec) {
  const cache_spec parsed = parsed_cache_spec(spec);
  return parsed.local == cache_spec::local_kind::memory && !parsed.remote;
}

std::unique_ptr<program_cache> open_cache(std::string_view spec, const arguments& args,
                                          std::optional<bool> statistics) {
  open_cache_options options;
  if (args.has(shared_cache_option.name)) options.shared = true;
  options.statistics = statistics;
  return open_program_cache(spec, options);
}

// The same probes program::compile(..., cache) uses: with --extra-digest the tool derives keys
// itself, and a hit must not load a compiler to learn its version.
const compiler_probes& probes_for(const program_cache& cache) {
  return compiler_probes_for(cache);
}

}  // namespace cucore::cli
