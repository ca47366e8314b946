#pragma once
// Why a key missed (docs/cache-keys.md, "Misses that explain themselves"): the difference between
// its fields (program_cache_key::explain()) and those of the nearest earlier key of the same
// program, named as a person looks for it: which header changed, which option, the compiler.

#include <string>
#include <string_view>
#include <vector>

#include "cache/program_notes.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/statistics.hpp"

namespace cucore::detail {

// Fields as lines "LABEL\tPAYLOAD\n" (tabs, newlines and backslashes in a payload escaped): the
// form notes keep and explain_miss compares, line against line.
std::string encode_fields(const std::vector<key_field>& fields);

// The reasons, most telling first: what changed between `before` (the nearest earlier key's
// fields, encoded) and `now` (encoded). Empty `before`: first_compile. Only differing lines are
// parsed: the cost is a hash of each line.
miss_explanation explain_miss(std::string_view before, std::string_view before_hex,
                              std::string_view now);

// The reasons as one line for a log: "KIND: DETAIL; KIND: DETAIL".
std::string describe_reasons(const miss_explanation& miss);

// The identities the note of the program a key's `fields` describe goes by
// (cache/program_notes.hpp): its name and target, its source and target.
program_note_identity note_identity_of(const std::vector<key_field>& fields);

}  // namespace cucore::detail
