// cucore cache: look into and maintain a persistent program cache (stats, ls, show, extract,
// export, import, verify, trim, clear, config).
#include <time.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <system_error>
#include <vector>

#include "cache_check.hpp"
#include "cache_pack.hpp"
#include "cache_recompile.hpp"
#include "cache_spec.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "compile_options.hpp"
#include "cucore/cache/config.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"
#include "cucore/object_code.hpp"
#include "json_output.hpp"

namespace cucore::cli {
namespace {

// The cache to work on; memory and none are refused (there would be nothing to look at).
constexpr option_spec cache_dir_option{
    cache_option.name, "", cache_option.value_name,
    "DIR, dir:DIR, sqlite:FILE, redis://URL or LOCAL+redis://URL "
    "(default: see above)"};
constexpr option_spec json_option{"--json", "", "", "print the result as JSON"};
constexpr option_spec output_option{
    "-o", "--output", "FILE", "export: the pack to write; extract: the file to write the code to"};
constexpr option_spec max_size_option{
    "--max-size", "", "N", "trim: the size to trim to, in bytes; K, M, G, T: KiB, MiB, GiB, TiB"};

constexpr option_spec unset_option{"--unset", "", "", "config: remove KEY's setting"};
constexpr option_spec zero_option{"--zero", "", "",
                                  "stats: reset the cache's persistent statistics to zero"};

constexpr option_spec options[] = {
    cache_dir_option, shared_cache_option, json_option,      output_option, max_size_option,
    unset_option,     zero_option,         recompile_option, all_option,    since_option,
    match_option,     quiet_option,        check_option};

struct subcommand {
  std::string_view name;
  std::string_view synopsis;  // what follows "cucore cache "
  std::string_view summary;   // one line in `cucore cache --help`
  std::string_view description;
  std::string_view exit_status;      // empty: the common one (exit_status_default)
  std::vector<option_spec> options;  // the part of `options` it takes
  std::size_t operands;              // how many positionals follow the name (KEYHEX)
  int (*run)(program_cache& cache, const arguments& args);
};

// ---------------------------------------------------------------------------------------------
// Helpers

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

std::string pad_left(std::string text, std::size_t width) {
  if (text.size() < width) text.insert(0, width - text.size(), ' ');
  return text;
}

// "12.3 MiB" for people; JSON gives the exact count.
std::string human_size(std::uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + " B";
  static constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes) / 1024;
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  char buffer[32];
  auto [end, ec] =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::fixed, 1);
  return std::string(buffer, ec == std::errc() ? end : buffer) + " " + units[unit];
}

// ISO 8601 in UTC to the second ("2025-01-31T12:34:56Z"), or "-" when the backend keeps none.
std::optional<std::string> iso_utc(
    const std::optional<std::chrono::system_clock::time_point>& when) {
  if (!when) return std::nullopt;
  const std::time_t t = std::chrono::system_clock::to_time_t(*when);
  std::tm utc{};
  if (::gmtime_r(&t, &utc) == nullptr) return std::nullopt;
  char buffer[32];
  const std::size_t n = std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return std::string(buffer, n);
}

std::string key_hex(const std::vector<std::byte>& key) {
  return encode_hex(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()));
}

// --max-size N: bytes, or with a binary suffix (K, M, G, T; "KiB" and "k" too), as cucore.conf's
// max_size. 0 is allowed: trim to nothing.
std::uint64_t parse_size(std::string_view option, std::string_view text) {
  try {
    return parse_cache_size(text);
  } catch (const invalid_argument& e) {
    throw usage_error(std::string(option) + ": " + e.what());
  }
}

// The entry KEYHEX names, or exit status 1 with a message.
std::optional<object_code> find_entry(program_cache& cache, const arguments& args,
                                      std::string& key) {
  key = decode_hex("KEYHEX", args.positionals()[1]);
  auto entry = cache.get(key);
  if (!entry) {
    std::cerr << "error: no entry " << args.positionals()[1] << " in the " << cache.description()
              << " cache\n";
  }
  return entry;
}

void print_counts(const std::vector<std::pair<std::string_view, std::uint64_t>>& counts) {
  json out = json::object();
  for (const auto& [name, n] : counts) out[std::string(name)] = n;
  write_json(out);
}

// ---------------------------------------------------------------------------------------------
// Subcommands

// The backend's name and where it is ("root", "file" or "url"), where the tool knows it.
struct backend_info {
  std::optional<std::string> backend;
  std::string_view location_name;
  std::optional<std::string> location;
};

backend_info backend_of(program_cache& cache) {
  if (auto* dir = dynamic_cast<file_stream_program_cache*>(&cache)) {
    return {"directory", "root", dir->root().string()};
  }
  if (auto* db = dynamic_cast<sqlite_program_cache*>(&cache)) {
    return {"sqlite", "file", db->file().string()};
  }
  if (auto* redis = dynamic_cast<redis_program_cache*>(&cache)) {
    return {"redis", "url", redis->url()};
  }
  if (dynamic_cast<tiered_program_cache*>(&cache)) return {"tiered", "", std::nullopt};
  return {};
}

// One tier of a tiered cache: its counts, or why it could not be counted (a remote tier that is
// down must not make `cache stats` fail, nor read as empty).
struct tier_report {
  std::string_view tier;
  program_cache* cache;
  std::optional<std::size_t> entries;
  std::optional<std::uint64_t> bytes;
  std::string error;
};

tier_report count_tier(std::string_view tier, program_cache& cache) {
  tier_report r{tier, &cache, std::nullopt, std::nullopt, {}};
  try {
    r.entries = cache.size();
    r.bytes = cache.size_bytes();
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

// "850 ms", "12.3 s", "4.2 min", "3.1 h" for people; JSON gives seconds.
std::string human_duration(std::chrono::nanoseconds d) {
  const double s = static_cast<double>(d.count()) / 1e9;
  auto fixed = [](double v, int decimals) {
    char buffer[32];
    auto [end, ec] =
        std::to_chars(buffer, buffer + sizeof buffer, v, std::chars_format::fixed, decimals);
    return std::string(buffer, ec == std::errc() ? end : buffer);
  };
  if (s < 1) return fixed(s * 1000, 0) + " ms";
  if (s < 120) return fixed(s, 1) + " s";
  if (s < 7200) return fixed(s / 60, 1) + " min";
  return fixed(s / 3600, 1) + " h";
}

// hits / (hits + misses), nullopt before the first lookup.
std::optional<double> hit_rate(std::uint64_t hits, std::uint64_t misses) {
  if (hits + misses == 0) return std::nullopt;
  return static_cast<double>(hits) / static_cast<double>(hits + misses);
}

// Either tier's hits over the lookups (each starts at the local tier): a local miss the remote
// tier answers is a hit overall.
std::optional<double> overall_hit_rate(const persistent_cache_stats& p, bool tiered) {
  const std::uint64_t lookups = p.local.hits + p.local.misses;
  if (lookups == 0) return std::nullopt;
  const std::uint64_t hits = p.local.hits + (tiered ? p.remote.hits : 0);
  return static_cast<double>(hits) / static_cast<double>(lookups);
}

std::string percent(std::optional<double> rate) {
  if (!rate) return "no lookups yet";
  char buffer[32];
  auto [end, ec] =
      std::to_chars(buffer, buffer + sizeof buffer, *rate * 100, std::chars_format::fixed, 1);
  return std::string(buffer, ec == std::errc() ? end : buffer) + " % hits";
}

std::string plural(std::uint64_t n, std::string_view one, std::string_view many) {
  return std::to_string(n) + " " + std::string(n == 1 ? one : many);
}

// A rate to 4 digits, or null before the first lookup.
json rate_json(std::optional<double> rate) {
  return rate ? rounded(*rate, 4) : json(nullptr);
}

json tier_counts_json(const cache_stats& s) {
  return {{"hits", s.hits},
          {"misses", s.misses},
          {"hit_rate", rate_json(hit_rate(s.hits, s.misses))},
          {"puts", s.puts},
          {"errors", s.errors},
          {"corrupt_dropped", s.corrupt_dropped},
          {"evictions", s.evictions}};
}

std::string tier_line(const cache_stats& s) {
  return plural(s.hits, "hit", "hits") + ", " + plural(s.misses, "miss", "misses") + " (" +
         percent(hit_rate(s.hits, s.misses)) + "), " + plural(s.puts, "put", "puts") + ", " +
         plural(s.errors, "error", "errors") + ", " + std::to_string(s.corrupt_dropped) +
         " corrupt dropped, " + plural(s.evictions, "eviction", "evictions");
}

// The persistent statistics ("statistics": {...}, or null for a cache that keeps none).
json statistics_json(const cache_statistics* store, const persistent_cache_stats& p, bool tiered) {
  if (store == nullptr) return nullptr;
  json out = {{"directory", store->directory().string()},
              {"shards", p.shards},
              {"shards_ignored", p.shards_ignored},
              {"zeroed_at", or_null(iso_utc(p.zeroed_at))},
              {"hit_rate", rate_json(overall_hit_rate(p, tiered))},
              {"local", tier_counts_json(p.local)}};
  if (tiered) out["remote"] = tier_counts_json(p.remote);
  out["compiles"] = p.compiles;
  out["compile_hits"] = p.compile_hits;
  out["compile_seconds"] = rounded(static_cast<double>(p.compile_ns) / 1e9, 6);
  const auto saved = p.compile_time_saved();
  out["compile_seconds_saved"] =
      saved ? rounded(static_cast<double>(saved->count()) / 1e9, 6) : json(nullptr);
  json skips = {{"total", p.skips_total()}};
  for (std::size_t i = 0; i < cache_skip_reason_count; ++i) {
    skips[std::string(to_string(static_cast<cache_skip_reason>(i)))] = p.skips[i];
  }
  out["skips"] = std::move(skips);
  out["verify"] = {{"verified", p.verified}, {"mismatches", p.verify_mismatches}};
  json misses = json::object();
  for (std::size_t i = 0; i < miss_kind_count; ++i) {
    misses[std::string(to_string(static_cast<miss_kind>(i)))] = p.misses_by_kind[i];
  }
  out["misses_by_reason"] = std::move(misses);
  return out;
}

void print_statistics(const cache_statistics* store, const persistent_cache_stats& p, bool tiered,
                      std::size_t width) {
  if (store == nullptr) {
    std::cout << pad("stats", width) << "none kept by this cache (counts live in one process)\n";
    return;
  }
  if (tiered) {
    const std::uint64_t hits = p.local.hits + p.remote.hits;
    std::cout << pad("lookups", width) << percent(overall_hit_rate(p, true)) << " (" << hits
              << " of " << p.local.hits + p.local.misses << ", either tier)\n";
    std::cout << pad(" local", width) << tier_line(p.local) << '\n';
    std::cout << pad(" remote", width) << tier_line(p.remote) << '\n';
  } else {
    std::cout << pad("lookups", width) << tier_line(p.local) << '\n';
  }
  std::cout << pad("compiles", width) << p.compiles << " compiled in "
            << human_duration(std::chrono::nanoseconds(p.compile_ns)) << ", " << p.compile_hits
            << " from the cache";
  if (const auto saved = p.compile_time_saved()) {
    std::cout << " (about " << human_duration(*saved) << " saved)";
  }
  std::cout << '\n';
  std::cout << pad("skipped", width) << p.skips_total();
  std::string reasons;
  for (std::size_t i = 0; i < cache_skip_reason_count; ++i) {
    if (p.skips[i] == 0) continue;
    reasons += (reasons.empty() ? "" : ", ") +
               std::string(to_string(static_cast<cache_skip_reason>(i))) + " " +
               std::to_string(p.skips[i]);
  }
  if (!reasons.empty()) std::cout << " (" << reasons << ")";
  std::cout << '\n';
  std::string why;
  for (std::size_t i = 0; i < miss_kind_count; ++i) {
    if (p.misses_by_kind[i] == 0) continue;
    why += (why.empty() ? "" : ", ") + std::string(to_string(static_cast<miss_kind>(i))) + " " +
           std::to_string(p.misses_by_kind[i]);
  }
  if (!why.empty()) std::cout << pad("missed", width) << why << '\n';
  if (p.verified != 0) {
    std::cout << pad("verified", width) << p.verified << " hits compiled again, "
              << p.verify_mismatches << " differed (stale, removed; docs/verify.md)\n";
  }
  std::cout << pad("stats", width) << plural(p.shards, "shard file", "shard files") << " in "
            << store->directory().string();
  if (p.shards_ignored != 0) std::cout << " (" << p.shards_ignored << " damaged, ignored)";
  if (const auto zeroed = iso_utc(p.zeroed_at)) std::cout << "; zeroed " << *zeroed;
  std::cout << '\n';
}

int zero_stats(program_cache& cache, const arguments& args) {
  const std::shared_ptr<cache_statistics> store = cache.statistics();
  if (!store) {
    throw cucore::error("the " + cache.description() +
                        " cache keeps no persistent statistics: nothing to zero");
  }
  store->zero();
  if (args.has("--json")) {
    write_json({{"zeroed", true}, {"directory", store->directory().string()}});
  } else {
    std::cout << "statistics of the " << cache.description() << " cache zeroed\n";
  }
  return exit_success;
}

int stats(program_cache& cache, const arguments& args) {
  if (args.has("--zero")) return zero_stats(cache, args);
  const backend_info info = backend_of(cache);
  std::vector<tier_report> tiers;
  if (auto* tiered = dynamic_cast<tiered_program_cache*>(&cache)) {
    tiers.push_back(count_tier("local", tiered->local()));
    tiers.push_back(count_tier("remote", tiered->remote()));
  }
  // A tiered cache's own counts are its local tier's (tiered.hpp); those are already counted.
  const std::size_t entries = tiers.empty() ? cache.size() : tiers[0].entries.value_or(0);
  const std::uint64_t bytes = tiers.empty() ? cache.size_bytes() : tiers[0].bytes.value_or(0);
  if (!tiers.empty() && !tiers[0].error.empty()) throw cucore::error(tiers[0].error);
  const std::shared_ptr<cache_statistics> store = cache.statistics();
  const persistent_cache_stats counts = store ? store->read() : persistent_cache_stats{};
  const bool tiered = !tiers.empty();
  if (args.has("--json")) {
    json out = {{"description", cache.description()}, {"backend", or_null(info.backend)}};
    if (info.location) out[std::string(info.location_name)] = *info.location;
    out["entries"] = entries;
    out["size_bytes"] = bytes;
    if (!tiers.empty()) {
      json tier_list = json::array();
      for (const tier_report& t : tiers) {
        const backend_info tier_info = backend_of(*t.cache);
        json tier = {{"tier", t.tier},
                     {"description", t.cache->description()},
                     {"backend", or_null(tier_info.backend)}};
        if (tier_info.location) tier[std::string(tier_info.location_name)] = *tier_info.location;
        if (t.entries) {
          tier["entries"] = *t.entries;
          tier["size_bytes"] = *t.bytes;
        } else {
          tier["error"] = t.error;
        }
        tier_list.push_back(std::move(tier));
      }
      out["tiers"] = std::move(tier_list);
    }
    out["statistics"] = statistics_json(store.get(), counts, tiered);
    write_json(out);
    return exit_success;
  }
  constexpr std::size_t width = 9;  // "entries" and two spaces
  std::cout << pad("cache", width) << cache.description() << '\n';
  if (!tiers.empty()) {
    for (const tier_report& t : tiers) {
      std::cout << pad(std::string(t.tier), width) << t.cache->description() << '\n';
      std::cout << pad("", width);
      if (t.entries) {
        std::cout << *t.entries << (*t.entries == 1 ? " entry, " : " entries, ")
                  << human_size(*t.bytes) << " (" << *t.bytes << " bytes)\n";
      } else {
        std::cout << "unreachable: " << t.error << '\n';
      }
    }
  } else {
    if (info.location) {
      std::cout << pad(std::string(info.location_name), width) << *info.location << '\n';
    }
    std::cout << pad("entries", width) << entries << '\n';
    std::cout << pad("size", width) << human_size(bytes) << " (" << bytes << " bytes)\n";
  }
  print_statistics(store.get(), counts, tiered, width);
  return exit_success;
}

int ls(program_cache& cache, const arguments& args) {
  std::vector<cache_entry_info> entries = cache.list();
  // Most recently used first; entries with no time last; then by key, so the order is stable.
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    if (a.last_used != b.last_used) {
      if (!a.last_used || !b.last_used) return a.last_used.has_value();
      return *a.last_used > *b.last_used;
    }
    return a.key < b.key;
  });
  if (args.has("--json")) {
    json out = json::array();
    for (const auto& e : entries) {
      out.push_back({{"key", key_hex(e.key)},
                     {"code_type", to_string(e.type)},
                     {"payload_bytes", e.payload_bytes},
                     {"stored_bytes", e.stored_bytes},
                     {"name", e.name},
                     {"symbols", e.symbol_count},
                     {"last_used", or_null(iso_utc(e.last_used))}});
    }
    write_json(out);
    return exit_success;
  }
  std::size_t key_width = 0, type_width = 0, bytes_width = 0, name_width = 0;
  for (const auto& e : entries) {
    key_width = std::max(key_width, e.key.size() * 2);
    type_width = std::max(type_width, to_string(e.type).size());
    bytes_width = std::max(bytes_width, std::to_string(e.payload_bytes).size());
    name_width = std::max(name_width, e.name.size());
  }
  for (const auto& e : entries) {
    std::cout << pad(key_hex(e.key), key_width) << "  "
              << pad(std::string(to_string(e.type)), type_width) << "  "
              << pad_left(std::to_string(e.payload_bytes), bytes_width) << "  "
              << pad(e.name, name_width) << "  " << iso_utc(e.last_used).value_or("-") << '\n';
  }
  return exit_success;
}

int show(program_cache& cache, const arguments& args) {
  std::string key;
  const auto entry = find_entry(cache, args, key);
  if (!entry) return exit_failure;
  const std::string hex = encode_hex(key);
  if (args.has("--json")) {
    json symbols = json::object();
    for (const auto& [expression, mangled] : entry->symbol_mapping()) symbols[expression] = mangled;
    write_json({{"key", hex},
                {"code_type", to_string(entry->type())},
                {"name", entry->name()},
                {"payload_bytes", entry->size()},
                {"symbols", std::move(symbols)}});
    return exit_success;
  }
  constexpr std::size_t width = 11;  // "code type" and two spaces
  std::cout << pad("key", width) << hex << '\n'
            << pad("code type", width) << to_string(entry->type()) << '\n'
            << pad("name", width) << entry->name() << '\n'
            << pad("bytes", width) << entry->size() << '\n'
            << pad("symbols", width) << entry->symbol_mapping().size() << '\n';
  for (const auto& [expression, mangled] : entry->symbol_mapping()) {
    std::cout << "  " << expression << " = " << mangled << '\n';
  }
  return exit_success;
}

int extract_entry(program_cache& cache, const arguments& args) {
  const auto output = args.last("-o");
  if (!output) throw usage_error("cache extract needs -o FILE");
  std::string key;
  const auto entry = find_entry(cache, args, key);
  if (!entry) return exit_failure;
  entry->write(*output);
  if (args.has("--json")) {
    write_json(
        {{"output", *output}, {"bytes", entry->size()}, {"code_type", to_string(entry->type())}});
    return exit_success;
  }
  std::cout << encode_hex(key) << " -> " << *output << " (" << entry->size() << " bytes, "
            << to_string(entry->type()) << ")\n";
  return exit_success;
}

int verify(program_cache& cache, const arguments& args) {
  const cache_verify_report r = cache.verify(/*remove_bad=*/true);
  json out = {{"entries", r.entries},         {"ok", r.ok},
              {"corrupt", r.corrupt},         {"removed", r.removed},
              {"moved_aside", r.moved_aside}, {"notes", r.notes}};
  if (!args.has("--json")) {
    for (const std::string& note : r.notes) std::cout << note << '\n';
    std::cout << r.entries << " entries, " << r.ok << " ok, " << r.corrupt << " corrupt, "
              << r.removed << " removed";
    if (r.moved_aside != 0) std::cout << ", " << r.moved_aside << " moved aside";
    std::cout << '\n';
  }
  // After the integrity check: what is compiled again is what survived it.
  bool stale = false;
  if (args.has(recompile_option.name)) out["recompile"] = recompile_verify(cache, args, stale);
  if (args.has("--json")) write_json(out);
  return r.corrupt == 0 && !stale ? exit_success : exit_failure;
}

int trim(program_cache& cache, const arguments& args) {
  const auto text = args.last(max_size_option.name);
  if (!text) throw usage_error("cache trim needs --max-size N");
  const std::uint64_t max_size = parse_size(max_size_option.name, *text);
  const std::size_t removed = cache.trim(max_size);
  const std::size_t entries = cache.size();
  const std::uint64_t bytes = cache.size_bytes();
  if (args.has("--json")) {
    print_counts({{"removed", removed}, {"entries", entries}, {"size_bytes", bytes}});
  } else {
    std::cout << "removed " << removed << (removed == 1 ? " entry" : " entries") << "; " << entries
              << " left, " << human_size(bytes) << '\n';
  }
  return exit_success;
}

int clear(program_cache& cache, const arguments& args) {
  const std::size_t entries = cache.size();
  const std::uint64_t bytes = cache.size_bytes();
  cache.clear();
  // What is left: entries other processes wrote meanwhile (clear() leaves writes in progress).
  const std::size_t left = cache.size();
  const std::uint64_t left_bytes = cache.size_bytes();
  const std::size_t removed = entries > left ? entries - left : 0;
  const std::uint64_t removed_bytes = bytes > left_bytes ? bytes - left_bytes : 0;
  if (args.has("--json")) {
    print_counts({{"removed", removed}, {"removed_bytes", removed_bytes}, {"entries", left}});
  } else {
    std::cout << "removed " << removed << (removed == 1 ? " entry" : " entries") << " ("
              << human_size(removed_bytes) << ") from the " << cache.description() << " cache\n";
  }
  return exit_success;
}

// cucore cache config [KEY [VALUE]]: the directory cache's cucore.conf. Needs no open cache (a
// cache the trust rules refuse can still be configured by its owner, and a size set before the
// first compile applies to it).
int config(const arguments& args) {
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
  for (const char* name :
       {"CUCORE_CACHE_MAX_SIZE", "CUCORE_CACHE_SHARED", "CUCORE_CACHE_RECIPES"}) {
    if (const char* v = std::getenv(name); v != nullptr && *v != '\0') {
      std::cout << "# overridden here: " << name << "=" << v << '\n';
    }
  }
  return exit_success;
}

int config_unreachable(program_cache&, const arguments& args) {
  return config(args);
}

int check_unreachable(program_cache&, const arguments& args) {
  return cache_check(args);
}

const std::vector<subcommand>& subcommands() {
  static const std::vector<subcommand> all = {
      {"stats",
       "stats [--cache SPEC] [--json] [--zero]",
       "where the cache is, its entries, size, hit rate and counts",
       "Prints the cache's location (for the directory cache its root, for SQLite its file, for\n"
       "Redis its URL without the password), its number of entries and their total size. A\n"
       "tiered cache (LOCAL+redis://...) shows each tier; a remote tier that cannot be reached\n"
       "is reported as such. Then the statistics the cache keeps in itself, summed over every\n"
       "process that used it since the last --zero (ROOT/stats/ of a directory cache,\n"
       "FILE.stats/ of an SQLite one; a tiered cache counts both tiers in its local tier's):\n"
       "hits, misses and hit rate, puts, errors, corrupt entries dropped and evictions per tier;\n"
       "compiles (misses that ran the compiler) and their time; compiles answered by the cache\n"
       "and the time they saved (an estimate: their number times the mean compile time);\n"
       "compiles that went without the cache, by reason (needs_extra_digest,\n"
       "uncacheable_options, time_macros, compiler_environment; header_changed and\n"
       "header_too_new: compiled, not stored). A Redis cache alone keeps none, nor does any\n"
       "cache opened with CUCORE_CACHE_STATS=0.\n"
       "--zero resets the statistics to zero (entries are untouched).\n"
       "--json: {\"description\", \"backend\", \"root\", \"file\" or \"url\", \"entries\",\n"
       "\"size_bytes\", \"statistics\"}, and for a tiered cache \"tiers\": [{\"tier\": \"local\"\n"
       "or \"remote\", \"description\", \"backend\", ..., \"entries\" and \"size_bytes\" or\n"
       "\"error\"}]; its own entries and size_bytes are the local tier's. \"statistics\" is null\n"
       "or {\"directory\", \"shards\", \"shards_ignored\", \"zeroed_at\", \"hit_rate\", \"local\"\n"
       "(and \"remote\"): {\"hits\", \"misses\", \"hit_rate\", \"puts\", \"errors\",\n"
       "\"corrupt_dropped\", \"evictions\"}, \"compiles\", \"compile_hits\", \"compile_seconds\",\n"
       "\"compile_seconds_saved\", \"skips\": {\"total\", one count per reason}, \"verify\":\n"
       "{\"verified\", \"mismatches\"}, \"misses_by_reason\": {one count per miss reason}} (a\n"
       "rate is\n"
       "null before the first lookup). With --zero: {\"zeroed\": true, \"directory\"}.\n"
       "On a tiered cache ls, verify, trim and clear work on the local tier (name the Redis URL\n"
       "alone for the remote one); show and extract read through both tiers.",
       "",
       {cache_dir_option, shared_cache_option, json_option, zero_option},
       0,
       stats},
      {"ls",
       "ls [--cache SPEC] [--json]",
       "one line per entry",
       "Lists the entries, most recently used first, one per line: the key (the hex of its\n"
       "bytes, what show and extract take), the code type, the code's size in bytes, the program\n"
       "name, and the last use (ISO 8601, UTC; \"-\" where the backend keeps none). --json: an\n"
       "array of {\"key\", \"code_type\", \"payload_bytes\", \"stored_bytes\", \"name\",\n"
       "\"symbols\", \"last_used\"}.",
       "",
       {cache_dir_option, shared_cache_option, json_option},
       0,
       ls},
      {"show",
       "show KEYHEX [--cache SPEC] [--json]",
       "one entry: its header and symbols",
       "Prints the entry KEYHEX (as ls lists it; a key from compile or key is 64 hex digits):\n"
       "its code type, program name, size, and the name expressions it maps to mangled names.\n"
       "Reading an entry checks it; a damaged one is removed and reported as not found.",
       "Exit status: 0 shown; 1 no such entry, or the cache cannot be opened; 2 bad command line.",
       {cache_dir_option, shared_cache_option, json_option},
       1,
       show},
      {"extract",
       "extract KEYHEX -o FILE [--cache SPEC] [--json]",
       "write an entry's code to a file",
       "Writes the code of the entry KEYHEX to FILE, the bytes as compiled (for cuobjdump,\n"
       "nvdisasm, or loading by hand). (Before packs, this was `cache export`.)",
       "Exit status: 0 written; 1 no such entry, FILE cannot be written, or the cache cannot be\n"
       "opened; 2 bad command line.",
       {cache_dir_option, shared_cache_option, json_option, output_option},
       1,
       extract_entry},
      {"export",
       "export [--all | KEYHEX... | --since TIME | --match PROGRAM] -o PACK [--cache SPEC]",
       "write entries to a pack file (docs/cache-packs.md)",
       "Writes the cache's entries to PACK, one file (docs/cache-packs.md): every entry (--all,\n"
       "the default), the entries KEYHEX... (each must be there), those used since TIME\n"
       "(2025-01-31, 2025-01-31T12:00:00Z in UTC, or an age: 7d, 12h, 30m), or those whose\n"
       "program name matches the glob PROGRAM ('kernels/*'); --since and --match combine.\n"
       "Each record keeps the entry as the cache stores it (code, symbols, checksum) and, where\n"
       "the cache's notes still name it, the compiler identity it was made with. Entries are\n"
       "read and written one at a time (a cache larger than memory works), into a temporary\n"
       "file renamed to PACK at the end: a failed export leaves no partial PACK. Reading counts\n"
       "no hits. A progress bar on a terminal (not with --quiet). On a tiered cache, the local\n"
       "tier's entries. --json: {\"pack\", \"cache\", \"entries\", \"skipped\",\n"
       "\"with_compiler_identity\", \"code_bytes\", \"pack_bytes\"}.",
       "Exit status: 0 written; 1 a KEYHEX not in the cache, PACK cannot be written, or the\n"
       "cache cannot be opened or read; 2 bad command line.",
       {cache_dir_option, shared_cache_option, json_option, output_option, all_option, since_option,
        match_option, quiet_option},
       0,
       nullptr},
      {"import",
       "import PACK [--check] [--cache SPEC] [--json]",
       "add a pack's entries to the cache (--check: verify it only)",
       "Verifies every record of PACK (its digest, zstd frame and entry checksum; the header,\n"
       "index and trailer; the format version) and only then adds each entry whose key the\n"
       "cache does not hold: an entry already there is never replaced. A damaged, truncated or\n"
       "foreign pack adds nothing; the message names what is wrong and where (the record and\n"
       "its byte offset). --check verifies PACK and adds nothing (no cache is opened). A\n"
       "progress bar on a terminal (not with --quiet). --json: {\"pack\", \"cache\",\n"
       "\"entries\", \"added\", \"already_present\", \"bytes_added\"}; with --check {\"pack\",\n"
       "\"ok\", \"entries\", \"code_bytes\", \"pack_bytes\", \"format_version\",\n"
       "\"cucore_version\", \"created\"}.",
       "Exit status: 0 imported (or verified); 1 the pack is damaged or foreign (nothing was\n"
       "added), or the cache cannot be opened or written; 2 bad command line.",
       {cache_dir_option, shared_cache_option, json_option, check_option, quiet_option},
       1,
       nullptr},
      {"verify",
       "verify [--recompile] [--cache SPEC] [--json]",
       "check every entry and remove damaged ones (and stale ones: --recompile)",
       "Reads and checks every entry (format, checksum, the key it echoes) and removes the\n"
       "damaged ones, and whatever is not an entry where one belongs (a directory, with what\n"
       "is inside it, never following a symbolic link; a symbolic link; a FIFO); what cannot be\n"
       "removed is moved aside, out of the key's way. Prints a line for each such thing (what\n"
       "it was, what was done, how to remove by hand what could not be), then \"N entries,\n"
       "N ok, N corrupt, N removed\" (\", N moved aside\" when some were).\n"
       "--recompile: then compiles again, uncached, each entry whose recipe the cache kept (its\n"
       "source and options: kept only when compiled with CUCORE_CACHE_RECIPES=1 or cucore.conf's\n"
       "recipes = true; docs/verify-recompile.md), as verify mode does (the clock moved on,\n"
       "NVRTC's per-process names masked), and compares: an entry that differs, or whose\n"
       "compile now fails, is stale: removed, counted in the statistics' mismatches, and reported\n"
       "in a file ($CUCORE_VERIFY_REPORTS, else ${TMPDIR:-/tmp}/cucore-verify-UID). An entry\n"
       "whose inputs changed since (its key, derived again, is another) is left. Prints a line "
       "per\n"
       "stale entry and a summary (and how to keep recipes when entries have none); recipes of\n"
       "entries that no longer exist are deleted. Progress on a terminal only.\n"
       "--json: {\"entries\", \"ok\", \"corrupt\", \"removed\", \"moved_aside\", \"notes\"},\n"
       "with --recompile also \"recompile\": {\"entries\", \"with_recipe\", \"without_recipe\",\n"
       "\"verified\", \"mismatched\", \"inputs_changed\", \"failed_to_read\", \"not_compiled\",\n"
       "\"damaged_recipes\", \"orphan_recipes_removed\", \"recipe_bytes\", \"recipes_enabled\",\n"
       "\"mismatches\": [{\"key\", \"name\", \"target\", \"what\", \"removed\", \"report\"}],\n"
       "\"notes\"}.",
       "Exit status: 0 nothing was damaged or stale; 1 damaged entries were found (and removed,\n"
       "unless removing failed: compare removed with corrupt), stale entries were found by\n"
       "--recompile (and removed), or the cache cannot be opened or read; 2 bad command line.",
       {cache_dir_option, shared_cache_option, json_option, recompile_option},
       0,
       verify},
      {"trim",
       "trim --max-size N [--cache SPEC] [--json]",
       "evict entries down to a size",
       "Removes least recently used entries until the entries total at most N bytes; N may end\n"
       "in K, M or G (KiB, MiB, GiB); 0 empties the cache. Prints how many it removed and what\n"
       "is left. --json: {\"removed\", \"entries\", \"size_bytes\"}.",
       "",
       {cache_dir_option, shared_cache_option, json_option, max_size_option},
       0,
       trim},
      {"clear",
       "clear [--cache SPEC] [--json]",
       "remove every entry",
       "Removes every entry, without asking, and prints how many (entries other processes are\n"
       "writing at the same time survive). --json: {\"removed\", \"removed_bytes\", \"entries\"}\n"
       "(entries: what is left).",
       "",
       {cache_dir_option, shared_cache_option, json_option},
       0,
       clear},
      {"check",
       "check [--cache SPEC] [--json]",
       "what is wrong with a cache, and what `cucore run` would do with it",
       "Checks the cache without needing it to work: its location (where it is, from --cache,\n"
       "$CUCORE_CACHE_DIR, $XDG_CACHE_HOME or ~/.cache; whether it is the directory or file it\n"
       "should be, or can be created), whether a file can be written there (a real write and\n"
       "fsync: a read-only or full file system fails it, for root too), the free space, the\n"
       "files the key keeps beside it (compiler-versions, header-digests and its manifests,\n"
       "claims, stats: each the kind of file it should be and, unless --shared-cache, yours and\n"
       "writable by no one else; leftover header-digests.tmp-* are noted), then whether it\n"
       "opens, reads, and stores an entry (one probe entry, put, read back and removed; a\n"
       "Redis tier that is down fails here). Prints one line per check (\"ok\" or \"PROBLEM\",\n"
       "what, and what to do), then what `cucore run` would do with this cache (it always runs\n"
       "the program). A malformed SPEC is reported, not a usage error. --json: {\"spec\",\n"
       "\"source\", \"path\", \"remote\" (with a Redis tier), \"description\" (when it opens),\n"
       "\"backend\", \"ok\", \"free_bytes\", \"checks\": [{\"check\", \"ok\", \"message\"}],\n"
       "\"cucore_run\"}.",
       "Exit status: 0 no problem found; 1 a problem found; 2 bad command line.",
       {cache_dir_option, shared_cache_option, json_option},
       0,
       check_unreachable},
      {"config",
       "config [KEY [VALUE] | --unset KEY] [--cache DIR]",
       "show or change the directory cache's persistent settings",
       "Reads or writes DIR/cucore.conf, the directory cache's settings (\"key = value\" lines):\n"
       "  max_size  the size cap (bytes, or N with K, M, G, T: powers of 1024; 0: no cap). The\n"
       "            default cache's default is 5G; $CUCORE_CACHE_MAX_SIZE overrides the file.\n"
       "  shared    true: trust a cache other users (a group) can write too, and create files\n"
       "            with group permissions. Honoured only from a cucore.conf you own that no one\n"
       "            else can write; $CUCORE_CACHE_SHARED and --shared-cache override it.\n"
       "  umask     octal permission bits removed from the files and directories the cache\n"
       "            creates (as ccache's umask; shared caches default to 002).\n"
       "  recipes   true: keep each stored entry's source and options beside the statistics,\n"
       "            for `cucore cache verify --recompile` (a size cost: "
       "docs/verify-recompile.md).\n"
       "            $CUCORE_CACHE_RECIPES overrides it.\n"
       "Without KEY prints every setting; with KEY prints its value; with KEY VALUE sets it\n"
       "(creating the directory and the file). --unset KEY removes a setting.",
       "Exit status: 0 success; 1 the file cannot be read or written, or is malformed; 2 bad\n"
       "command line or value.",
       {cache_dir_option, shared_cache_option, unset_option},
       0,
       config_unreachable},
  };
  return all;
}

const subcommand* find_subcommand(std::string_view name) {
  for (const auto& s : subcommands()) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string subcommand_names() {
  std::string out;
  for (const auto& s : subcommands()) out += (out.empty() ? "" : ", ") + std::string(s.name);
  return out;
}

// `cucore cache --help` lists the subcommands; the table is built from them, so it is complete.
std::string cache_usage() {
  std::string out =
      "Usage: cucore cache SUBCOMMAND [options]\n"
      "\n"
      "Looks into and maintains a persistent program cache: the one `cucore compile` uses.\n"
      "\n" CUCORE_CLI_CACHE_SPEC_HELP
      " The in-memory cache is refused here: it starts empty in every process.\n"
      "\n"
      "Subcommands:\n";
  std::size_t width = 0;
  for (const auto& s : subcommands()) width = std::max(width, s.synopsis.size());
  for (const auto& s : subcommands()) {
    out += "  " + pad(std::string(s.synopsis), width + 2) + std::string(s.summary) + "\n";
  }
  out +=
      "\nRun 'cucore cache SUBCOMMAND --help' for one subcommand.\n"
      "\n"
      "Exit status: 0 success; 1 an entry not found, damaged (or, with --recompile, stale)\n"
      "entries found by verify, or a cache that cannot be opened or read; 2 bad command line.\n"
      "\n"
      "Options:\n" +
      options_help(options);
  return out;
}

constexpr std::string_view exit_status_default =
    "Exit status: 0 success; 1 the cache cannot be opened, read or written; 2 bad command line.";

std::string subcommand_usage(const subcommand& s) {
  const std::string_view exit_status = s.exit_status.empty() ? exit_status_default : s.exit_status;
  return "Usage: cucore cache " + std::string(s.synopsis) + "\n\n" + std::string(s.description) +
         "\n\n" CUCORE_CLI_CACHE_SPEC_HELP +
         std::string(s.name == "check" ? "" : " Not memory or none here.") + "\n\n" +
         std::string(exit_status) + "\n\nOptions:\n" + options_help(s.options);
}

std::optional<std::string> help(const arguments& args) {
  if (!args.positionals().empty()) {
    if (const subcommand* s = find_subcommand(args.positionals()[0])) return subcommand_usage(*s);
  }
  return cache_usage();
}

int run(const arguments& args) {
  const auto& positionals = args.positionals();
  if (positionals.empty()) {
    throw usage_error("cache needs a SUBCOMMAND: " + subcommand_names());
  }
  const subcommand* sub = find_subcommand(positionals[0]);
  if (sub == nullptr) {
    throw usage_error("unknown cache subcommand \"" + positionals[0] + "\": use one of " +
                      subcommand_names());
  }
  const std::string who = "cache " + std::string(sub->name);
  if (sub->name == "config") {
    if (positionals.size() > 3) {
      throw usage_error("cache config takes at most KEY VALUE, but got also \"" + positionals[3] +
                        "\"");
    }
    for (const auto& option : options) {
      const bool takes = std::any_of(sub->options.begin(), sub->options.end(),
                                     [&](const option_spec& o) { return o.name == option.name; });
      if (!takes && args.has(option.name)) {
        throw usage_error(who + " takes no " + std::string(option.name));
      }
    }
    return config(args);
  }
  if (sub->name == "export" || sub->name == "import") {
    for (const auto& option : options) {
      const bool takes = std::any_of(sub->options.begin(), sub->options.end(),
                                     [&](const option_spec& o) { return o.name == option.name; });
      if (!takes && args.has(option.name)) {
        throw usage_error(who + " takes no " + std::string(option.name));
      }
    }
    return sub->name == "export" ? pack_export(args) : pack_import(args);
  }
  if (sub->name == "check") {
    // Before the cache is opened or its spec parsed: reporting those failures is its job.
    if (positionals.size() > 1) {
      throw usage_error("cache check takes no arguments, but got \"" + positionals[1] + "\"");
    }
    for (const auto& option : options) {
      const bool takes = std::any_of(sub->options.begin(), sub->options.end(),
                                     [&](const option_spec& o) { return o.name == option.name; });
      if (!takes && args.has(option.name)) {
        throw usage_error(who + " takes no " + std::string(option.name));
      }
    }
    return cache_check(args);
  }
  if (positionals.size() < 1 + sub->operands) throw usage_error(who + " needs a KEYHEX");
  if (positionals.size() > 1 + sub->operands) {
    throw usage_error(
        who + " takes " +
        (sub->operands == 0 ? std::string("no arguments") : std::string("one KEYHEX")) +
        ", but got also \"" + positionals[1 + sub->operands] + "\"");
  }
  for (const auto& option : options) {
    const bool takes = std::any_of(sub->options.begin(), sub->options.end(),
                                   [&](const option_spec& o) { return o.name == option.name; });
    if (!takes && args.has(option.name)) {
      throw usage_error(who + " takes no " + std::string(option.name));
    }
  }
  if (sub->operands > 0) (void)decode_hex("KEYHEX", positionals[1]);

  const std::string spec = cache_spec_from(args);
  if (is_no_cache(spec)) {
    throw usage_error("--cache " + spec + ": " + who + " needs a cache to work on");
  }
  if (is_memory_cache(spec)) {
    throw usage_error("--cache memory: an in-memory cache starts empty in every process, so " +
                      who + " would see nothing: name a directory (DIR) or sqlite:FILE");
  }
  // show and extract only look at an entry: reading it must not count as a hit.
  const bool looks_only = sub->name == "show" || sub->name == "extract";
  const std::unique_ptr<program_cache> cache =
      open_cache(spec, args, looks_only ? std::optional<bool>(false) : std::nullopt);
  return sub->run(*cache, args);
}

}  // namespace

const command cache_command{
    "cache",
    "cache SUBCOMMAND [options]",
    "look into and maintain the program cache: stats, ls, show, extract, export, import, verify, "
    "trim, clear, check, config",
    "",  // help() writes the usage, from the subcommand table
    options,
    run,
    help,
};

}  // namespace cucore::cli
