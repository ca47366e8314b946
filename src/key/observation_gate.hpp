#pragma once
// The store gate's second half (docs/cache-keys.md, "Observed inputs"): whether every input a
// compile was observed reading is one its key covers. The first half, that each covered file is
// still what the key hashed, is check_store() over the walk's manifest.

#include <optional>
#include <string>
#include <vector>

#include "cucore/cache/key.hpp"
#include "observe/compiler_observer.hpp"

namespace cucore::detail {

struct walk_manifest;

// What a key covers besides its fields' values.
struct key_coverage {
  const walk_manifest* walk = nullptr;      // every path the include walk stat'd; null: none
  std::string program_name;                 // options.name (NVRTC stats it, never reads it)
  std::vector<std::string> memory_headers;  // in-memory headers' names (NVRTC may stat them)
  // An extra_digest the key required (PCH options, libdevice, a macro include it could not work
  // out) vouches for files the key cannot see: a file outside the walk is then accepted; a
  // process-view input and a variable outside the table are not.
  bool extra_digest = false;
};

// nullopt when every input of `seen` is covered: a path the walk checked (its identity is
// check_store()'s), a name NVRTC is known to stat harmlessly, a directory holding what the key
// covers, a variable of the compilers' table, the working directory (getcwd: NVRTC reads it in
// every compile; the key holds it where an output embeds it, as the context oracle measures). Else
// why not (unkeyed_input), or process_view_input for an input no key can cover
// (first_process_view_input).
std::optional<store_refusal> check_observed_inputs(const observed_inputs& seen,
                                                   const key_coverage& key);

}  // namespace cucore::detail
