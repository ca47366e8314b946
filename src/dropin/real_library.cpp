// Which real library a drop-in forwards to: the one the program would have loaded without
// `cucore run` (docs/transparent-cache.md, "Which real library"). The program's loaders are
// emulated in their own order: NVIDIA's wheel in the site-packages of the Python running in this
// process and $CONDA_PREFIX (cuda.pathfinder: cuda.core, cuda.bindings, CuPy, numba-cuda), then the
// dynamic loader's search by soname as it would have gone without the drop-in directory
// (DT_RPATH, the program's LD_LIBRARY_PATH, DT_RUNPATH, the loader cache's directories, the
// system's), then $CUDA_PATH/$CUDA_HOME (cuda.pathfinder's last steps), and only then cucore's own
// search (/usr/local/cuda, ...).
#include <dlfcn.h>
#include <elf.h>
#include <glob.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/environment.hpp"
#include "dropin/run_environment.hpp"
#include "dropin/support.hpp"
#include "loader/libraries.hpp"

namespace cucore::dropin {
namespace {

struct file_id {
  dev_t device = 0;
  ino_t inode = 0;
  bool operator==(const file_id&) const = default;
};

std::optional<file_id> id_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return file_id{st.st_dev, st.st_ino};
}

std::string executable_directory() {
  std::error_code ec;
  const auto exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

// What the loaded objects of this process tell about the program's library search.
struct process_view {
  // Site-packages (or dist-packages) directories that objects were loaded from, in load order:
  // the Python environment running in this process.
  std::vector<std::string> site_packages;
  // DT_RPATH of the objects that need the soname (searched before LD_LIBRARY_PATH), and their
  // DT_RUNPATH with the main program's (searched after it), $ORIGIN expanded.
  std::vector<std::string> rpath;
  std::vector<std::string> runpath;
};

struct view_request {
  const std::vector<std::string_view>* sonames;
  process_view* view;
};

void add_unique(std::vector<std::string>& list, std::string item) {
  if (std::find(list.begin(), list.end(), item) == list.end()) list.push_back(std::move(item));
}

// "$ORIGIN/../lib:/opt/x" → directories; entries with other dynamic tokens ($LIB, $PLATFORM) are
// left out (the loader expands them from its own state).
void add_search_list(std::string_view list, const std::string& origin,
                     std::vector<std::string>& out) {
  for (auto dir : split_path_list(list)) {
    for (std::string_view token : {"${ORIGIN}", "$ORIGIN"}) {
      for (auto at = dir.find(token); at != std::string::npos; at = dir.find(token)) {
        dir.replace(at, token.size(), origin);
      }
    }
    if (dir.find('$') == std::string::npos && !origin.empty()) add_unique(out, std::move(dir));
  }
}

int inspect_object(struct dl_phdr_info* info, size_t, void* data) {
  auto& request = *static_cast<view_request*>(data);
  auto& view = *request.view;
  const std::string name = info->dlpi_name ? info->dlpi_name : "";
  const bool main_program = name.empty();
  for (std::string_view marker : {"/site-packages/", "/dist-packages/"}) {
    if (const auto at = name.find(marker); at != std::string::npos) {
      add_unique(view.site_packages, name.substr(0, at + marker.size() - 1));
    }
  }
  if (!main_program && !name.starts_with('/')) return 0;  // the vDSO, a name the loader made
  const ElfW(Dyn)* dynamic = nullptr;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    if (info->dlpi_phdr[i].p_type == PT_DYNAMIC) {
      dynamic = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
    }
  }
  if (dynamic == nullptr) return 0;
  ElfW(Addr) strtab = 0;
  std::vector<ElfW(Addr)> needed;
  ElfW(Addr) rpath = 0, runpath = 0;
  bool has_rpath = false, has_runpath = false;
  for (const auto* d = dynamic; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_STRTAB:
        strtab = d->d_un.d_ptr;
        break;
      case DT_NEEDED:
        needed.push_back(d->d_un.d_val);
        break;
      case DT_RPATH:
        rpath = d->d_un.d_val, has_rpath = true;
        break;
      case DT_RUNPATH:
        runpath = d->d_un.d_val, has_runpath = true;
        break;
      default:
        break;
    }
  }
  if (strtab == 0) return 0;
  // The loader relocates the dynamic section's addresses in place on most targets, not on all:
  // an address below the object's base is still relative to it.
  if (strtab < info->dlpi_addr) strtab += info->dlpi_addr;
  const char* strings = reinterpret_cast<const char*>(strtab);
  bool needs = false;
  for (auto offset : needed) {
    const std::string_view soname(strings + offset);
    needs = needs || std::find(request.sonames->begin(), request.sonames->end(), soname) !=
                         request.sonames->end();
  }
  if (!needs && !main_program) return 0;
  const std::string origin =
      main_program ? executable_directory() : std::filesystem::path(name).parent_path().string();
  // DT_RPATH counts only where the object has no DT_RUNPATH (the loader's rule).
  if (has_rpath && !has_runpath) add_search_list(strings + rpath, origin, view.rpath);
  if (has_runpath) add_search_list(strings + runpath, origin, view.runpath);
  return 0;
}

process_view inspect_process(const detail::library_spec& spec) {
  process_view view;
  view_request request{&spec.sonames, &view};
  ::dl_iterate_phdr(inspect_object, &request);
  return view;
}

}  // namespace

std::optional<std::string> find_real_library(const detail::library_spec& spec,
                                             env::variable override_variable, const void* self,
                                             std::vector<std::string>& searched,
                                             const std::vector<std::string_view>& wheel_dirs) {
  // Never the drop-in: the engine itself, nor the shim beside it named as the real library.
  std::vector<file_id> excluded;
  std::string self_dir;
  if (Dl_info info{}; ::dladdr(self, &info) != 0 && info.dli_fname != nullptr) {
    std::error_code ec;
    const auto canonical = std::filesystem::canonical(info.dli_fname, ec);
    const std::string self_path = ec ? std::string(info.dli_fname) : canonical.string();
    self_dir = self_path.substr(0, self_path.rfind('/'));
    if (auto id = id_of(self_path)) excluded.push_back(*id);
    for (auto soname : spec.sonames) {
      if (auto id = id_of(self_dir + "/" + std::string(soname))) excluded.push_back(*id);
    }
  }
  const auto acceptable = [&](const std::string& path, std::string_view why) {
    searched.push_back(path + " (" + std::string(why) + ")");
    const auto id = id_of(path);
    return id && std::find(excluded.begin(), excluded.end(), *id) == excluded.end();
  };
  const auto choose = [&](const std::string& path, std::string_view why) {
    note(log_level::debug, "the real " + std::string(spec.display_name) + ": " + path + " (" +
                               std::string(why) + ")");
    detail::pin_library(spec, path);
    return std::optional<std::string>(path);
  };
  const auto in_root = [&](const std::string& root,
                           std::string_view why) -> std::optional<std::string> {
    for (auto subdir : spec.subdirs) {
      for (auto soname : spec.sonames) {
        const std::string candidate = root + "/" + std::string(subdir) + "/" + std::string(soname);
        if (acceptable(candidate, why)) return candidate;
      }
    }
    return std::nullopt;
  };

  // 1. What `cucore run --nvrtc` (or the variable, one of environment.hpp's table) names.
  if (const auto chosen = env::text(override_variable)) {
    const std::string path(*chosen);
    const std::string_view why = env::name(override_variable);
    if (acceptable(path, why)) return choose(path, why);
    searched.back() += id_of(path) ? ": the drop-in itself" : ": no such file";
    return std::nullopt;
  }
  const auto view = inspect_process(spec);

  // 2. cuda.pathfinder's first steps: NVIDIA's wheels in the site-packages of the Python in this
  // process (nvidia/cu13/lib, or a CUDA 12 wheel's directory), then $CONDA_PREFIX. Its "already
  // loaded" check, which comes before, finds the preloaded drop-in; without it, this is where the
  // program's library would have come from.
  for (const auto& site : view.site_packages) {
    for (auto wheel : wheel_dirs) {
      for (auto soname : spec.sonames) {
        const std::string candidate = site + "/" + std::string(wheel) + "/" + std::string(soname);
        if (acceptable(candidate,
                       "NVIDIA's wheel in a site-packages directory this Python "
                       "process loaded modules from")) {
          return choose(candidate, "NVIDIA's wheel in the program's site-packages");
        }
      }
    }
  }
  if (!view.site_packages.empty()) {
    if (const char* conda = std::getenv("CONDA_PREFIX"); conda != nullptr && *conda == '/') {
      if (auto found = in_root(conda, "$CONDA_PREFIX")) return choose(*found, "$CONDA_PREFIX");
    }
  }

  // 3. The dynamic loader's search by soname, without the drop-in directory: DT_RPATH of the
  // objects that need the library, the program's own LD_LIBRARY_PATH, their DT_RUNPATH and the
  // main program's, the loader cache's directories, the system's.
  std::vector<std::pair<std::string, std::string_view>> dirs;
  for (const auto& dir : view.rpath) dirs.emplace_back(dir, "DT_RPATH");
  if (const auto original = program_library_path()) {
    for (auto& dir : split_path_list(*original))
      dirs.emplace_back(std::move(dir), "LD_LIBRARY_PATH");
  }
  for (const auto& dir : view.runpath) dirs.emplace_back(dir, "DT_RUNPATH");
  std::vector<std::string> system;
  add_ld_so_conf("/etc/ld.so.conf", system, 0);
  for (const char* dir :
       {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64", "/lib", "/usr/lib"}) {
    system.emplace_back(dir);
  }
  for (auto& dir : system) dirs.emplace_back(std::move(dir), "the loader's system directories");
  for (const auto& [dir, why] : dirs) {
    if (dir == self_dir) continue;
    for (auto soname : spec.sonames) {
      const std::string candidate = dir + "/" + std::string(soname);
      if (acceptable(candidate, why)) return choose(candidate, why);
    }
  }

  // 4. cuda.pathfinder's fallbacks after the loader: $CUDA_PATH, then $CUDA_HOME.
  for (const char* variable : {"CUDA_PATH", "CUDA_HOME"}) {
    if (const char* root = std::getenv(variable); root != nullptr && *root != '\0') {
      if (auto found = in_root(root, variable)) return choose(*found, variable);
    }
  }

  // 5. Where the program would have found none: cucore's own search (docs/library-discovery.md).
  for (const auto& file : detail::files_in_roots(spec)) {
    if (acceptable(file, "cucore's toolkit search")) return choose(file, "cucore's toolkit search");
  }
  return std::nullopt;
}

detail::library_spec dropin_spec(toolkit::library lib, int major) {
  detail::library_spec spec = detail::library_spec_of(lib);
  if (lib == toolkit::library::nvrtc) {
    spec.sonames = {major == 12 ? "libnvrtc.so.12" : "libnvrtc.so.13"};
  } else if (lib == toolkit::library::nvjitlink) {
    spec.sonames = {major == 12 ? "libnvJitLink.so.12" : "libnvJitLink.so.13"};
  }
  return spec;
}

std::vector<std::string_view> wheel_dirs(toolkit::library lib, int major) {
  // cuda.pathfinder 1.9's site_packages_linux (descriptor_catalog.py).
  switch (lib) {
    case toolkit::library::nvrtc:
      return {major == 12 ? "nvidia/cuda_nvrtc/lib" : "nvidia/cu13/lib"};
    case toolkit::library::nvjitlink:
      return {major == 12 ? "nvidia/nvjitlink/lib" : "nvidia/cu13/lib"};
    case toolkit::library::nvvm:
      return {"nvidia/cu13/lib", "nvidia/cuda_nvcc/nvvm/lib64"};
    default:
      return {};
  }
}

}  // namespace cucore::dropin
