#include "dropin/nvrtc_options.hpp"

#include "program/nvrtc_option_table.hpp"

#include <algorithm>
#include <map>
#include <string_view>

namespace cucore::dropin {
namespace {

bool has_control_or_edge_space(std::string_view e) {
  if (e.front() == ' ' || e.front() == '\t' || e.back() == ' ' || e.back() == '\t') return true;
  return std::any_of(e.begin(), e.end(), [](char c) {
    return static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) == 0x7F;
  });
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
    const auto eq = e.find('=');
    const bool has_value = eq != std::string_view::npos;
    const std::string value = has_value ? std::string(e.substr(eq + 1)) : std::string();
    // The one table of NVRTC's options (program/nvrtc_option_table.hpp): what it does not know
    // bypasses the cache, whatever its name looks like.
    const detail::nvrtc_option* known = detail::find_nvrtc_option(e);
    if (known == nullptr) {
      bypass("option \"" + std::string(e) +
             "\" is not an NVRTC option cucore knows: the key cannot tell what it makes NVRTC "
             "read, write or emit");
      break;
    }
    using enum detail::nvrtc_option_use;
    if (known->use == side_effect) {
      bypass("option \"" + std::string(e) + "\" has an effect besides the compile's outputs");
      break;
    }
    if (known->use == unseen_input) {
      bypass("option \"" + std::string(e) + "\" makes NVRTC read files the key cannot see", true);
      break;
    }
    if (known->use == tool_options) {
      bypass("option \"" + std::string(e) +
             "\" passes options to a tool inside NVRTC, which may read or write any file");
      break;
    }
    const std::string_view canonical = known->canonical;
    if (known->use == toolkit_root) {
      // --use-bundled-headers=DIR (13.3+): NVRTC installs its bundled headers into DIR and searches
      // -I DIR -I DIR/cccl here. The drop-in installs them first (nvrtc.cpp), and the walk follows
      // both directories; the option stays in the key as written, apart from plain -I's.
      if (!has_value || value.empty() || value.front() != '/') {
        bypass("option \"" + std::string(e) +
               "\" installs NVRTC's bundled headers into a directory that is not an absolute "
               "path, which the drop-in does not follow");
        break;
      }
      std::string dir = value;
      while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
      out.canonical.push_back("-" + std::string(canonical) + "=" + dir);
      out.fields.include_path.push_back(dir);
      out.fields.include_path.push_back(dir == "/" ? "/cccl" : dir + "/cccl");
      out.bundled_headers.push_back(dir);
      continue;
    }
    if (known->use == tile) {
      // Keyed through its field as the library keys it (tile_ir: alongside): the entry holds the
      // Tile IR.
      if (canonical == "tile-only") {
        out.fields.tile_only = true;
      } else {
        out.fields.enable_tile = true;
      }
    }
    if (canonical == "simt-only") out.fields.simt_only = true;
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
    // ptxas's arguments: the key bypasses those that name files (ptxas --options-file, ...).
    if (canonical == "Xptxas" && has_value) out.fields.ptxas_options.push_back(value);
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
