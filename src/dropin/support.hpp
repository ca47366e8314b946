// What every drop-in library of `cucore run` shares (docs/transparent-cache.md): logging that stays
// silent unless CUCORE_LOG asks, the process's program cache, finding the real library it forwards
// to, and the record format of its cache entries (dropin/recorded_output.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/environment.hpp"
#include "common/recorded_output.hpp"
#include "common/sha256.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/log.hpp"
#include "cucore/toolkit.hpp"
#include "loader/shared_library.hpp"

namespace cucore::dropin {

// The record format (common/recorded_output.hpp), as the drop-ins name it.
using detail::recorded::answer_bytes;
using detail::recorded::answer_size;
using detail::recorded::format_error;
using detail::recorded::read_output;
using detail::recorded::record_output;
using detail::recorded::record_reader;
using detail::recorded::record_writer;
using detail::recorded::recorded_output;
using detail::recorded::write_output;

// CUCORE_LOG: unset, "", "0" or "off": nothing is printed (cucore's own warnings included);
// "warning" (or "1"): warnings and errors; "info": also one line per compile (hit, miss, bypass and
// why); "debug": everything. Lines go to stderr, prefixed "cucore[PID]: ". Read once per process.
bool log_enabled(log_level level) noexcept;
void note(log_level level, std::string_view message) noexcept;
// Routes cucore's own log (cache warnings) through the CUCORE_LOG filter; idempotent.
void install_log_handler() noexcept;
// An error the user must see even with CUCORE_LOG off (the real library is missing), once per
// `what` and process.
void report_once(std::string_view what, std::string_view message) noexcept;

// The program cache the drop-ins of this process use, opened on first use from CUCORE_RUN_CACHE
// (a --cache SPEC; unset or empty: the default cache, as `cucore compile` opens it, with
// CUCORE_REMOTE_CACHE's Redis tier; "none": no cache). nullptr when there is none or it cannot be
// opened (logged once): every compile then goes to the real library.
program_cache* process_cache() noexcept;

// A digest key's last fields, alike for nvJitLink and libNVVM: the keyed variables the compilers
// read (observe/compiler_variables.hpp), then `inputs` (the modules or link inputs recorded); the
// key is the record's SHA-256.
detail::sha256_digest finish_digest_key(record_writer& key, record_writer inputs);

// Records a compile that went without the cache into the cache's persistent statistics.
void record_skip(cache_skip_reason reason) noexcept;

// The real library a drop-in forwards to: the one the program would have loaded without the
// drop-in (src/dropin/real_library.cpp), never the drop-in itself. `override_variable` when set (a
// path); else NVIDIA's wheel in the site-packages of the Python in this process, $CONDA_PREFIX
// (cuda.pathfinder's order); else the loader's search by soname (DT_RPATH of the objects that need
// it, CUCORE_RUN_LD_LIBRARY_PATH — the program's LD_LIBRARY_PATH before `cucore run` — or
// LD_LIBRARY_PATH, DT_RUNPATH, /etc/ld.so.conf's directories, the system's); else $CUDA_PATH,
// $CUDA_HOME; else cucore's own search. The file found is pinned in cucore's loader (pin_library),
// so cucore's key probes and compiles with exactly it. `self` is any address inside the drop-in.
// Returns the path, or nullopt with `searched` listing every place looked at and why.
std::optional<std::string> find_real_library(const detail::library_spec& spec,
                                             env::variable override_variable, const void* self,
                                             std::vector<std::string>& searched,
                                             const std::vector<std::string_view>& wheel_dirs);

// The library a drop-in built for CUDA `major` (CUCORE_DROPIN_MAJOR) forwards to: `lib`'s search
// with that major's soname alone, so that the .so.12 drop-in never forwards to NVRTC 13.
detail::library_spec dropin_spec(toolkit::library lib, int major);
// Where cuda.pathfinder finds `lib` of `major` in a site-packages directory (NVIDIA's wheels).
std::vector<std::string_view> wheel_dirs(toolkit::library lib, int major);

// How a drop-in names its real library to the user when it cannot forward to it.
struct real_library_names {
  const char* label;                // report_once's `what`: "nvrtc"
  const char* display;              // "NVRTC"
  const char* file;                 // "libnvrtc.so.13"
  env::variable override_variable;  // run_nvrtc: CUCORE_RUN_NVRTC
  const char* path_example;         // what to set it to: "the library"
  const char* load_failure;         // what to say when loading throws (out of memory)
};

// The real library `lib` of CUDA `major` (find_real_library of dropin_spec and wheel_dirs; `self`
// any address inside the drop-in): its path, or nullopt when there is none (told the user once).
std::optional<std::string> find_real_library_or_report(toolkit::library lib, int major,
                                                       const real_library_names& names,
                                                       const void* self);

// That library opened by cucore's loader's `table` (detail::nvrtc_table, ...), as a new Real
// (leaked: programs call the library until exit) with its `api` and `file_size` (which build of
// it the keys name) set, and `fill(real, library)` looking up what cucore's table lacks. nullptr,
// told the user once, when there is none or it is unusable.
template <class Real, class Table, class Fill>
const Real* load_real_library(toolkit::library lib, int major, const real_library_names& names,
                              const Table& (*table)(), const void* self, Fill fill) noexcept {
  try {
    install_log_handler();
    const auto path = find_real_library_or_report(lib, major, names, self);
    if (!path) return nullptr;
    const auto& opened = table();
    if (!opened.api) {
      report_once(names.label, std::string("cucore run: cannot use the real ") + names.display +
                                   " " + *path + ": " + opened.status.error);
      return nullptr;
    }
    const auto& library = *opened.api->library;
    auto* real = new Real;
    real->api = opened.api.get();
    fill(*real, library);
    if (const auto id = detail::identify_file(library.path())) {
      real->file_size = static_cast<std::int64_t>(id->size);
    }
    note(log_level::debug, "forwarding to " + library.path());
    return real;
  } catch (...) {
    report_once(names.label, names.load_failure);
    return nullptr;
  }
}

// "cucore-dropin" label and the process's current directory, for keys that depend on it.
std::string current_directory();

}  // namespace cucore::dropin
