#pragma once
// What a compile depends on besides its inputs: the environment variables the compilers read,
// the working directory, the clock. One table: the key, the bypass decision, the context oracle
// (tests/oracle/context_oracle_test.cpp) and docs/cache-keys.md ("What NVRTC's output depends
// on") all go by it.

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/cache/key.hpp"
#include "cucore/object_code.hpp"
#include "observe/compiler_variables.hpp"

namespace cucore::detail {

// Whether NVRTC writes the working directory into this output: --generate-line-info, -G, every
// LTO-IR (-dlto), Tile IR (measured on NVRTC 13.0: docs/cache-keys.md).
bool embeds_working_directory(std::span<const std::string> flags, code_type target);

// Whether the output holds the modification times of the files its code came from: a cubin with
// line information (--generate-line-info, -G) carries each source file's mtime in its DWARF line
// table (measured on NVRTC 13.0: touching the program's file or a header changes the cubin; PTX
// and LTO-IR do not carry them).
bool embeds_file_times(std::span<const std::string> flags, code_type target);

// getcwd() (not $PWD, which NVRTC never uses for this), or "<getcwd failed: ERRNO>".
std::string working_directory();

// Whether CUCORE_SLOPPINESS names `what` ("time_macros"): comma- or blank-separated words, as
// ccache's sloppiness setting.
bool sloppiness_allows(std::string_view what);

}  // namespace cucore::detail
