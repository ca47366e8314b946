#include "dropin/nvrtc_options.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <string_view>

namespace cucore::dropin {
namespace {

// Spellings NVRTC 13 accepts for one option (docs: long and short names; src/program/options.cpp
// lists the aliases its option parser knows), and the one canonical name each becomes.
struct alias {
  std::string_view spelling;
  std::string_view canonical;
};
constexpr auto kAliases = std::to_array<alias>({
    {"gpu-architecture", "arch"},
    {"arch", "arch"},
    {"relocatable-device-code", "rdc"},
    {"rdc", "rdc"},
    {"extensible-whole-program", "ewp"},
    {"ewp", "ewp"},
    {"device-debug", "G"},
    {"G", "G"},
    {"generate-line-info", "lineinfo"},
    {"lineinfo", "lineinfo"},
    {"ptxas-options", "Xptxas"},
    {"Xptxas", "Xptxas"},
    {"use-fast-math", "use-fast-math"},
    {"dlink-time-opt", "dlto"},
    {"dlto", "dlto"},
    {"define-macro", "D"},
    {"undefine-macro", "U"},
    {"include-path", "I"},
    {"pre-include", "include"},
    {"preinclude", "include"},
    {"include", "include"},
    {"no-source-include", "no-source-include"},
    {"disable-warnings", "w"},
    {"w", "w"},
    {"device-as-default-execution-space", "default-device"},
    {"default-device", "default-device"},
    {"optimization-info", "opt-info"},
    {"opt-info", "opt-info"},
    {"no-display-error-number", "no-err-no"},
    {"no-err-no", "no-err-no"},
    {"brief-diagnostics", "brief-diag"},
    {"brief-diag", "brief-diag"},
    {"fdevice-syntax-only", "fdevice-syntax-only"},
    {"device-syntax-only", "fdevice-syntax-only"},
    {"Ofast-compile", "Ofast-compile"},
    {"Ofc", "Ofast-compile"},
    // Known and kept under their own name (one or two dashes, '_' or '-').
    {"std", "std"},
    {"ftz", "ftz"},
    {"prec-sqrt", "prec-sqrt"},
    {"prec-div", "prec-div"},
    {"fmad", "fmad"},
    {"maxrregcount", "maxrregcount"},
    {"dopt", "dopt"},
    {"extra-device-vectorization", "extra-device-vectorization"},
    {"gen-opt-lto", "gen-opt-lto"},
    {"builtin-move-forward", "builtin-move-forward"},
    {"builtin-initializer-list", "builtin-initializer-list"},
    {"restrict", "restrict"},
    {"device-int128", "device-int128"},
    {"device-float128", "device-float128"},
    {"diag-error", "diag-error"},
    {"diag-suppress", "diag-suppress"},
    {"diag-warn", "diag-warn"},
    {"split-compile", "split-compile"},
    {"minimal", "minimal"},
    {"no-cache", "no-cache"},
    {"frandom-seed", "frandom-seed"},
    {"pch-verbose", "pch-verbose"},
    {"pch-messages", "pch-messages"},
    {"instantiate-templates-in-pch", "instantiate-templates-in-pch"},
    {"numba-debug", "numba-debug"},
    {"optix-ir", "optix-ir"},
    {"emit-optix-ir", "optix-ir"},
});

// Options whose compile has an effect besides its outputs: a hit would skip it.
constexpr auto kSideEffects = std::to_array<std::string_view>({
    "create-pch",
    "time",
    "fdevice-time-trace",
    "device-time-trace",
    "dependency-output",
    "generate-dependencies",
    "generate-dependencies-with-compile",
    "generate-nonsystem-dependencies",
    "generate-nonsystem-dependencies-with-compile",
    "dependency-target-name",
    "save-temps",
    "keep",
    "keep-dir",
});

// Options that make NVRTC read files the key cannot see.
constexpr auto kUnseenInputs = std::to_array<std::string_view>({
    "pch",
    "use-pch",
    "pch-dir",
    "isystem",
    "idirafter",
    "iquote",
    "imacros",
    "sysroot",
    "include-directory-after",
    "system-include",
});

// The option's name: without its leading dashes (one or two), cut at '=', '_' read as '-'.
std::string name_of(std::string_view element) {
  element.remove_prefix(element.starts_with("--") ? 2 : 1);
  std::string name(element.substr(0, element.find('=')));
  std::replace(name.begin(), name.end(), '_', '-');
  return name;
}

bool has_control_or_edge_space(std::string_view e) {
  if (e.front() == ' ' || e.front() == '\t' || e.back() == ' ' || e.back() == '\t') return true;
  return std::any_of(e.begin(), e.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7F;
  });
}

template <std::size_t N>
bool listed(const std::array<std::string_view, N>& list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

}  // namespace

parsed_nvrtc_options parse_nvrtc_options(int count, const char* const* options) {
  parsed_nvrtc_options out;
  out.fields.toolkit_include_path = false;  // NVRTC gets the program's -I and nothing else
  auto bypass = [&](std::string why, bool needs_digest = false) {
    if (out.bypass.empty()) {
      out.bypass = std::move(why);
      out.bypass_needs_digest = needs_digest;
    }
  };
  if (count < 0 || (count > 0 && options == nullptr)) {
    bypass("the option array is missing");
    return out;
  }
  std::map<std::string, std::string, std::less<>> defined;  // macro → its -D text
  std::map<std::string, int, std::less<>> undefined;
  for (int i = 0; i < count && out.bypass.empty(); ++i) {
    if (options[i] == nullptr) {
      bypass("option " + std::to_string(i) + " is NULL");
      break;
    }
    const std::string_view e(options[i]);
    if (e.empty() || has_control_or_edge_space(e)) {
      bypass("option \"" + std::string(e) +
             "\" is empty, or has a control character or spaces "
             "around it");
      break;
    }
    if (!e.starts_with('-') || e == "-" || e == "--") {
      bypass("\"" + std::string(e) + "\" is not an option (a value given apart from its option)");
      break;
    }
    // -D, -U and -I with their value attached.
    if (!e.starts_with("--") && e.size() >= 2 && (e[1] == 'D' || e[1] == 'U' || e[1] == 'I')) {
      const char which = e[1];
      std::string value(e.substr(2));
      if (value.empty()) {
        bypass("\"" + std::string(e) + "\" without its value attached");
        break;
      }
      out.canonical.push_back(std::string("-") + which + value);
      if (which == 'I') {
        out.fields.include_path.push_back(value);
      } else if (which == 'D') {
        const auto eq = value.find('=');
        std::string name = value.substr(0, eq);
        if (auto [it, added] = defined.emplace(name, value); !added && it->second != value) {
          bypass("macro " + name + " is defined twice with different values");
        }
        out.fields.define_macro.push_back(
            eq == std::string::npos ? macro(name) : macro(name, value.substr(eq + 1)));
      } else {
        undefined.emplace(value, i);
        out.fields.undefine_macro.push_back(value);
      }
      continue;
    }
    const std::string name = name_of(e);
    const auto eq = e.find('=');
    const bool has_value = eq != std::string_view::npos;
    const std::string value = has_value ? std::string(e.substr(eq + 1)) : std::string();
    if (listed(kSideEffects, name) || name.starts_with('M') ||
        name.find("dependenc") != std::string::npos || name.starts_with("dump")) {
      bypass("option \"" + std::string(e) + "\" has an effect besides the compile's outputs");
      break;
    }
    if (listed(kUnseenInputs, name)) {
      bypass("option \"" + std::string(e) + "\" makes NVRTC read files the key cannot see", true);
      break;
    }
    if (name.starts_with('X') && name != "Xptxas") {
      bypass("option \"" + std::string(e) +
             "\" passes options to a tool inside NVRTC, which may read or write any file");
      break;
    }
    const alias* known = nullptr;
    for (const auto& a : kAliases) {
      if (a.spelling == name) known = &a;
    }
    if (known == nullptr) {
      // Unknown: kept verbatim. One that may name a file or a search directory is something the
      // key cannot see.
      const bool path_like = name.starts_with('I') || name.starts_with('D') ||
                             name.starts_with('U') || name.starts_with('i') ||
                             name.find("include") != std::string::npos ||
                             name.find("path") != std::string::npos;
      if (path_like || (has_value && value.find('/') != std::string::npos)) {
        bypass("unknown option \"" + std::string(e) + "\" may name a file", true);
        break;
      }
      out.canonical.emplace_back(e);
      continue;
    }
    const std::string_view canonical = known->canonical;
    if (canonical == "D" || canonical == "U" || canonical == "I" || canonical == "include") {
      if (!has_value || value.empty()) {
        bypass("\"" + std::string(e) + "\" without its value attached");
        break;
      }
      if (canonical == "include") {
        out.canonical.push_back("-include=" + value);
        out.fields.pre_include.push_back(value);
      } else {
        // Re-read as the attached short form.
        const std::string short_form = "-" + std::string(canonical) + value;
        const char* one[] = {short_form.c_str()};
        auto again = parse_nvrtc_options(1, one);
        out.canonical.push_back(short_form);
        if (!again.bypass.empty()) {
          bypass(again.bypass, again.bypass_needs_digest);
          break;
        }
        if (canonical == "I") out.fields.include_path.push_back(value);
        if (canonical == "U") {
          undefined.emplace(value, i);
          out.fields.undefine_macro.push_back(value);
        }
        if (canonical == "D") {
          const auto& m = again.fields.define_macro.front();
          std::string text = m.value ? m.name + "=" + *m.value : m.name;
          if (auto [it, added] = defined.emplace(m.name, text); !added && it->second != text) {
            bypass("macro " + m.name + " is defined twice with different values");
          }
          out.fields.define_macro.push_back(m);
        }
      }
      continue;
    }
    out.canonical.push_back("-" + std::string(canonical) + (has_value ? "=" + value : ""));
    if (canonical == "no-source-include") out.fields.no_source_include = true;
    if (canonical == "arch" && has_value) out.fields.arch = value;
  }
  for (const auto& [name, index] : undefined) {
    (void)index;
    if (defined.contains(name)) {
      bypass("macro " + name + " is both defined and undefined (their order decides)");
    }
  }
  return out;
}

}  // namespace cucore::dropin
