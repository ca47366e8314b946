// Opening shared libraries at run time: an RAII dlopen handle and the search over CUDA roots.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cucore::detail {

// A file as it was at one moment: resolved path, device, inode, size, modification and change
// times. Replacing, upgrading or rewriting a library in place changes it.
struct file_identity {
  std::string path;  // canonical
  std::uint64_t device = 0;
  std::uint64_t inode = 0;
  std::uint64_t size = 0;
  std::int64_t mtime_ns = 0;
  std::int64_t ctime_ns = 0;  // changes on every write and rename, whatever mtime is set to
  friend bool operator==(const file_identity&, const file_identity&) = default;
};

// stat() of a (canonical) regular file; nullopt when it cannot be stat'ed.
std::optional<file_identity> identify_file(const std::string& path);

// One dlopen handle. Move-only; dlclose on destruction. The process-wide CUDA library tables are
// deliberately never destroyed (see library_table), so their handles stay open until exit.
class shared_library {
 public:
  // Opens `file` (a path, or a bare soname for the loader's own search). On failure returns nullopt
  // and sets `error` to dlerror().
  static std::optional<shared_library> open(const std::string& file, std::string& error);

  shared_library(shared_library&& other) noexcept;
  shared_library& operator=(shared_library&& other) noexcept;
  shared_library(const shared_library&) = delete;
  shared_library& operator=(const shared_library&) = delete;
  ~shared_library();

  void* symbol(const char* name) const noexcept;
  void* handle() const noexcept { return handle_; }
  // The file the loader actually mapped (resolved through symlinks).
  const std::string& path() const noexcept { return path_; }
  // That file's identity when it was opened: the same stat() before and after dlopen (nullopt
  // when the file changed meanwhile, or was found through the loader path under another name).
  const std::optional<file_identity>& identity() const noexcept { return identity_; }

 private:
  explicit shared_library(void* handle);
  void* handle_ = nullptr;
  std::string path_;
  std::optional<file_identity> identity_;
};

// What to look for: the library's display name, its sonames (newest first), and the sub-directories
// of each CUDA root where the toolkit keeps it.
struct library_spec {
  std::string_view display_name;
  std::vector<std::string_view> sonames;
  std::vector<std::string_view> subdirs;
  bool search_roots = true;  // false for the driver: only the loader path
  // Where CUDA 12's pip wheels keep it, relative to <site-packages>/nvidia (one directory per
  // package: cuda_nvrtc/lib/libnvrtc.so.12, ...); empty where they have none.
  std::vector<std::string_view> cu12_wheel_files;
};

struct located_library {
  std::optional<shared_library> library;
  std::vector<std::string> searched;  // every place looked at, in order
  std::string error;                  // why nothing was opened (empty on success)
  std::string source;                 // the cuda_root::source it came from, or "loader path"
};

// One place a CUDA toolkit may be: a directory laid out like a toolkit (lib64/ or lib/, include/,
// nvvm/), and where it came from, as `cucore info` prints it.
// Or CUDA 12's per-package pip wheels: path is <site-packages>/nvidia, each library and header
// set in its package's directory (cu12_wheels).
struct cuda_root {
  std::string path;
  std::string source;  // "CUCORE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH", "/usr/local/cuda",
                       // "pip wheel in <site-packages>"
  bool cu12_wheels = false;
};

// The CUDA roots, in search order. By default: $CUCORE_CUDA_HOME, $CUDA_HOME, $CUDA_PATH,
// /usr/local/cuda, then the pip wheels: nvidia/cu13 in each site-packages directory of
// wheel_site_packages(), then CUDA 12's nvidia/ in each. CUCORE_CUDA_SEARCH chooses and orders
// the sources; with CUCORE_CUDA_HOME_ONLY=1 only $CUCORE_CUDA_HOME. In every root the first
// library file that exists wins, whatever its major version (a CUDA 12 toolkit is found as a 13
// one is).
std::vector<cuda_root> cuda_roots();

// One file `spec`'s library may be under a root, in the search's order, and the include
// directories (include/cccl, then include/, for a toolkit) that go with it: NVRTC's headers come
// from the root it was found in. Nothing is checked on disk.
struct root_candidate {
  std::string file;
  std::vector<std::string> include_dirs;
};
std::vector<root_candidate> candidates_in(const cuda_root& root, const library_spec& spec);
// Whether the dynamic loader's own path is searched after the roots (not with
// CUCORE_CUDA_HOME_ONLY, nor when CUCORE_CUDA_SEARCH leaves out "loader").
bool search_loader_path();
// Why CUCORE_CUDA_SEARCH cannot be used (an unknown source), or empty. Nothing is searched then.
std::string search_error();
// The site-packages directories searched for NVIDIA's CUDA 13 wheels, in order: $CUCORE_CUDA_WHEELS
// (':'-separated), those the Python package registered (toolkit::add_wheel_directory), the
// site-packages of $VIRTUAL_ENV and $CONDA_PREFIX, and the one CMake took the headers from.
std::vector<std::string> wheel_site_packages();
void add_wheel_directory(std::string site_packages);

located_library locate(const library_spec& spec);

// Pins the file `spec`'s library is opened from in this process: locate() and find_in_roots() then
// look at that file alone, whatever the search would find. The drop-in libraries of `cucore run`
// (src/dropin/) pin the real library they forward to, so that cucore's key probes and compiles
// with the very library the program's calls reach (and never finds the drop-in itself through the
// loader path). Call before the library's table is first built; an empty path unpins.
void pin_library(const library_spec& spec, std::string path);
std::optional<std::string> pinned_library(const library_spec& spec);

// Every existing file `spec`'s library could be opened from under the CUDA roots, in locate()'s
// order, resolved through symlinks, without duplicates (nothing is loaded).
std::vector<std::string> files_in_roots(const library_spec& spec);

// The file `spec` would be opened from under the CUDA roots, found with stat() alone (nothing is
// loaded), resolved through symlinks; nullopt when no root has it (the loader path would decide).
std::optional<std::string> find_in_roots(const library_spec& spec);

}  // namespace cucore::detail
