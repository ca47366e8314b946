#include "loader/libraries.hpp"

#include "observe/compiler_observer.hpp"

#include <unistd.h>

#include <cudaTypedefs.h>

#include <atomic>
#include <string>
#include <type_traits>
#include <utility>

#include "cucore/error.hpp"
#include "observe/compiler_variables.hpp"

namespace cucore::detail {
namespace {

#if defined(__x86_64__)
constexpr std::string_view kTargetLibDir = "targets/x86_64-linux/lib";
#elif defined(__aarch64__)
constexpr std::string_view kTargetLibDir = "targets/sbsa-linux/lib";
#else
constexpr std::string_view kTargetLibDir = "targets/linux/lib";
#endif

// Marks the library unusable and unloads it; returns the table for `return mark_missing(...)`.
template <class Api>
library_table<Api> mark_missing(library_table<Api>& table, std::string why) {
  table.api.reset();
  table.status.found = false;
  table.status.error = std::move(why);
  return std::move(table);
}

// Opens the library and fills every pointer in `Api` with `resolve(name)`; a missing symbol makes
// the library unusable (an old or foreign build) rather than crashing later.
template <class Api, class Resolve, class Fill>
library_table<Api> load(toolkit::library lib, const library_spec& spec, Resolve resolve,
                        Fill fill) {
  library_table<Api> table;
  table.status.which = lib;
  located_library found = locate(spec);
  table.status.searched = std::move(found.searched);
  if (!found.library) return mark_missing(table, std::move(found.error));
  table.status.path = found.library->path();
  table.status.source = std::move(found.source);
  table.api = std::make_unique<Api>();
  table.api->library = std::move(*found.library);
  std::string missing_symbol;
  fill(*table.api, [&](const char* name) -> void* {
    void* p = resolve(*table.api, name);
    if (p == nullptr && missing_symbol.empty()) missing_symbol = name;
    return p;
  });
  if (!missing_symbol.empty()) {
    std::string why = table.status.path + " has no entry point " + missing_symbol +
                      " (too old, or not the library cucore expects)";
    return mark_missing(table, std::move(why));
  }
  table.status.found = true;
  return table;
}

void* plain_symbol(const shared_library& lib, const char* name) {
  return lib.symbol(name);
}

// An entry point of a later release: null when the library lacks it.
template <class Api, class Fn>
void optional_symbol(const Api& api, Fn& out, const char* name) {
  out = reinterpret_cast<Fn>(plain_symbol(*api.library, name));
}

// A compiler library (NVRTC, nvJitLink, libNVVM): its entry points found by name, and what its
// compiles read observed (observe/compiler_observer.hpp) under `observed_as`.
template <class Api, class Fill>
library_table<Api> load_compiler(toolkit::library lib, const char* observed_as, Fill fill) {
  // What the compilers' variables were as a compiler first read them (some are read once).
  note_compiler_environment_at_load();
  auto table = load<Api>(
      lib, library_spec_of(lib),
      [](const Api& api, const char* name) { return plain_symbol(*api.library, name); }, fill);
  if (table.api) observe_compiler_library(table.api->library->handle(), observed_as);
  return table;
}

library_table<nvrtc_api> load_nvrtc() {
  auto table =
      load_compiler<nvrtc_api>(toolkit::library::nvrtc, "NVRTC", [](nvrtc_api& api, auto&& sym) {
#define CUCORE_FILL(name) api.name = reinterpret_cast<decltype(api.name)>(sym(#name));
        CUCORE_NVRTC_FUNCTIONS(CUCORE_FILL)
#undef CUCORE_FILL
      });
  if (table.api) {
    auto& v = table.api->nvrtc_version;
    nvrtcResult r = table.api->nvrtcVersion(&v.major, &v.minor);
    if (r != NVRTC_SUCCESS) {
      std::string why = std::string("nvrtcVersion failed: ") + table.api->nvrtcGetErrorString(r);
      return mark_missing(table, std::move(why));
    }
    table.status.version = v.to_string();
    {
      const std::string& file = table.api->library->path();
      const std::string builtins = file.substr(0, file.rfind('/') + 1) + "libnvrtc-builtins.so." +
                                   std::to_string(v.major) + "." + std::to_string(v.minor);
      std::string ignored;
      if (file.find('/') != std::string::npos && ::access(builtins.c_str(), R_OK) == 0) {
        table.api->builtins = shared_library::open(builtins, ignored);
      }
    }
    // Optional entry points of later releases: a table without them is still whole.
    optional_symbol(*table.api, table.api->nvrtcInstallBundledHeaders,
                    "nvrtcInstallBundledHeaders");
    optional_symbol(*table.api, table.api->nvrtcGetBundledHeadersInfo,
                    "nvrtcGetBundledHeadersInfo");
    optional_symbol(*table.api, table.api->nvrtcGetTileIRSize, "nvrtcGetTileIRSize");
    optional_symbol(*table.api, table.api->nvrtcGetTileIR, "nvrtcGetTileIR");
  }
  return table;
}

library_table<nvjitlink_api> load_nvjitlink() {
  auto table = load_compiler<nvjitlink_api>(toolkit::library::nvjitlink, "nvJitLink",
                                            [](nvjitlink_api& api, auto&& sym) {
#define CUCORE_FILL(name) api.name = reinterpret_cast<decltype(api.name)>(sym(#name));
                                              CUCORE_NVJITLINK_FUNCTIONS(CUCORE_FILL)
#undef CUCORE_FILL
                                            });
  if (table.api) {
    auto& v = table.api->nvjitlink_version;
    unsigned major = 0;
    unsigned minor = 0;
    if (table.api->nvJitLinkVersion(&major, &minor) != NVJITLINK_SUCCESS) {
      return mark_missing(table, "nvJitLinkVersion failed");
    }
    v = {static_cast<int>(major), static_cast<int>(minor)};
    table.status.version = v.to_string();
    optional_symbol(*table.api, table.api->nvJitLinkGetLinkedLTOIRSize,
                    "nvJitLinkGetLinkedLTOIRSize");
    optional_symbol(*table.api, table.api->nvJitLinkGetLinkedLTOIR, "nvJitLinkGetLinkedLTOIR");
  }
  return table;
}

library_table<nvvm_api> load_nvvm() {
  auto table =
      load_compiler<nvvm_api>(toolkit::library::nvvm, "libNVVM", [](nvvm_api& api, auto&& sym) {
#define CUCORE_FILL(name) api.name = reinterpret_cast<decltype(api.name)>(sym(#name));
        CUCORE_NVVM_FUNCTIONS(CUCORE_FILL)
#undef CUCORE_FILL
      });
  if (table.api) {
    auto& v = table.api->versions;
    if (table.api->nvvmVersion(&v.library.major, &v.library.minor) != NVVM_SUCCESS ||
        table.api->nvvmIRVersion(&v.ir.major, &v.ir.minor, &v.debug_metadata.major,
                                 &v.debug_metadata.minor) != NVVM_SUCCESS) {
      return mark_missing(table, "nvvmVersion/nvvmIRVersion failed");
    }
    table.status.version = v.library.to_string() + " (IR " + v.ir.to_string() + ", debug " +
                           v.debug_metadata.to_string() + ")";
    optional_symbol(*table.api, table.api->nvvmLLVMVersion, "nvvmLLVMVersion");
  }
  return table;
}

using get_proc_address_v2 = CUresult (*)(const char*, void**, int, cuuint64_t,
                                         CUdriverProcAddressQueryResult*);

// cuGetProcAddress(name, CUDA_VERSION) returns the newest version of `name` up to CUDA_VERSION.
// For most entry points that is what cuda.h's un-versioned name declares (its macros map the name
// to the newest version), but CUDA 13.0 added cuCtxGetDevice_v2 and cuCtxSynchronize_v2, which
// take a context, as the 13000 versions while cuda.h keeps the old signatures under the plain
// names. Those are asked for at the version their declaration is (checked below against
// cudaTypedefs.h), so every pointer has the type it is declared with.
int requested_version(std::string_view name) {
  if (name == "cuCtxGetDevice" || name == "cuCtxSynchronize") return 2000;
  return CUDA_VERSION;
}
static_assert(std::is_same_v<decltype(&::cuCtxGetDevice), PFN_cuCtxGetDevice_v2000>);
static_assert(std::is_same_v<decltype(&::cuCtxSynchronize), PFN_cuCtxSynchronize_v2000>);

library_table<driver_api> load_driver() {
  const library_spec& spec = library_spec_of(toolkit::library::driver);
  auto table = load<driver_api>(
      toolkit::library::driver, spec,
      [](const driver_api& api, const char* name) -> void* {
        auto gpa =
            reinterpret_cast<get_proc_address_v2>(api.library->symbol("cuGetProcAddress_v2"));
        if (gpa == nullptr) return nullptr;
        void* fn = nullptr;
        CUdriverProcAddressQueryResult status{};
        if (gpa(name, &fn, requested_version(name), CU_GET_PROC_ADDRESS_DEFAULT, &status) !=
                CUDA_SUCCESS ||
            status != CU_GET_PROC_ADDRESS_SUCCESS) {
          return nullptr;
        }
        return fn;
      },
      [](driver_api& api, auto&& sym) {
#define CUCORE_FILL(name) api.name = reinterpret_cast<decltype(api.name)>(sym(#name));
        CUCORE_DRIVER_FUNCTIONS(CUCORE_FILL)
#undef CUCORE_FILL
      });
  if (table.api) {
    if (table.api->cuDriverGetVersion(&table.api->driver_version) != CUDA_SUCCESS) {
      return mark_missing(table, "cuDriverGetVersion failed");
    }
    table.status.version =
        version{table.api->driver_version / 1000, (table.api->driver_version % 1000) / 10}
            .to_string();
    table.api->init_result = table.api->cuInit(0);
  }
  return table;
}

template <class Api>
const Api& require(const library_table<Api>& table, std::string_view feature) {
  if (!table.api) {
    throw library_not_found(std::string(toolkit::library_name(table.status.which)),
                            table.status.searched, std::string(feature), table.status.error);
  }
  return *table.api;
}

}  // namespace

const library_spec& library_spec_of(toolkit::library lib) {
  static const library_spec nvrtc{"NVRTC",
                                  {"libnvrtc.so.13", "libnvrtc.so.12"},
                                  {"lib64", "lib", kTargetLibDir},
                                  true,
                                  {"cuda_nvrtc/lib/libnvrtc.so.12"}};
  static const library_spec nvjitlink{"nvJitLink",
                                      {"libnvJitLink.so.13", "libnvJitLink.so.12"},
                                      {"lib64", "lib", kTargetLibDir},
                                      true,
                                      {"nvjitlink/lib/libnvJitLink.so.12"}};
  // CUDA 12's nvidia-cuda-nvcc-cu12 ships libnvvm.so alone (no .so.4 name).
  static const library_spec nvvm{
      "libNVVM",
      {"libnvvm.so.4"},
      {"nvvm/lib64", "lib64", "lib", kTargetLibDir},
      true,
      {"cuda_nvcc/nvvm/lib64/libnvvm.so.4", "cuda_nvcc/nvvm/lib64/libnvvm.so"}};
  // Only the loader path: the toolkit's lib64/stubs/libcuda.so must never be picked up.
  static const library_spec driver{"CUDA driver", {"libcuda.so.1"}, {}, /*search_roots=*/false, {}};
  switch (lib) {
    case toolkit::library::nvrtc:
      return nvrtc;
    case toolkit::library::nvjitlink:
      return nvjitlink;
    case toolkit::library::nvvm:
      return nvvm;
    case toolkit::library::driver:
      return driver;
  }
  return driver;
}

// Leaked on purpose: see library_table.
namespace {
// Set once a table exists: whether this process has already tried to load the library, asked
// without trying.
std::atomic<const library_table<nvrtc_api>*> nvrtc_loaded{nullptr};
std::atomic<const library_table<nvjitlink_api>*> nvjitlink_loaded{nullptr};
std::atomic<const library_table<nvvm_api>*> nvvm_loaded{nullptr};
}  // namespace

const library_table<nvrtc_api>& nvrtc_table() {
  static const auto* table = [] {
    const auto* t = new library_table<nvrtc_api>(load_nvrtc());
    nvrtc_loaded.store(t, std::memory_order_release);
    return t;
  }();
  return *table;
}
const library_table<nvjitlink_api>& nvjitlink_table() {
  static const auto* table = [] {
    const auto* t = new library_table<nvjitlink_api>(load_nvjitlink());
    nvjitlink_loaded.store(t, std::memory_order_release);
    return t;
  }();
  return *table;
}
const library_table<nvvm_api>& nvvm_table() {
  static const auto* table = [] {
    const auto* t = new library_table<nvvm_api>(load_nvvm());
    nvvm_loaded.store(t, std::memory_order_release);
    return t;
  }();
  return *table;
}
const library_table<nvrtc_api>* nvrtc_table_if_loaded() noexcept {
  return nvrtc_loaded.load(std::memory_order_acquire);
}
const library_table<nvjitlink_api>* nvjitlink_table_if_loaded() noexcept {
  return nvjitlink_loaded.load(std::memory_order_acquire);
}
const library_table<nvvm_api>* nvvm_table_if_loaded() noexcept {
  return nvvm_loaded.load(std::memory_order_acquire);
}
const library_table<driver_api>& driver_table() {
  static const auto* table = new library_table<driver_api>(load_driver());
  return *table;
}

const nvrtc_api& nvrtc(std::string_view feature) {
  return require(nvrtc_table(), feature);
}
const nvjitlink_api& nvjitlink(std::string_view feature) {
  return require(nvjitlink_table(), feature);
}
const nvvm_api& nvvm(std::string_view feature) {
  return require(nvvm_table(), feature);
}

const driver_api& driver(std::string_view feature) {
  const driver_api& api = require(driver_table(), feature);
  check_driver(api.init_result, "cuInit");
  return api;
}

void check_driver(CUresult result, const char* call, std::string_view detail) {
  if (result == CUDA_SUCCESS) return;
  const char* name = nullptr;
  const char* text = nullptr;
  if (const auto& table = driver_table(); table.api) {
    table.api->cuGetErrorName(result, &name);
    table.api->cuGetErrorString(result, &text);
  }
  throw cuda_error(static_cast<int>(result), name ? name : "CUDA_ERROR_UNKNOWN", call,
                   !detail.empty() ? std::string(detail) : std::string(text ? text : ""));
}

}  // namespace cucore::detail
