#pragma once
// The fields of the last key stored for each program, kept beside a cache's statistics: what a
// later miss of the same program is compared with (key/miss_explanation.hpp; docs/cache-keys.md,
// "Misses that explain themselves"). Best effort: a note that cannot be written or read costs an
// explanation, never a compile.

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cucore::detail {

// The two identities a program's note goes by: its name and target, its source and target (40
// hex digits each; key/miss_explanation.hpp's note_identity_of makes them from a key's fields).
struct program_note_identity {
  std::string by_name, by_source;
};

struct program_note {
  std::string key_hex;
  std::string fields;  // encode_fields (key/miss_explanation.hpp)
};

// Records `encoded` (a stored key's explain(), encoded) as the latest of the program `id` names:
// by program name and target, and by source and target. `directory`: the cache's statistics
// directory (notes go to DIRECTORY/programs/, with its permissions); nullopt: this process's
// memory.
void record_program_note(const std::optional<std::filesystem::path>& directory,
                         std::string_view key_hex, const program_note_identity& id,
                         std::string_view encoded) noexcept;

// The latest note of the program `id` names: the same name and target, else the same source and
// target.
std::optional<program_note> nearest_program_note(
    const std::optional<std::filesystem::path>& directory, const program_note_identity& id);

// Every note kept (each key once): what a cache pack records of the compiler that made an entry
// (cache/pack). Only the latest key of each program has one.
std::vector<program_note> all_program_notes(const std::optional<std::filesystem::path>& directory);

}  // namespace cucore::detail
