// cucore cache ls, show, extract, verify, trim and clear (cache_entries.hpp).
#include "cache_entries.hpp"

#include <time.h>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <iostream>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include "cache_recompile.hpp"
#include "commands.hpp"
#include "common/hex.hpp"
#include "compile_options.hpp"
#include "cucore/cache/config.hpp"
#include "cucore/error.hpp"
#include "cucore/object_code.hpp"
#include "json_output.hpp"

namespace cucore::cli {
namespace {

std::string key_hex(const std::vector<std::byte>& key) {
  return detail::to_hex(key);
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

}  // namespace

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

std::string pad_left(std::string text, std::size_t width) {
  if (text.size() < width) text.insert(0, width - text.size(), ' ');
  return text;
}

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

int list_entries(program_cache& cache, const arguments& args) {
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

int show_entry(program_cache& cache, const arguments& args) {
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

int verify_entries(program_cache& cache, const arguments& args) {
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

int trim_entries(program_cache& cache, const arguments& args) {
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

int clear_entries(program_cache& cache, const arguments& args) {
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

}  // namespace cucore::cli
