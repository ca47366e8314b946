#pragma once
// Recipes: what it takes to compile a cache entry again (its source, source type, options, target
// and name expressions), kept beside the cache's statistics when the user opts in, for
// `cucore cache verify --recompile` (docs/verify-recompile.md). Best effort: a recipe that cannot
// be written costs that check, never a compile; one that is damaged is ignored.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/cache/key.hpp"

namespace cucore::detail {

// A recipe as read back: owns the source the key inputs view.
struct program_recipe {
  std::string code;
  source_type code_type = source_type::cxx;
  program_options options;  // compile_server and verify as defaults (neither is kept)
  cucore::code_type target = cucore::code_type::cubin;
  std::vector<std::string> name_expressions;
  std::vector<std::string> byte_name_expressions;
  std::string working_directory;  // where the key was made (relative paths resolve from it)

  // The key's inputs (no extra_digest); `code` views this recipe's.
  program_cache_key_inputs inputs() const;
};

// Whether the cache whose statistics live in `stats_dir` keeps recipes: $CUCORE_CACHE_RECIPES
// when set (1/0, true/false, on/off, yes/no; anything else a warning, and off), else the
// directory cache's cucore.conf `recipes` (STATS_DIR is ROOT/stats), else off. The variable is
// read once per process, the file once per statistics directory.
bool recipes_enabled(const std::filesystem::path& stats_dir) noexcept;

// Writes the recipe of the entry `key_hex` to STATS_DIR/recipes/KEY_HEX (temporary file and
// rename; the statistics directory's permissions) when recipes_enabled(). Nothing for nullopt
// (a cache without statistics) or inputs with an extra_digest (it cannot be rebuilt). Never
// throws; a failure is logged at debug.
void record_program_recipe(const std::optional<std::filesystem::path>& stats_dir,
                           std::string_view key_hex,
                           const program_cache_key_inputs& inputs) noexcept;

// As above for a key the caller derived (program::compile(target, names, cache, key)): the
// program's own inputs, text name expressions only. A key made with an extra_digest is not the
// recipe's: `cucore cache verify --recompile` counts such an entry as inputs_changed.
void record_program_recipe(const std::optional<std::filesystem::path>& stats_dir,
                           std::string_view key_hex, std::string_view code, source_type type,
                           const program_options& options, cucore::code_type target,
                           std::span<const std::string> name_expressions) noexcept;

// What reading a recipe found.
enum class recipe_read_status { ok, absent, damaged };

struct recipe_read {
  recipe_read_status status = recipe_read_status::absent;
  std::optional<program_recipe> recipe;  // set when ok
};

// The recipe of `key_hex`: absent, damaged (wrong magic or version, checksum, encoding, or
// another key's), or read. Never throws for what it finds on disk.
recipe_read read_program_recipe_file(const std::filesystem::path& stats_dir,
                                     std::string_view key_hex) noexcept;

// As read_program_recipe_file, nullopt unless it was read whole.
std::optional<program_recipe> read_program_recipe(const std::filesystem::path& stats_dir,
                                                  std::string_view key_hex) noexcept;

// Removes the recipe of `key_hex`; false when there was none (or it cannot be removed).
bool remove_program_recipe(const std::filesystem::path& stats_dir,
                           std::string_view key_hex) noexcept;

// The keys (64 hex digits) that have a recipe file, and its size in bytes; temporary files
// excluded.
struct recipe_file {
  std::string key_hex;
  std::uintmax_t bytes = 0;
  std::filesystem::file_time_type modified;
};
std::vector<recipe_file> list_program_recipes(const std::filesystem::path& stats_dir) noexcept;

// The encoded recipe (what the file holds), for tests and size measurements.
std::string encode_program_recipe(std::string_view key_hex, const program_cache_key_inputs& inputs,
                                  std::string_view working_directory);

}  // namespace cucore::detail
