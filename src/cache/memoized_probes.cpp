#include "cache/memoized_probes.hpp"

#include <map>
#include <memory>
#include <mutex>

#include "cache/include_tracking.hpp"
#include "cucore/cache/program_cache.hpp"
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

}  // namespace

memoized_compiler_probes::memoized_compiler_probes(std::filesystem::path memo_file)
    : memo_(memo_file), header_memo_(header_memo_file_beside(memo_file)) {}

version_probe memoized_compiler_probes::nvrtc() const {
  const auto file = located(toolkit::library::nvrtc);
  if (file) {
    if (auto value = memo_.lookup("nvrtc", *file)) return {true, *value};
  }
  version_probe probe = installed_compiler_probes().nvrtc();
  if (probe.ok && file && loaded_from(nvrtc_table(), *file)) {
    memo_.remember("nvrtc", *file, probe.value);
  }
  return probe;
}

version_probe memoized_compiler_probes::nvvm() const {
  const auto file = located(toolkit::library::nvvm);
  if (file) {
    if (auto value = memo_.lookup("nvvm", *file)) return {true, *value};
  }
  version_probe probe = installed_compiler_probes().nvvm();
  if (probe.ok && file && loaded_from(nvvm_table(), *file)) {
    memo_.remember("nvvm", *file, probe.value);
  }
  return probe;
}

linker_probe memoized_compiler_probes::linker() const {
  // nvJitLink is the backend whenever it loads; a remembered nvJitLink identity means it loaded
  // from this very file before. The driver linker (no nvJitLink) is not memoized: linking with
  // it needs the driver loaded anyway.
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
