#include "key/memoized_probes.hpp"

#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <type_traits>

#include "cache/key_files.hpp"
#include "cucore/cache/program_cache.hpp"
#include "key/include_tracking.hpp"
#include "loader/libraries.hpp"

namespace cucore::detail {
namespace {

// The identity of the file the loader would open for `lib` from the CUDA roots, without loading.
std::optional<file_identity> located(toolkit::library lib) {
  auto file = find_in_roots(library_spec_of(lib));
  if (!file) return std::nullopt;
  return identify_file(*file);
}

// True when the library this process loaded is exactly `file` (path, inode, size, mtime as the
// loader saw them), so the installed probe's answer describes that file. A library replaced on
// disk after this process loaded it must not lend the old version to the new file.
template <class Table>
bool loaded_from(const Table& table, const file_identity& file) {
  return table.api && table.api->library && table.api->library->identity() == file;
}

// The identity of the library this process loaded for `table`, once it has: the compiler its
// compiles use from then on, whatever the file on disk has become since.
template <class Table>
std::optional<file_identity> loaded_identity(const Table* table) {
  if (table == nullptr || !table->api || !table->api->library) return std::nullopt;
  return table->api->library->identity();
}

// The version for a loaded library: the memo's record for its identity, else the library's own
// answer (remembered). Without an identity, only its own answer.
template <class Probe, class Ask>
Probe probe_loaded(compiler_version_memo& memo, std::string_view name,
                   const std::optional<file_identity>& id, Ask&& ask) {
  if (!id) return ask();
  if (auto value = memo.lookup(name, *id)) {
    if constexpr (std::is_same_v<Probe, version_probe>) {
      return {true, *value};
    } else {
      return {true, linker_backend::nvjitlink, *value, {}};
    }
  }
  Probe probe = ask();
  if constexpr (std::is_same_v<Probe, version_probe>) {
    if (probe.ok) memo.remember(name, *id, probe.value);
  } else {
    if (probe.ok && probe.backend == linker_backend::nvjitlink) {
      memo.remember(name, *id, probe.version);
    }
  }
  return probe;
}

// A compiler's version (NVRTC's, libNVVM's): once this process has loaded the library, the loaded
// one's, with no path search; before, the memo's record for the file the loader would open, else
// the installed probe's answer (remembered only when the library it loaded is that very file).
template <class Api>
version_probe library_version(compiler_version_memo& memo, std::string_view name,
                              toolkit::library lib, const library_table<Api>* loaded,
                              const library_table<Api>& (*table)(), version_probe (*ask)()) {
  if (loaded != nullptr)
    return probe_loaded<version_probe>(memo, name, loaded_identity(loaded), ask);
  const auto file = located(lib);
  if (file) {
    if (auto value = memo.lookup(name, *file)) return {true, *value};
  }
  version_probe probe = ask();
  if (probe.ok && file && loaded_from(table(), *file)) memo.remember(name, *file, probe.value);
  return probe;
}

}  // namespace

std::string nvrtc_library_directory() {
  const auto directory_of = [](const std::string& file) -> std::string {
    char resolved[PATH_MAX];
    const std::string real = ::realpath(file.c_str(), resolved) != nullptr ? resolved : file;
    const auto slash = real.rfind('/');
    return slash == std::string::npos ? std::string() : real.substr(0, slash);
  };
  if (const auto* loaded = nvrtc_table_if_loaded();
      loaded != nullptr && loaded->api && loaded->api->nvrtcVersion != nullptr) {
    // Found through the loader path, the library's path may be a bare soname: ask the loader.
    // A loaded library stays where it is for the process's life: asked once (every key that
    // reuses a walk asks).
    static const std::string directory = [&] {
      Dl_info info{};
      if (::dladdr(reinterpret_cast<void*>(loaded->api->nvrtcVersion), &info) != 0 &&
          info.dli_fname != nullptr && info.dli_fname[0] == '/') {
        return directory_of(info.dli_fname);
      }
      return std::string();
    }();
    return directory;
  }
  if (auto file = find_in_roots(library_spec_of(toolkit::library::nvrtc))) {
    if (!file->empty() && file->front() == '/') return directory_of(*file);
  }
  return {};
}

memoized_compiler_probes::memoized_compiler_probes(std::filesystem::path memo_file)
    : memo_(memo_file), header_memo_(header_memo_file_beside(memo_file)) {}

version_probe memoized_compiler_probes::nvrtc() const {
  // Once this process has loaded NVRTC, that library compiles: its identity, not the file the
  // search would find now (which may have been replaced), and no path search per key.
  return library_version(memo_, "nvrtc", toolkit::library::nvrtc, nvrtc_table_if_loaded(),
                         &nvrtc_table, [] { return installed_compiler_probes().nvrtc(); });
}

version_probe memoized_compiler_probes::nvvm() const {
  return library_version(memo_, "nvvm", toolkit::library::nvvm, nvvm_table_if_loaded(), &nvvm_table,
                         [] { return installed_compiler_probes().nvvm(); });
}

linker_probe memoized_compiler_probes::linker() const {
  // nvJitLink is the backend whenever it loads; a remembered nvJitLink identity means it loaded
  // from this very file before. The driver linker (no nvJitLink) is not memoized: linking with
  // it needs the driver loaded anyway.
  if (const auto* loaded = nvjitlink_table_if_loaded(); loaded != nullptr && loaded->api) {
    return probe_loaded<linker_probe>(memo_, "nvjitlink", loaded_identity(loaded),
                                      [] { return installed_compiler_probes().linker(); });
  }
  const auto file = located(toolkit::library::nvjitlink);
  if (file) {
    if (auto value = memo_.lookup("nvjitlink", *file)) {
      return {true, linker_backend::nvjitlink, *value, {}};
    }
  }
  linker_probe probe = installed_compiler_probes().linker();
  if (probe.ok && probe.backend == linker_backend::nvjitlink && file &&
      loaded_from(nvjitlink_table(), *file)) {
    memo_.remember("nvjitlink", *file, probe.version);
  }
  return probe;
}

const compiler_probes& probes_with_memo(const std::filesystem::path& memo_file) {
  static std::mutex mutex;
  static auto* probes = new std::map<std::filesystem::path,
                                     std::unique_ptr<memoized_compiler_probes>>();  // leaked
  std::lock_guard lock(mutex);
  auto& slot = (*probes)[memo_file];
  if (!slot) slot = std::make_unique<memoized_compiler_probes>(memo_file);
  return *slot;
}

}  // namespace cucore::detail

namespace cucore {

const compiler_probes& compiler_probes_for(const program_cache& cache) {
  if (auto memo = cache.compiler_version_memo()) return detail::probes_with_memo(*memo);
  return installed_compiler_probes();
}

}  // namespace cucore
