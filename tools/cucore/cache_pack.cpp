// cucore cache export / import (cache_pack.hpp).
#include "cache_pack.hpp"

#include <time.h>
#include <unistd.h>

#include <cctype>
#include <charconv>
#include <chrono>
#include <ctime>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "cache_spec.hpp"
#include "commands.hpp"
#include "compile_options.hpp"
#include "cucore/cache/pack.hpp"
#include "cucore/cache/statistics.hpp"
#include "json_output.hpp"
#include "text_output.hpp"

namespace cucore::cli {
namespace {

// "[######------]  120/1000 entries  3.4/12.0 MiB" on stderr, rewritten in place at most ten
// times a second: only on a terminal and without --quiet (scripts and logs get nothing); cleared
// at the end.
class progress_bar {
 public:
  explicit progress_bar(bool on) : line_(on) {}

  pack_progress_callback callback() {
    if (!line_.on()) return {};
    return [this](const pack_progress& p) { show(p); };
  }

 private:
  static std::string mib(std::uint64_t bytes) {
    return one_decimal(static_cast<double>(bytes) / (1024.0 * 1024.0));
  }
  void show(const pack_progress& p) {
    const auto now = std::chrono::steady_clock::now();
    if (line_.shown() && p.done != p.total && now - last_ < std::chrono::milliseconds(100)) return;
    last_ = now;
    constexpr std::size_t width = 24;
    const std::size_t filled = p.total == 0 ? width : width * p.done / p.total;
    const char* what = p.what == pack_progress::stage::exporting   ? "exporting"
                       : p.what == pack_progress::stage::verifying ? "verifying"
                                                                   : "importing";
    line_.show(std::string(what) + " [" + std::string(filled, '#') +
               std::string(width - filled, '-') + "] " + std::to_string(p.done) + "/" +
               std::to_string(p.total) + " entries  " + mib(p.bytes_done) +
               (p.bytes_total != 0 ? "/" + mib(p.bytes_total) : std::string()) + " MiB");
  }
  status_line line_;
  std::chrono::steady_clock::time_point last_{};
};

// --since: a date or time in UTC (2025-01-31, 2025-01-31T12:00:00Z), or an age (7d, 12h, 30m, 45s).
std::chrono::system_clock::time_point parse_since(const std::string& text) {
  const auto now = std::chrono::system_clock::now();
  if (!text.empty() && std::isdigit(static_cast<unsigned char>(text[0])) &&
      std::string_view("smhdw").find(text.back()) != std::string_view::npos) {
    long long n = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size() - 1, n);
    if (ec == std::errc() && end == text.data() + text.size() - 1 && n >= 0) {
      const long long unit = text.back() == 's'   ? 1
                             : text.back() == 'm' ? 60
                             : text.back() == 'h' ? 3600
                             : text.back() == 'd' ? 86400
                                                  : 7 * 86400;
      return now - std::chrono::seconds(n * unit);
    }
  }
  std::tm tm{};
  for (const char* format : {"%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"}) {
    tm = {};
    const char* end = ::strptime(text.c_str(), format, &tm);
    if (end != nullptr && *end == '\0') {
      // Past what the clock can hold (year 2262 and on): later than every entry.
      const std::time_t t = ::timegm(&tm);
      constexpr auto limit = std::chrono::duration_cast<std::chrono::seconds>(
          std::chrono::system_clock::duration::max());
      if (t >= limit.count()) return std::chrono::system_clock::time_point::max();
      return std::chrono::system_clock::from_time_t(t);
    }
  }
  throw usage_error("--since " + text +
                    ": not a time: write a UTC date or time (2025-01-31, 2025-01-31T12:00:00Z) or "
                    "an age (7d, 12h, 30m, 45s)");
}

}  // namespace

int pack_export(const arguments& args) {
  const auto output = args.last("-o");
  if (!output) throw usage_error("cache export needs -o PACK (the file to write)");
  pack_selection selection;
  const auto& pos = args.positionals();
  for (std::size_t i = 1; i < pos.size(); ++i) {
    const std::string key = decode_hex("KEYHEX", pos[i]);
    selection.keys.emplace_back(reinterpret_cast<const std::byte*>(key.data()),
                                reinterpret_cast<const std::byte*>(key.data()) + key.size());
  }
  if (const auto since = args.last(since_option.name)) selection.since = parse_since(*since);
  if (const auto match = args.last(match_option.name)) selection.match = *match;
  const bool filtered = selection.since || selection.match;
  if (!selection.keys.empty() && (filtered || args.has(all_option.name))) {
    throw usage_error(
        "cache export: KEYHEX names the entries itself: give it without --all, "
        "--since or --match");
  }
  if (filtered && args.has(all_option.name)) {
    throw usage_error(
        "cache export: --all exports every entry: give it without --since or "
        "--match");
  }
  const std::string spec = cache_spec_from(args);
  if (is_no_cache(spec) || is_memory_cache(spec)) {
    throw usage_error("--cache " + spec +
                      ": cache export needs a cache with entries in it: name a directory (DIR), "
                      "sqlite:FILE or a Redis URL");
  }
  // Reading the entries is no use of them: a handle without statistics reads; the notes (the
  // compiler of each entry) are where a handle with them keeps its statistics.
  const std::unique_ptr<program_cache> meta = open_cache(spec, args);
  const std::unique_ptr<program_cache> cache = open_cache(spec, args, std::optional<bool>(false));
  std::optional<std::filesystem::path> notes;
  if (const auto stats = meta->statistics()) notes = stats->directory();
  pack_export_result r;
  {
    progress_bar bar(!args.has(quiet_option.name));
    r = export_pack(*cache, *output, selection, bar.callback(), notes);
  }
  if (args.has("--json")) {
    write_json({{"pack", *output},
                {"cache", cache->description()},
                {"entries", r.entries},
                {"skipped", r.skipped},
                {"with_compiler_identity", r.with_compiler_identity},
                {"code_bytes", r.code_bytes},
                {"pack_bytes", r.file_bytes}});
  } else {
    std::cout << "exported " << plural(r.entries, "entry", "entries") << " (" << r.code_bytes
              << " bytes of code) from the " << cache->description() << " cache to " << *output
              << " (" << r.file_bytes << " bytes)";
    if (r.skipped != 0) std::cout << "; " << r.skipped << " gone or damaged when read, left out";
    std::cout << '\n';
  }
  return exit_success;
}

int pack_import(const arguments& args) {
  const auto& pos = args.positionals();
  if (pos.size() != 2) {
    throw usage_error(pos.size() < 2
                          ? "cache import needs a PACK"
                          : "cache import takes one PACK, but got also \"" + pos[2] + "\"");
  }
  const std::string pack = pos[1];
  const bool json_out = args.has("--json");
  if (args.has(check_option.name)) {
    pack_info info;
    {
      progress_bar bar(!args.has(quiet_option.name));
      info = verify_pack(pack, bar.callback());
    }
    char created[32] = "";
    const std::time_t t = std::chrono::system_clock::to_time_t(info.created);
    std::tm utc{};
    if (::gmtime_r(&t, &utc) != nullptr) {
      std::strftime(created, sizeof created, "%Y-%m-%dT%H:%M:%SZ", &utc);
    }
    if (json_out) {
      write_json({{"pack", pack},
                  {"ok", true},
                  {"entries", info.entries},
                  {"code_bytes", info.code_bytes},
                  {"pack_bytes", info.file_bytes},
                  {"format_version", info.format_version},
                  {"cucore_version", info.cucore_version},
                  {"created", created}});
    } else {
      std::cout << pack << ": " << plural(info.entries, "entry", "entries") << ", all verified ("
                << info.code_bytes << " bytes of code; format " << info.format_version
                << ", written by cucore " << info.cucore_version << " at " << created << ")\n";
    }
    return exit_success;
  }
  const std::string spec = cache_spec_from(args);
  if (is_no_cache(spec) || is_memory_cache(spec)) {
    throw usage_error("--cache " + spec +
                      ": cache import needs a cache that outlives it: name a directory (DIR), "
                      "sqlite:FILE or a Redis URL");
  }
  // Looking for what is there already is no use of it: no statistics counted.
  const std::unique_ptr<program_cache> cache = open_cache(spec, args, std::optional<bool>(false));
  pack_import_result r;
  {
    progress_bar bar(!args.has(quiet_option.name));
    r = import_pack(*cache, pack, bar.callback());
  }
  if (json_out) {
    write_json({{"pack", pack},
                {"cache", cache->description()},
                {"entries", r.entries},
                {"added", r.added},
                {"already_present", r.already_present},
                {"bytes_added", r.bytes_added}});
  } else {
    std::cout << "imported " << pack << " into the " << cache->description()
              << " cache: " << r.added << " added (" << r.bytes_added << " bytes of code), "
              << r.already_present << " already there (left as they were)\n";
  }
  return exit_success;
}

}  // namespace cucore::cli
