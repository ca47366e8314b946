#include "loader/shared_library.hpp"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <utility>

#include "common/environment.hpp"

namespace cucore::detail {
namespace {

std::string getenv_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
}

std::string cucore_variable(env::variable v) {
  return std::string(env::text(v).value_or(""));
}

bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string mapped_path(void* handle) {
  link_map* map = nullptr;
  if (::dlinfo(handle, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) {
    return {};
  }
  std::error_code ec;
  auto canonical = std::filesystem::canonical(map->l_name, ec);
  return ec ? std::string(map->l_name) : canonical.string();
}

}  // namespace

std::optional<file_identity> identify_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  file_identity id;
  id.path = path;
  id.device = static_cast<std::uint64_t>(st.st_dev);
  id.inode = static_cast<std::uint64_t>(st.st_ino);
  id.size = static_cast<std::uint64_t>(st.st_size);
  id.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  id.ctime_ns = static_cast<std::int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  return id;
}

std::optional<shared_library> shared_library::open(const std::string& file, std::string& error) {
  // The identity is taken before and after dlopen: equal, it is the identity of what was mapped.
  std::error_code ec;
  const auto canonical = std::filesystem::canonical(file, ec);
  const auto before = ec ? std::nullopt : identify_file(canonical.string());
  ::dlerror();
  void* handle = ::dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* message = ::dlerror();
    error = message ? message : "dlopen failed";
    return std::nullopt;
  }
  shared_library lib(handle);
  if (before && before->path == lib.path_ && identify_file(lib.path_) == before) {
    lib.identity_ = before;
  }
  return lib;
}

shared_library::shared_library(void* handle) : handle_(handle), path_(mapped_path(handle)) {}

shared_library::shared_library(shared_library&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)),
      path_(std::move(other.path_)),
      identity_(std::move(other.identity_)) {}

shared_library& shared_library::operator=(shared_library&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) ::dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    path_ = std::move(other.path_);
    identity_ = std::move(other.identity_);
  }
  return *this;
}

shared_library::~shared_library() {
  if (handle_ != nullptr) ::dlclose(handle_);
}

void* shared_library::symbol(const char* name) const noexcept {
  return handle_ ? ::dlsym(handle_, name) : nullptr;
}

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> split(const std::string& text, char separator) {
  std::vector<std::string> parts;
  std::size_t begin = 0;
  while (begin <= text.size()) {
    std::size_t end = text.find(separator, begin);
    if (end == std::string::npos) end = text.size();
    if (end > begin) parts.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return parts;
}

// The sources CUCORE_CUDA_SEARCH may name, in their default order.
constexpr std::string_view kSources[] = {"CUCORE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH",
                                         "/usr/local/cuda",  "wheels",    "loader"};

struct search_order {
  std::vector<std::string> sources;
  std::string error;
};

search_order read_search_order() {
  search_order order;
  if (env::flag(env::variable::cuda_home_only).value.value_or(false)) {
    order.sources = {"CUCORE_CUDA_HOME"};
    return order;
  }
  const std::string chosen = cucore_variable(env::variable::cuda_search);
  if (chosen.empty()) {
    order.sources.assign(std::begin(kSources), std::end(kSources));
    return order;
  }
  for (auto& name : split(chosen, ',')) {
    bool known = false;
    for (auto source : kSources) known = known || name == source;
    if (!known) {
      order.error = "CUCORE_CUDA_SEARCH=\"" + chosen + "\" names the unknown source \"" + name +
                    "\": use a comma-separated list of CUCORE_CUDA_HOME, CUDA_HOME, CUDA_PATH, "
                    "/usr/local/cuda, wheels, loader";
      order.sources.clear();
      return order;
    }
    order.sources.push_back(std::move(name));
  }
  return order;
}

std::mutex registered_mutex;
std::vector<std::string>& registered_wheel_directories() {
  static std::vector<std::string> dirs;
  return dirs;
}

// <prefix>/lib/python3.*/site-packages, sorted (one in a usual environment).
void add_prefix_site_packages(const std::string& prefix, std::vector<std::string>& out) {
  if (prefix.empty() || !is_directory(prefix + "/lib")) return;
  std::vector<std::string> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(prefix + "/lib", ec)) {
    const std::string name = entry.path().filename().string();
    const std::string site = entry.path().string() + "/site-packages";
    if (name.rfind("python3", 0) == 0 && is_directory(site)) found.push_back(site);
  }
  std::sort(found.begin(), found.end());
  out.insert(out.end(), found.begin(), found.end());
}

}  // namespace

std::vector<std::string> wheel_site_packages() {
  std::vector<std::string> dirs = split(cucore_variable(env::variable::cuda_wheels), ':');
  {
    std::lock_guard lock(registered_mutex);
    const auto& registered = registered_wheel_directories();
    dirs.insert(dirs.end(), registered.begin(), registered.end());
  }
  add_prefix_site_packages(getenv_or_empty("VIRTUAL_ENV"), dirs);
  add_prefix_site_packages(getenv_or_empty("CONDA_PREFIX"), dirs);
#ifdef CUCORE_BUILD_CUDA_WHEELS
  // The site-packages directory CMake took the CUDA headers from (scripts/setup.sh puts the wheels
  // there on a machine without a toolkit).
  dirs.emplace_back(CUCORE_BUILD_CUDA_WHEELS);
#endif
  return dirs;
}

void add_wheel_directory(std::string site_packages) {
  std::lock_guard lock(registered_mutex);
  auto& dirs = registered_wheel_directories();
  if (std::find(dirs.begin(), dirs.end(), site_packages) == dirs.end()) {
    dirs.push_back(std::move(site_packages));
  }
}

std::vector<cuda_root> cuda_roots() {
  std::vector<cuda_root> roots;
  auto add = [&](std::string path, std::string source, bool cu12_wheels = false) {
    if (path.empty()) return;
    for (const auto& existing : roots) {
      if (existing.path == path) return;
    }
    roots.push_back({std::move(path), std::move(source), cu12_wheels});
  };
  for (const auto& source : read_search_order().sources) {
    if (source == "CUCORE_CUDA_HOME") {
      add(cucore_variable(env::variable::cuda_home), source);
    } else if (source == "CUDA_HOME" || source == "CUDA_PATH") {
      add(getenv_or_empty(source.c_str()), source);
    } else if (source == "/usr/local/cuda") {
      add(source, source);
    } else if (source == "wheels") {
      // CUDA 13 wheels (nvidia-cuda-nvrtc, nvidia-nvjitlink, nvidia-nvvm, nvidia-cuda-runtime,
      // nvidia-cuda-cccl, ...) all install into nvidia/cu13, laid out like a toolkit: lib/,
      // include/, include/cccl/, nvvm/libdevice/.
      const std::vector<std::string> sites = wheel_site_packages();
      for (const auto& site : sites) add(site + "/nvidia/cu13", "pip wheel in " + site);
      // Then CUDA 12's wheels (nvidia-cuda-nvrtc-cu12, nvidia-nvjitlink-cu12,
      // nvidia-cuda-nvcc-cu12, nvidia-cuda-runtime-cu12, nvidia-cuda-cccl-cu12): one directory per
      // package under nvidia/. After every cu13 directory, so that they never displace a CUDA 13
      // wheel that was found before them.
      for (const auto& site : sites) add(site + "/nvidia", "pip wheel in " + site, true);
    }
  }
  return roots;
}

std::vector<root_candidate> candidates_in(const cuda_root& root, const library_spec& spec) {
  std::vector<root_candidate> out;
  if (root.cu12_wheels) {
    for (auto file : spec.cu12_wheel_files) {
      out.push_back({root.path + "/" + std::string(file),
                     {root.path + "/cuda_cccl/include", root.path + "/cuda_runtime/include",
                      root.path + "/cuda_nvcc/include"}});
    }
    return out;
  }
  for (auto subdir : spec.subdirs) {
    // targets/<arch>-linux/lib keeps its headers in targets/<arch>-linux/include.
    std::string base = root.path;
    if (subdir.starts_with("targets/") && subdir.ends_with("/lib")) {
      base = root.path + "/" + std::string(subdir.substr(0, subdir.size() - 4));
    }
    for (auto soname : spec.sonames) {
      out.push_back({root.path + "/" + std::string(subdir) + "/" + std::string(soname),
                     {base + "/include/cccl", base + "/include"}});
    }
  }
  return out;
}

bool search_loader_path() {
  const auto sources = read_search_order().sources;
  return std::find(sources.begin(), sources.end(), "loader") != sources.end();
}

std::string search_error() {
  return read_search_order().error;
}

namespace {
std::mutex pinned_mutex;
std::vector<std::pair<std::string, std::string>>& pinned_files() {
  static std::vector<std::pair<std::string, std::string>> pins;  // display name → path
  return pins;
}
}  // namespace

void pin_library(const library_spec& spec, std::string path) {
  std::lock_guard lock(pinned_mutex);
  auto& pins = pinned_files();
  std::erase_if(pins, [&](const auto& pin) { return pin.first == spec.display_name; });
  if (!path.empty()) pins.emplace_back(std::string(spec.display_name), std::move(path));
}

std::optional<std::string> pinned_library(const library_spec& spec) {
  std::lock_guard lock(pinned_mutex);
  for (const auto& [name, path] : pinned_files()) {
    if (name == spec.display_name) return path;
  }
  return std::nullopt;
}

std::vector<std::string> files_in_roots(const library_spec& spec) {
  std::vector<std::string> files;
  if (!spec.search_roots || !search_error().empty()) return files;
  for (const auto& root : cuda_roots()) {
    for (const auto& [candidate, includes] : candidates_in(root, spec)) {
      if (!is_regular_file(candidate)) continue;
      std::error_code ec;
      auto canonical = std::filesystem::canonical(candidate, ec);
      std::string file = ec ? candidate : canonical.string();
      if (std::find(files.begin(), files.end(), file) == files.end()) {
        files.push_back(std::move(file));
      }
    }
  }
  return files;
}

located_library locate(const library_spec& spec) {
  located_library result;
  std::string last_error;
  if (auto pinned = pinned_library(spec)) {
    result.searched.push_back("pinned: " + *pinned);
    if (auto lib = shared_library::open(*pinned, last_error)) {
      result.library = std::move(lib);
      result.source = "pinned";
    } else {
      result.error = last_error;
    }
    return result;
  }
  if (spec.search_roots) {
    if (auto why = search_error(); !why.empty()) {
      result.error = std::move(why);
      return result;
    }
    for (const auto& root : cuda_roots()) {
      for (const auto& [candidate, includes] : candidates_in(root, spec)) {
        result.searched.push_back(candidate);
        if (!is_regular_file(candidate)) continue;
        if (auto lib = shared_library::open(candidate, last_error)) {
          result.library = std::move(lib);
          result.source = root.source;
          return result;
        }
      }
    }
  }
  if (!spec.search_roots || search_loader_path()) {
    for (auto soname : spec.sonames) {
      std::string candidate(soname);
      result.searched.push_back("loader path: " + candidate);
      if (auto lib = shared_library::open(candidate, last_error)) {
        result.library = std::move(lib);
        result.source = "loader path";
        return result;
      }
    }
  }
  result.error = last_error.empty() ? std::string("no candidate file exists") : last_error;
  return result;
}

}  // namespace cucore::detail

namespace cucore::detail {

std::optional<std::string> find_in_roots(const library_spec& spec) {
  if (auto pinned = pinned_library(spec)) {
    std::error_code ec;
    auto canonical = std::filesystem::canonical(*pinned, ec);
    return ec ? *pinned : canonical.string();
  }
  if (!spec.search_roots || !search_error().empty()) return std::nullopt;
  for (const auto& root : cuda_roots()) {
    for (const auto& [candidate, includes] : candidates_in(root, spec)) {
      if (!is_regular_file(candidate)) continue;
      std::error_code ec;
      auto canonical = std::filesystem::canonical(candidate, ec);
      return ec ? candidate : canonical.string();
    }
  }
  return std::nullopt;
}

}  // namespace cucore::detail
