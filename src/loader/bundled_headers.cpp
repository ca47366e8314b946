// NVRTC's bundled headers (NVRTC 13.3+: nvrtcInstallBundledHeaders), installed once per NVRTC
// into a directory of the default cache and then used as an ordinary include root: the cache key
// walks and hashes them like any header on disk (docs/library-discovery.md, "Bundled headers").
#include "loader/bundled_headers.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <span>
#include <string>
#include <system_error>

#include "common/sha256.hpp"
#include "cucore/error.hpp"
#include "cucore/locations.hpp"
#include "loader/libraries.hpp"

namespace cucore::detail {
namespace {

namespace fs = std::filesystem;

constexpr const char* kMarker = ".nvrtc_headers_version";
constexpr std::time_t kStaleTempSeconds = 600;

std::string errno_text(int err) {
  return std::error_code(err, std::generic_category()).message();
}

// "libnvrtc-builtins.so.13.5" → {13, 5}; nullopt for any other name.
std::optional<version> builtins_version(std::string_view name) {
  constexpr std::string_view prefix = "libnvrtc-builtins.so.";
  if (!name.starts_with(prefix)) return std::nullopt;
  name.remove_prefix(prefix.size());
  version v;
  auto [p, ec] = std::from_chars(name.data(), name.data() + name.size(), v.major);
  if (ec != std::errc() || p == name.data() + name.size() || *p != '.') return std::nullopt;
  auto [q, ec2] = std::from_chars(p + 1, name.data() + name.size(), v.minor);
  if (ec2 != std::errc() || q != name.data() + name.size()) return std::nullopt;
  return v;
}

// The builtins libraries beside `nvrtc` (NVRTC loads libnvrtc-builtins.so.MAJOR.MINOR from its own
// directory; the bundled headers live in it), sorted by name.
std::vector<std::string> builtins_beside(const std::string& nvrtc) {
  std::vector<std::string> out;
  std::error_code ec;
  const fs::path dir = fs::path(nvrtc).parent_path();
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string name = entry.path().filename().string();
    if (builtins_version(name)) out.push_back(entry.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void add_identity(std::string& text, const std::string& path) {
  struct stat st {};
  text += path;
  text += '\n';
  if (::stat(path.c_str(), &st) != 0) {
    text += "absent\n";
    return;
  }
  text += std::to_string(st.st_dev) + ' ' + std::to_string(st.st_ino) + ' ' +
          std::to_string(st.st_size) + ' ' + std::to_string(st.st_mtim.tv_sec) + '.' +
          std::to_string(st.st_mtim.tv_nsec) + '\n';
}

// 32 hex digits naming one NVRTC: its file and its builtins libraries (resolved path, device,
// inode, size, mtime). ctime is left out: a copy keeps the name, a re-copy gets a fresh install.
std::string nvrtc_identity(const std::string& nvrtc) {
  std::string text = "cucore-bundled-headers-1\n";
  add_identity(text, nvrtc);
  for (const auto& b : builtins_beside(nvrtc)) add_identity(text, b);
  auto hex = sha256_hex(std::as_bytes(std::span(text.data(), text.size())));
  return std::string(hex.data(), 32);
}

// A directory of cucore's may be used only when it is this user's, no link, and writable by
// nobody else: headers are code that every compile through it reads.
void check_private_directory(const fs::path& dir, std::string_view what) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    throw error("cannot use " + std::string(what) + " " + dir.string() + ": " + errno_text(errno));
  }
  std::string wrong;
  if (!S_ISDIR(st.st_mode)) {
    wrong = "it is not a directory (or is a symbolic link)";
  } else if (st.st_uid != ::geteuid()) {
    wrong = "it belongs to user " + std::to_string(st.st_uid) + ", not to this user (" +
            std::to_string(::geteuid()) + ")";
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    wrong = "others can write to it";
  }
  if (!wrong.empty()) {
    throw error("refusing " + std::string(what) + " " + dir.string() + ": " + wrong +
                "; remove it (cucore installs it again) or set CUCORE_CACHE_DIR to a directory "
                "of your own");
  }
}

// An installed directory is complete when NVRTC's marker is in it (it is written last, and the
// directory appears under its final name only by rename).
bool is_complete(const fs::path& dir) {
  struct stat st {};
  return ::lstat((dir / kMarker).c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

void make_private_directories(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  make_private_directories(dir.parent_path());
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw error("cannot create " + dir.string() + " for NVRTC's bundled headers: " +
                errno_text(errno) + "; set CUCORE_CACHE_DIR to a writable directory");
  }
}

// Temp directories left by a process killed mid-install, older than 10 minutes, this user's.
void remove_stale_temps(const fs::path& base) {
  std::error_code ec;
  const std::time_t now = std::time(nullptr);
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(".tmp-")) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != ::geteuid() || now - st.st_mtime < kStaleTempSeconds) {
      continue;
    }
    fs::remove_all(entry.path(), ec);
  }
}

}  // namespace

bool may_have_bundled_headers(const std::string& nvrtc_file) {
  for (const auto& b : builtins_beside(nvrtc_file)) {
    auto v = builtins_version(fs::path(b).filename().string());
    if (v && *v >= version{13, 3}) return true;
  }
  return false;
}

std::string bundled_headers_directory() {
  static std::mutex mutex;
  std::lock_guard lock(mutex);

  // The NVRTC this process compiles with, found with stat() alone where it is under a CUDA root
  // (or pinned), so that an installed directory is found without loading NVRTC.
  std::string nvrtc_file;
  if (auto in_root = find_in_roots(library_spec_of(toolkit::library::nvrtc))) {
    nvrtc_file = *in_root;
  } else {
    nvrtc_file = nvrtc("installing NVRTC's bundled headers").library->path();
  }
  if (!may_have_bundled_headers(nvrtc_file)) {
    throw invalid_argument("NVRTC " + nvrtc_file +
                           " has no bundled headers (no libnvrtc-builtins.so.13.3 or newer beside "
                           "it; NVRTC 13.3 and newer carry them): use NVRTC 13.3 or newer, or a "
                           "toolkit with include/cccl");
  }
  const fs::path base = default_cache_dir() / "bundled-headers";
  const fs::path final_dir = base / nvrtc_identity(nvrtc_file);

  auto usable = [&]() -> bool {
    struct stat st {};
    if (::lstat(final_dir.c_str(), &st) != 0) return false;
    check_private_directory(final_dir, "the bundled-header directory");
    if (!is_complete(final_dir)) {
      throw error("the bundled-header directory " + final_dir.string() + " has no " + kMarker +
                  " (not installed by cucore, or damaged): remove it and cucore installs it "
                  "again");
    }
    return true;
  };

  make_private_directories(base);
  check_private_directory(base, "the bundled-header directory");
  if (usable()) return final_dir.string();

  const auto& api = nvrtc("installing NVRTC's bundled headers");
  if (api.nvrtcInstallBundledHeaders == nullptr) {
    throw invalid_argument("NVRTC " + api.nvrtc_version.to_string() + " (" + api.library->path() +
                           ") has no bundled headers (NVRTC 13.3 and newer carry them): use "
                           "NVRTC 13.3 or newer, or a toolkit with include/cccl");
  }
  remove_stale_temps(base);
  std::string temp = (base / ".tmp-XXXXXX").string();
  if (::mkdtemp(temp.data()) == nullptr) {
    throw error("cannot create a temporary directory in " + base.string() + ": " +
                errno_text(errno));
  }
  std::error_code ec;
  const char* log = nullptr;
  nvrtcResult r = api.nvrtcInstallBundledHeaders(temp.c_str(), 0, &log);
  if (r != NVRTC_SUCCESS) {
    fs::remove_all(temp, ec);
    throw library_error(
        "NVRTC", "nvrtcInstallBundledHeaders into " + temp,
        std::string(api.nvrtcGetErrorString(r)) + (log ? std::string(": ") + log : ""));
  }
  // NVRTC's lock file is no header; the directory is never installed into again.
  fs::remove(fs::path(temp) / ".nvrtc_install.lock", ec);
  if (::chmod(temp.c_str(), 0755) != 0 || !is_complete(temp)) {
    fs::remove_all(temp, ec);
    throw error("nvrtcInstallBundledHeaders left no " + std::string(kMarker) + " in " + temp);
  }
  if (::rename(temp.c_str(), final_dir.c_str()) != 0) {
    const int err = errno;
    fs::remove_all(temp, ec);
    // Another process installed it first: use theirs (checked like any other).
    if ((err == EEXIST || err == ENOTEMPTY) && usable()) return final_dir.string();
    throw error("cannot move NVRTC's bundled headers to " + final_dir.string() + ": " +
                errno_text(err));
  }
  return final_dir.string();
}

std::optional<bundled_headers_info> bundled_headers_info_of_loaded_nvrtc() {
  const auto* table = nvrtc_table_if_loaded();
  if (table == nullptr || !table->api || table->api->nvrtcGetBundledHeadersInfo == nullptr) {
    return std::nullopt;
  }
  nvrtc_bundled_headers_info raw{};
  const char* log = nullptr;
  if (table->api->nvrtcGetBundledHeadersInfo(&raw, &log) != NVRTC_SUCCESS || raw.available == 0) {
    return std::nullopt;
  }
  return bundled_headers_info{raw.num_files, raw.uncompressed_size,
                              version{raw.cuda_version_major, raw.cuda_version_minor}};
}

}  // namespace cucore::detail
