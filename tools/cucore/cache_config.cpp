// cucore cache config (cache_config.hpp).
#include "cache_config.hpp"

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cache_spec.hpp"
#include "commands.hpp"
#include "common/environment.hpp"
#include "cucore/cache/config.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/error.hpp"

namespace cucore::cli {

// cucore cache config [KEY [VALUE]]: the directory cache's cucore.conf. Needs no open cache (a
// cache the trust rules refuse can still be configured by its owner, and a size set before the
// first compile applies to it).
int configure_cache(const arguments& args) {
  const std::string spec = cache_spec_from(args);
  const cache_spec parsed = parsed_cache_spec(spec);
  // The default cache's remote tier ($CUCORE_REMOTE_CACHE) is no obstacle: the file configures
  // the directory in front of it.
  const bool is_default = parsed.local == cache_spec::local_kind::default_directory;
  if (parsed.remote && !parsed.remote_from_environment) {  // the spec holds a URL: not echoed
    throw usage_error(
        "--cache names a Redis tier: cache config works on a directory cache (DIR, dir:DIR or "
        "the default); name the local directory alone");
  }
  if (!is_default && parsed.local != cache_spec::local_kind::directory) {
    throw usage_error("--cache " + spec +
                      ": cache config works on a directory cache (DIR, dir:DIR or the default)");
  }
  const std::filesystem::path dir = is_default ? default_cache_dir() : parsed.path;
  std::optional<bool> shared = shared_cache_from_env();
  if (args.has(shared_cache_option.name)) shared = true;
  const cache_access access =
      shared.value_or(false) ? cache_access::shared : cache_access::private_to_user;
  const auto& pos = args.positionals();
  const std::string file = (dir / cache_config_file_name).string();
  if (args.has(unset_option.name)) {
    if (pos.size() != 2) throw usage_error("cache config --unset needs exactly one KEY");
    try {
      write_cache_config(dir, pos[1], std::nullopt, access);
    } catch (const invalid_argument& e) {
      throw usage_error(std::string("cache config: ") + e.what());
    }
    std::cout << pos[1] << " unset in " << file << '\n';
    return exit_success;
  }
  if (pos.size() == 3) {
    try {
      write_cache_config(dir, pos[1], pos[2], access);
    } catch (const invalid_argument& e) {
      throw usage_error(std::string("cache config ") + pos[1] + ": " + e.what());
    }
    std::cout << pos[1] << " = " << pos[2] << " in " << file << '\n';
    return exit_success;
  }
  const cache_config c = read_cache_config(dir, access);
  const std::vector<std::pair<std::string, std::string>> values = {
      {"max_size", c.max_size ? (*c.max_size == 0 ? "0 (no cap)" : format_cache_size(*c.max_size))
                   : is_default ? format_cache_size(default_cache_max_size) + " (default)"
                                : "0 (default: no cap)"},
      {"shared", c.shared ? (*c.shared ? "true" : "false") : "false (default)"},
      {"umask", c.umask ? [&] {
         char buf[8];
         std::snprintf(buf, sizeof buf, "%03o", *c.umask);
         return std::string(buf);
       }()
                        : "unset (default)"},
      {"recipes", c.recipes ? (*c.recipes ? "true" : "false") : "false (default)"},
  };
  if (pos.size() == 2) {
    for (const auto& [key, value] : values) {
      if (key == pos[1]) {
        std::cout << value << '\n';
        return exit_success;
      }
    }
    throw usage_error("cache config: unknown key \"" + pos[1] +
                      "\" (known: max_size, shared, umask, recipes)");
  }
  std::cout << "# " << file << '\n';
  for (const auto& [key, value] : values) std::cout << key << " = " << value << '\n';
  // What overrides the file in this environment.
  for (const env::variable v :
       {env::variable::cache_max_size, env::variable::cache_shared, env::variable::cache_recipes}) {
    if (const auto value = env::text(v)) {
      std::cout << "# overridden here: " << env::name(v) << "=" << *value << '\n';
    }
  }
  return exit_success;
}

}  // namespace cucore::cli
