#include "loader/shared_library.hpp"

#include <dlfcn.h>
#include <link.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

namespace cucore::detail {
namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::string(value) : std::string();
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
  id.inode = static_cast<std::uint64_t>(st.st_ino);
  id.size = static_cast<std::uint64_t>(st.st_size);
  id.mtime_ns = static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
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

std::vector<std::string> cuda_roots() {
  std::vector<std::string> roots;
  auto add = [&](std::string root) {
    if (root.empty()) return;
    for (const auto& existing : roots) {
      if (existing == root) return;
    }
    roots.push_back(std::move(root));
  };
  add(env("CUCORE_CUDA_HOME"));
  if (!search_loader_path()) return roots;
  add(env("CUDA_HOME"));
  add(env("CUDA_PATH"));
  add("/usr/local/cuda");
  return roots;
}

bool search_loader_path() {
  return env("CUCORE_CUDA_HOME_ONLY") != "1";
}

located_library locate(const library_spec& spec) {
  located_library result;
  std::string last_error;
  if (spec.search_roots) {
    for (const auto& root : cuda_roots()) {
      for (auto subdir : spec.subdirs) {
        for (auto soname : spec.sonames) {
          std::string candidate = root + "/" + std::string(subdir) + "/" + std::string(soname);
          result.searched.push_back(candidate);
          if (!is_regular_file(candidate)) continue;
          if (auto lib = shared_library::open(candidate, last_error)) {
            result.library = std::move(lib);
            return result;
          }
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
  if (!spec.search_roots) return std::nullopt;
  for (const auto& root : cuda_roots()) {
    for (auto subdir : spec.subdirs) {
      for (auto soname : spec.sonames) {
        std::string candidate = root + "/" + std::string(subdir) + "/" + std::string(soname);
        if (!is_regular_file(candidate)) continue;
        std::error_code ec;
        auto canonical = std::filesystem::canonical(candidate, ec);
        return ec ? candidate : canonical.string();
      }
    }
  }
  return std::nullopt;
}

}  // namespace cucore::detail
