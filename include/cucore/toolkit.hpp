// Discovery of the CUDA libraries cucore opens at run time, and their versions.
//
// cucore never links against a CUDA library. NVRTC, nvJitLink and libNVVM are searched, in order,
// in $CUCORE_CUDA_HOME, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda (each under lib64/, lib/,
// targets/<arch>-linux/lib/, and nvvm/lib64/ for libNVVM), then in NVIDIA's CUDA 13 pip wheels
// (<site-packages>/nvidia/cu13: see add_wheel_directory), then through the dynamic loader's own
// path. CUCORE_CUDA_SEARCH (a comma-separated list of CUCORE_CUDA_HOME, CUDA_HOME, CUDA_PATH,
// /usr/local/cuda, wheels, loader) chooses and orders those sources; CUCORE_CUDA_HOME_ONLY=1
// restricts the search to $CUCORE_CUDA_HOME. docs/library-discovery.md has the details. The driver
// (libcuda.so.1) is only ever taken from the loader path: the toolkit ships a stub of it that must
// never be loaded. Every probe is done once per process, is thread-safe, and is cached.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <vector>

namespace cucore {

struct version {
  int major = 0;
  int minor = 0;
  friend auto operator<=>(const version&, const version&) = default;
  std::string to_string() const;  // "13.0"
};

namespace toolkit {

enum class library { nvrtc, nvjitlink, nvvm, driver };

// The name a person reads: "NVRTC", "nvJitLink", "libNVVM", "CUDA driver".
std::string_view library_name(library lib) noexcept;

// What one probe found. When `found` is false, `error` says why and `searched` lists every place
// looked at; nothing was loaded.
struct library_status {
  library which{};
  bool found = false;
  std::string path;                   // the file opened (resolved), when found
  std::vector<std::string> searched;  // candidates tried, in order
  std::string version;                // "13.0"; for libNVVM "2.0 (IR 2.0, debug 3.2)"
  std::string error;                  // why it was not found, or why its version probe failed
  // Where it was found: "CUCORE_CUDA_HOME", "CUDA_HOME", "CUDA_PATH", "/usr/local/cuda",
  // "pip wheel in <site-packages>" or "loader path"; empty when not found.
  std::string source;
};

struct device_summary {
  int ordinal = 0;
  std::string name;
  std::string arch;  // "sm_90"
};

// What the loaded libraries offer beyond CUDA 13.0, by the entry points each exports (a library
// that is not found supports nothing).
struct capabilities {
  bool tile_ir = false;               // NVRTC: nvrtcGetTileIR (Tile code, 13.3+)
  bool bundled_headers = false;       // NVRTC: nvrtcInstallBundledHeaders (13.3+)
  unsigned bundled_header_files = 0;  // how many it bundles (nvrtcGetBundledHeadersInfo)
  std::string bundled_headers_cuda;   // their CUDA version, "13.5"
  bool linked_ltoir = false;          // nvJitLink: nvJitLinkGetLinkedLTOIR (13.3+)
  bool relocatable_lto_link = false;  // nvJitLink: -r with -lto (13.3+; 13.0 ignores -r there)
  bool llvm_version = false;          // libNVVM: nvvmLLVMVersion (13.1+)
  // libNVVM's LLVM version per architecture it was asked about: {"compute_90", 7}, ...
  std::vector<std::pair<std::string, int>> nvvm_llvm_versions;
};

struct report {
  library_status nvrtc;
  library_status nvjitlink;
  library_status nvvm;
  library_status driver;
  std::optional<std::string> libdevice;          // path of libdevice.10.bc, if found
  std::vector<std::string> include_directories;  // include_directories()
  std::string include_source;  // the source of their root, as library_status::source; or empty
  // Why NVRTC's bundled headers could not stand in for a toolkit without CCCL; empty otherwise.
  std::string bundled_headers_error;
  capabilities supports;
  std::vector<device_summary> devices;  // empty without a driver or without a GPU
};

// The include directories of the toolkit whose NVRTC compiles, in search order: its include/cccl
// (CCCL: cub/, cuda/, nv/, thrust/) then include/, whichever exist. The toolkit is the CUDA root
// (see above) under which NVRTC is found, found with stat() alone (no library is loaded); for a
// targets/<arch>-linux/lib layout its targets/<arch>-linux/include. Empty when NVRTC is not under a
// CUDA root (taken from the loader path: which toolkit it belongs to is unknown). Found once per
// process; never throws. program_options::toolkit_include_path appends them to NVRTC's -I list.
//
// A root without include/cccl (`pip install nvidia-cuda-nvrtc` alone) whose NVRTC carries bundled
// headers (13.3+) gets them instead: installed once into default_cache_dir()/bundled-headers/
// (bundled_include_directories()), and then searched and keyed as any include root.
const std::vector<std::string>& include_directories();

// NVRTC's bundled headers (13.3+) as include directories, in the order NVRTC's own
// --use-bundled-headers=DIR searches them: DIR, then DIR/cccl. DIR is
// default_cache_dir()/bundled-headers/<identity of the NVRTC file>, installed on the first call for
// that NVRTC (atomically: a temp directory renamed into place; processes may race) and only
// statted afterwards. Throws invalid_argument for an NVRTC without bundled headers (before 13.3),
// library_not_found without NVRTC, error when DIR is not this user's or writable by others.
std::vector<std::string> bundled_include_directories();

// Adds a site-packages directory to search for NVIDIA's CUDA 13 wheels (its nvidia/cu13), after
// those in $CUCORE_CUDA_WHEELS. The Python package registers the sys.path entries that hold the
// wheels when it is imported. Takes effect only for libraries not yet probed in this process.
void add_wheel_directory(std::string site_packages);

// Probes every library; never throws.
report query();
library_status status(library lib);

// Version probes. Each throws library_not_found if its library is missing.
version nvrtc_version();
version nvjitlink_version();
struct nvvm_version_info {
  version library;
  version ir;
  version debug_metadata;
};
nvvm_version_info nvvm_version();

// The driver's CUDA version (13000 → 13.0), or nullopt when no driver can be loaded. Never throws.
std::optional<version> driver_version();

// Number of CUDA devices; 0 without a driver or when cuInit fails (no GPU). Never throws.
int device_count();

// "sm_XY" of the device current on this thread (device 0 when no context is current), or nullopt
// without a GPU. This is the default `arch` of compilation.
std::optional<std::string> current_device_arch();

// Path of libdevice (nvvm/libdevice/libdevice.10.bc) under the first root that has it.
// Throws library_not_found naming the places searched.
std::string libdevice_path();

}  // namespace toolkit
}  // namespace cucore
