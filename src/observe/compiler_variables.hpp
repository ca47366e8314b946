#pragma once
// The environment variables the compilers read, and what the cache does with each: one table. The
// key (key/compiler_environment.hpp), the bypass decision, the observation gate, the context
// oracle (tests/oracle/context_oracle_test.cpp) and docs/cache-keys.md ("What NVRTC's output
// depends on") all go by it. Here, below the loader, because the values that count are those a
// compiler saw as it was loaded.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cucore::detail {

// What the cache does with one variable a compiler reads.
enum class environment_effect {
  keyed,     // name and value (or its absence) enter the key
  bypass,    // set (to anything): the compile has side effects (writes files): no cache
  harmless,  // measured: never changes an output (the context oracle keeps checking it)
};

struct environment_variable {
  std::string_view name;
  environment_effect effect;
  std::string_view why;  // how it was measured or why it is treated so
};

// Every variable NVRTC 13.0, libNVVM 13.0 and nvJitLink 13.0 read (getenv/secure_getenv, found by
// interposing them: the context oracle fails when a compiler reads one not listed here).
std::span<const environment_variable> compiler_environment();

// The table's entry for `name`, or nullptr.
const environment_variable* find_compiler_variable(std::string_view name) noexcept;

// The key's "environment" payloads: "NAME=VALUE" for each keyed variable that is set, in table
// order (an unset one adds nothing, so a set-but-empty one differs from an unset one).
std::vector<std::string> keyed_environment();

// The first bypass variable that is set: "NAME" (why), or nullopt. Also a keyed variable whose
// value changed since this process first loaded a compiler: NVRTC and libNVVM read some of them
// once per process (LLVM_OVERRIDE_PRODUCER: measured, a value set after the first compile changes
// nothing), so the key cannot tell which value a compile uses.
std::optional<std::string> environment_bypass();

// Records the keyed variables' values as a compiler library is loaded (the loader calls it before
// the first of NVRTC, libNVVM and nvJitLink is opened; later calls change nothing).
void note_compiler_environment_at_load();

}  // namespace cucore::detail
