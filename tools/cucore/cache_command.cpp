// cucore cache: look into and maintain a persistent program cache (stats, ls, show, extract,
// export, import, verify, trim, clear, config). Here: the subcommand table, the usage written from
// it, and the dispatch; the subcommands are in cache_stats.cpp, cache_entries.cpp,
// cache_pack.cpp, cache_check.cpp and cache_config.cpp.
#include <algorithm>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cache_check.hpp"
#include "cache_config.hpp"
#include "cache_entries.hpp"
#include "cache_pack.hpp"
#include "cache_recompile.hpp"
#include "cache_spec.hpp"
#include "cache_stats.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "compile_options.hpp"
#include "cucore/cache/program_cache.hpp"

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

int config_unreachable(program_cache&, const arguments& args) {
  return configure_cache(args);
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
       print_stats},
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
       list_entries},
      {"show",
       "show KEYHEX [--cache SPEC] [--json]",
       "one entry: its header and symbols",
       "Prints the entry KEYHEX (as ls lists it; a key from compile or key is 64 hex digits):\n"
       "its code type, program name, size, and the name expressions it maps to mangled names.\n"
       "Reading an entry checks it; a damaged one is removed and reported as not found.",
       "Exit status: 0 shown; 1 no such entry, or the cache cannot be opened; 2 bad command line.",
       {cache_dir_option, shared_cache_option, json_option},
       1,
       show_entry},
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
       verify_entries},
      {"trim",
       "trim --max-size N [--cache SPEC] [--json]",
       "evict entries down to a size",
       "Removes least recently used entries until the entries total at most N bytes; N may end\n"
       "in K, M or G (KiB, MiB, GiB); 0 empties the cache. Prints how many it removed and what\n"
       "is left. --json: {\"removed\", \"entries\", \"size_bytes\"}.",
       "",
       {cache_dir_option, shared_cache_option, json_option, max_size_option},
       0,
       trim_entries},
      {"clear",
       "clear [--cache SPEC] [--json]",
       "remove every entry",
       "Removes every entry, without asking, and prints how many (entries other processes are\n"
       "writing at the same time survive). --json: {\"removed\", \"removed_bytes\", \"entries\"}\n"
       "(entries: what is left).",
       "",
       {cache_dir_option, shared_cache_option, json_option},
       0,
       clear_entries},
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

// A usage error for an option of the command that the subcommand `who` does not take.
void refuse_options_not_taken(const subcommand& sub, const arguments& args,
                              const std::string& who) {
  for (const auto& option : options) {
    const bool takes = std::any_of(sub.options.begin(), sub.options.end(),
                                   [&](const option_spec& o) { return o.name == option.name; });
    if (!takes && args.has(option.name)) {
      throw usage_error(who + " takes no " + std::string(option.name));
    }
  }
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
    refuse_options_not_taken(*sub, args, who);
    return configure_cache(args);
  }
  if (sub->name == "export" || sub->name == "import") {
    refuse_options_not_taken(*sub, args, who);
    return sub->name == "export" ? pack_export(args) : pack_import(args);
  }
  if (sub->name == "check") {
    // Before the cache is opened or its spec parsed: reporting those failures is its job.
    if (positionals.size() > 1) {
      throw usage_error("cache check takes no arguments, but got \"" + positionals[1] + "\"");
    }
    refuse_options_not_taken(*sub, args, who);
    return cache_check(args);
  }
  if (positionals.size() < 1 + sub->operands) throw usage_error(who + " needs a KEYHEX");
  if (positionals.size() > 1 + sub->operands) {
    throw usage_error(
        who + " takes " +
        (sub->operands == 0 ? std::string("no arguments") : std::string("one KEYHEX")) +
        ", but got also \"" + positionals[1 + sub->operands] + "\"");
  }
  refuse_options_not_taken(*sub, args, who);
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
