// cucore cache verify --recompile (cache_recompile.hpp).
#include "cache_recompile.hpp"

#include <iostream>
#include <memory>
#include <string>

#include "cache_spec.hpp"
#include "cucore/cache/recompile.hpp"
#include "text_output.hpp"

namespace cucore::cli {

json recompile_verify(program_cache& cache, const arguments& args, bool& stale) {
  const bool as_json = args.has("--json");
  // A second handle without statistics reads the entries: a check is not a hit.
  const std::unique_ptr<program_cache> reader =
      open_cache(cache_spec_from(args), args, std::optional<bool>(false));
  recompile_report r;
  {
    // "recompiling entries: 3/10" on a terminal.
    status_line progress(!as_json);
    recompile_options options;
    options.reader = reader.get();
    options.progress = [&](std::size_t done, std::size_t total) {
      if (progress.on() && total != 0) {
        progress.show("recompiling entries: " + std::to_string(done) + "/" + std::to_string(total));
      }
    };
    r = cucore::verify_by_recompiling(cache, options);
  }
  stale = r.mismatched != 0;
  const std::size_t without = r.entries - r.with_recipe;
  json mismatches = json::array();
  for (const auto& m : r.mismatches) {
    mismatches.push_back({{"key", m.key},
                          {"name", m.name},
                          {"target", to_string(m.target)},
                          {"what", m.what},
                          {"removed", m.removed},
                          {"report", or_null(m.report)}});
  }
  json out = {{"entries", r.entries},
              {"with_recipe", r.with_recipe},
              {"without_recipe", without},
              {"verified", r.verified},
              {"mismatched", r.mismatched},
              {"inputs_changed", r.inputs_changed},
              {"failed_to_read", r.failed_to_read},
              {"not_compiled", r.not_compiled},
              {"damaged_recipes", r.damaged_recipes},
              {"orphan_recipes_removed", r.orphan_recipes_removed},
              {"recipe_bytes", r.recipe_bytes},
              {"recipes_enabled", r.recipes_enabled},
              {"mismatches", std::move(mismatches)},
              {"notes", r.notes}};
  if (as_json) return out;

  for (const auto& m : r.mismatches) {
    std::cout << "stale " << m.key.substr(0, 16) << " \"" << m.name << "\" (" << to_string(m.target)
              << "): " << m.what << (m.removed ? "; removed" : "; not found to remove");
    if (m.report) std::cout << " (report: " << *m.report << ")";
    std::cout << '\n';
  }
  for (const auto& note : r.notes) std::cout << note << '\n';
  std::cout << "recompiled " << r.with_recipe << " of " << plural(r.entries, "entry", "entries")
            << " (those with a recipe): " << r.verified << " the same, " << r.mismatched
            << " stale (removed), " << r.inputs_changed << " with inputs changed since (left)";
  if (r.failed_to_read != 0) std::cout << ", " << r.failed_to_read << " unreadable";
  if (r.not_compiled != 0) std::cout << ", " << r.not_compiled << " not compiled";
  std::cout << '\n';
  if (r.damaged_recipes != 0 || r.orphan_recipes_removed != 0) {
    std::cout << plural(r.damaged_recipes, "damaged recipe", "damaged recipes") << " ignored, "
              << plural(r.orphan_recipes_removed, "recipe", "recipes")
              << " of removed entries deleted\n";
  }
  if (!r.recipes_possible) {
    std::cout << "this cache keeps no statistics directory, so no recipes (a Redis cache alone, "
                 "or CUCORE_CACHE_STATS=0): nothing can be compiled again\n";
  } else if (without != 0 && r.recipes_enabled) {
    std::cout << plural(without, "entry has", "entries have")
              << " no recipe (stored before recipes were kept, or by a front end that keeps "
                 "none)\n";
  } else if (without != 0) {
    std::cout << plural(without, "entry has", "entries have")
              << " no recipe: compile with CUCORE_CACHE_RECIPES=1 (or, for a directory cache, "
                 "`cucore cache config recipes true`) to keep what it takes to compile them again "
                 "(docs/verify-recompile.md)\n";
  }
  return out;
}

}  // namespace cucore::cli
