#include "cache_spec.hpp"

#include "cucore/cache/key.hpp"
#include "cucore/cache/open.hpp"

namespace cucore::cli {

std::string cache_spec_from(const arguments& args) {
  const std::string spec = args.last(cache_option.name).value_or("");
  if (spec == "sqlite:") {
    throw usage_error("--cache sqlite: names no file: use --cache sqlite:FILE");
  }
  if (spec == "dir:") throw usage_error("--cache dir: names no directory: use --cache dir:DIR");
  return spec;
}

bool is_no_cache(std::string_view spec) {
  return spec == "none" || spec == "off";
}

bool is_memory_cache(std::string_view spec) {
  return spec == "memory";
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
