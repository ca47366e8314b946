#include "cucore/cache/open.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>

#include "cucore/cache/config.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"

namespace cucore {

cache_spec_error::cache_spec_error(std::string variable, std::string spec, std::string reason)
    : invalid_argument((variable.empty() ? std::string("cache spec") : "$" + variable) + " \"" +
                       spec + "\": " + reason),
      variable_(std::move(variable)),
      spec_(std::move(spec)),
      reason_(std::move(reason)) {}

namespace {

// What every refusal lists.
constexpr std::string_view kForms =
    "a cache spec is DIR or dir:DIR (a directory cache), sqlite:FILE, memory, none (or off), "
    "redis://HOST[:PORT][/DB] or LOCAL+redis://... (LOCAL in front of Redis); schemes and words "
    "in any case (docs/cache-specs.md)";

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool starts_with_nocase(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && lower(s.substr(0, prefix.size())) == prefix;
}

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

bool is_redis_url(std::string_view s) {
  return starts_with_nocase(s, "redis://") || starts_with_nocase(s, "rediss://");
}

// Where LOCAL+redis... splits: the first "+redis:" or "+rediss:" in any case (so LOCAL may not
// hold one; a password in the URL may hold '+').
std::size_t tier_separator(std::string_view spec) {
  const std::string l = lower(spec);
  return std::min(l.find("+redis:"), l.find("+rediss:"));
}

// A Redis URL with its scheme in lower case, checked by parse_redis_url.
std::string checked_redis_url(std::string_view url, const std::string& variable,
                              const std::string& shown) {
  const std::size_t colon = url.find(':');
  std::string normal = lower(url.substr(0, colon)) + std::string(url.substr(colon));
  try {
    (void)parse_redis_url(normal);
  } catch (const invalid_argument& e) {
    throw cache_spec_error(variable, shown, e.what());
  }
  return normal;
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
  const std::string word = lower(local);
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
  const std::string name = lower(scheme);
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
  if (name == "memory" || name == "none" || name == "off") {
    throw refuse("\"" + name + "\" takes nothing after it: write " + name + " alone; " + escape);
  }
  if (name == "redis" || name == "rediss") {
    throw refuse("a Redis URL starts with \"" + name + "://\": write redis://HOST[:PORT][/DB]; " +
                 escape);
  }
  std::string why = "\"" + std::string(scheme) +
                    ":\" is not a cache scheme: " + std::string(kForms) + "; " + escape;
  if (scheme.size() == 1) why += " (a Windows drive letter is not special here)";
  throw refuse(why);
}

std::unique_ptr<program_cache> open_redis(std::string_view url) {
  redis_cache_options options;
  options.url = std::string(url);
  return std::make_unique<redis_program_cache>(std::move(options));
}

// The user's own choice of trust: the caller's option, else the environment.
std::optional<bool> user_shared(const open_cache_options& options) {
  return options.shared ? options.shared : shared_cache_from_env();
}

// $CUCORE_CACHE_STATS: 0/false/no/off turns the persistent statistics off (1/true/yes/on or unset:
// on). Anything else is an invalid_argument naming the variable.
bool statistics_from_env() {
  const char* text = std::getenv("CUCORE_CACHE_STATS");
  if (text == nullptr || *text == '\0') return true;
  const std::string_view v(text);
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  throw invalid_argument("$CUCORE_CACHE_STATS is \"" + std::string(v) +
                         "\": use 1 (keep statistics, the default) or 0 (keep none)");
}

// The caller's choice, else the environment's.
bool statistics_for(const open_cache_options& options) {
  return options.statistics ? *options.statistics : statistics_from_env();
}

// $CUCORE_CACHE_FSYNC: 0/false/no/off turns a directory cache's fsync off (unset: on).
bool fsync_for(const open_cache_options& options) {
  if (options.fsync) return *options.fsync;
  const char* text = std::getenv("CUCORE_CACHE_FSYNC");
  if (text == nullptr || *text == '\0') return true;
  const std::string_view v(text);
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  throw invalid_argument("$CUCORE_CACHE_FSYNC is \"" + std::string(v) +
                         "\": use 1 (fsync each entry, the default) or 0 (do not)");
}

cache_access access_of(bool shared) {
  return shared ? cache_access::shared : cache_access::private_to_user;
}

// A directory cache with its settings: options, environment, cucore.conf, defaults (in that
// order of precedence).
std::unique_ptr<program_cache> open_directory(const std::filesystem::path& dir, bool is_default,
                                              const open_cache_options& options) {
  const std::optional<bool> chosen = user_shared(options);
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
      return open_directory(spec.path, /*is_default=*/false, options);
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

}  // namespace

cache_spec parse_cache_spec(std::string_view spec) {
  cache_spec out;
  if (spec.empty()) {
    const char* remote = std::getenv("CUCORE_REMOTE_CACHE");
    if (remote != nullptr && *remote != '\0') {
      const std::string_view url(remote);
      const std::string shown = redact_redis_url(url);
      if (!is_redis_url(url)) {
        throw cache_spec_error("CUCORE_REMOTE_CACHE", shown,
                               "the default cache's remote tier is a Redis URL: write "
                               "redis://HOST[:PORT][/DB] (docs/cache-remote.md)");
      }
      out.remote = checked_redis_url(url, "CUCORE_REMOTE_CACHE", shown);
      out.remote_from_environment = true;
    }
    return out;
  }
  if (is_redis_url(spec)) {
    out.local = cache_spec::local_kind::none;
    out.remote = checked_redis_url(spec, "", redact_redis_url(spec));
    return out;
  }
  const std::size_t plus = tier_separator(spec);
  if (plus == std::string_view::npos) {
    parse_local(spec, out, std::string(spec));
    return out;
  }
  const std::string_view local = spec.substr(0, plus);
  const std::string_view url = spec.substr(plus + 1);
  const std::string shown = std::string(local) + "+" + redact_redis_url(url);
  parse_local(local, out, shown);
  if (out.local == cache_spec::local_kind::none) {
    throw cache_spec_error("", shown,
                           "a tiered cache needs a local tier: write redis://... alone for the "
                           "remote tier without one");
  }
  if (!is_redis_url(url)) {
    throw cache_spec_error("", shown,
                           "after \"+\" comes the remote tier, a Redis URL: write "
                           "LOCAL+redis://HOST[:PORT][/DB]");
  }
  out.remote = checked_redis_url(url, "", shown);
  return out;
}

std::unique_ptr<program_cache> open_program_cache(std::string_view spec) {
  return open_program_cache(spec, open_cache_options{});
}

std::unique_ptr<program_cache> open_program_cache(std::string_view spec,
                                                  const open_cache_options& options) {
  const cache_spec parsed = parse_cache_spec(spec);
  if (!parsed.remote) return open_local(parsed, options);
  std::unique_ptr<program_cache> remote;
  try {
    remote = open_redis(*parsed.remote);
  } catch (const invalid_argument& e) {
    if (!parsed.remote_from_environment) throw;
    throw invalid_argument(std::string("$CUCORE_REMOTE_CACHE: ") + e.what());
  }
  if (parsed.local == cache_spec::local_kind::none) return remote;
  return std::make_unique<tiered_program_cache>(open_local(parsed, options), std::move(remote));
}

}  // namespace cucore
