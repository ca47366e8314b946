// The one table of NVRTC's options (every option NVRTC 12.x and 13.x documents), and how the cache
// treats each. The library (extra_nvrtc_options, options.cpp, key.cpp), the CLI (-Xnvrtc, through
// extra_nvrtc_options) and the NVRTC drop-in (dropin/nvrtc_options.cpp) all parse through it: an
// option not in it bypasses the cache, whatever it looks like (docs/compilation.md, "Every
// option").
//
// Beside it, the table of the program_options fields the compile options of `cucore compile` and
// `cucore key` and of the Python package's ProgramOptions set (program_option_fields): the field,
// its value's form, its command-line option and help. Both interfaces read their options through
// it, and the NVRTC table takes each field's command-line option from it, so an option is added
// in one place.
#pragma once

#include <array>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cucore/options.hpp"

namespace cucore::detail {

// What a compile with the option does that a cache key must answer for.
enum class nvrtc_option_use : unsigned char {
  keyed,          // changes the outputs only through its own text: keyed as written
  include_input,  // -I, -include, -D, -U, --no-source-include: the include walk follows them
  side_effect,    // writes a file or prints timings: a hit would skip that (bypass)
  unseen_input,   // reads precompiled headers the key cannot see (bypass unless an extra_digest)
  tool_options,   // hands options to a tool inside NVRTC, which may read or write any file (bypass)
  other_output,   // makes NVRTC emit an output kind cucore does not compile to (OptiX IR)
  tile,           // Tile code (13.1+): its code goes to the Tile IR (kept alongside in an entry)
  toolkit_root,   // --use-bundled-headers=DIR (13.3+): installs headers into DIR, reads them
                  // (bypass)
};

struct nvrtc_option {
  // Every spelling, without dashes and with '-' for '_' (NVRTC takes one or two dashes, and '_'
  // for '-' in long names); the first is the long name docs/compilation.md gives.
  std::string_view names;  // space-separated
  // The drop-in's one spelling of it in its key ("-" + canonical, "=value" when given).
  std::string_view canonical;
  // Takes a value: "--x=v", or "-x v" (the next element, when it does not start with '-').
  bool takes_value;
  nvrtc_option_use use;
  // The program_options field that covers it ("" for none): extra_nvrtc_options refuses it,
  // naming the field, and the cucore command line's option for that field (program_option_fields'
  // unless the table gives its own).
  std::string_view field = {};
  std::string_view cli = {};
};

// How a program_options field takes its value, on the command line and from Python.
enum class option_form : unsigned char {
  heading,   // no field: a heading of the command line's help (in `help`)
  flag,      // optional<bool>: the option alone sets true; Python: a bool
  off_flag,  // optional<bool>: the option alone (--no-...) sets false; Python: a bool
  boolean,   // optional<bool>: true|false; Python: a bool
  on_off,    // optional<bool>: on|off; Python: a bool
  integer,   // optional<int>
  integers,  // vector<int>, one a use of the option; Python: an int or a sequence of them
  text,      // optional<string>; Python: a str or path-like (False: unset)
  path,      // optional<string> naming a file; Python: any value but None (a bool as its text)
  texts,     // vector<string>, one a use; Python: a str, path-like, or a sequence of them
  custom,    // a form of its own, read by each interface's own code (macros, headers, ...)
};

// Where the field's value is kept, by type (std::monostate for a heading or a custom field).
using option_member =
    std::variant<std::monostate, std::optional<bool> program_options::*,
                 std::optional<int> program_options::*,
                 std::optional<std::string> program_options::*, std::vector<int> program_options::*,
                 std::vector<std::string> program_options::*>;

struct program_option_field {
  std::string_view name;  // the program_options member: the Python ProgramOptions attribute too
  option_form form;
  // The option of `cucore compile` and `cucore key`: its spelling, another spelling, what its
  // value is called in the help ("" for a flag, and for boolean and on_off, whose words are
  // given), and one line of help.
  std::string_view cli;
  std::string_view cli_alias;
  std::string_view value_name;
  std::string_view help;
  option_member member = {};
};

constexpr program_option_field option_heading(std::string_view text) {
  return {{}, option_form::heading, {}, {}, {}, text};
}

// The fields, under the command line's help headings, in its order. A field may have two rows
// (compile_server: --server and --no-server). program_options' name, arch, verify and
// verify_in_background are not here: the command line sets them with options of its own.
inline constexpr auto program_option_fields = [] {
  using enum option_form;
  using p = program_options;
  return std::to_array<program_option_field>({
      option_heading("Preprocessor (c++)"),
      {"include_path", texts, "-I", "--include-path", "DIR", "search DIR for headers (repeatable)",
       &p::include_path},
      {"define_macro", custom, "-D", "--define-macro", "NAME[=VALUE]",
       "define a macro (repeatable)"},
      {"undefine_macro", texts, "-U", "--undefine-macro", "NAME", "undefine a macro (repeatable)",
       &p::undefine_macro},
      {"pre_include", texts, "--pre-include", "", "FILE",
       "include FILE before the source (repeatable)", &p::pre_include},
      {"headers", custom, "--header", "", "NAME=FILE",
       "in-memory header: #include NAME reads FILE (repeatable)"},
      {"no_source_include", flag, "--no-source-include", "", "",
       "do not look up quoted #includes beside FILE (--name's directory)", &p::no_source_include},
      {"toolkit_include_path", off_flag, "--no-toolkit-include", "", "",
       "do not search the toolkit's headers (CCCL, CUB, <cuda/...>)", &p::toolkit_include_path},
      {"use_bundled_headers", flag, "--use-bundled-headers", "", "",
       "search NVRTC's own bundled CUDA/CCCL headers (NVRTC 13.3+) instead of the toolkit's",
       &p::use_bundled_headers},
      option_heading("Language (c++)"),
      {"std", text, "--std", "", "STD", "language dialect: c++17, c++20, ...", &p::std},
      {"device_as_default_execution_space", flag, "--default-device", "", "",
       "unannotated functions are __device__ (CUTLASS, CuTe)",
       &p::device_as_default_execution_space},
      {"builtin_move_forward", boolean, "--builtin-move-forward", "", "",
       "built-in std::move, std::forward (default true)", &p::builtin_move_forward},
      {"builtin_initializer_list", boolean, "--builtin-initializer-list", "", "",
       "built-in std::initializer_list (default true)", &p::builtin_initializer_list},
      {"device_int128", flag, "--device-int128", "", "", "allow __int128 in device code",
       &p::device_int128},
      {"device_float128", flag, "--device-float128", "", "",
       "allow __float128, _Float128 in device code (sm_100+)", &p::device_float128},
      {"restrict", flag, "--restrict", "", "", "kernel pointer parameters are __restrict__",
       &p::restrict},
      {"extensible_whole_program", flag, "--extensible-whole-program", "", "",
       "extensible whole-program compilation", &p::extensible_whole_program},
      {"minimal", flag, "--minimal", "", "", "omit textures, cudadevrt, device launch (faster)",
       &p::minimal},
      option_heading("Code generation"),
      {"debug", flag, "-G", "--debug", "", "device debug information", &p::debug},
      {"lineinfo", flag, "--lineinfo", "", "", "line-number information (c++, ptx)", &p::lineinfo},
      {"max_register_count", integer, "--maxrregcount", "", "N",
       "at most N registers per thread (c++, ptx)", &p::max_register_count},
      {"use_fast_math", flag, "--use-fast-math", "", "", "fast, less precise math (c++)",
       &p::use_fast_math},
      {"ftz", boolean, "--ftz", "", "", "flush denormal floats to zero", &p::ftz},
      {"prec_div", boolean, "--prec-div", "", "", "IEEE-rounded division", &p::prec_div},
      {"prec_sqrt", boolean, "--prec-sqrt", "", "", "IEEE-rounded square root", &p::prec_sqrt},
      {"fma", boolean, "--fmad", "", "", "contract multiply and add into FMA", &p::fma},
      {"relocatable_device_code", flag, "--rdc", "", "", "relocatable device code (c++)",
       &p::relocatable_device_code},
      {"link_time_optimization", flag, "--dlink-time-opt", "", "",
       "link-time optimization (c++: implied by ltoir; ptx)", &p::link_time_optimization},
      {"gen_opt_lto", flag, "--gen-opt-lto", "", "", "optimize before emitting LTO-IR (c++)",
       &p::gen_opt_lto},
      {"ptxas_options", texts, "--ptxas-options", "", "OPT",
       "pass OPT to ptxas (repeatable; c++, ptx)", &p::ptxas_options},
      {"device_code_optimize", on_off, "--dopt", "", "", "device code optimization (c++, nvvm)",
       &p::device_code_optimize},
      {"ofast_compile", text, "--Ofast-compile", "", "0|min|mid|max",
       "trade code speed for compile speed (c++)", &p::ofast_compile},
      {"extra_device_vectorization", flag, "--extra-device-vectorization", "", "",
       "more aggressive vectorization (c++)", &p::extra_device_vectorization},
      {"split_compile", integer, "--split-compile", "", "N",
       "optimize with up to N threads, 0: all (c++, ptx)", &p::split_compile},
      {"frandom_seed", text, "--frandom-seed", "", "SEED",
       "seed of generated names: reproducible output (c++)", &p::frandom_seed},
      {"no_cache", flag, "--no-compiler-cache", "", "",
       "the compiler's own cache off; cucore's: --cache none", &p::no_cache},
      {"fdevice_syntax_only", flag, "--fdevice-syntax-only", "", "",
       "stop after the front end: no usable code (c++)", &p::fdevice_syntax_only},
      {"numba_debug", flag, "--numba-debug", "", "",
       "Numba's debug flag, passed on (c++, nvvm, ptx)", &p::numba_debug},
      option_heading("Tile code (c++, C++20, NVRTC 13.1+: its code is in the Tile IR)"),
      {"enable_tile", flag, "--enable-tile", "", "",
       "compile Tile code (__tile_global__) besides SIMT code", &p::enable_tile},
      {"tile_only", flag, "--tile-only", "", "",
       "compile only Tile code (no PTX, cubin or LTO-IR: --target tile-ir)", &p::tile_only},
      {"simt_only", flag, "--simt-only", "", "",
       "parse Tile code, generate only SIMT code (no Tile IR)", &p::simt_only},
      {"default_tile", flag, "--default-tile", "", "",
       "unannotated functions and variables are __tile__", &p::default_tile},
      {"diagnose_implicit_tile_var", flag, "--diagnose-implicit-tile-var", "", "",
       "with --default-tile: diagnose variables that cannot be __tile__",
       &p::diagnose_implicit_tile_var},
      option_heading("Diagnostics (c++)"),
      {"disable_warnings", flag, "--disable-warnings", "", "", "no warnings", &p::disable_warnings},
      {"diag_error", integers, "--diag-error", "", "N",
       "make diagnostic number N an error (repeatable)", &p::diag_error},
      {"diag_suppress", integers, "--diag-suppress", "", "N",
       "suppress diagnostic number N (repeatable)", &p::diag_suppress},
      {"diag_warn", integers, "--diag-warn", "", "N",
       "make diagnostic number N a warning (repeatable)", &p::diag_warn},
      {"warning_as_error", texts, "--warning-as-error", "", "KIND",
       "make warnings of KIND errors: all-warnings, reorder, ... (repeatable; NVRTC 13.1+)",
       &p::warning_as_error},
      {"wreorder", flag, "--Wreorder", "", "",
       "warn when member initializers are reordered (NVRTC 13.1+)", &p::wreorder},
      {"no_display_error_number", flag, "--no-display-error-number", "", "",
       "leave out diagnostic numbers", &p::no_display_error_number},
      {"brief_diagnostics", boolean, "--brief-diagnostics", "", "",
       "diagnostics without the source line", &p::brief_diagnostics},
      {"optimization_info", text, "--optimization-info", "", "KIND",
       "optimization remarks in the log (KIND: inline)", &p::optimization_info},
      option_heading("Precompiled headers and timing files (c++; see above for caching)"),
      {"time", path, "--time", "", "FILE", "append compile-phase timings to FILE (-: the log)",
       &p::time},
      {"fdevice_time_trace", path, "--fdevice-time-trace", "", "FILE",
       "write a Chrome trace of the compile to FILE", &p::fdevice_time_trace},
      {"pch", flag, "--pch", "", "", "automatic precompiled headers", &p::pch},
      {"create_pch", path, "--create-pch", "", "FILE", "create the precompiled header FILE",
       &p::create_pch},
      {"use_pch", path, "--use-pch", "", "FILE", "use the precompiled header FILE", &p::use_pch},
      {"pch_dir", path, "--pch-dir", "", "DIR",
       "where precompiled headers are looked up and created", &p::pch_dir},
      {"pch_verbose", boolean, "--pch-verbose", "", "", "log why a PCH was not used (default true)",
       &p::pch_verbose},
      {"pch_messages", boolean, "--pch-messages", "", "",
       "log when a PCH is created or used (default true)", &p::pch_messages},
      {"instantiate_templates_in_pch", boolean, "--instantiate-templates-in-pch", "", "",
       "instantiate templates before creating a PCH (default true)",
       &p::instantiate_templates_in_pch},
      {"auto_pch", off_flag, "--no-auto-pch", "", "",
       "no automatic precompiled headers (same output; faster repeats)", &p::auto_pch},
      {"compile_server", custom, "--server", "", "",
       "compile a miss in the compile server, starting it if none runs"},
      {"compile_server", custom, "--no-server", "", "",
       "compile in this process (default: a running server, if any)"},
      option_heading("Any other NVRTC option"),
      {"extra_nvrtc_options", texts, "-Xnvrtc", "", "OPT",
       "pass OPT to NVRTC verbatim, after all else (repeatable)", &p::extra_nvrtc_options},
      option_heading("NVVM IR"),
      {"use_libdevice", flag, "--libdevice", "", "", "link libdevice, the CUDA math library",
       &p::use_libdevice},
      {"extra_sources", custom, "--extra-module", "", "FILE",
       "another IR module to compile with FILE (repeatable)"},
  });
}();

// What the help calls a field's value: its value_name, or the words a boolean form takes.
constexpr std::string_view option_value_name(const program_option_field& f) {
  if (f.form == option_form::boolean) return "true|false";
  if (f.form == option_form::on_off) return "on|off";
  return f.value_name;
}

// The member of `options` a field keeps its value in; T is the member's type, as its form says.
template <class T>
T& field_member(program_options& options, const program_option_field& f) {
  return options.*std::get<T program_options::*>(f.member);
}

// The whole table, in docs/compilation.md's order.
std::span<const nvrtc_option> nvrtc_options();

// The name an element spells: without its leading dashes (one or two), cut at '=', '_' as '-'.
// "" for an element that does not start with '-'.
std::string nvrtc_option_name(std::string_view element);

// The table's entry for an element ("-arch=sm_90", "--use_fast_math", "-DX=1", "-I/dir"), or
// nullptr when NVRTC documents no such option. -D, -U and -I also match with text attached.
const nvrtc_option* find_nvrtc_option(std::string_view element);

// One option of an option list, as the table reads it.
struct parsed_nvrtc_option {
  std::size_t index = 0;                 // of its first element
  const nvrtc_option* option = nullptr;  // nullptr: not an NVRTC option the table knows
  std::string_view element;              // as written
  bool has_value = false;
  std::string value;            // attached ("=v", or the text after -D/-U/-I) or the next element
  bool separate_value = false;  // the value was the next element
};

// Splits an option list into options, each with its value. Never throws.
std::vector<parsed_nvrtc_option> parse_nvrtc_option_list(std::span<const std::string> options);

// Why a cache cannot key an option list, or "" when it can: the first option that is not in the
// table, has a side effect, names a tool inside NVRTC, or names --use-bundled-headers. (Options a
// program_options field covers, and precompiled headers, are refused by their fields' checks.)
std::string nvrtc_options_uncacheable(std::span<const std::string> options);

// An option list's element as a message quotes it: printable ASCII as is, other bytes as \xHH,
// at most 80 characters.
std::string quoted_option(std::string_view element);

// Whether `flags` make NVRTC generate Tile code, whose code goes to the Tile IR: -enable-tile or
// -tile-only, without -simt-only (13.1+).
bool compiles_tile_code(std::span<const std::string> flags);

// ptxas's arguments as NVRTC (--ptxas-options, -Xptxas) and nvJitLink (-Xptxas=) hand them over:
// each value one argument, never split at blanks or commas (measured on NVRTC 12.9, 13.0, 13.5
// and nvJitLink 13.0). Why they may make ptxas read or write a file the cache key does not cover,
// or "" when none can: every argument must be an option of ptxas's own --help that names no file
// (long names with "--", short with "-", exact: ptxas takes no prefixes and no '_'), its value
// attached with '=' or in the next argument, or -O / -m with the value attached ("-O3", "-m64").
// Anything else is reported: --options-file/-optf (reads options from a file), --output-file/-o
// (writes a file), an argument that is no option (ptxas reads it as a PTX input file), and an
// option --help does not list (the built-in ptxas has hidden ones that read or write files, e.g.
// --compiler-stats-file, --apply-controls, --nv-host), --help, --version.
std::string ptxas_arguments_name_files(std::span<const std::string> arguments);

// The option among `flags` that explains why NVRTC produced no bytes of the asked-for output, and
// what to do instead, or "" when none does (-tile-only compiles Tile code only).
std::string empty_output_cause(std::span<const std::string> flags, std::string_view target);

}  // namespace cucore::detail
