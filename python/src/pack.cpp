// cucore.export_pack, import_pack, verify_pack: cache packs (cucore/cache/pack.hpp,
// docs/cache-packs.md).
#include "pack.hpp"

#include <nanobind/stl/filesystem.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <string>

#include "convert.hpp"
#include "cucore/cache/pack.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace cucore::python {
namespace {

program_cache& native_cache(nb::handle cache) {
  if (nb::isinstance<program_cache>(cache)) return *nb::cast<program_cache*>(cache);
  // cucore.cuda_core's wrappers for cuda.core carry the native cache.
  if (nb::object native = nb::getattr(cache, "native", nb::none());
      !native.is_none() && nb::isinstance<program_cache>(native)) {
    return *nb::cast<program_cache*>(native);
  }
  throw nb::type_error(("cache must be a cucore ProgramCache (or a cucore.cuda_core cache), got " +
                        std::string(nb::inst_name(cache).c_str()))
                           .c_str());
}

// A progress bar on stderr, only when it is a terminal (written with write(2): the GIL is
// released while a pack is read or written).
pack_progress_callback progress_bar(bool quiet) {
  if (quiet || ::isatty(STDERR_FILENO) != 1) return {};
  return [last = std::chrono::steady_clock::time_point{}](const pack_progress& p) mutable {
    const auto now = std::chrono::steady_clock::now();
    if (p.done != p.total && now - last < std::chrono::milliseconds(100)) return;
    last = now;
    const char* what = p.what == pack_progress::stage::exporting   ? "exporting"
                       : p.what == pack_progress::stage::verifying ? "verifying"
                                                                   : "importing";
    constexpr std::size_t width = 24;
    const std::size_t filled = p.total == 0 ? width : width * p.done / p.total;
    std::string line = "\r" + std::string(what) + " [" + std::string(filled, '#') +
                       std::string(width - filled, '-') + "] " + std::to_string(p.done) + "/" +
                       std::to_string(p.total) + " entries, " + std::to_string(p.bytes_done) +
                       " bytes\033[K";
    if (p.done == p.total) line += "\r\033[K";
    (void)!::write(STDERR_FILENO, line.data(), line.size());
  };
}

std::optional<std::chrono::system_clock::time_point> since_of(nb::handle since) {
  if (since.is_none()) return std::nullopt;
  // A datetime (its timestamp(): naive ones are local time, as Python reads them) or seconds
  // since the epoch.
  const double seconds = nb::hasattr(since, "timestamp")
                             ? nb::cast<double>(since.attr("timestamp")())
                             : nb::cast<double>(since);
  if (!std::isfinite(seconds)) throw nb::value_error("since must be a finite time");
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::duration<double>(seconds)));
}

}  // namespace

void bind_packs(nb::module_& m) {
  m.def(
      "export_pack",
      [](nb::handle cache, const std::filesystem::path& path, nb::handle keys, nb::handle since,
         std::optional<std::string> match, bool quiet) {
        program_cache& from = native_cache(cache);
        pack_selection selection;
        if (!keys.is_none()) {
          for (nb::handle key : keys) {
            const std::string k = key_bytes(key);
            selection.keys.emplace_back(reinterpret_cast<const std::byte*>(k.data()),
                                        reinterpret_cast<const std::byte*>(k.data()) + k.size());
          }
        }
        selection.since = since_of(since);
        selection.match = std::move(match);
        const pack_export_result r =
            without_gil([&] { return export_pack(from, path, selection, progress_bar(quiet)); });
        return counts_dict({{"entries", r.entries},
                            {"skipped", r.skipped},
                            {"with_compiler_identity", r.with_compiler_identity},
                            {"code_bytes", r.code_bytes},
                            {"pack_bytes", r.file_bytes}});
      },
      nb::sig("def export_pack(cache: ProgramCache, path: str | os.PathLike[str], *, keys: "
              "collections.abc.Iterable[bytes | str] | None = None, since: datetime.datetime | "
              "float | None = None, match: str | None = None, quiet: bool = True) -> dict[str, "
              "int]"),
      "cache"_a, "path"_a, nb::kw_only(), "keys"_a.none() = nb::none(),
      "since"_a.none() = nb::none(), "match"_a.none() = nb::none(), "quiet"_a = true,
      "Writes the cache's entries to the pack file `path` (docs/cache-packs.md): all, or the "
      "`keys`, or those used since `since` and/or whose program name matches the glob `match`. "
      "Streamed, one entry at a time, through a temporary file renamed at the end. A progress bar "
      "on a terminal unless quiet. Returns entries, skipped, with_compiler_identity, code_bytes, "
      "pack_bytes.");
  m.def(
      "import_pack",
      [](nb::handle cache, const std::filesystem::path& path, bool quiet) {
        program_cache& into = native_cache(cache);
        const pack_import_result r =
            without_gil([&] { return import_pack(into, path, progress_bar(quiet)); });
        return counts_dict({{"entries", r.entries},
                            {"added", r.added},
                            {"already_present", r.already_present},
                            {"bytes_added", r.bytes_added}});
      },
      nb::sig("def import_pack(cache: ProgramCache, path: str | os.PathLike[str], *, quiet: bool "
              "= True) -> dict[str, int]"),
      "cache"_a, "path"_a, nb::kw_only(), "quiet"_a = true,
      "Adds the pack's entries to the cache: every record is verified first (a damaged or "
      "foreign pack raises InvalidArgument naming the record and adds nothing), then each entry "
      "whose key the cache lacks is put; one already there is never replaced. Returns entries, "
      "added, already_present, bytes_added.");
  m.def(
      "verify_pack",
      [](const std::filesystem::path& path) {
        const pack_info info = without_gil([&] { return verify_pack(path); });
        nb::dict d = counts_dict({{"entries", info.entries},
                                  {"code_bytes", info.code_bytes},
                                  {"pack_bytes", info.file_bytes},
                                  {"format_version", info.format_version}});
        d["cucore_version"] = info.cucore_version;
        d["created"] =
            std::chrono::duration_cast<std::chrono::seconds>(info.created.time_since_epoch())
                .count();
        return d;
      },
      nb::sig("def verify_pack(path: str | os.PathLike[str]) -> dict[str, typing.Any]"), "path"_a,
      "Verifies every record of the pack without adding anything (InvalidArgument names the first "
      "problem). Returns entries, code_bytes, pack_bytes, format_version, cucore_version, created "
      "(Unix seconds).");
}

}  // namespace cucore::python
