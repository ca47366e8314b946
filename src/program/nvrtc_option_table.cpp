#include "program/nvrtc_option_table.hpp"

#include <algorithm>
#include <array>
#include <utility>

namespace cucore::detail {
namespace {

using enum nvrtc_option_use;
constexpr bool V = true;   // takes a value
constexpr bool N = false;  // takes none

// Each form keeps its value in a member of one type, and the help names the value of those that
// take one.
consteval bool consistent(const program_option_field& f) {
  using enum option_form;
  const std::size_t type = f.member.index();  // option_member's alternatives, in order
  switch (f.form) {
    case heading:
      return f.name.empty() && f.cli.empty() && type == 0;
    case custom:
      return !f.name.empty() && !f.cli.empty() && type == 0;
    case flag:
    case off_flag:
    case boolean:
    case on_off:
      return type == 1 && f.value_name.empty();
    case integer:
      return type == 2 && !f.value_name.empty();
    case text:
    case path:
      return type == 3 && !f.value_name.empty();
    case integers:
      return type == 4 && !f.value_name.empty();
    case texts:
      return type == 5 && !f.value_name.empty();
  }
  return false;
}
static_assert(std::ranges::all_of(program_option_fields, consistent));

// The table with each field's command-line option filled in from program_option_fields, where a
// row does not give its own.
template <std::size_t N>
consteval std::array<nvrtc_option, N> with_command_line_options(std::array<nvrtc_option, N> table) {
  for (auto& o : table) {
    for (const auto& f : program_option_fields) {
      if (o.cli.empty() && !o.field.empty() && f.name == o.field) o.cli = f.cli;
    }
  }
  return table;
}

// NVRTC 12.x / 13.x "Supported Compile Options" (the NVRTC User Guide), plus the undocumented
// aliases NVRTC 13.0's option parser takes for them (found by passing each name in libnvrtc's
// option table to nvrtcCompileProgram). Versions where an option is newer are noted.
constexpr auto kTable = with_command_line_options(std::to_array<nvrtc_option>({
    // Targets.
    {"gpu-architecture arch", "arch", V, keyed, "arch", "--arch"},
    // Separate compilation and whole-program compilation.
    {"relocatable-device-code rdc", "rdc", V, keyed, "relocatable_device_code"},
    {"device-c dc", "dc", N, keyed, "relocatable_device_code"},
    {"device-w dw", "dw", N, keyed, "relocatable_device_code"},
    {"extensible-whole-program ewp", "ewp", N, keyed, "extensible_whole_program"},
    // Debugging.
    {"device-debug G", "G", N, keyed, "debug"},
    {"generate-line-info lineinfo", "lineinfo", N, keyed, "lineinfo"},
    // Code generation.
    {"dopt", "dopt", V, keyed, "device_code_optimize"},
    {"Ofast-compile Ofc", "Ofast-compile", V, keyed, "ofast_compile"},
    {"ptxas-options Xptxas", "Xptxas", V, keyed, "ptxas_options"},
    {"maxrregcount", "maxrregcount", V, keyed, "max_register_count"},
    {"ftz", "ftz", V, keyed, "ftz"},
    {"prec-sqrt", "prec-sqrt", V, keyed, "prec_sqrt"},
    {"prec-div", "prec-div", V, keyed, "prec_div"},
    {"fmad", "fmad", V, keyed, "fma"},
    {"use-fast-math", "use-fast-math", N, keyed, "use_fast_math"},
    {"extra-device-vectorization", "extra-device-vectorization", N, keyed,
     "extra_device_vectorization"},
    {"modify-stack-limit", "modify-stack-limit", V, keyed},
    {"dlink-time-opt dlto", "dlto", N, keyed, "link_time_optimization",
     "--dlink-time-opt (or the ltoir target)"},
    {"gen-opt-lto", "gen-opt-lto", N, keyed, "gen_opt_lto"},
    {"optix-ir emit-optix-ir", "optix-ir", N, other_output},
    {"jump-table-density jtd", "jtd", V, keyed},
    {"device-stack-protector", "device-stack-protector", V, keyed},
    {"no-cache", "no-cache", N, keyed, "no_cache"},
    {"frandom-seed", "frandom-seed", V, keyed, "frandom_seed"},
    {"split-compile", "split-compile", V, keyed, "split_compile"},
    // Tile code (13.1+): -enable-tile adds it, -tile-only compiles nothing else; its code goes to
    // the Tile IR. -simt-only parses it but generates none (no Tile IR); -default-tile makes
    // unannotated functions and variables Tile ones (with -enable-tile or -tile-only).
    {"enable-tile", "enable-tile", N, tile, "enable_tile"},
    {"tile-only", "tile-only", N, tile, "tile_only"},
    {"simt-only", "simt-only", N, keyed, "simt_only"},
    {"default-tile", "default-tile", N, keyed, "default_tile"},
    {"diagnose-implicit-tile-var", "diagnose-implicit-tile-var", N, keyed,
     "diagnose_implicit_tile_var"},
    // Preprocessing.
    {"define-macro D", "D", V, include_input, "define_macro"},
    {"undefine-macro U", "U", V, include_input, "undefine_macro"},
    {"include-path I", "I", V, include_input, "include_path"},
    {"pre-include preinclude include", "include", V, include_input, "pre_include"},
    {"no-source-include", "no-source-include", N, include_input, "no_source_include"},
    // NVRTC 13.3+: installs its bundled headers into DIR unless DIR/.nvrtc_headers_version
    // matches, then reads them as -I DIR -I DIR/cccl.
    {"use-bundled-headers", "use-bundled-headers", V, toolkit_root},
    // Language dialect.
    {"std", "std", V, keyed, "std"},
    {"builtin-move-forward", "builtin-move-forward", V, keyed, "builtin_move_forward"},
    {"builtin-initializer-list", "builtin-initializer-list", V, keyed, "builtin_initializer_list"},
    // Precompiled headers.
    {"pch", "pch", N, unseen_input, "pch"},
    {"create-pch", "create-pch", V, side_effect, "create_pch"},
    {"use-pch", "use-pch", V, unseen_input, "use_pch"},
    {"pch-dir", "pch-dir", V, unseen_input, "pch_dir"},
    {"pch-verbose", "pch-verbose", V, keyed, "pch_verbose"},
    {"no-pch-verbose", "no-pch-verbose", N, keyed, "pch_verbose"},
    {"pch-messages", "pch-messages", V, keyed, "pch_messages"},
    {"no-pch-messages", "no-pch-messages", N, keyed, "pch_messages"},
    {"instantiate-templates-in-pch", "instantiate-templates-in-pch", V, keyed,
     "instantiate_templates_in_pch"},
    {"no-instantiate-templates-in-pch", "no-instantiate-templates-in-pch", N, keyed,
     "instantiate_templates_in_pch"},
    // Miscellaneous.
    {"disable-warnings w", "w", N, keyed, "disable_warnings"},
    {"restrict", "restrict", N, keyed, "restrict"},
    {"device-as-default-execution-space default-device", "default-device", N, keyed,
     "device_as_default_execution_space"},
    {"device-int128", "device-int128", N, keyed, "device_int128"},
    {"no-device-int128", "no-device-int128", N, keyed, "device_int128"},
    {"device-float128", "device-float128", N, keyed, "device_float128"},
    {"no-device-float128", "no-device-float128", N, keyed, "device_float128"},
    {"optimization-info opt-info", "opt-info", V, keyed, "optimization_info"},
    {"display-error-number err-no", "err-no", N, keyed},
    {"no-display-error-number no-err-no", "no-err-no", N, keyed, "no_display_error_number"},
    {"diag-error", "diag-error", V, keyed, "diag_error"},
    {"diag-suppress", "diag-suppress", V, keyed, "diag_suppress"},
    {"diag-warn", "diag-warn", V, keyed, "diag_warn"},
    {"brief-diagnostics brief-diag", "brief-diag", V, keyed, "brief_diagnostics"},
    {"time", "time", V, side_effect, "time"},
    {"fdevice-time-trace device-time-trace", "fdevice-time-trace", V, side_effect,
     "fdevice_time_trace"},
    {"fdevice-syntax-only device-syntax-only", "fdevice-syntax-only", N, keyed,
     "fdevice_syntax_only"},
    {"minimal", "minimal", N, keyed, "minimal"},
    {"numba-debug", "numba-debug", N, keyed, "numba_debug"},
    // Diagnostics (13.1+).
    {"warning-as-error Werror", "Werror", V, keyed, "warning_as_error"},
    {"Wreorder", "Wreorder", N, keyed, "wreorder"},
    {"Wconversion", "Wconversion", N, keyed},
    {"fmax-errors", "fmax-errors", V, keyed},
    // Options for tools inside NVRTC: its front end and its optimizer.
    {"Xcudafe", "Xcudafe", V, tool_options},
    {"Xnvvm", "Xnvvm", V, tool_options},
}));
// Every field the table names is one program_option_fields has (or the row names its option).
static_assert(std::ranges::all_of(kTable, [](const nvrtc_option& o) {
  return o.field.empty() == o.cli.empty();
}));

bool spells(const nvrtc_option& o, std::string_view name) {
  std::string_view names = o.names;
  while (!names.empty()) {
    const auto space = names.find(' ');
    if (names.substr(0, space) == name) return true;
    if (space == std::string_view::npos) break;
    names.remove_prefix(space + 1);
  }
  return false;
}

// Every spelling, sorted, for a binary search (the drop-in parses options on every compile).
const std::vector<std::pair<std::string_view, const nvrtc_option*>>& spellings() {
  static const auto sorted = [] {
    std::vector<std::pair<std::string_view, const nvrtc_option*>> out;
    for (const auto& o : kTable) {
      std::string_view names = o.names;
      while (!names.empty()) {
        const auto space = names.find(' ');
        out.emplace_back(names.substr(0, space), &o);
        if (space == std::string_view::npos) break;
        names.remove_prefix(space + 1);
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  }();
  return sorted;
}

const nvrtc_option* by_name(std::string_view name) {
  const auto& all = spellings();
  const auto it =
      std::lower_bound(all.begin(), all.end(), name,
                       [](const auto& entry, std::string_view n) { return entry.first < n; });
  return it != all.end() && it->first == name ? it->second : nullptr;
}

}  // namespace

std::string quoted_option(std::string_view text) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < 80; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F) {
      out += static_cast<char>(c);
    } else {
      static constexpr char digits[] = "0123456789abcdef";
      out += "\\x";
      out += digits[c >> 4];
      out += digits[c & 0xF];
    }
  }
  if (text.size() > 80) out += "...";
  return out + "\"";
}

std::span<const nvrtc_option> nvrtc_options() {
  return kTable;
}

std::string nvrtc_option_name(std::string_view element) {
  if (!element.starts_with('-')) return {};
  element.remove_prefix(element.starts_with("--") ? 2 : 1);
  std::string name(element.substr(0, element.find('=')));
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

const nvrtc_option* find_nvrtc_option(std::string_view element) {
  const std::string name = nvrtc_option_name(element);
  if (name.empty()) return nullptr;
  if (const auto* o = by_name(name)) return o;
  // -DX=1, -UX, -I/dir: the short forms with their value attached (one dash).
  if (!element.starts_with("--") && element.size() > 2 &&
      (element[1] == 'D' || element[1] == 'U' || element[1] == 'I')) {
    return by_name(std::string(1, element[1]));
  }
  return nullptr;
}

std::vector<parsed_nvrtc_option> parse_nvrtc_option_list(std::span<const std::string> options) {
  std::vector<parsed_nvrtc_option> out;
  for (std::size_t i = 0; i < options.size(); ++i) {
    parsed_nvrtc_option p;
    p.index = i;
    p.element = options[i];
    p.option = find_nvrtc_option(p.element);
    if (p.option != nullptr) {
      const std::string name = nvrtc_option_name(p.element);
      const auto eq = p.element.find('=');
      if (!spells(*p.option, name)) {  // -DX=1: the value is all after "-D"
        p.has_value = true;
        p.value = std::string(p.element.substr(2));
      } else if (eq != std::string_view::npos) {
        p.has_value = true;
        p.value = std::string(p.element.substr(eq + 1));
      } else if (p.option->takes_value && i + 1 < options.size() &&
                 (p.option->names.starts_with('X') || !options[i + 1].starts_with('-'))) {
        // -Xptxas, -Xcudafe and -Xnvvm take options as their values: "-Xnvvm -opt=0".
        p.has_value = true;
        p.separate_value = true;
        p.value = options[++i];
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::string nvrtc_options_uncacheable(std::span<const std::string> options) {
  for (const auto& p : parse_nvrtc_option_list(options)) {
    const std::string which = quoted_option(p.element);
    if (p.option == nullptr) {
      return which +
             ": it is not an NVRTC option cucore knows (docs/compilation.md lists them): a cache "
             "key "
             "cannot tell what it makes NVRTC read, write or emit";
    }
    switch (p.option->use) {
      case side_effect:
        if (p.option->field.empty()) {
          return which + ": it has an effect besides the compile's outputs, which a hit would skip";
        }
        break;  // its field's check refuses it
      case toolkit_root:
        return which +
               ": it makes NVRTC install its bundled headers into that directory (unless its "
               ".nvrtc_headers_version matches) and read them from there, which a cache key does "
               "not walk: set program_options::use_bundled_headers (--use-bundled-headers without "
               "a "
               "value on the command line), whose directory the key walks, or give the headers "
               "with -I";
      case keyed:
      case include_input:
      case unseen_input:
      case tool_options:  // tool_passthrough_options() names them with their values
      case other_output:
      case tile:
        break;
    }
  }
  return {};
}

bool compiles_tile_code(std::span<const std::string> flags) {
  bool tile = false;
  for (const auto& p : parse_nvrtc_option_list(flags)) {
    if (p.option == nullptr) continue;
    if (p.option->canonical == "simt-only") return false;
    if (p.option->use == nvrtc_option_use::tile) tile = true;
  }
  return tile;
}

std::string empty_output_cause(std::span<const std::string> flags, std::string_view target) {
  if (target == "tile_ir") {
    for (const auto& p : parse_nvrtc_option_list(flags)) {
      if (p.option != nullptr && p.option->canonical == "simt-only") {
        return quoted_option(p.element) +
               " generated no Tile code, so NVRTC produced no Tile IR: drop it to get the Tile IR";
      }
    }
    if (!compiles_tile_code(flags)) {
      return "Tile code is not enabled, so NVRTC produced no Tile IR: set enable_tile or tile_only "
             "(--enable-tile, --tile-only)";
    }
    return "NVRTC produced no Tile IR: the program has no Tile function (__tile_global__) to "
           "compile";
  }
  for (const auto& p : parse_nvrtc_option_list(flags)) {
    if (p.option != nullptr && nvrtc_option_name(p.element) == "tile-only") {
      return quoted_option(p.element) + " compiled only Tile code, so NVRTC produced no " +
             std::string(target) + ": request the Tile IR or drop " + std::string(p.element);
    }
  }
  for (const auto& p : parse_nvrtc_option_list(flags)) {
    if (p.option != nullptr && p.option->canonical == "dlto" && target != "ltoir") {
      return quoted_option(p.element) + " compiled to LTO-IR only, so NVRTC produced no " +
             std::string(target) +
             ": request the ltoir target or drop it (program_options::link_time_optimization)";
    }
  }
  return {};
}

namespace {

// ptxas's options as `ptxas --help` lists them (CUDA 13.0), less those that name a file
// (--options-file/-optf, --output-file/-o) or only print (--help, --version, --list-version).
// takes_value: the value may be the next argument ("<value>" in --help; checked for
// --maxrregcount, --opt-level, --entry, --fmad on NVRTC 12.9, 13.0 and 13.5). One that --help
// shows without a value is marked false: were it to take the next argument after all, that
// argument is checked on its own (a file option, or no option: reported), which is sound.
struct ptxas_option {
  std::string_view long_name;
  std::string_view short_name;
  bool takes_value;
};
constexpr auto kPtxasOptions = std::to_array<ptxas_option>({
    {"Ofast-compile", "Ofc", V},
    {"allow-expensive-optimizations", "allow-expensive-optimizations", V},
    {"compile-as-tools-patch", "astoolspatch", N},
    {"compile-only", "c", N},
    {"compiler-annotations", "annotate", N},
    {"def-load-cache", "dlcm", N},
    {"def-store-cache", "dscm", N},
    {"device-debug", "g", N},
    {"device-function-maxrregcount", "func-maxrregcount", V},
    {"device-stack-protector", "device-stack-protector", V},
    {"disable-optimizer-constants", "disable-optimizer-consts", N},
    {"disable-warnings", "w", N},
    {"dont-merge-basicblocks", "no-bb-merge", N},
    {"entry", "e", V},
    {"extensible-whole-program", "ewp", N},
    {"fmad", "fmad", V},
    {"force-load-cache", "flcm", N},
    {"force-store-cache", "fscm", N},
    {"g-tensor-memory-access-check", "g-tmem-access-check", N},
    {"generate-line-info", "lineinfo", N},
    {"gno-tensor-memory-access-check", "gno-tmem-access-check", N},
    {"gpu-name", "arch", V},
    {"input-as-string", "ias", V},  // PTX text, keyed as written
    {"legacy-bar-warp-wide-behavior", "legacy-bar-warp-wide-behavior", N},
    {"machine", "m", V},
    {"make-errors-visible-at-exit", "make-errors-visible-at-exit", N},
    {"maxntid", "maxntid", V},
    {"maxrregcount", "maxrregcount", V},
    {"minnctapersm", "minnctapersm", V},
    {"opt-level", "", V},  // -O: its value attached only ("-O 2" reads "2" as an input file)
    {"optimize-float-atomics", "opt-fp-atomics", N},
    {"override-directive-values", "override-directive-values", N},
    {"position-independent-code", "pic", V},
    {"preserve-relocs", "preserve-relocs", N},
    {"register-usage-level", "regUsageLevel", V},
    {"return-at-end", "ret-end", N},
    {"sanitize", "sanitize", V},
    {"sp-bounds-check", "sp-bounds-check", N},
    {"split-compile", "split-compile", V},
    {"suppress-async-bulk-multicast-advisory-warning",
     "suppress-async-bulk-multicast-advisory-warning", N},
    {"suppress-debug-info", "suppress-debug-info", N},
    {"suppress-double-demote-warning", "suppress-double-demote-warning", N},
    {"suppress-sparse-mma-advisory-info", "suppress-sparse-mma-advisory-info", N},
    {"suppress-stack-size-warning", "suppress-stack-size-warning", N},
    {"verbose", "v", N},
    {"warn-on-double-precision-use", "warn-double-usage", N},
    {"warn-on-local-memory-usage", "warn-lmem-usage", N},
    {"warn-on-spills", "warn-spills", N},
    {"warning-as-error", "Werror", N},
});

const ptxas_option* find_ptxas_option(std::string_view name, bool long_form) {
  for (const auto& o : kPtxasOptions) {
    if (!name.empty() && (long_form ? o.long_name : o.short_name) == name) return &o;
  }
  return nullptr;
}

}  // namespace

std::string ptxas_arguments_name_files(std::span<const std::string> arguments) {
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    const std::string& a = arguments[i];
    const std::string which = quoted_option(a);
    if (!a.starts_with('-') || a == "-" || a == "--") {
      return which +
             " is no ptxas option: ptxas reads it as a PTX input file, which the cache "
             "key does not cover";
    }
    const bool long_form = a.starts_with("--");
    const std::string_view spelled = std::string_view(a).substr(long_form ? 2 : 1);
    const std::string_view name = spelled.substr(0, spelled.find('='));
    const bool attached = name.size() != spelled.size();
    // The file options, in every spelling ptxas takes, with the value attached or next.
    const bool reads = long_form ? name == "options-file" : name == "optf";
    const bool writes = long_form ? name == "output-file" : name == "o";
    if (reads || writes) {
      std::string file = attached                   ? std::string(spelled.substr(name.size() + 1))
                         : i + 1 < arguments.size() ? arguments[i + 1]
                                                    : std::string();
      std::string what = which;
      if (!attached && i + 1 < arguments.size()) what += " " + quoted_option(arguments[i + 1]);
      if (reads) {
        return what + " makes ptxas read options from the file " + quoted_option(file) +
               " (--options-file), which the cache key does not cover";
      }
      return what + " makes ptxas write the file " + quoted_option(file) +
             " (--output-file), which a cache hit would skip";
    }
    const ptxas_option* o = find_ptxas_option(name, long_form);
    // -O3, -m64: digits attached to -O / -m; -O alone, or -O=3.
    if (o == nullptr && !long_form && !attached && name.size() > 1 &&
        (name.front() == 'O' || name.front() == 'm') &&
        std::all_of(name.begin() + 1, name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    if (o == nullptr && !long_form && name == "O") continue;
    if (o == nullptr) {
      return which +
             " is not a ptxas option cucore knows (ptxas --help lists them; the built-in ptxas "
             "also takes hidden ones that read or write files): it may name a file ptxas reads "
             "or writes, which the cache key does not cover";
    }
    if (o->takes_value && !attached) ++i;  // its value: any next argument
  }
  return {};
}

}  // namespace cucore::detail
