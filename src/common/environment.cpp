#include "common/environment.hpp"

#include <array>
#include <cerrno>
#include <cstdlib>
#include <limits>

namespace cucore::env {
namespace {

constexpr double kNoRange = 0;
constexpr double kMaxWhole = static_cast<double>(std::numeric_limits<std::uint64_t>::max());

constexpr flag_words kExact = flag_words::exact;

// Every variable once: docs/environment.md shows this table; keep the two alike.
constexpr auto make_table() {
  using enum variable;
  using enum kind;
  return std::to_array<variable_info>({
      {log, "CUCORE_LOG", enumerated, kExact, kNoRange, kNoRange,
       "off (unset, empty, 0, none), error, warning (1, any other value), info, debug",
       "what cucore says on stderr: the library's debug lines (debug); the drop-ins' and `cucore "
       "run`'s messages from that level up"},
      {trace, "CUCORE_TRACE", path, kExact, kNoRange, kNoRange, "a file",
       "Chrome trace-event JSON of every key, lookup, compile, store and wait (docs/trace.md)"},
      {cache_dir, "CUCORE_CACHE_DIR", path, kExact, kNoRange, kNoRange,
       "a directory (a value that reads as a cache scheme, WORD:, is refused)",
       "where the default directory cache lives (else $XDG_CACHE_HOME/cucore, ~/.cache/cucore)"},
      {remote_cache, "CUCORE_REMOTE_CACHE", cache_spec, kExact, kNoRange, kNoRange,
       "redis://... or http(s)://...",
       "the default cache's remote tier (read only when no cache spec is given)"},
      {cache_shared, "CUCORE_CACHE_SHARED", flag, flag_words::any_case_trimmed, kNoRange, kNoRange,
       "1/true/yes/on or 0/false/no/off",
       "a cache other users may write (its trust and modes), over cucore.conf's `shared`"},
      {cache_max_size, "CUCORE_CACHE_MAX_SIZE", size, kExact, kNoRange, kNoRange,
       "bytes, with K/M/G/T: 5G, 1536M", "the cache's size cap, over cucore.conf's `max_size`"},
      {cache_stats, "CUCORE_CACHE_STATS", flag, kExact, kNoRange, kNoRange,
       "1/true/yes/on (the default) or 0/false/no/off",
       "whether caches keep persistent statistics"},
      {cache_fsync, "CUCORE_CACHE_FSYNC", flag, kExact, kNoRange, kNoRange,
       "1/true/yes/on (the default; the drop-ins': 0) or 0/false/no/off",
       "whether a directory cache fsyncs each entry it writes"},
      {cache_recipes, "CUCORE_CACHE_RECIPES", flag, flag_words::any_case, kNoRange, kNoRange,
       "1/true/yes/on or 0/false/no/off",
       "whether caches keep each entry's recipe (docs/verify-recompile.md), over cucore.conf's "
       "`recipes`"},
      {http_bearer_token, "CUCORE_HTTP_BEARER_TOKEN", text, kExact, kNoRange, kNoRange, "a token",
       "the HTTP cache's bearer token, when its URL gives no credentials"},
      {single_flight, "CUCORE_SINGLE_FLIGHT", flag, kExact, kNoRange, kNoRange,
       "1/true/yes/on (the default) or 0/false/no/off",
       "whether a miss waits for another process's compile of the same key "
       "(docs/cache-single-flight.md)"},
      {single_flight_wait, "CUCORE_SINGLE_FLIGHT_WAIT", number, kExact, 0, 86400,
       "seconds, 0 to 86400", "the longest such wait"},
      {sloppiness, "CUCORE_SLOPPINESS", word_list, kExact, kNoRange, kNoRange,
       "time_macros; words separated by ',', ' ' or a tab",
       "key inputs taken as harmless: time_macros caches compiles that use __TIME__ or __DATE__ "
       "(docs/cache-keys.md)"},
      {verify, "CUCORE_VERIFY", number, kExact, 0, 1, "a fraction, 0 to 1",
       "the fraction of cache hits compiled again and compared (docs/verify.md)"},
      {verify_reports, "CUCORE_VERIFY_REPORTS", path, kExact, kNoRange, kNoRange, "a directory",
       "where verify mode writes its reports (else $TMPDIR/cucore-verify-UID)"},
      {compile_server, "CUCORE_COMPILE_SERVER", enumerated, kExact, kNoRange, kNoRange,
       "off, on, auto",
       "whether misses compile in the user's compile server (docs/compile-server.md)"},
      {server_dir, "CUCORE_SERVER_DIR", path, kExact, kNoRange, kNoRange, "a directory",
       "the compile server's directory (else $XDG_RUNTIME_DIR/cucore, /tmp/cucore-server-UID)"},
      {server_program, "CUCORE_SERVER_PROGRAM", path, kExact, kNoRange, kNoRange,
       "the cucore program", "what starts a compile server (`cucore run` sets it)"},
      {server_timeout_ms, "CUCORE_SERVER_TIMEOUT_MS", whole_number, kExact, 0, kMaxWhole,
       "milliseconds (default 5000)", "how long a client waits for a silent server"},
      {server_workers, "CUCORE_SERVER_WORKERS", whole_number, kExact, 0, kMaxWhole,
       "a count (default: the cores)", "the compile server's worker processes"},
      {server_idle_seconds, "CUCORE_SERVER_IDLE_SECONDS", whole_number, kExact, 0, kMaxWhole,
       "seconds (default 600)", "the compile server exits after this long without a request"},
      {server_worker_memory_mb, "CUCORE_SERVER_WORKER_MEMORY_MB", whole_number, kExact, 0,
       kMaxWhole, "MiB (default 4096)", "a worker holding more is replaced"},
      {server_worker_compute_cache_off, "CUCORE_SERVER_WORKER_COMPUTE_CACHE_OFF", flag,
       flag_words::one, kNoRange, kNoRange, "1",
       "set by the compile server in a worker whose CUDA_CACHE_DISABLE it set, not its clients"},
      {cuda_home, "CUCORE_CUDA_HOME", path, kExact, kNoRange, kNoRange, "a toolkit's root",
       "searched first for the CUDA libraries and headers (docs/library-discovery.md)"},
      {cuda_home_only, "CUCORE_CUDA_HOME_ONLY", flag, flag_words::one, kNoRange, kNoRange, "1",
       "the search looks at $CUCORE_CUDA_HOME only"},
      {cuda_search, "CUCORE_CUDA_SEARCH", word_list, kExact, kNoRange, kNoRange,
       "CUCORE_CUDA_HOME, CUDA_HOME, CUDA_PATH, /usr/local/cuda, wheels, loader; ','-separated",
       "chooses and orders the toolkit search's sources"},
      {cuda_wheels, "CUCORE_CUDA_WHEELS", path_list, kExact, kNoRange, kNoRange,
       "site-packages directories, ':'-separated", "searched first for NVIDIA's CUDA wheels"},
      {run_cache, "CUCORE_RUN_CACHE", cache_spec, kExact, kNoRange, kNoRange,
       "a cache spec, or none/off",
       "the drop-ins' cache (`cucore run --cache`); none/off: no cache "
       "(docs/transparent-cache.md)"},
      {run_libs, "CUCORE_RUN_LIBS", path, kExact, kNoRange, kNoRange, "a directory",
       "where `cucore run` finds its drop-in libraries"},
      {run_ld_library_path, "CUCORE_RUN_LD_LIBRARY_PATH", path_list, kExact, kNoRange, kNoRange,
       "directories, ':'-separated; set, even empty, it stands for LD_LIBRARY_PATH",
       "the program's own LD_LIBRARY_PATH, kept by `cucore run` for the drop-ins' search for the "
       "real libraries"},
      {run_nvrtc, "CUCORE_RUN_NVRTC", path, kExact, kNoRange, kNoRange, "a file",
       "the real libnvrtc.so.13 the drop-in forwards to (`cucore run --nvrtc`)"},
      {run_nvrtc12, "CUCORE_RUN_NVRTC12", path, kExact, kNoRange, kNoRange, "a file",
       "the real libnvrtc.so.12 the .so.12 drop-in forwards to (`cucore run --nvrtc`)"},
      {run_nvjitlink, "CUCORE_RUN_NVJITLINK", path, kExact, kNoRange, kNoRange, "a file",
       "the real libnvJitLink.so.13 the drop-in forwards to"},
      {run_nvjitlink12, "CUCORE_RUN_NVJITLINK12", path, kExact, kNoRange, kNoRange, "a file",
       "the real libnvJitLink.so.12 the .so.12 drop-in forwards to"},
      {run_nvvm, "CUCORE_RUN_NVVM", path, kExact, kNoRange, kNoRange, "a file",
       "the real libnvvm.so.4 the drop-in forwards to"},
  });
}
constexpr auto kTable = make_table();

constexpr bool in_order() {
  for (std::size_t i = 0; i < std::size(kTable); ++i) {
    if (static_cast<std::size_t>(kTable[i].id) != i) return false;
  }
  return static_cast<std::size_t>(variable::run_nvvm) + 1 == std::size(kTable);
}
static_assert(in_order(), "kTable lists every variable once, in the enum's order");

// getenv's pointer: names are string literals, so no copy is needed for the terminating NUL.
const char* raw(variable v) noexcept {
  return std::getenv(info(v).name.data());
}

constexpr bool is_blank(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

// The boolean words, spelled as `words` allows; nullopt for anything else.
std::optional<bool> flag_word(std::string_view text, flag_words words) noexcept {
  if (words == flag_words::one) return text == "1";
  if (words == flag_words::any_case_trimmed) {
    while (!text.empty() && is_blank(text.front())) text.remove_prefix(1);
    while (!text.empty() && is_blank(text.back())) text.remove_suffix(1);
  }
  char lowered[8];  // the longest word is "false"
  if (text.size() >= sizeof lowered) return std::nullopt;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    lowered[i] = words != flag_words::exact && c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c;
  }
  const std::string_view t(lowered, text.size());
  if (t == "1" || t == "true" || t == "yes" || t == "on") return true;
  if (t == "0" || t == "false" || t == "no" || t == "off") return false;
  return std::nullopt;
}

}  // namespace

std::span<const variable_info> variables() noexcept {
  return kTable;
}

const variable_info& info(variable v) noexcept {
  return kTable[static_cast<std::size_t>(v)];
}

std::string_view name(variable v) noexcept {
  return info(v).name;
}

std::optional<variable> variable_named(std::string_view name) noexcept {
  for (const auto& row : kTable) {
    if (row.name == name) return row.id;
  }
  return std::nullopt;
}

std::optional<std::string_view> text(variable v) noexcept {
  const char* value = raw(v);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string_view(value);
}

std::optional<std::string_view> text_even_empty(variable v) noexcept {
  const char* value = raw(v);
  if (value == nullptr) return std::nullopt;
  return std::string_view(value);
}

reading<bool> flag(variable v) noexcept {
  reading<bool> out;
  if (const auto value = text(v)) {
    out.text = *value;
    out.value = flag_word(*value, info(v).words);
  }
  return out;
}

reading<double> number(variable v) noexcept {
  reading<double> out;
  const char* value = raw(v);
  if (value == nullptr || *value == '\0') return out;
  out.text = value;
  char* end = nullptr;
  const double n = std::strtod(value, &end);
  // NaN fails both comparisons.
  if (*end == '\0' && n >= info(v).min && n <= info(v).max) out.value = n;
  return out;
}

reading<std::uint64_t> whole_number(variable v) noexcept {
  reading<std::uint64_t> out;
  const char* value = raw(v);
  if (value == nullptr || *value == '\0') return out;
  out.text = value;
  char* end = nullptr;
  const int saved = errno;
  errno = 0;
  const unsigned long long n = std::strtoull(value, &end, 10);
  if (errno == 0 && *end == '\0' && value[0] != '-') out.value = n;
  errno = saved;
  return out;
}

std::optional<log_level> log_threshold() noexcept {
  const auto value = text(variable::log);
  if (!value || *value == "0" || *value == "off" || *value == "none") return std::nullopt;
  if (*value == "debug") return log_level::debug;
  if (*value == "info") return log_level::info;
  if (*value == "error") return log_level::error;
  return log_level::warning;
}

}  // namespace cucore::env
