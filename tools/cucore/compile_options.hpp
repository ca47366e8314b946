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
#include "program/nvrtc_option_table.hpp"

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
// Python), from the table the Python package reads too (program_option_fields); -Xnvrtc passes
// what no field covers.
inline constexpr auto compiler_options = [] {
  constexpr auto& fields = detail::program_option_fields;
  std::array<option_spec, fields.size()> out{};
  for (std::size_t i = 0; i < fields.size(); ++i) {
    const auto& f = fields[i];
    out[i] = {f.cli, f.cli_alias, detail::option_value_name(f), f.help};  // a heading: its text
  }
  return out;
}();

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
