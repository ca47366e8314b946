// Verifying a cache's entries by compiling them again (`cucore cache verify --recompile`;
// docs/verify-recompile.md): verify mode's check (docs/verify.md) for every entry whose inputs the
// cache kept — its recipe: the source, source type, options, target and name expressions, kept
// beside the cache's statistics when $CUCORE_CACHE_RECIPES=1 or cucore.conf's `recipes = true`.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/object_code.hpp"

namespace cucore {

// One entry a fresh compile did not reproduce: removed from the cache.
struct recompile_mismatch {
  std::string key;   // 64 hex digits
  std::string name;  // the program's name
  code_type target{};
  std::string what;                   // "first difference at byte N", "the fresh compile failed"
  bool removed = false;               // erased from the cache (every tier of a tiered cache)
  std::optional<std::string> report;  // the report file (verify mode's: docs/verify.md)
};

struct recompile_report {
  std::size_t entries = 0;      // entries listed
  std::size_t with_recipe = 0;  // of them, with a recipe that could be read
  std::size_t verified = 0;     // compiled again: the same bytes and symbols; kept
  std::size_t mismatched = 0;   // compiled again: other bytes or symbols, or an error; removed
  // The recipe's key, derived again now, is not the entry's: an input changed since (a header
  // edited, another compiler, another working directory); the entry is left as it is (a lookup
  // no longer reaches it; trim evicts it in time).
  std::size_t inputs_changed = 0;
  std::size_t failed_to_read = 0;  // the entry could not be read (removed meanwhile, damaged)
  // Not compiled again for a reason of this process, not of the program (no compiler loads, an
  // option refused): nothing checked, the entry left.
  std::size_t not_compiled = 0;
  std::size_t damaged_recipes = 0;         // recipe files ignored: damaged, or another version's
  std::size_t orphan_recipes_removed = 0;  // recipes of entries that no longer exist, removed
  std::uintmax_t recipe_bytes = 0;         // what the recipes left take on disk
  // Whether this cache keeps recipes of what it stores now ($CUCORE_CACHE_RECIPES, cucore.conf).
  bool recipes_enabled = false;
  // Whether it can keep any: false for a cache without persistent statistics (in-memory, Redis
  // alone, CUCORE_CACHE_STATS=0), which has nowhere to put them.
  bool recipes_possible = false;
  std::vector<recompile_mismatch> mismatches;
  // For people, one line each: entries whose inputs changed, and what failed.
  std::vector<std::string> notes;
};

struct recompile_options {
  // Called after each entry (and once before the first, with done = 0).
  std::function<void(std::size_t done, std::size_t total)> progress;
  // Where entries are read from when set: the same cache opened without statistics
  // (open_cache_options::statistics = false), so that reading every entry counts no hits. The
  // cache passed to verify_by_recompiling keeps the recipes, counts what was found
  // (cache_statistics::record_verify) and has the stale entries erased.
  program_cache* reader = nullptr;
};

// For each entry of `cache` (program_cache::list) with a recipe: derives its key again from the
// recipe (make_program_cache_key with compiler_probes_for(cache)); another key is counted in
// inputs_changed and left alone. Else compiles the recipe uncached in this process (no compile
// server, no automatic PCH), with the clock 400 days and 7 hours on and NVRTC's process id
// pinned to the entry's as verify mode does, and compares with the entry (NVRTC's _INTERNAL_
// module and process ids masked; the name expressions' symbols). Equal: verified. Different, or
// the compile fails: the entry and its recipe are removed, the mismatch counted in the cache's
// statistics and reported in a file (verify mode's report, $CUCORE_VERIFY_REPORTS). Recipes
// whose entries no longer exist (made before this call began) are removed. Compiles on the
// calling thread, one entry at a time. Throws what list() throws; an entry's failure is counted.
recompile_report verify_by_recompiling(program_cache& cache, const recompile_options& options = {});

}  // namespace cucore
