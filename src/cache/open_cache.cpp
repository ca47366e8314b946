#include "cucore/cache/open.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "common/environment.hpp"
#include "common/text.hpp"
#include "cucore/cache/config.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/http.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/pack.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"

namespace cucore {

namespace {

// What a read-only layer may be.
constexpr std::string_view kLayerForms =
    "a read-only layer is ro:DIR, ro:dir:DIR, pack:FILE, ro:redis://... or ro:http[s]://... "
    "(docs/cache-layers.md): a SQLite cache, memory and none cannot be one";

// What every refusal lists.
constexpr std::string_view kForms =
    "a cache spec is DIR or dir:DIR (a directory cache), sqlite:FILE, memory, none (or off), "
    "redis://HOST[:PORT][/DB], http[s]://HOST[:PORT]/PATH, pack:FILE, ro:DIR, or "
    "LOCAL+LAYER+...+URL (LOCAL in front of read-only layers ro:DIR, pack:FILE, ro:URL and a "
    "remote tier URL); schemes and words in any case (docs/cache-specs.md)";

// "WORD" when `s` starts with "WORD:" and WORD is an RFC 3986 scheme (a letter, then letters,
// digits, '+', '-', '.'); else empty.
std::string_view scheme_of(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return {};
  std::size_t i = 1;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '+' ||
                          s[i] == '-' || s[i] == '.')) {
    ++i;
  }
  return i < s.size() && s[i] == ':' ? s.substr(0, i) : std::string_view();
}

// The remote tiers a spec may name: each one's URL schemes, how its URLs are checked and shown,
// and how it opens. A new remote tier is one more row.
struct remote_tier {
  std::string_view backend;                 // cache_spec::remote_backend
  std::array<std::string_view, 2> schemes;  // lower case
  std::string_view form;                    // for messages
  void (*check)(std::string_view url);      // throws invalid_argument
  std::string (*redact)(std::string_view url);
  std::unique_ptr<program_cache> (*open)(std::string_view url, bool read_only);
};

// A remote tier's cache at `url`, with its other options left at their defaults.
template <class Cache, class Options>
std::unique_ptr<program_cache> open_remote(std::string_view url, bool read_only) {
  Options options;
  options.url = std::string(url);
  options.read_only = read_only;
  return std::make_unique<Cache>(std::move(options));
}

const std::array<remote_tier, 2> kRemoteTiers = {{
    {"redis",
     {"redis", "rediss"},
     "redis://HOST[:PORT][/DB]",
     [](std::string_view url) { (void)parse_redis_url(url); },
     &redact_redis_url,
     &open_remote<redis_program_cache, redis_cache_options>},
    {"http",
     {"http", "https"},
     "http[s]://HOST[:PORT]/PATH",
     [](std::string_view url) { (void)parse_http_url(url); },
     &redact_http_url,
     &open_remote<http_program_cache, http_cache_options>},
}};

// The remote tier whose scheme `scheme` is (any case), or nullptr.
const remote_tier* remote_tier_of_scheme(std::string_view scheme) {
  const std::string name = detail::lower_case(scheme);
  for (const remote_tier& t : kRemoteTiers) {
    if (name == t.schemes[0] || name == t.schemes[1]) return &t;
  }
  return nullptr;
}

// The remote tier `s` is a URL of (SCHEME://...), or nullptr.
const remote_tier* remote_tier_of(std::string_view s) {
  const std::size_t sep = s.find("://");
  if (sep == std::string_view::npos) return nullptr;
  const std::string_view scheme = s.substr(0, sep);
  return scheme_of(s).size() == scheme.size() ? remote_tier_of_scheme(scheme) : nullptr;
}

// `url` with its credentials shown as "***", whichever tier's URL it is or looks like.
std::string redact_url(std::string_view url) {
  const remote_tier* tier = remote_tier_of(url);
  if (tier == nullptr) tier = remote_tier_of_scheme(scheme_of(url));
  return tier != nullptr ? tier->redact(url) : redact_http_url(redact_redis_url(url));
}

// Whether `rest` (lower case) starts a tier of a spec: ro:, pack: or a remote tier's SCHEME:.
bool starts_tier(std::string_view rest) {
  if (rest.starts_with("ro:") || rest.starts_with("pack:")) return true;
  for (const remote_tier& t : kRemoteTiers) {
    for (std::string_view scheme : t.schemes) {
      if (rest.starts_with(scheme) && rest.substr(scheme.size()).starts_with(":")) return true;
    }
  }
  return false;
}

// The spec's tiers: split before each "+ro:", "+pack:" and "+SCHEME:" of a remote tier, in any
// case (so a tier's own text may not hold one; a password in a URL may hold '+').
std::vector<std::string_view> tiers_of(std::string_view spec) {
  const std::string l = detail::lower_case(spec);
  std::vector<std::string_view> out;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < l.size(); ++i) {
    if (l[i] == '+' && starts_tier(std::string_view(l).substr(i + 1))) {
      out.push_back(spec.substr(begin, i - begin));
      begin = i + 1;
    }
  }
  out.push_back(spec.substr(begin));
  return out;
}

// A remote URL with its scheme in lower case, checked by its tier's parser.
std::string checked_remote_url(const remote_tier& tier, std::string_view url,
                               const std::string& variable, const std::string& shown) {
  const std::size_t colon = url.find(':');
  std::string normal = detail::lower_case(url.substr(0, colon)) + std::string(url.substr(colon));
  try {
    tier.check(normal);
  } catch (const invalid_argument& e) {
    throw cache_spec_error(variable, shown, e.what());
  }
  return normal;
}

// "redis://HOST[:PORT][/DB] or http[s]://HOST[:PORT]/PATH", for messages.
std::string remote_forms() {
  std::string out;
  for (const remote_tier& t : kRemoteTiers) {
    if (!out.empty()) out += " or ";
    out += t.form;
  }
  return out;
}

// The local part of a spec (all of it, or LOCAL of LOCAL+redis://...). `shown`: the spec as
// messages quote it.
void parse_local(std::string_view local, cache_spec& out, const std::string& shown) {
  auto refuse = [&](const std::string& why) -> cache_spec_error {
    return cache_spec_error("", shown, why);
  };
  if (local.empty()) {
    out.local = cache_spec::local_kind::default_directory;
    return;
  }
  const std::string word = detail::lower_case(local);
  if (word == "none" || word == "off") {
    out.local = cache_spec::local_kind::none;
    return;
  }
  if (word == "memory") {
    out.local = cache_spec::local_kind::memory;
    return;
  }
  const std::string_view scheme = scheme_of(local);
  if (scheme.empty()) {  // ./a:b, /abs/x:y, cache, my_cache:1 (no scheme has '_')
    out.local = cache_spec::local_kind::directory;
    out.path = std::string(local);
    return;
  }
  const std::string name = detail::lower_case(scheme);
  std::string_view rest = local.substr(scheme.size() + 1);
  const std::string escape = "for a directory of that name, write ./" + std::string(local) +
                             " or dir:" + std::string(local);
  if (name == "dir" || name == "sqlite") {
    const bool dir = name == "dir";
    const std::string form = dir ? "dir:DIR" : "sqlite:FILE";
    const std::string what = dir ? "directory" : "file";
    if (rest.empty()) throw refuse("\"" + name + ":\" names no " + what + ": write " + form);
    // name:///abs is the URL spelling of name:/abs; name://x would make x a host.
    if (rest.starts_with("///")) {
      rest.remove_prefix(2);
    } else if (rest.starts_with("//")) {
      const std::string given(rest.substr(2));
      throw refuse(name + "://" + given + " would make \"" + given + "\" a host name: write " +
                   name + ":" + given + " for a " + what +
                   " relative to the working directory, or " + name + ":/ABS/PATH (also " + name +
                   ":///ABS/PATH) for an absolute path");
    }
    out.local = dir ? cache_spec::local_kind::directory : cache_spec::local_kind::sqlite;
    out.path = std::string(rest);
    return;
  }
  if (name == "pack") {
    if (rest.empty()) throw refuse("\"pack:\" names no file: write pack:FILE");
    out.local = cache_spec::local_kind::pack;
    out.path = std::string(rest);
    return;
  }
  if (name == "ro") {  // a read-only directory (or pack) as the local tier
    cache_spec inner;
    parse_local(rest, inner, shown);
    if (inner.local == cache_spec::local_kind::default_directory) {
      throw refuse("\"ro:\" names nothing: write ro:DIR, ro:dir:DIR, pack:FILE or ro:URL");
    }
    if (inner.local != cache_spec::local_kind::directory &&
        inner.local != cache_spec::local_kind::pack) {
      throw refuse(std::string(kLayerForms));
    }
    out.local = inner.local;
    out.path = inner.path;
    out.local_read_only = true;
    return;
  }
  if (name == "memory" || name == "none" || name == "off") {
    throw refuse("\"" + name + "\" takes nothing after it: write " + name + " alone; " + escape);
  }
  if (const remote_tier* tier = remote_tier_of_scheme(name)) {
    throw refuse("a " + std::string(tier->backend) + " URL starts with \"" + name +
                 "://\": write " + std::string(tier->form) + "; " + escape);
  }
  std::string why = "\"" + std::string(scheme) +
                    ":\" is not a cache scheme: " + std::string(kForms) + "; " + escape;
  if (scheme.size() == 1) why += " (a Windows drive letter is not special here)";
  throw refuse(why);
}

// The user's own choice of trust: the caller's option, else the environment.
std::optional<bool> user_shared(const open_cache_options& options) {
  return options.shared ? options.shared : shared_cache_from_env();
}

// $CUCORE_CACHE_STATS: 0/false/no/off turns the persistent statistics off (1/true/yes/on or unset:
// on). Anything else is an invalid_argument naming the variable.
bool statistics_from_env() {
  const auto stats = env::flag(env::variable::cache_stats);
  if (stats.malformed()) {
    throw invalid_argument("$CUCORE_CACHE_STATS is \"" + std::string(stats.text) +
                           "\": use 1 (keep statistics, the default) or 0 (keep none)");
  }
  return stats.value.value_or(true);
}

// The caller's choice, else the environment's.
bool statistics_for(const open_cache_options& options) {
  return options.statistics ? *options.statistics : statistics_from_env();
}

// $CUCORE_CACHE_FSYNC: 0/false/no/off turns a directory cache's fsync off (unset: on).
bool fsync_for(const open_cache_options& options) {
  if (options.fsync) return *options.fsync;
  const auto fsync = env::flag(env::variable::cache_fsync);
  if (fsync.malformed()) {
    throw invalid_argument("$CUCORE_CACHE_FSYNC is \"" + std::string(fsync.text) +
                           "\": use 1 (fsync each entry, the default) or 0 (do not)");
  }
  return fsync.value.value_or(true);
}

cache_access access_of(bool shared) {
  return shared ? cache_access::shared : cache_access::private_to_user;
}

// A directory cache with its settings: options, environment, cucore.conf, defaults (in that
// order of precedence).
std::unique_ptr<program_cache> open_directory(const std::filesystem::path& dir, bool is_default,
                                              const open_cache_options& options,
                                              bool read_only = false) {
  const std::optional<bool> chosen = user_shared(options);
  if (read_only) {  // only read: no settings, statistics or size cap apply
    file_stream_cache_options o;
    o.access = access_of(chosen.value_or(false));
    o.read_only = true;
    o.statistics = false;
    return std::make_unique<file_stream_program_cache>(dir, o);
  }
  const cache_config config = read_cache_config(dir, access_of(chosen.value_or(false)));
  file_stream_cache_options o;
  o.access = access_of(chosen.value_or(config.shared.value_or(false)));
  o.umask = config.umask;
  o.statistics = statistics_for(options);
  o.fsync = fsync_for(options);
  std::optional<std::uint64_t> max_size = cache_max_size_from_env();
  if (!max_size) max_size = config.max_size;
  if (!max_size && is_default) max_size = default_cache_max_size;
  if (max_size && *max_size != 0) o.max_size_bytes = max_size;
  return std::make_unique<file_stream_program_cache>(dir, o);
}

// The local tier `spec` names (nullptr for none).
std::unique_ptr<program_cache> open_local(const cache_spec& spec,
                                          const open_cache_options& options) {
  switch (spec.local) {
    case cache_spec::local_kind::none:
      return nullptr;
    case cache_spec::local_kind::default_directory:
      return open_directory(default_cache_dir(), /*is_default=*/true, options);
    case cache_spec::local_kind::directory:
      return open_directory(spec.path, /*is_default=*/false, options, spec.local_read_only);
    case cache_spec::local_kind::pack:
      return std::make_unique<pack_program_cache>(spec.path);
    case cache_spec::local_kind::memory:
      return std::make_unique<in_memory_program_cache>();
    case cache_spec::local_kind::sqlite: {
      sqlite_cache_options o;
      o.access = access_of(user_shared(options).value_or(false));
      o.statistics = statistics_for(options);
      return std::make_unique<sqlite_program_cache>(spec.path, o);
    }
  }
  throw error("open_program_cache: unknown cache kind");
}

// A read-only layer (docs/cache-layers.md).
std::unique_ptr<program_cache> open_layer(const cache_spec::layer& layer,
                                          const open_cache_options& options) {
  switch (layer.what) {
    case cache_spec::layer::kind::directory:
      return open_directory(layer.path, /*is_default=*/false, options, /*read_only=*/true);
    case cache_spec::layer::kind::pack:
      return std::make_unique<pack_program_cache>(layer.path);
    case cache_spec::layer::kind::remote: {
      const remote_tier* tier = remote_tier_of(layer.url);
      if (tier == nullptr) throw error("open_program_cache: unknown remote tier");
      return tier->open(layer.url, /*read_only=*/true);
    }
  }
  throw error("open_program_cache: unknown layer kind");
}

}  // namespace

cache_spec parse_cache_spec(std::string_view spec) {
  cache_spec out;
  if (spec.empty()) {
    if (const auto remote = env::text(env::variable::remote_cache)) {
      const std::string_view url = *remote;
      const std::string shown = redact_url(url);
      const remote_tier* tier = remote_tier_of(url);
      if (tier == nullptr) {
        throw cache_spec_error("CUCORE_REMOTE_CACHE", shown,
                               "the default cache's remote tier is a URL: write " + remote_forms() +
                                   " (docs/cache-remote.md, docs/cache-http.md)");
      }
      out.remote = checked_remote_url(*tier, url, "CUCORE_REMOTE_CACHE", shown);
      out.remote_backend = std::string(tier->backend);
      out.remote_from_environment = true;
    }
    return out;
  }
  const std::vector<std::string_view> tiers = tiers_of(spec);
  // The spec as messages quote it: each URL's credentials shown as "***".
  std::string shown;
  for (std::string_view t : tiers) {
    if (!shown.empty()) shown += "+";
    const bool ro = detail::lower_case(t.substr(0, 3)) == "ro:";
    shown += ro ? "ro:" + redact_url(t.substr(3)) : redact_url(t);
  }
  auto refuse = [&](const std::string& why) { return cache_spec_error("", shown, why); };
  // A remote URL (or a read-only one) first: no local tier.
  std::size_t next = 0;
  if (const remote_tier* tier = remote_tier_of(tiers[0])) {
    if (tiers.size() > 1) {
      throw refuse("the remote tier comes last: write LOCAL+...+" + std::string(tier->form));
    }
    out.local = cache_spec::local_kind::none;
    out.remote = checked_remote_url(*tier, tiers[0], "", shown);
    out.remote_backend = std::string(tier->backend);
    return out;
  }
  if (detail::lower_case(tiers[0].substr(0, 3)) == "ro:" &&
      remote_tier_of(tiers[0].substr(3)) != nullptr) {
    out.local = cache_spec::local_kind::none;
  } else {
    parse_local(tiers[0], out, shown);
    next = 1;
    if (out.local == cache_spec::local_kind::none && tiers.size() > 1) {
      throw refuse(
          "a tiered cache needs a local tier: write the remote URL (or the layers) alone for a "
          "cache without one");
    }
  }
  for (std::size_t i = next; i < tiers.size(); ++i) {
    const std::string_view t = tiers[i];
    if (const remote_tier* tier = remote_tier_of(t)) {
      if (i + 1 != tiers.size()) {
        throw refuse(
            "the writable remote tier comes last (it is looked up after every layer): "
            "write LOCAL+LAYER+...+" +
            std::string(tier->form));
      }
      out.remote = checked_remote_url(*tier, t, "", shown);
      out.remote_backend = std::string(tier->backend);
      continue;
    }
    cache_spec::layer layer;
    if (detail::lower_case(t.substr(0, 3)) == "ro:") {
      const std::string_view inner = t.substr(3);
      if (const remote_tier* tier = remote_tier_of(inner)) {
        layer.what = cache_spec::layer::kind::remote;
        layer.url = checked_remote_url(*tier, inner, "", shown);
        layer.backend = std::string(tier->backend);
        out.layers.push_back(std::move(layer));
        continue;
      }
    }
    // ro:DIR, ro:dir:DIR, pack:FILE (ro:pack:FILE too), read as a local tier is.
    cache_spec local;
    parse_local(t, local, shown);
    if (!local.local_read_only && local.local != cache_spec::local_kind::pack) {
      throw refuse("after \"+\" comes a read-only layer or the remote tier: " +
                   std::string(kLayerForms) + "; the remote tier is " + remote_forms());
    }
    layer.what = local.local == cache_spec::local_kind::pack ? cache_spec::layer::kind::pack
                                                             : cache_spec::layer::kind::directory;
    layer.path = local.path;
    out.layers.push_back(std::move(layer));
  }
  return out;
}

std::unique_ptr<program_cache> open_program_cache(std::string_view spec) {
  return open_program_cache(spec, open_cache_options{});
}

std::unique_ptr<program_cache> open_program_cache(std::string_view spec,
                                                  const open_cache_options& options) {
  const cache_spec parsed = parse_cache_spec(spec);
  // The tiers in lookup order; a tiered cache of each in front of the rest.
  std::vector<std::unique_ptr<program_cache>> tiers;
  if (parsed.local != cache_spec::local_kind::none) tiers.push_back(open_local(parsed, options));
  for (const cache_spec::layer& layer : parsed.layers) tiers.push_back(open_layer(layer, options));
  if (parsed.remote) {
    try {
      const remote_tier* tier = remote_tier_of(*parsed.remote);
      if (tier == nullptr) throw error("open_program_cache: unknown remote tier");
      tiers.push_back(tier->open(*parsed.remote, /*read_only=*/false));
    } catch (const invalid_argument& e) {
      if (!parsed.remote_from_environment) throw;
      throw invalid_argument(std::string("$CUCORE_REMOTE_CACHE: ") + e.what());
    }
  }
  if (tiers.empty()) return nullptr;
  std::unique_ptr<program_cache> cache = std::move(tiers.back());
  for (std::size_t i = tiers.size() - 1; i-- > 0;) {
    cache = std::make_unique<tiered_program_cache>(std::move(tiers[i]), std::move(cache));
  }
  return cache;
}

}  // namespace cucore
