// What `cucore compile` and `cucore key` share: one table of the options that describe a
// compilation (so the two commands cannot drift apart: a key computed by `cucore key` is the key
// `cucore compile` uses for the same command line), and one reading of them into compile inputs.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "command_line.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "cucore/object_code.hpp"
#include "cucore/options.hpp"
#include "json_output.hpp"

namespace cucore::cli {

// Joins option tables into one, in order, so a command can place its own options around the
// shared ones.
template <std::size_t... N>
constexpr std::array<option_spec, (N + ...)> join_options(
    const std::array<option_spec, N>&... tables) {
  std::array<option_spec, (N + ...)> out{};
  std::size_t i = 0;
  ((std::copy(tables.begin(), tables.end(), out.begin() + static_cast<std::ptrdiff_t>(i)), i += N),
   ...);
  return out;
}

// What is compiled, and to what.
inline constexpr auto compilation_options = std::to_array<option_spec>({
    {"--code-type", "", "c++|ptx|nvvm", "what FILE holds (default: from its extension)"},
    {"--target", "", "ptx|cubin|ltoir|tile-ir",
     "what to produce (default: cubin; ptx from nvvm; tile-ir: c++ Tile code, NVRTC 13.1+)"},
    {"--arch", "", "sm_XY", "GPU architecture (default: the GPU's)"},
    {"--name", "", "NAME", "program name: messages; quoted #includes beside it (default: FILE)"},
    {"--name-expression", "", "EXPR", "c++: report EXPR's mangled name (repeatable)"},
});

// The compiler's options, under headings: the last part of a command's table. Every
// program_options field has one (docs/compilation.md, "Every option": field, NVRTC flag, CLI,
// Python); -Xnvrtc passes what no field covers.
inline constexpr auto compiler_options = std::to_array<option_spec>({
    {"", "", "", "Preprocessor (c++)"},
    {"-I", "--include-path", "DIR", "search DIR for headers (repeatable)"},
    {"-D", "--define-macro", "NAME[=VALUE]", "define a macro (repeatable)"},
    {"-U", "--undefine-macro", "NAME", "undefine a macro (repeatable)"},
    {"--pre-include", "", "FILE", "include FILE before the source (repeatable)"},
    {"--header", "", "NAME=FILE", "in-memory header: #include NAME reads FILE (repeatable)"},
    {"--no-source-include", "", "",
     "do not look up quoted #includes beside FILE (--name's directory)"},
    {"--no-toolkit-include", "", "", "do not search the toolkit's headers (CCCL, CUB, <cuda/...>)"},
    {"--use-bundled-headers", "", "",
     "search NVRTC's own bundled CUDA/CCCL headers (NVRTC 13.3+) instead of the toolkit's"},
    {"", "", "", "Language (c++)"},
    {"--std", "", "STD", "language dialect: c++17, c++20, ..."},
    {"--default-device", "", "", "unannotated functions are __device__ (CUTLASS, CuTe)"},
    {"--builtin-move-forward", "", "true|false", "built-in std::move, std::forward (default true)"},
    {"--builtin-initializer-list", "", "true|false",
     "built-in std::initializer_list (default true)"},
    {"--device-int128", "", "", "allow __int128 in device code"},
    {"--device-float128", "", "", "allow __float128, _Float128 in device code (sm_100+)"},
    {"--restrict", "", "", "kernel pointer parameters are __restrict__"},
    {"--extensible-whole-program", "", "", "extensible whole-program compilation"},
    {"--minimal", "", "", "omit textures, cudadevrt, device launch (faster)"},
    {"", "", "", "Code generation"},
    {"-G", "--debug", "", "device debug information"},
    {"--lineinfo", "", "", "line-number information (c++, ptx)"},
    {"--maxrregcount", "", "N", "at most N registers per thread (c++, ptx)"},
    {"--use-fast-math", "", "", "fast, less precise math (c++)"},
    {"--ftz", "", "true|false", "flush denormal floats to zero"},
    {"--prec-div", "", "true|false", "IEEE-rounded division"},
    {"--prec-sqrt", "", "true|false", "IEEE-rounded square root"},
    {"--fmad", "", "true|false", "contract multiply and add into FMA"},
    {"--rdc", "", "", "relocatable device code (c++)"},
    {"--dlink-time-opt", "", "", "link-time optimization (c++: implied by ltoir; ptx)"},
    {"--gen-opt-lto", "", "", "optimize before emitting LTO-IR (c++)"},
    {"--ptxas-options", "", "OPT", "pass OPT to ptxas (repeatable; c++, ptx)"},
    {"--dopt", "", "on|off", "device code optimization (c++, nvvm)"},
    {"--Ofast-compile", "", "0|min|mid|max", "trade code speed for compile speed (c++)"},
    {"--extra-device-vectorization", "", "", "more aggressive vectorization (c++)"},
    {"--split-compile", "", "N", "optimize with up to N threads, 0: all (c++, ptx)"},
    {"--frandom-seed", "", "SEED", "seed of generated names: reproducible output (c++)"},
    {"--no-compiler-cache", "", "", "the compiler's own cache off; cucore's: --cache none"},
    {"--fdevice-syntax-only", "", "", "stop after the front end: no usable code (c++)"},
    {"--numba-debug", "", "", "Numba's debug flag, passed on (c++, nvvm, ptx)"},
    {"", "", "", "Tile code (c++, C++20, NVRTC 13.1+: its code is in the Tile IR)"},
    {"--enable-tile", "", "", "compile Tile code (__tile_global__) besides SIMT code"},
    {"--tile-only", "", "", "compile only Tile code (no PTX, cubin or LTO-IR: --target tile-ir)"},
    {"--simt-only", "", "", "parse Tile code, generate only SIMT code (no Tile IR)"},
    {"--default-tile", "", "", "unannotated functions and variables are __tile__"},
    {"--diagnose-implicit-tile-var", "", "",
     "with --default-tile: diagnose variables that cannot be __tile__"},
    {"", "", "", "Diagnostics (c++)"},
    {"--disable-warnings", "", "", "no warnings"},
    {"--diag-error", "", "N", "make diagnostic number N an error (repeatable)"},
    {"--diag-suppress", "", "N", "suppress diagnostic number N (repeatable)"},
    {"--diag-warn", "", "N", "make diagnostic number N a warning (repeatable)"},
    {"--warning-as-error", "", "KIND",
     "make warnings of KIND errors: all-warnings, reorder, ... (repeatable; NVRTC 13.1+)"},
    {"--Wreorder", "", "", "warn when member initializers are reordered (NVRTC 13.1+)"},
    {"--no-display-error-number", "", "", "leave out diagnostic numbers"},
    {"--brief-diagnostics", "", "true|false", "diagnostics without the source line"},
    {"--optimization-info", "", "KIND", "optimization remarks in the log (KIND: inline)"},
    {"", "", "", "Precompiled headers and timing files (c++; see above for caching)"},
    {"--time", "", "FILE", "append compile-phase timings to FILE (-: the log)"},
    {"--fdevice-time-trace", "", "FILE", "write a Chrome trace of the compile to FILE"},
    {"--pch", "", "", "automatic precompiled headers"},
    {"--create-pch", "", "FILE", "create the precompiled header FILE"},
    {"--use-pch", "", "FILE", "use the precompiled header FILE"},
    {"--pch-dir", "", "DIR", "where precompiled headers are looked up and created"},
    {"--pch-verbose", "", "true|false", "log why a PCH was not used (default true)"},
    {"--pch-messages", "", "true|false", "log when a PCH is created or used (default true)"},
    {"--instantiate-templates-in-pch", "", "true|false",
     "instantiate templates before creating a PCH (default true)"},
    {"--no-auto-pch", "", "", "no automatic precompiled headers (same output; faster repeats)"},
    {"--server", "", "", "compile a miss in the compile server, starting it if none runs"},
    {"--no-server", "", "", "compile in this process (default: a running server, if any)"},
    {"", "", "", "Any other NVRTC option"},
    {"-Xnvrtc", "", "OPT", "pass OPT to NVRTC verbatim, after all else (repeatable)"},
    {"", "", "", "NVVM IR"},
    {"--libdevice", "", "", "link libdevice, the CUDA math library"},
    {"--extra-module", "", "FILE", "another IR module to compile with FILE (repeatable)"},
});

// Both commands take it, under a heading of their own.
inline constexpr option_spec extra_digest_option{
    "--extra-digest", "", "HEX",
    "mix these bytes into the key: a fingerprint of files it cannot see"};

// Everything one compilation needs, read from the command line and FILE.
struct compile_inputs {
  std::string file;
  std::string code;  // FILE's bytes
  source_type source = source_type::cxx;
  code_type target = code_type::cubin;
  std::vector<std::string> name_expressions;  // each once, in command-line order
  program_options options;                    // as given: arch unset when --arch is absent
  std::string arch;                           // the arch the compile uses (options.arch resolved)
};

// Reads the compilation options and FILE (the one positional). Usage errors for a malformed or
// contradictory command line, and for options the code type does not take (asked of the library
// before any compiler is loaded); cucore::error for a FILE or --extra-module it cannot read, and
// for no --arch on a machine without a GPU. `command` names the command in messages.
compile_inputs compile_inputs_from(const arguments& args, std::string_view command);

// The bytes `text` spells in hexadecimal (either case); a usage_error naming `option` for an odd
// number of digits or a character that is not one.
std::string decode_hex(std::string_view option, std::string_view text);
// Bytes as lowercase hexadecimal.
std::string encode_hex(std::string_view bytes);

// The decoded --extra-digest, if given.
std::optional<std::string> extra_digest_from(const arguments& args);

// The inputs of the cache key of `in`. The options carry the resolved arch, so deriving the key
// queries no GPU.
program_cache_key_inputs key_inputs(const compile_inputs& in,
                                    std::optional<std::string> extra_digest);

// Why make_program_cache_key refused the key of `in` (the exception it threw), in the tool's words:
// the library's message without its advice to library callers, the file named for "the c++ code",
// and the tool's option where that is the cause (--libdevice). Commands add their own advice.
struct cache_refusal {
  std::string reason;
  bool extra_digest_helps = false;  // extra_digest_required: --extra-digest would make it keyable
};
cache_refusal cache_refusal_of(const compile_inputs& in, const cucore::invalid_argument& refusal);

// The key's "headers" member for --json: what include tracking did (counts, and whether every file
// was answered by stat alone), or null for a key without tracked includes or no key at all.
json headers_json(const program_cache_key* key);

// The backend a cached compile of `source` would have used, from its key alone (for ptx, the key's
// linker_backend field): naming it must not load a compiler. nullopt when the key does not say.
std::optional<std::string> backend_from_key(const program_cache_key& key, source_type source);

}  // namespace cucore::cli
