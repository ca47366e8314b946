// What every drop-in library of `cucore run` shares (docs/transparent-cache.md): logging that stays
// silent unless CUCORE_LOG asks, the process's program cache, finding the real library it forwards
// to, and the length-prefixed record format of its cache entries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/log.hpp"
#include "cucore/toolkit.hpp"
#include "loader/shared_library.hpp"

namespace cucore::dropin {

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
                                             const char* override_variable, const void* self,
                                             std::vector<std::string>& searched,
                                             const std::vector<std::string_view>& wheel_dirs);

// The library a drop-in built for CUDA `major` (CUCORE_DROPIN_MAJOR) forwards to: `lib`'s search
// with that major's soname alone, so that the .so.12 drop-in never forwards to NVRTC 13.
detail::library_spec dropin_spec(toolkit::library lib, int major);
// Where cuda.pathfinder finds `lib` of `major` in a site-packages directory (NVIDIA's wheels).
std::vector<std::string_view> wheel_dirs(toolkit::library lib, int major);

// A flat record: fields appended in a fixed order, each a little-endian u64 length and its bytes;
// numbers as 8 bytes. reader throws format_error on anything short or malformed (a damaged cache
// entry is a miss).
class record_writer {
 public:
  explicit record_writer(std::string_view magic) { bytes(magic); }
  void number(std::int64_t value);
  void bytes(std::string_view data);
  void bytes(std::span<const std::byte> data) {
    bytes(std::string_view(reinterpret_cast<const char*>(data.data()), data.size()));
  }
  std::vector<std::byte> take() { return std::move(out_); }

 private:
  std::vector<std::byte> out_;
};

struct format_error {};

class record_reader {
 public:
  record_reader(std::span<const std::byte> data, std::string_view magic);
  std::int64_t number();
  std::string_view bytes();
  bool done() const noexcept { return at_ == data_.size(); }

 private:
  std::uint64_t u64();
  std::span<const std::byte> data_;
  std::size_t at_ = 0;
};

// "cucore-dropin" label and the process's current directory, for keys that depend on it.
std::string current_directory();

}  // namespace cucore::dropin
