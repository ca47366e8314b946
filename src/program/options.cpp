// The one place where options become compiler flags. The program cache key hashes exactly these
// lists, so any change here changes keys (bump the key schema when it does).
#include "cucore/options.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <functional>

#include "common/enum_names.hpp"
#include "common/text.hpp"
#include "cucore/error.hpp"
#include "cucore/toolkit.hpp"
#include "program/extra_nvrtc_options.hpp"
#include "program/nvrtc_option_table.hpp"

namespace cucore {
namespace {

const char* tf(bool v) {
  return v ? "true" : "false";
}
const char* one_zero(bool v) {
  return v ? "1" : "0";
}

// Collects flags and validates values as they are emitted.
class flag_list {
 public:
  explicit flag_list(std::string_view backend) : backend_(backend) {}

  void add(std::string flag) { flags_.push_back(std::move(flag)); }
  void truthy(const std::optional<bool>& v, const char* flag) {
    if (v.value_or(false)) add(flag);
  }
  void boolean(const std::optional<bool>& v, const char* prefix) {
    if (v) add(std::string(prefix) + tf(*v));
  }
  void text(const std::optional<std::string>& v, const char* field, const char* prefix) {
    if (!v) return;
    require_text(*v, field);
    add(prefix + *v);
  }
  void each(const std::vector<std::string>& values, const char* field, const char* prefix) {
    for (const auto& v : values) {
      require_text(v, field);
      add(prefix + v);
    }
  }
  void positive(const std::optional<int>& v, const char* field, const char* prefix, int min = 1) {
    if (!v) return;
    if (*v < min) {
      throw invalid_argument(std::string(field) + "=" + std::to_string(*v) + " is invalid for " +
                             backend_ + ": it must be at least " + std::to_string(min));
    }
    add(prefix + std::to_string(*v));
  }
  void numbers(const std::vector<int>& values, const char* field, const char* prefix) {
    if (values.empty()) return;
    std::string joined;
    for (int v : values) {
      if (v < 0) {
        throw invalid_argument(std::string(field) + " has " + std::to_string(v) +
                               ": diagnostic numbers are non-negative");
      }
      if (!joined.empty()) joined += ',';
      joined += std::to_string(v);
    }
    add(prefix + joined);
  }
  void require_text(const std::string& v, const char* field) const {
    if (v.empty()) {
      throw invalid_argument(std::string(field) +
                             " is set to an empty string: give it a value "
                             "or leave it unset");
    }
    if (v.find('\0') != std::string::npos) {
      throw invalid_argument(std::string(field) + " contains a NUL byte");
    }
  }
  std::vector<std::string> take() { return std::move(flags_); }

 private:
  std::string backend_;
  std::vector<std::string> flags_;
};

void check_arch(const std::string& arch) {
  auto fail = [&] {
    throw invalid_argument("arch \"" + arch +
                           "\" is not a GPU architecture: use the form sm_XY (e.g. sm_90, sm_90a, "
                           "sm_100f) or compute_XY");
  };
  std::string_view rest;
  if (arch.rfind("sm_", 0) == 0) {
    rest = std::string_view(arch).substr(3);
  } else if (arch.rfind("compute_", 0) == 0) {
    rest = std::string_view(arch).substr(8);
  } else {
    fail();
  }
  std::size_t digits = 0;
  while (digits < rest.size() && std::isdigit(static_cast<unsigned char>(rest[digits]))) ++digits;
  if (digits < 2) fail();
  auto suffix = rest.substr(digits);
  if (!(suffix.empty() || suffix == "a" || suffix == "f")) fail();
}

// "sm_90a" → "compute_90a"
std::string virtual_arch(const std::string& arch) {
  return arch.rfind("sm_", 0) == 0 ? "compute_" + arch.substr(3) : arch;
}

struct field_check {
  const char* name;
  bool set;
};

// Every program_options field and whether it is set; the per-backend "supported" lists below
// refuse the rest by name.
std::vector<field_check> set_fields(const program_options& o) {
  auto b = [](const auto& v) { return v.has_value(); };
  auto l = [](const auto& v) { return !v.empty(); };
  return {
      {"relocatable_device_code", b(o.relocatable_device_code)},
      {"extensible_whole_program", b(o.extensible_whole_program)},
      {"debug", b(o.debug)},
      {"lineinfo", b(o.lineinfo)},
      {"device_code_optimize", b(o.device_code_optimize)},
      {"ptxas_options", l(o.ptxas_options)},
      {"max_register_count", b(o.max_register_count)},
      {"ftz", b(o.ftz)},
      {"prec_sqrt", b(o.prec_sqrt)},
      {"prec_div", b(o.prec_div)},
      {"fma", b(o.fma)},
      {"use_fast_math", b(o.use_fast_math)},
      {"extra_device_vectorization", b(o.extra_device_vectorization)},
      {"link_time_optimization", b(o.link_time_optimization)},
      {"gen_opt_lto", b(o.gen_opt_lto)},
      {"define_macro", l(o.define_macro)},
      {"undefine_macro", l(o.undefine_macro)},
      {"include_path", l(o.include_path)},
      {"pre_include", l(o.pre_include)},
      {"no_source_include", b(o.no_source_include)},
      {"toolkit_include_path", b(o.toolkit_include_path)},
      {"use_bundled_headers", b(o.use_bundled_headers)},
      {"headers", l(o.headers)},
      {"std", b(o.std)},
      {"builtin_move_forward", b(o.builtin_move_forward)},
      {"builtin_initializer_list", b(o.builtin_initializer_list)},
      {"disable_warnings", b(o.disable_warnings)},
      {"restrict", b(o.restrict)},
      {"device_as_default_execution_space", b(o.device_as_default_execution_space)},
      {"device_int128", b(o.device_int128)},
      {"device_float128", b(o.device_float128)},
      {"optimization_info", b(o.optimization_info)},
      {"no_display_error_number", b(o.no_display_error_number)},
      {"diag_error", l(o.diag_error)},
      {"diag_suppress", l(o.diag_suppress)},
      {"diag_warn", l(o.diag_warn)},
      {"brief_diagnostics", b(o.brief_diagnostics)},
      {"time", b(o.time)},
      {"split_compile", b(o.split_compile)},
      {"fdevice_syntax_only", b(o.fdevice_syntax_only)},
      {"minimal", b(o.minimal)},
      {"no_cache", b(o.no_cache)},
      {"fdevice_time_trace", b(o.fdevice_time_trace)},
      {"frandom_seed", b(o.frandom_seed)},
      {"ofast_compile", b(o.ofast_compile)},
      {"pch", b(o.pch)},
      {"create_pch", b(o.create_pch)},
      {"use_pch", b(o.use_pch)},
      {"pch_dir", b(o.pch_dir)},
      {"pch_verbose", b(o.pch_verbose)},
      {"pch_messages", b(o.pch_messages)},
      {"instantiate_templates_in_pch", b(o.instantiate_templates_in_pch)},
      {"auto_pch", b(o.auto_pch)},
      {"extra_sources", l(o.extra_sources)},
      {"use_libdevice", b(o.use_libdevice)},
      {"numba_debug", b(o.numba_debug)},
      {"warning_as_error", l(o.warning_as_error)},
      {"wreorder", b(o.wreorder)},
      {"enable_tile", b(o.enable_tile)},
      {"tile_only", b(o.tile_only)},
      {"simt_only", b(o.simt_only)},
      {"default_tile", b(o.default_tile)},
      {"diagnose_implicit_tile_var", b(o.diagnose_implicit_tile_var)},
      {"extra_nvrtc_options", l(o.extra_nvrtc_options)},
  };
}

void refuse_unsupported(const program_options& o, std::initializer_list<std::string_view> supported,
                        std::string_view backend, std::string_view hint) {
  std::string refused;
  for (const auto& f : set_fields(o)) {
    if (!f.set) continue;
    if (std::find(supported.begin(), supported.end(), f.name) != supported.end()) continue;
    if (!refused.empty()) refused += ", ";
    refused += f.name;
  }
  if (!refused.empty()) {
    throw invalid_argument("program_options not supported by the " + std::string(backend) +
                           " backend: " + refused + ". " + std::string(hint));
  }
}

// In-memory headers go to nvrtcCreateProgram as C strings: names must be usable, contents text.
void check_headers(const std::vector<include_header>& headers) {
  for (std::size_t i = 0; i < headers.size(); ++i) {
    const auto& h = headers[i];
    const std::string which = "headers[" + std::to_string(i) + "]";
    if (h.name.empty()) {
      throw invalid_argument(which + " has an empty name: give the name its #include writes");
    }
    if (h.name.find_first_of(std::string_view("\0\n", 2)) != std::string::npos) {
      throw invalid_argument(which + " name \"" + h.name.substr(0, h.name.find_first_of('\n')) +
                             "\" contains a NUL byte or a newline: an #include cannot write it");
    }
    if (h.contents.find('\0') != std::string::npos) {
      throw invalid_argument(which + " \"" + h.name +
                             "\" contains a NUL byte: NVRTC takes header contents as text");
    }
    for (std::size_t j = 0; j < i; ++j) {
      if (headers[j].name == h.name) {
        throw invalid_argument(which + " \"" + h.name + "\" repeats headers[" + std::to_string(j) +
                               "]: give each name once");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// extra_nvrtc_options

constexpr std::string_view kOneSpelling =
    "so that each setting has one spelling in the flags and the cache key";
constexpr std::string_view kTracksHeaders =
    "so that the cache key tracks the headers it makes NVRTC read";
constexpr std::string_view kFilesGated =
    "so that the cache key sees the files it makes NVRTC read or write (and refuses a key, or "
    "compiles without the cache, where it cannot cover them)";

// Why an option a field covers is given through the field, for the refusal's message.
std::string_view why_the_field(const detail::nvrtc_option& o) {
  if (o.field == "include_path" || o.field == "pre_include" || o.field == "no_source_include") {
    return kTracksHeaders;
  }
  using enum detail::nvrtc_option_use;
  if (o.use == side_effect || o.use == unseen_input) return kFilesGated;
  return kOneSpelling;
}

// -Xcudafe, -Xnvvm and any other -X option but -Xptxas (a field): options for a tool inside NVRTC.
bool is_tool_passthrough(std::string_view name) {
  return name.starts_with('X') && name != "Xptxas";
}

void check_extra_nvrtc_options(const std::vector<std::string>& options) {
  bool value_next = false;  // the element after a bare -Xcudafe / -Xnvvm is that tool's option
  for (std::size_t i = 0; i < options.size(); ++i) {
    const std::string& element = options[i];
    const std::string which = "extra_nvrtc_options[" + std::to_string(i) + "] ";
    if (element.empty()) {
      throw invalid_argument(which + "is empty: give an NVRTC option, or leave it out");
    }
    const bool control = std::any_of(element.begin(), element.end(), [](char c) {
      return static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7F;
    });
    if (control || element.front() == ' ' || element.back() == ' ') {
      throw invalid_argument(
          which + detail::quoted_option(element) +
          " has a control character or leading or trailing spaces: NVRTC trims them and reads "
          "another option than the one given; write the option alone");
    }
    if (value_next) {
      value_next = false;
      continue;
    }
    const std::string name = detail::nvrtc_option_name(element);
    if (name.empty()) continue;  // the value of the option before it ("-jtd", "50")
    if (is_tool_passthrough(name)) {
      value_next = element.find('=') == std::string::npos;
      continue;
    }
    // The table (program/nvrtc_option_table.cpp) names the field that covers an option; an
    // option it does not know goes to NVRTC as given (and bypasses the cache: key.cpp).
    const detail::nvrtc_option* known = detail::find_nvrtc_option(element);
    if (known == nullptr) continue;
    if (!known->field.empty()) {
      throw invalid_argument(which + detail::quoted_option(element) +
                             " is NVRTC's option for program_options::" +
                             std::string(known->field) + ": set " + std::string(known->field) +
                             " instead (on the cucore command line: " + std::string(known->cli) +
                             "), " + std::string(why_the_field(*known)));
    }
    if (known->use == detail::nvrtc_option_use::other_output) {
      throw invalid_argument(which + detail::quoted_option(element) +
                             " makes NVRTC emit OptiX IR, which is not a target cucore compiles "
                             "to (ptx, cubin, ltoir): leave it out");
    }
  }
}

std::vector<std::string> nvrtc_flags(const program_options& o, code_type target) {
  if (!o.extra_sources.empty()) {
    throw invalid_argument(
        "extra_sources is only supported for nvvm programs; for CUDA C++ #include the extra code "
        "or link separately compiled LTO-IR with cucore::linker");
  }
  if (o.use_libdevice) {
    throw invalid_argument(
        "use_libdevice is only supported for nvvm programs; NVRTC links libdevice on its own");
  }
  flag_list f("NVRTC");
  check_arch(*o.arch);
  f.add("-arch=" + *o.arch);
  f.boolean(o.relocatable_device_code, "--relocatable-device-code=");
  f.truthy(o.extensible_whole_program, "--extensible-whole-program");
  f.truthy(o.debug, "--device-debug");
  f.truthy(o.lineinfo, "--generate-line-info");
  f.truthy(o.device_code_optimize, "--dopt=on");  // NVRTC knows only "on"
  f.each(o.ptxas_options, "ptxas_options", "--ptxas-options=");
  f.positive(o.max_register_count, "max_register_count", "--maxrregcount=");
  f.boolean(o.ftz, "--ftz=");
  f.boolean(o.prec_sqrt, "--prec-sqrt=");
  f.boolean(o.prec_div, "--prec-div=");
  f.boolean(o.fma, "--fmad=");
  f.truthy(o.use_fast_math, "--use_fast_math");
  f.truthy(o.extra_device_vectorization, "--extra-device-vectorization");
  // LTO-IR output needs -dlto; it is emitted here so the cache key sees it too.
  if (o.link_time_optimization.value_or(false) || target == code_type::ltoir) {
    f.add("--dlink-time-opt");
  }
  f.truthy(o.gen_opt_lto, "--gen-opt-lto");
  for (const auto& m : o.define_macro) {
    f.require_text(m.name, "define_macro");
    if (m.name.find('=') != std::string::npos) {
      throw invalid_argument("define_macro name \"" + m.name +
                             "\" contains '=': pass macro{\"NAME\", \"VALUE\"} instead");
    }
    f.add("--define-macro=" + m.name + (m.value ? "=" + *m.value : std::string()));
  }
  f.each(o.undefine_macro, "undefine_macro", "--undefine-macro=");
  f.each(o.include_path, "include_path", "--include-path=");
  // After the user's directories, as nvcc searches them: a user header can shadow the toolkit's.
  // NVRTC's bundled headers take the toolkit's place, where its --use-bundled-headers=DIR would
  // put them (-I DIR -I DIR/cccl at the option's position; traced on 13.5).
  if (o.use_bundled_headers.value_or(false)) {
    std::vector<std::string> dirs;
    try {
      dirs = toolkit::bundled_include_directories();
    } catch (const invalid_argument& e) {
      throw invalid_argument(std::string("use_bundled_headers: ") + e.what());
    }
    for (const auto& dir : dirs) f.add("--include-path=" + dir);
  } else if (o.toolkit_include_path.value_or(true)) {
    for (const auto& dir : toolkit::include_directories()) f.add("--include-path=" + dir);
  }
  f.each(o.pre_include, "pre_include", "--pre-include=");
  f.truthy(o.no_source_include, "--no-source-include");
  check_headers(o.headers);
  f.text(o.std, "std", "--std=");
  f.boolean(o.builtin_move_forward, "--builtin-move-forward=");
  f.boolean(o.builtin_initializer_list, "--builtin-initializer-list=");
  f.truthy(o.disable_warnings, "--disable-warnings");
  f.truthy(o.restrict, "--restrict");
  f.truthy(o.device_as_default_execution_space, "--device-as-default-execution-space");
  f.truthy(o.device_int128, "--device-int128");
  f.truthy(o.device_float128, "--device-float128");
  f.text(o.optimization_info, "optimization_info", "--optimization-info=");
  f.truthy(o.no_display_error_number, "--no-display-error-number");
  f.numbers(o.diag_error, "diag_error", "--diag-error=");
  f.numbers(o.diag_suppress, "diag_suppress", "--diag-suppress=");
  f.numbers(o.diag_warn, "diag_warn", "--diag-warn=");
  f.boolean(o.brief_diagnostics, "--brief-diagnostics=");
  f.text(o.time, "time", "--time=");
  f.positive(o.split_compile, "split_compile", "--split-compile=", 0);
  f.truthy(o.fdevice_syntax_only, "--fdevice-syntax-only");
  f.truthy(o.minimal, "--minimal");
  f.truthy(o.no_cache, "--no-cache");
  f.text(o.fdevice_time_trace, "fdevice_time_trace", "--fdevice-time-trace=");
  f.text(o.frandom_seed, "frandom_seed", "--frandom-seed=");
  if (o.ofast_compile) {
    const auto& v = *o.ofast_compile;
    if (v != "0" && v != "min" && v != "mid" && v != "max") {
      throw invalid_argument("ofast_compile=\"" + v +
                             "\" is invalid: use \"0\", \"min\", \"mid\" or \"max\"");
    }
    f.add("--Ofast-compile=" + v);
  }
  f.truthy(o.pch, "--pch");
  f.text(o.create_pch, "create_pch", "--create-pch=");
  f.text(o.use_pch, "use_pch", "--use-pch=");
  f.text(o.pch_dir, "pch_dir", "--pch-dir=");
  f.boolean(o.pch_verbose, "--pch-verbose=");
  f.boolean(o.pch_messages, "--pch-messages=");
  f.boolean(o.instantiate_templates_in_pch, "--instantiate-templates-in-pch=");
  f.truthy(o.numba_debug, "--numba-debug");
  // NVRTC 13.1+.
  if (!o.warning_as_error.empty()) {
    std::string kinds;
    for (const auto& kind : o.warning_as_error) {
      f.require_text(kind, "warning_as_error");
      if (kind.find_first_of(", ") != std::string::npos) {
        throw invalid_argument("warning_as_error kind \"" + kind +
                               "\" contains ',' or a space: give each kind as its own element");
      }
      if (!kinds.empty()) kinds += ',';
      kinds += kind;
    }
    f.add("--warning-as-error=" + kinds);
  }
  f.truthy(o.wreorder, "--Wreorder");
  f.truthy(o.enable_tile, "--enable-tile");
  f.truthy(o.tile_only, "--tile-only");
  f.truthy(o.simt_only, "--simt-only");
  // One dash: NVRTC 13.5 rejects "--default-tile" (unrecognized option), its nvrtc.h's spelling.
  f.truthy(o.default_tile, "-default-tile");
  f.truthy(o.diagnose_implicit_tile_var, "--diagnose-implicit-tile-var");
  // Last, as given: the key hashes what NVRTC gets.
  check_extra_nvrtc_options(o.extra_nvrtc_options);
  for (const auto& option : o.extra_nvrtc_options) f.add(option);
  return f.take();
}

std::vector<std::string> nvvm_flags(const program_options& o, code_type target) {
  refuse_unsupported(o,
                     {"debug", "device_code_optimize", "ftz", "prec_sqrt", "prec_div", "fma",
                      "extra_sources", "use_libdevice", "numba_debug"},
                     "NVVM",
                     "NVVM takes arch, debug, device_code_optimize, ftz, prec_sqrt, "
                     "prec_div, fma, extra_sources, use_libdevice and numba_debug.");
  for (const auto& m : o.extra_sources) {
    if (m.code.empty()) {
      throw invalid_argument("extra_sources module \"" + m.name +
                             "\" is empty: give it NVVM IR text or bitcode");
    }
  }
  flag_list f("NVVM");
  check_arch(*o.arch);
  f.add("-arch=" + virtual_arch(*o.arch));
  f.truthy(o.debug, "-g");
  if (o.device_code_optimize) f.add(*o.device_code_optimize ? "-opt=3" : "-opt=0");
  if (o.ftz) f.add(std::string("-ftz=") + one_zero(*o.ftz));
  if (o.prec_sqrt) f.add(std::string("-prec-sqrt=") + one_zero(*o.prec_sqrt));
  if (o.prec_div) f.add(std::string("-prec-div=") + one_zero(*o.prec_div));
  if (o.fma) f.add(std::string("-fma=") + one_zero(*o.fma));
  f.truthy(o.numba_debug, "--numba-debug");
  if (target == code_type::ltoir) f.add("-gen-lto");
  return f.take();
}

}  // namespace

constexpr auto kSourceTypeNames = detail::name_each<source_type::nvvm>("c++", "ptx", "nvvm");

std::string_view to_string(source_type type) noexcept {
  return kSourceTypeNames(type);
}

source_type parse_source_type(std::string_view text) {
  auto t = detail::lower_case(text);
  if (t == "cxx" || t == "cuda") return source_type::cxx;
  if (const auto type = kSourceTypeNames.find(t)) return *type;
  throw invalid_argument("unknown source type \"" + std::string(text) +
                         "\": use \"c++\", \"ptx\" or \"nvvm\"");
}

constexpr auto kCompilerBackendNames =
    detail::name_each<compiler_backend::driver>("NVRTC", "NVVM", "nvJitLink", "driver");

std::string_view to_string(compiler_backend backend) noexcept {
  return kCompilerBackendNames(backend);
}

std::vector<code_type> supported_targets(source_type source) {
  switch (source) {
    case source_type::cxx:
      return {code_type::ptx, code_type::cubin, code_type::ltoir, code_type::tile_ir};
    // Not ptx: nvJitLink's -ptx needs LTO-IR inputs ("-ptx requires that all inputs have
    // LTOIR") and the driver linker only emits cubin, so no backend turns PTX into PTX.
    case source_type::ptx:
      return {code_type::cubin};
    case source_type::nvvm:
      return {code_type::ptx, code_type::ltoir};
  }
  return {};
}

void check_target(source_type source, code_type target) {
  auto targets = supported_targets(source);
  if (std::find(targets.begin(), targets.end(), target) != targets.end()) return;
  std::string list;
  for (auto t : targets) {
    if (!list.empty()) list += ", ";
    list += to_string(t);
  }
  throw invalid_argument("unsupported target \"" + std::string(to_string(target)) + "\" for " +
                         std::string(to_string(source)) + " code (supported: " + list + ")");
}

std::string resolve_arch(const std::optional<std::string>& arch) {
  if (arch) {
    check_arch(*arch);
    return *arch;
  }
  if (auto current = toolkit::current_device_arch()) return *current;
  throw invalid_argument(
      "no arch given and no GPU to take it from: set the target architecture explicitly "
      "(program_options::arch / linker_options::arch, or --arch on the command line), e.g. "
      "\"sm_90\"");
}

linker_options to_linker_options(const program_options& o) {
  refuse_unsupported(
      o,
      {"relocatable_device_code", "debug", "lineinfo", "ptxas_options", "max_register_count", "ftz",
       "prec_sqrt", "prec_div", "fma", "link_time_optimization", "time", "split_compile",
       "no_cache", "numba_debug"},
      "PTX (linker)",
      "PTX programs take name, arch, relocatable_device_code (nvJitLink -r), debug, lineinfo, "
      "ptxas_options, max_register_count, ftz, prec_sqrt, prec_div, fma, "
      "link_time_optimization, time, split_compile, no_cache and numba_debug.");
  linker_options l;
  l.name = o.name;
  l.arch = o.arch;
  l.max_register_count = o.max_register_count;
  // A relocatable PTX program is a relocatable link of it: a cubin to link again.
  if (o.relocatable_device_code.value_or(false)) l.relocatable = true;
  if (o.time) l.time = true;
  l.link_time_optimization = o.link_time_optimization;
  l.debug = o.debug;
  l.lineinfo = o.lineinfo;
  l.ftz = o.ftz;
  l.prec_div = o.prec_div;
  l.prec_sqrt = o.prec_sqrt;
  l.fma = o.fma;
  l.ptxas_options = o.ptxas_options;
  l.split_compile = o.split_compile;
  l.no_cache = o.no_cache;
  l.numba_debug = o.numba_debug;
  return l;
}

std::vector<std::string> nvjitlink_flags(const linker_options& o) {
  flag_list f("nvJitLink");
  if (!o.arch)
    throw invalid_argument("linker_options::arch must be resolved before emitting flags");
  check_arch(*o.arch);
  f.add("-arch=" + *o.arch);
  f.positive(o.max_register_count, "max_register_count", "-maxrregcount=");
  f.truthy(o.time, "-time");
  f.truthy(o.verbose, "-verbose");
  f.truthy(o.link_time_optimization, "-lto");
  f.truthy(o.ptx, "-ptx");
  f.truthy(o.relocatable, "-r");
  if (o.optimization_level) {
    if (*o.optimization_level < 0 || *o.optimization_level > 3) {
      throw invalid_argument("optimization_level=" + std::to_string(*o.optimization_level) +
                             " is invalid: use 0, 1, 2 or 3");
    }
    f.add("-O" + std::to_string(*o.optimization_level));
  }
  f.truthy(o.debug, "-g");
  f.truthy(o.lineinfo, "-lineinfo");
  f.boolean(o.ftz, "-ftz=");
  f.boolean(o.prec_div, "-prec-div=");
  f.boolean(o.prec_sqrt, "-prec-sqrt=");
  f.boolean(o.fma, "-fma=");
  f.each(o.kernels_used, "kernels_used", "-kernels-used=");
  f.each(o.variables_used, "variables_used", "-variables-used=");
  f.truthy(o.optimize_unused_variables, "-optimize-unused-variables");
  f.each(o.ptxas_options, "ptxas_options", "-Xptxas=");
  f.positive(o.split_compile, "split_compile", "-split-compile=", 0);
  f.positive(o.split_compile_extended, "split_compile_extended", "-split-compile-extended=", 0);
  f.truthy(o.no_cache, "-no-cache");
  return f.take();
}

namespace detail {

std::vector<std::string> tool_passthrough_options(const std::vector<std::string>& options) {
  std::vector<std::string> out;
  bool value_next = false;
  for (const auto& element : options) {
    if (value_next) {
      out.push_back(element);
      value_next = false;
      continue;
    }
    if (const std::string name = detail::nvrtc_option_name(element);
        !name.empty() && is_tool_passthrough(name)) {
      out.push_back(element);
      value_next = element.find('=') == std::string::npos;
    }
  }
  return out;
}

}  // namespace detail

std::vector<std::string> compiler_flags(const program_options& options, source_type source,
                                        code_type target) {
  check_target(source, target);
  if (!options.arch) {
    throw invalid_argument("program_options::arch must be resolved before emitting flags");
  }
  switch (source) {
    case source_type::cxx:
      return nvrtc_flags(options, target);
    case source_type::nvvm:
      return nvvm_flags(options, target);
    case source_type::ptx:
      return nvjitlink_flags(to_linker_options(options));
  }
  return {};
}

}  // namespace cucore
