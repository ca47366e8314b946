// Compiler and linker options: every field of cuda.core's ProgramOptions and LinkerOptions.
//
// An unset field (std::nullopt, or an empty list) emits nothing. Each backend's flags come from one
// function (compiler_flags / linker_flags), which is also what the program cache key hashes, so the
// key can never disagree with what the compiler was given.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cucore/object_code.hpp"

namespace cucore {

// Kinds of source a program compiles.
enum class source_type { cxx, ptx, nvvm };
std::string_view to_string(source_type type) noexcept;  // "c++", "ptx", "nvvm"
source_type parse_source_type(std::string_view text);   // case-insensitive; throws invalid_argument

enum class compiler_backend { nvrtc, nvvm, nvjitlink, driver };

// Whether a c++ miss compiles in a compile server's worker process (docs/compile-server.md):
// off; on (use the user's server, starting one when none runs); automatic (use one that runs,
// never start one). Whatever happens there, the result is the in-process compile's, and any
// trouble with the server makes the compile run in-process.
enum class compile_server_mode { off, on, automatic };
std::string_view to_string(compile_server_mode mode) noexcept;  // "off", "on", "auto"
// "off", "on", "auto" (case-insensitive); throws invalid_argument naming the word.
compile_server_mode parse_compile_server_mode(std::string_view text);
std::string_view to_string(
    compiler_backend backend) noexcept;  // "NVRTC", "NVVM", "nvJitLink", "driver"

// A preprocessor macro for define_macro: NAME, or NAME=VALUE.
struct macro {
  std::string name;
  std::optional<std::string> value;
  macro(std::string n) : name(std::move(n)) {}  // NOLINT: implicit from a name is the common case
  macro(const char* n) : name(n) {}             // NOLINT
  macro(std::string n, std::string v) : name(std::move(n)), value(std::move(v)) {}
  friend bool operator==(const macro&, const macro&) = default;
};

// A header given in memory (NVRTC's nvrtcCreateProgram headers): an #include that writes `name`
// exactly ("name" or <name>) reads `contents`, and nothing on disk is consulted for it.
struct include_header {
  std::string name;      // as the #include writes it: "tuning.cuh", "detail/config.h"
  std::string contents;  // text (no NUL byte)
  friend bool operator==(const include_header&, const include_header&) = default;
};

// An extra NVVM IR module (text or bitcode) compiled together with the main one.
struct nvvm_module {
  std::string name;
  std::string code;
  friend bool operator==(const nvvm_module&, const nvvm_module&) = default;
};

struct program_options {
  std::string name = "default_program";  // program name (NVRTC) / module name (NVVM, PTX)
  std::optional<std::string> arch;       // "sm_90"; default: the current device's arch
  std::optional<bool> relocatable_device_code;
  std::optional<bool> extensible_whole_program;
  std::optional<bool> debug;
  std::optional<bool> lineinfo;
  std::optional<bool> device_code_optimize;
  std::vector<std::string> ptxas_options;
  std::optional<int> max_register_count;
  std::optional<bool> ftz;
  std::optional<bool> prec_sqrt;
  std::optional<bool> prec_div;
  std::optional<bool> fma;
  std::optional<bool> use_fast_math;
  std::optional<bool> extra_device_vectorization;
  std::optional<bool> link_time_optimization;
  std::optional<bool> gen_opt_lto;
  std::vector<macro> define_macro;
  std::vector<std::string> undefine_macro;
  std::vector<std::string> include_path;
  std::vector<std::string> pre_include;
  std::optional<bool> no_source_include;
  // c++ only. Unset or true: the toolkit's own include directories (toolkit::include_directories():
  // include/cccl and include of the toolkit whose NVRTC compiles) are searched after include_path,
  // so CCCL, CUB and <cuda/...> headers compile with no flags. false: they are not.
  std::optional<bool> toolkit_include_path;
  // c++ only (cuda.core's use_bundled_headers). true: NVRTC's own bundled CUDA and CCCL headers
  // (NVRTC 13.3+) are searched after include_path in place of the toolkit's directories:
  // installed once into default_cache_dir()/bundled-headers/
  // (toolkit::bundled_include_directories()) and given to NVRTC as --include-path=DIR
  // --include-path=DIR/cccl, as its
  // --use-bundled-headers=DIR would, so the cache key walks them like any include root. An NVRTC
  // without bundled headers makes compiler_flags() throw invalid_argument.
  std::optional<bool> use_bundled_headers;
  // c++ only: headers in memory, looked up by the name an #include writes before any directory.
  std::vector<include_header> headers;
  std::optional<std::string> std;  // "c++17", "c++20", ...
  std::optional<bool> builtin_move_forward;
  std::optional<bool> builtin_initializer_list;
  std::optional<bool> disable_warnings;
  std::optional<bool> restrict;
  std::optional<bool> device_as_default_execution_space;
  std::optional<bool> device_int128;
  std::optional<bool> device_float128;
  std::optional<std::string> optimization_info;
  std::optional<bool> no_display_error_number;
  std::vector<int> diag_error;
  std::vector<int> diag_suppress;
  std::vector<int> diag_warn;
  std::optional<bool> brief_diagnostics;
  std::optional<std::string> time;  // NVRTC writes timing to this file (a side effect)
  std::optional<int> split_compile;
  std::optional<bool> fdevice_syntax_only;
  std::optional<bool> minimal;
  std::optional<bool> no_cache;
  std::optional<std::string> fdevice_time_trace;
  std::optional<std::string> frandom_seed;
  std::optional<std::string> ofast_compile;  // "0", "min", "mid", "max"
  std::optional<bool> pch;
  std::optional<std::string> create_pch;
  std::optional<std::string> use_pch;
  std::optional<std::string> pch_dir;
  std::optional<bool> pch_verbose;
  std::optional<bool> pch_messages;
  std::optional<bool> instantiate_templates_in_pch;
  // c++ only, cucore's own (no NVRTC flag, never in a cache key): unset or true: automatic
  // precompiled headers. The leading #include lines of a program, met again in this process, are
  // precompiled once (NVRTC's --pch, in a directory cucore keeps per set of headers, options and
  // program name) and later compiles with the same lines start from that, unless a header they
  // read changed (docs/compilation.md, "Precompiled headers"). Outputs and logs are the same
  // either way. false: off. Also off while pch, create_pch, use_pch or pch_dir is set, or
  // instantiate_templates_in_pch is true.
  std::optional<bool> auto_pch;
  std::vector<nvvm_module> extra_sources;  // NVVM only
  std::optional<bool> use_libdevice;       // NVVM only
  std::optional<bool> numba_debug;
  // NVRTC 13.1+ (NVRTC 13.0 fails the compile: "unrecognized option ... found";
  // docs/compilation.md, "Tile code"). Warning kinds NVRTC makes errors: "all-warnings", "reorder",
  // "deprecated-declarations", "conversion" (NVRTC 13.5's list; NVRTC checks the names).
  std::vector<std::string> warning_as_error;  // --warning-as-error=KIND,... (-Werror)
  std::optional<bool> wreorder;               // --Wreorder: warn when member initializers reorder
  // Tile code (__tile__, __tile_global__; C++20): its code goes to the Tile IR, which compile()
  // returns with the PTX, cubin or LTO-IR (object_code::tile_ir()), or alone (code_type::tile_ir).
  std::optional<bool> enable_tile;  // --enable-tile: Tile and SIMT code
  std::optional<bool> tile_only;    // --tile-only: Tile code only (no PTX, cubin or LTO-IR)
  std::optional<bool> simt_only;    // --simt-only: parses Tile code, generates only SIMT code
  std::optional<bool>
      default_tile;  // --default-tile: unannotated functions and variables are __tile__
  std::optional<bool> diagnose_implicit_tile_var;  // --diagnose-implicit-tile-var
  // c++ only: NVRTC options no field above covers (newer ones, e.g. "--jump-table-density=50",
  // "--device-stack-protector=true"), passed to NVRTC as given, in order, after every other flag;
  // the cache key hashes them the same way. An option that takes a value is written "-opt=VALUE",
  // or as two elements where NVRTC accepts that ("-jtd", "50"). Refused with invalid_argument
  // naming the element and what to use instead: an option a field covers, in any spelling (-std=,
  // -arch, -D, -I, -include, -G, --pch-dir=, --time=, ...: set the field, whose checks and cache
  // key gates then apply), --optix-ir (not a target cucore produces), and an element that is empty
  // or has a control character or surrounding whitespace (NVRTC trims it). -Xcudafe and -Xnvvm
  // (options for NVRTC's internal front end and optimizer; each takes the next element) are
  // passed, but the cache key refuses them: they can make NVRTC read and write files the key
  // cannot see. An option NVRTC does not know fails the compile with NVRTC's own message.
  std::vector<std::string> extra_nvrtc_options;
  // Where a c++ miss compiles (never keyed: the output is the same). Unset: CUCORE_COMPILE_SERVER
  // (off / on / auto), else off (docs/compile-server.md, "Clients").
  std::optional<compile_server_mode> compile_server;
  // The fraction of cache hits (0 to 1) compiled again, uncached, under another clock, and
  // compared with the entry (docs/verify.md); a mismatch removes the entry and returns the fresh
  // result. Never keyed. Unset: CUCORE_VERIFY, else 0. Out of [0, 1]: invalid_argument.
  std::optional<double> verify;
  // Where a sampled hit is checked: false, on the calling thread (a mismatch returns the fresh
  // result); true, on the process's background thread (the hit returns the cached bytes at once;
  // a mismatch removes the entry for later compiles). Never keyed. Unset: in the background below
  // rate 1, on the calling thread at rate 1 (docs/verify.md, "In the background").
  std::optional<bool> verify_in_background;
};

struct linker_options {
  std::string name = "<default linker>";
  std::optional<std::string> arch;  // "sm_90"; default: the current device's arch
  std::optional<int> max_register_count;
  std::optional<bool> time;
  std::optional<bool> verbose;
  std::optional<bool> link_time_optimization;
  std::optional<bool> ptx;  // emit PTX from LTO-IR (needs link_time_optimization)
  // nvJitLink -r: a relocatable (incremental) link, whose cubin is another relocatable object
  // (ELF ET_REL) to link again. Not in cuda.core's LinkerOptions; nvJitLink only (the driver linker
  // refuses it). With link_time_optimization it needs nvJitLink 13.3+: 13.0 ignores -r there
  // (measured: the same executable cubin), so an older one is refused by name.
  std::optional<bool> relocatable;
  std::optional<int> optimization_level;
  std::optional<bool> debug;
  std::optional<bool> lineinfo;
  std::optional<bool> ftz;
  std::optional<bool> prec_div;
  std::optional<bool> prec_sqrt;
  std::optional<bool> fma;
  std::vector<std::string> kernels_used;
  std::vector<std::string> variables_used;
  std::optional<bool> optimize_unused_variables;
  std::vector<std::string> ptxas_options;
  std::optional<int> split_compile;
  std::optional<int> split_compile_extended;
  std::optional<bool> no_cache;
  std::optional<bool> numba_debug;  // accepted for parity; no backend flag
};

// The flags `options` gives the compiler for `source` and `target`, in one fixed order: for c++ the
// NVRTC flags (the toolkit's include directories appended to include_path unless
// toolkit_include_path is false; in-memory headers are no flag), for nvvm the libNVVM flags, for
// ptx the nvJitLink flags of the translated linker options. Resolves nothing: `arch` must be set
// (see resolve_arch). Throws invalid_argument for a field the backend does not support, naming it,
// and for malformed values.
std::vector<std::string> compiler_flags(const program_options& options, source_type source,
                                        code_type target);

// The linker_options a PTX program uses: the program_options fields the linkers understand.
// Throws invalid_argument naming every other field that is set.
linker_options to_linker_options(const program_options& options);

// nvJitLink flags for `options`, in a fixed order. `arch` must be set.
std::vector<std::string> nvjitlink_flags(const linker_options& options);

// `arch` if set, else the current device's arch; throws invalid_argument when neither exists.
std::string resolve_arch(const std::optional<std::string>& arch);

// The targets each source type compiles to: c++ → ptx, cubin, ltoir; ptx → cubin; nvvm → ptx,
// ltoir. (PTX → PTX is refused: nvJitLink emits PTX only from LTO-IR, the driver only cubin.)
// Throws invalid_argument naming the supported ones otherwise.
void check_target(source_type source, code_type target);
std::vector<code_type> supported_targets(source_type source);

}  // namespace cucore
