// cucore cache stats (cache_stats.hpp).
#include "cache_stats.hpp"

#include <charconv>
#include <chrono>
#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "cache_entries.hpp"
#include "commands.hpp"
#include "cucore/cache/file_stream.hpp"
#include "cucore/cache/redis.hpp"
#include "cucore/cache/sqlite.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/cache/tiered.hpp"
#include "cucore/error.hpp"
#include "json_output.hpp"
#include "text_output.hpp"

namespace cucore::cli {
namespace {

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
  return one_decimal(*rate * 100) + " % hits";
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

}  // namespace

int print_stats(program_cache& cache, const arguments& args) {
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

}  // namespace cucore::cli
