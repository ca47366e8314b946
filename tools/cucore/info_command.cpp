// cucore info: which CUDA libraries this process finds, their versions, and the GPUs. Never fails
// for a missing library or GPU: reporting those is its purpose.
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "command_line.hpp"
#include "commands.hpp"
#include "cucore/linker.hpp"
#include "cucore/toolkit.hpp"
#include "json_output.hpp"

namespace cucore::cli {
namespace {

constexpr option_spec options[] = {
    {"--json", "", "", "print the report as one JSON object"},
};

constexpr std::string_view description =
    "Reports the CUDA libraries cucore opens at run time (NVRTC, nvJitLink, libNVVM, the CUDA\n"
    "driver): where each was found and its version, or why it was not; libdevice; the toolkit's\n"
    "include directories, which c++ compiles search after -I (CCCL, CUB, <cuda/...>; none when\n"
    "NVRTC is not under a CUDA root; NVRTC's bundled headers where the toolkit has no CCCL); what\n"
    "each library supports beyond CUDA 13.0 (Tile IR, bundled headers, linked LTO-IR, relocatable\n"
    "LTO link, libNVVM's LLVM version per architecture); the linker backend; and the GPUs. Each\n"
    "shows where it came from. The search: $CUCORE_CUDA_HOME, $CUDA_HOME, $CUDA_PATH,\n"
    "/usr/local/cuda, NVIDIA's CUDA pip wheels (<site-packages>/nvidia/cu13 for each "
    "site-packages\n"
    "in $CUCORE_CUDA_WHEELS, $VIRTUAL_ENV, $CONDA_PREFIX; then CUDA 12's nvidia/cuda_nvrtc, ... "
    "in\n"
    "each), then the loader path; in each root the first library there wins, CUDA 12 or 13.\n"
    "CUCORE_CUDA_SEARCH=<list> chooses and orders these sources\n"
    "(CUCORE_CUDA_HOME,CUDA_HOME,CUDA_PATH,/usr/local/cuda,wheels,loader);\n"
    "CUCORE_CUDA_HOME_ONLY=1 restricts it to $CUCORE_CUDA_HOME.\n"
    "\n"
    "Exit status: 0, also when libraries or GPUs are missing; 2 bad command line.";

// Library messages can span lines (dlerror, search lists); a table row cannot.
std::string one_line(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  return text;
}

std::string pad(std::string text, std::size_t width) {
  if (text.size() < width) text.append(width - text.size(), ' ');
  return text;
}

// A string, or null when empty.
json text_or_null(const std::string& text) {
  return text.empty() ? json(nullptr) : json(text);
}

json library_json(const toolkit::library_status& s) {
  json searched = json::array();
  for (const auto& place : s.searched) searched.push_back(place);
  return {{"found", s.found},
          {"path", text_or_null(s.path)},
          {"version", text_or_null(s.version)},
          {"error", text_or_null(s.error)},
          {"source", text_or_null(s.source)},
          {"searched", std::move(searched)}};
}

// libNVVM's LLVM versions grouped: "7 (compute_75 to compute_90), 22 (compute_100 to compute_121)".
std::string llvm_versions_text(const toolkit::capabilities& c) {
  std::string out;
  for (std::size_t i = 0; i < c.nvvm_llvm_versions.size();) {
    std::size_t j = i;
    while (j + 1 < c.nvvm_llvm_versions.size() &&
           c.nvvm_llvm_versions[j + 1].second == c.nvvm_llvm_versions[i].second) {
      ++j;
    }
    if (!out.empty()) out += ", ";
    out += std::to_string(c.nvvm_llvm_versions[i].second) + " (" + c.nvvm_llvm_versions[i].first;
    if (j != i) out += " to " + c.nvvm_llvm_versions[j].first;
    out += ")";
    i = j + 1;
  }
  return out;
}

json supports_json(const toolkit::report& r) {
  const auto& c = r.supports;
  json llvm = json::object();
  for (const auto& [arch, major] : c.nvvm_llvm_versions) llvm[arch] = major;
  auto nvrtc = json{{"tile_ir", c.tile_ir}, {"bundled_headers", c.bundled_headers}};
  if (c.bundled_headers) {
    nvrtc["bundled_header_files"] = c.bundled_header_files;
    nvrtc["bundled_headers_cuda"] = text_or_null(c.bundled_headers_cuda);
  }
  return {
      {"nvrtc", r.nvrtc.found ? nvrtc : json(nullptr)},
      {"nvjitlink", r.nvjitlink.found ? json{{"linked_ltoir", c.linked_ltoir},
                                             {"relocatable_lto_link", c.relocatable_lto_link}}
                                      : json(nullptr)},
      {"nvvm", r.nvvm.found ? json{{"llvm_version", c.llvm_version},
                                   {"llvm_versions", c.llvm_version ? llvm : json(nullptr)}}
                            : json(nullptr)},
  };
}

void print_json(const toolkit::report& r, linker_backend backend) {
  json include_directories = json::array();
  for (const auto& dir : r.include_directories) include_directories.push_back(dir);
  json devices = json::array();
  for (const auto& d : r.devices) {
    devices.push_back({{"ordinal", d.ordinal}, {"name", d.name}, {"arch", d.arch}});
  }
  write_json({
      {"nvrtc", library_json(r.nvrtc)},
      {"nvjitlink", library_json(r.nvjitlink)},
      {"nvvm", library_json(r.nvvm)},
      {"driver", library_json(r.driver)},
      {"libdevice", or_null(r.libdevice)},
      {"include_directories", std::move(include_directories)},
      {"include_source", text_or_null(r.include_source)},
      {"bundled_headers_error", text_or_null(r.bundled_headers_error)},
      {"supports", supports_json(r)},
      {"devices", std::move(devices)},
      {"linker_backend", to_string(backend)},
  });
}

void print_human(const toolkit::report& r, linker_backend backend) {
  const std::vector<const toolkit::library_status*> libraries = {&r.nvrtc, &r.nvjitlink, &r.nvvm,
                                                                 &r.driver};
  constexpr std::size_t label_width = 13;  // "CUDA driver" and two spaces
  std::size_t version_width = 0;
  for (const auto* s : libraries) {
    if (s->found) version_width = std::max(version_width, s->version.size());
  }
  version_width += 2;

  for (const auto* s : libraries) {
    std::string line = pad(std::string(toolkit::library_name(s->which)), label_width);
    if (s->found) {
      line += pad(s->version, version_width) + s->path;
      if (!s->source.empty()) line += "  (from " + s->source + ")";
      // Found but not usable as hoped, e.g. a driver whose cuInit failed.
      if (!s->error.empty()) line += "  (" + one_line(s->error) + ")";
    } else {
      line += "not found (" + one_line(s->error) + ")";
    }
    std::cout << line << '\n';
  }
  std::cout << pad("libdevice", label_width) << r.libdevice.value_or("not found") << '\n';
  // One directory a line, in search order.
  if (r.include_directories.empty()) {
    std::cout << pad("include", label_width) << "none (NVRTC is not under a CUDA root)\n";
  }
  for (std::size_t i = 0; i < r.include_directories.size(); ++i) {
    std::cout << pad(i == 0 ? "include" : "", label_width) << r.include_directories[i] << '\n';
  }
  if (!r.include_source.empty()) {
    std::cout << pad("include from", label_width) << r.include_source << '\n';
  }
  if (!r.bundled_headers_error.empty()) {
    std::cout << pad("", label_width)
              << "(NVRTC's bundled headers not used: " << one_line(r.bundled_headers_error)
              << ")\n";
  }
  // What each library offers beyond CUDA 13.0.
  const auto& c = r.supports;
  auto yes_no = [](bool b) { return b ? std::string("yes") : std::string("no"); };
  if (r.nvrtc.found) {
    std::string bundled = yes_no(c.bundled_headers);
    if (c.bundled_headers && c.bundled_header_files != 0) {
      bundled += " (" + std::to_string(c.bundled_header_files) + " files, CUDA " +
                 c.bundled_headers_cuda + ")";
    }
    std::cout << pad("NVRTC", label_width) << "Tile IR: " << yes_no(c.tile_ir)
              << "; bundled headers: " << bundled << '\n';
  }
  if (r.nvjitlink.found) {
    std::cout << pad("nvJitLink", label_width) << "linked LTO-IR: " << yes_no(c.linked_ltoir)
              << "; relocatable LTO link (-r -lto): " << yes_no(c.relocatable_lto_link) << '\n';
  }
  if (r.nvvm.found) {
    std::cout << pad("libNVVM", label_width) << "LLVM version: "
              << (c.llvm_version ? llvm_versions_text(c)
                                 : std::string("unknown (no nvvmLLVMVersion)"))
              << '\n';
  }
  std::cout << pad("linker", label_width) << to_string(backend) << '\n';
  if (r.devices.empty()) {
    std::cout << pad("devices", label_width) << (r.driver.found ? "no GPU" : "no driver") << '\n';
  }
  for (const auto& d : r.devices) {
    std::cout << pad("device " + std::to_string(d.ordinal), label_width) << d.name << " (" << d.arch
              << ")\n";
  }
}

int run(const arguments& args) {
  if (!args.positionals().empty()) {
    throw usage_error("info takes no arguments, but got \"" + args.positionals()[0] + "\"");
  }
  const toolkit::report r = toolkit::query();
  const linker_backend backend = linker::which_backend();
  if (args.has("--json")) {
    print_json(r, backend);
  } else {
    print_human(r, backend);
  }
  return exit_success;
}

}  // namespace

const command info_command{
    "info",      "info [--json]", "show the CUDA libraries, their versions and the GPUs",
    description, options,         run,
    nullptr,
};

}  // namespace cucore::cli
