// A cache's entries compiled again from their recipes and compared (cucore/cache/recompile.hpp).
#include <unistd.h>

#include <algorithm>
#include <set>

#include "common/hex.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/recompile.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/program.hpp"
#include "observe/compile_replay.hpp"
#include "verify/hit_verifier.hpp"
#include "verify/program_recipes.hpp"

namespace cucore {

namespace {

namespace fs = std::filesystem;

// The fresh compile of a recipe, as verify mode replays a hit: in this process, uncached, without
// the compile server or automatic PCH (an image made earlier could carry what the entry carries),
// the clock moved on, NVRTC's process id pinned to the entry's (its _INTERNAL_ names keep their
// length) unless the recipe's own PCH options are set (NVRTC names PCH scratch files by it).
struct fresh_compile {
  std::optional<object_code> code;
  std::optional<compile_error> failed;
};

fresh_compile compile_again(const detail::program_recipe& recipe, const object_code& cached) {
  program_options o = recipe.options;
  o.verify = 0.0;
  // NVRTC's only: the PTX and NVVM backends refuse options they do not take.
  if (recipe.code_type == source_type::cxx) {
    o.compile_server = compile_server_mode::off;
    o.auto_pch = false;
  }
  const bool own_pch = o.pch.value_or(false) || o.create_pch || o.use_pch || o.pch_dir;
  const pid_t pid = own_pch ? 0 : detail::output_pid(cached.code()).value_or(0);
  program p(recipe.code, recipe.code_type, std::move(o));
  fresh_compile out;
  try {
    const detail::compile_replay replay(detail::kVerifyClockShiftSeconds, pid);
    out.code =
        p.compile(recipe.target, recipe.name_expressions, recipe.byte_name_expressions, nullptr);
  } catch (const compile_error& e) {
    out.failed = e;
  }
  return out;
}

// Verify mode's report (docs/verify.md), for an entry a recompile did not reproduce.
std::string report_text(const program_cache_key& key, const detail::program_recipe& recipe,
                        program_cache& cache, bool erased, const object_code& cached,
                        const fresh_compile& fresh, const std::optional<std::size_t>& differs) {
  std::string report =
      "cucore verify mismatch: a cache entry differs from a fresh compile of its recipe "
      "(cucore cache verify --recompile)\n";
  report += "key " + key.hex() + "\nprogram " + recipe.options.name + "\ntarget " +
            std::string(to_string(recipe.target)) + "\ncache " + cache.description() +
            (erased ? " (entry removed)" : " (entry not found to remove)") + "\n";
  report += "recipe recorded in " + recipe.working_directory + "\n";
  report += "cached output " + std::to_string(cached.code().size()) + " bytes, sha256 " +
            detail::digest_hex(cached.code()) + "\n";
  if (fresh.code) {
    report += "fresh output " + std::to_string(fresh.code->code().size()) + " bytes, sha256 " +
              detail::digest_hex(fresh.code->code()) + "\n";
    report += differs
                  ? "first difference at byte " + std::to_string(*differs) +
                        " (NVRTC's _INTERNAL_ module and process ids masked)\n"
                  : std::string("the outputs are equal; the name expressions' symbols differ\n");
  } else {
    report +=
        "the fresh compile failed (" + fresh.failed->status() + "):\n" + fresh.failed->log() + "\n";
  }
  report += "the fresh compile ran with the clock " +
            std::to_string(detail::kVerifyClockShiftSeconds) +
            " s on (an output that depends on the clock differs)\n\nkey fields:\n";
  for (const auto& field : key.explain()) {
    report += field.label + ": " + field.payload.substr(0, 4096) + "\n";
  }
  return report;
}

std::string short_name(const std::string& key_hex, const std::string& name) {
  return key_hex.substr(0, 16) + " \"" + name + "\"";
}

}  // namespace

recompile_report verify_by_recompiling(program_cache& cache, const recompile_options& options) {
  recompile_report r;
  program_cache& reader = options.reader != nullptr ? *options.reader : cache;
  const auto stats = cache.statistics();
  // Recipes made after this moment may belong to entries list() does not show yet: not orphans.
  const auto started = fs::file_time_type::clock::now();
  const std::vector<cache_entry_info> entries = reader.list();
  r.entries = entries.size();
  r.recipes_possible = stats != nullptr;
  if (!stats) {
    if (options.progress) options.progress(r.entries, r.entries);
    return r;
  }
  const fs::path stats_dir = stats->directory();
  r.recipes_enabled = detail::recipes_enabled(stats_dir);
  std::error_code ec;
  const std::string cwd = fs::current_path(ec).string();
  std::set<std::string> listed;
  if (options.progress) options.progress(0, entries.size());
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const std::string hex = detail::to_hex(entries[i].key);
    listed.insert(hex);
    const auto done = [&] {
      if (options.progress) options.progress(i + 1, entries.size());
    };
    const detail::recipe_read read = detail::read_program_recipe_file(stats_dir, hex);
    if (read.status == detail::recipe_read_status::damaged) ++r.damaged_recipes;
    if (read.status != detail::recipe_read_status::ok) {
      done();
      continue;
    }
    const detail::program_recipe& recipe = *read.recipe;
    ++r.with_recipe;
    const std::string who = short_name(hex, recipe.options.name);
    std::optional<program_cache_key> key;
    try {
      key = make_program_cache_key(recipe.inputs(), compiler_probes_for(cache));
    } catch (const std::exception& e) {
      ++r.inputs_changed;
      r.notes.push_back(who + ": its key cannot be derived again now (" + e.what() +
                        "); entry left");
      done();
      continue;
    }
    if (key->hex() != hex) {
      ++r.inputs_changed;
      std::string note = who +
                         ": its inputs changed since it was stored (a header, the compiler, " +
                         "the environment); entry left";
      if (recipe.working_directory != cwd) {
        note += " (recorded in " + recipe.working_directory +
                ": relative paths resolve from there; run from that directory)";
      }
      r.notes.push_back(std::move(note));
      done();
      continue;
    }
    std::optional<object_code> cached;
    try {
      cached = reader.get(std::span<const std::byte>(entries[i].key));
    } catch (const std::exception& e) {
      cucore::log(log_level::debug, "verify --recompile: " + who + ": " + e.what());
    }
    if (!cached) {
      ++r.failed_to_read;
      r.notes.push_back(who + ": the entry could not be read (removed meanwhile, or damaged)");
      done();
      continue;
    }
    fresh_compile fresh;
    try {
      fresh = compile_again(recipe, *cached);
    } catch (const std::exception& e) {
      // Not the program's fault (no compiler loads, an option refused): nothing was checked.
      ++r.not_compiled;
      r.notes.push_back(who + ": not compiled again: " + e.what() + "; entry left");
      done();
      continue;
    }
    std::optional<std::size_t> differs;
    bool symbols_differ = false;
    if (fresh.code) {
      differs = detail::first_difference(cached->code(), fresh.code->code());
      symbols_differ = cached->symbol_mapping() != fresh.code->symbol_mapping();
    }
    if (fresh.code && !differs && !symbols_differ) {
      ++r.verified;
      stats->record_verify(false);
      done();
      continue;
    }
    // Stale: the entry goes (from every tier), with its recipe; counted and reported.
    ++r.mismatched;
    recompile_mismatch m{hex, recipe.options.name, recipe.target, {}, false, std::nullopt};
    try {
      m.removed = cache.erase(*key);
    } catch (const std::exception& e) {
      cucore::log(log_level::warning,
                  "verify --recompile: could not remove the entry " + hex + ": " + e.what());
    }
    detail::remove_program_recipe(stats_dir, hex);
    stats->record_verify(true);
    m.what = !fresh.code ? "the fresh compile failed (" + fresh.failed->status() + ")"
             : differs   ? "first difference at byte " + std::to_string(*differs)
                         : std::string("the name expressions' symbols differ");
    const auto path = detail::write_verify_report(
        hex, report_text(*key, recipe, cache, m.removed, *cached, fresh, differs));
    if (path) m.report = path->string();
    r.mismatches.push_back(std::move(m));
    done();
  }
  // Recipes of entries that are gone (evicted, trimmed, cleared, removed): made before this call
  // began, so that one written for an entry stored meanwhile stays.
  for (const auto& file : detail::list_program_recipes(stats_dir)) {
    if (!listed.contains(file.key_hex) && file.modified < started &&
        detail::remove_program_recipe(stats_dir, file.key_hex)) {
      ++r.orphan_recipes_removed;
    }
  }
  for (const auto& file : detail::list_program_recipes(stats_dir)) r.recipe_bytes += file.bytes;
  return r;
}

}  // namespace cucore
