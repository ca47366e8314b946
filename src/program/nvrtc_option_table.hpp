// The one table of NVRTC's options (every option NVRTC 12.x and 13.x documents), and how the cache
// treats each. The library (extra_nvrtc_options, options.cpp, key.cpp), the CLI (-Xnvrtc, through
// extra_nvrtc_options) and the NVRTC drop-in (dropin/nvrtc_options.cpp) all parse through it: an
// option not in it bypasses the cache, whatever it looks like (docs/compilation.md, "Every
// option").
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

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
  // naming the field, and the cucore command line's option for that field.
  std::string_view field;
  std::string_view cli;
};

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
