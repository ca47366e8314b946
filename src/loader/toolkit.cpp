#include "cucore/toolkit.hpp"

#include <sys/stat.h>

#include <filesystem>

#include "cucore/error.hpp"
#include "loader/bundled_headers.hpp"
#include "loader/libraries.hpp"
#include "loader/shared_library.hpp"

namespace cucore {

std::string version::to_string() const {
  return std::to_string(major) + "." + std::to_string(minor);
}

namespace toolkit {
namespace {

bool is_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// libdevice candidates: beside the libNVVM that was loaded (nvvm/lib64/../libdevice, or
// lib/../nvvm/libdevice in flattened layouts), then under each CUDA root.
std::vector<std::string> libdevice_candidates() {
  std::vector<std::string> candidates;
  const auto& nvvm = detail::nvvm_table();
  if (nvvm.status.found) {
    auto dir = std::filesystem::path(nvvm.status.path).parent_path();
    candidates.push_back((dir.parent_path() / "libdevice/libdevice.10.bc").string());
    candidates.push_back((dir.parent_path() / "nvvm/libdevice/libdevice.10.bc").string());
  }
  for (const auto& root : detail::cuda_roots()) {
    candidates.push_back(root.path + "/nvvm/libdevice/libdevice.10.bc");
  }
  return candidates;
}

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

struct include_search {
  std::vector<std::string> dirs;
  std::string source;
  std::string bundled_error;
};

// The include directories beside the NVRTC that find_in_roots would pick: the same root and
// library subdirectory order, so that headers and compiler come from one toolkit.
include_search find_include_directories() {
  const auto& spec = detail::library_spec_of(library::nvrtc);
  if (!detail::search_error().empty()) return {};
  for (const auto& root : detail::cuda_roots()) {
    for (const auto& candidate : detail::candidates_in(root, spec)) {
      if (!is_file(candidate.file)) continue;
      include_search found;
      found.source = root.source;
      bool has_cccl = false;
      for (const auto& dir : candidate.include_dirs) {
        if (!is_directory(dir)) continue;
        found.dirs.push_back(dir);
        has_cccl = has_cccl || is_file(dir + "/cub/version.cuh");
      }
      // No CCCL in this toolkit (NVRTC's wheel alone): NVRTC's own bundled headers, which are
      // the toolkit's and CCCL's of its release, stand in for the whole include tree.
      if (!has_cccl && detail::may_have_bundled_headers(candidate.file)) {
        try {
          found.dirs = bundled_include_directories();
          found.source = "NVRTC's bundled headers (no CCCL under " + root.source + ")";
        } catch (const std::exception& e) {
          found.bundled_error = e.what();
        }
      }
      return found;
    }
  }
  return {};
}

const include_search& include_search_result() {
  static const include_search found = find_include_directories();
  return found;
}

}  // namespace

const std::vector<std::string>& include_directories() {
  return include_search_result().dirs;
}

std::vector<std::string> bundled_include_directories() {
  const std::string dir = detail::bundled_headers_directory();
  return {dir, dir + "/cccl"};
}

void add_wheel_directory(std::string site_packages) {
  detail::add_wheel_directory(std::move(site_packages));
}

std::string_view library_name(library lib) noexcept {
  switch (lib) {
    case library::nvrtc:
      return "NVRTC";
    case library::nvjitlink:
      return "nvJitLink";
    case library::nvvm:
      return "libNVVM";
    case library::driver:
      return "CUDA driver";
  }
  return "unknown library";
}

library_status status(library lib) {
  switch (lib) {
    case library::nvrtc:
      return detail::nvrtc_table().status;
    case library::nvjitlink:
      return detail::nvjitlink_table().status;
    case library::nvvm:
      return detail::nvvm_table().status;
    case library::driver:
      return detail::driver_table().status;
  }
  return {};
}

report query() {
  report r;
  r.nvrtc = status(library::nvrtc);
  r.nvjitlink = status(library::nvjitlink);
  r.nvvm = status(library::nvvm);
  r.driver = status(library::driver);
  r.include_directories = include_directories();
  r.include_source = include_search_result().source;
  r.bundled_headers_error = include_search_result().bundled_error;
  if (const auto* t = detail::nvrtc_table_if_loaded(); t != nullptr && t->api) {
    r.supports.tile_ir = t->api->library->symbol("nvrtcGetTileIR") != nullptr;
    r.supports.bundled_headers = t->api->nvrtcInstallBundledHeaders != nullptr;
    if (auto info = detail::bundled_headers_info_of_loaded_nvrtc()) {
      r.supports.bundled_header_files = info->files;
      r.supports.bundled_headers_cuda = info->cuda.to_string();
    }
  }
  if (const auto& t = detail::nvjitlink_table(); t.api) {
    r.supports.linked_ltoir = t.api->nvJitLinkGetLinkedLTOIR != nullptr;
    r.supports.relocatable_lto_link = r.supports.linked_ltoir;
  }
  if (const auto& t = detail::nvvm_table(); t.api && t.api->nvvmLLVMVersion != nullptr) {
    r.supports.llvm_version = true;
    for (const char* arch : {"compute_75", "compute_80", "compute_86", "compute_87", "compute_88",
                             "compute_89", "compute_90", "compute_100", "compute_103",
                             "compute_110", "compute_120", "compute_121"}) {
      int major = 0;
      if (t.api->nvvmLLVMVersion(arch, &major) == NVVM_SUCCESS) {
        r.supports.nvvm_llvm_versions.emplace_back(arch, major);
      }
    }
  }
  for (const auto& candidate : libdevice_candidates()) {
    if (is_file(candidate)) {
      r.libdevice = std::filesystem::weakly_canonical(candidate).string();
      break;
    }
  }
  const auto& drv = detail::driver_table();
  if (drv.api && drv.api->init_result != CUDA_SUCCESS) {
    const char* name = nullptr;
    drv.api->cuGetErrorName(drv.api->init_result, &name);
    r.driver.error = std::string("cuInit failed: ") + (name ? name : "unknown error");
  }
  int count = device_count();
  for (int i = 0; i < count; ++i) {
    CUdevice dev{};
    if (drv.api->cuDeviceGet(&dev, i) != CUDA_SUCCESS) continue;
    device_summary d;
    d.ordinal = i;
    char name[256] = {};
    if (drv.api->cuDeviceGetName(name, sizeof(name), dev) == CUDA_SUCCESS) d.name = name;
    int major = 0;
    int minor = 0;
    drv.api->cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev);
    drv.api->cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev);
    d.arch = "sm_" + std::to_string(major * 10 + minor);
    r.devices.push_back(std::move(d));
  }
  return r;
}

version nvrtc_version() {
  return detail::nvrtc("the NVRTC version probe").nvrtc_version;
}
version nvjitlink_version() {
  return detail::nvjitlink("the nvJitLink version probe").nvjitlink_version;
}
nvvm_version_info nvvm_version() {
  return detail::nvvm("the libNVVM version probe").versions;
}

std::optional<version> driver_version() {
  const auto& table = detail::driver_table();
  if (!table.api) return std::nullopt;
  int v = table.api->driver_version;
  return version{v / 1000, (v % 1000) / 10};
}

int device_count() {
  const auto& table = detail::driver_table();
  if (!table.api || table.api->init_result != CUDA_SUCCESS) return 0;
  int count = 0;
  if (table.api->cuDeviceGetCount(&count) != CUDA_SUCCESS) return 0;
  return count;
}

std::optional<std::string> current_device_arch() {
  if (device_count() == 0) return std::nullopt;
  const auto& api = *detail::driver_table().api;
  CUdevice dev = 0;
  CUcontext ctx = nullptr;
  if (api.cuCtxGetCurrent(&ctx) != CUDA_SUCCESS || ctx == nullptr ||
      api.cuCtxGetDevice(&dev) != CUDA_SUCCESS) {
    if (api.cuDeviceGet(&dev, 0) != CUDA_SUCCESS) return std::nullopt;
  }
  int major = 0;
  int minor = 0;
  if (api.cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev) !=
          CUDA_SUCCESS ||
      api.cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev) !=
          CUDA_SUCCESS) {
    return std::nullopt;
  }
  return "sm_" + std::to_string(major * 10 + minor);
}

std::string libdevice_path() {
  auto candidates = libdevice_candidates();
  for (const auto& candidate : candidates) {
    if (is_file(candidate)) return std::filesystem::weakly_canonical(candidate).string();
  }
  throw library_not_found("libdevice", std::move(candidates), "NVVM compilation with use_libdevice",
                          "libdevice.10.bc not found");
}

}  // namespace toolkit
}  // namespace cucore
