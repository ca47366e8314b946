#include "cucore/cache/open.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>

#include "cucore/cache/config.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/http.hpp"
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
    "redis://HOST[:PORT][/DB], http[s]://HOST[:PORT]/PATH, or LOCAL+redis://... or "
    "LOCAL+http[s]://... (LOCAL in front of the remote tier); schemes and words in any case "
    "(docs/cache-specs.md)";

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
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

// The remote tiers a spec may name: each one's URL schemes, how its URLs are checked and shown,
// and how it opens. A new remote tier is one more row.
struct remote_tier {
  std::string_view backend;                 // cache_spec::remote_backend
  std::array<std::string_view, 2> schemes;  // lower case
  std::string_view form;                    // for messages
  void (*check)(std::string_view url);      // throws invalid_argument
  std::string (*redact)(std::string_view url);
  std::unique_ptr<program_cache> (*open)(std::string_view url);
};

const std::array<remote_tier, 2> kRemoteTiers = {{
    {"redis",
     {"redis", "rediss"},
     "redis://HOST[:PORT][/DB]",
     [](std::string_view url) { (void)parse_redis_url(url); },
     &redact_redis_url,
     [](std::string_view url) -> std::unique_ptr<program_cache> {
       redis_cache_options options;
       options.url = std::string(url);
       return std::make_unique<redis_program_cache>(std::move(options));
     }},
    {"http",
     {"http", "https"},
     "http[s]://HOST[:PORT]/PATH",
     [](std::string_view url) { (void)parse_http_url(url); },
     &redact_http_url,
     [](std::string_view url) -> std::unique_ptr<program_cache> {
       http_cache_options options;
       options.url = std::string(url);
       return std::make_unique<http_program_cache>(std::move(options));
     }},
}};

// The remote tier whose scheme `scheme` is (any case), or nullptr.
const remote_tier* remote_tier_of_scheme(std::string_view scheme) {
  const std::string name = lower(scheme);
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

// Where LOCAL+SCHEME:... splits: the first "+SCHEME:" of a remote tier, in any case (so LOCAL
// may not hold one; a password in the URL may hold '+').
std::size_t tier_separator(std::string_view spec) {
  const std::string l = lower(spec);
  std::size_t first = std::string::npos;
  for (const remote_tier& t : kRemoteTiers) {
    for (std::string_view scheme : t.schemes) {
      first = std::min(first, l.find("+" + std::string(scheme) + ":"));
    }
  }
  return first;
}

// A remote URL with its scheme in lower case, checked by its tier's parser.
std::string checked_remote_url(const remote_tier& tier, std::string_view url,
                               const std::string& variable, const std::string& shown) {
  const std::size_t colon = url.find(':');
  std::string normal = lower(url.substr(0, colon)) + std::string(url.substr(colon));
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
  if (const remote_tier* tier = remote_tier_of(spec)) {
    out.local = cache_spec::local_kind::none;
    out.remote = checked_remote_url(*tier, spec, "", redact_url(spec));
    out.remote_backend = std::string(tier->backend);
    return out;
  }
  const std::size_t plus = tier_separator(spec);
  if (plus == std::string_view::npos) {
    parse_local(spec, out, std::string(spec));
    return out;
  }
  const std::string_view local = spec.substr(0, plus);
  const std::string_view url = spec.substr(plus + 1);
  const std::string shown = std::string(local) + "+" + redact_url(url);
  parse_local(local, out, shown);
  const remote_tier* tier = remote_tier_of(url);
  if (out.local == cache_spec::local_kind::none) {
    throw cache_spec_error("", shown,
                           "a tiered cache needs a local tier: write the remote URL (" +
                               std::string(url.substr(0, url.find(':'))) +
                               "://...) alone for the remote tier without one");
  }
  if (tier == nullptr) {
    const remote_tier* named = remote_tier_of_scheme(url.substr(0, url.find(':')));
    throw cache_spec_error("", shown,
                           "after \"+\" comes the remote tier, a URL: write LOCAL+" +
                               std::string(named ? named->form : remote_forms()));
  }
  out.remote = checked_remote_url(*tier, url, "", shown);
  out.remote_backend = std::string(tier->backend);
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
    const remote_tier* tier = remote_tier_of(*parsed.remote);
    if (tier == nullptr) throw error("open_program_cache: unknown remote tier");
    remote = tier->open(*parsed.remote);
  } catch (const invalid_argument& e) {
    if (!parsed.remote_from_environment) throw;
    throw invalid_argument(std::string("$CUCORE_REMOTE_CACHE: ") + e.what());
  }
  if (parsed.local == cache_spec::local_kind::none) return remote;
  return std::make_unique<tiered_program_cache>(open_local(parsed, options), std::move(remote));
}

}  // namespace cucore
