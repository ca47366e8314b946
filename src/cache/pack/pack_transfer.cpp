// export_pack, verify_pack and import_pack (cucore/cache/pack.hpp).
#include <fnmatch.h>

#include <algorithm>
#include <map>
#include <set>

#include "cache/pack/pack_format.hpp"
#include "cache/program_notes.hpp"
#include "common/hex.hpp"
#include "cucore/cache/pack.hpp"
#include "cucore/cache/statistics.hpp"

namespace cucore {
namespace {

// The compiler lines of a note's key fields (encoded "LABEL\tPAYLOAD\n"): the identity the key
// hashed for the code type's compiler, and the key schema.
std::string compiler_identity_of(std::string_view fields) {
  static const std::set<std::string_view> labels = {
      "schema",         "nvrtc",          "nvrtc_probe_failed", "nvvm", "nvvm_probe_failed",
      "linker_backend", "linker_version", "linker_probe_failed"};
  std::string out;
  while (!fields.empty()) {
    const auto end = fields.find('\n');
    const std::string_view line = fields.substr(0, end);
    fields = end == std::string_view::npos ? std::string_view() : fields.substr(end + 1);
    if (labels.contains(line.substr(0, line.find('\t')))) {
      out.append(line);
      out += '\n';
    }
  }
  return out;
}

void report(const pack_progress_callback& progress, const pack_progress& p) {
  if (progress) progress(p);
}

// The entries to export, in key order (a pack of the same entries is the same but for its time).
struct candidate {
  std::string key;
  std::optional<std::chrono::system_clock::time_point> last_used;
};

std::vector<candidate> select(program_cache& from, const pack_selection& selection) {
  std::vector<candidate> out;
  if (!selection.keys.empty()) {
    std::set<std::string> seen;
    for (const auto& k : selection.keys) {
      std::string key(reinterpret_cast<const char*>(k.data()), k.size());
      if (seen.insert(key).second) out.push_back({std::move(key), std::nullopt});
    }
    return out;
  }
  for (cache_entry_info& e : from.list()) {
    if (selection.since && (!e.last_used || *e.last_used < *selection.since)) continue;
    if (selection.match && ::fnmatch(selection.match->c_str(), e.name.c_str(), 0) != 0) continue;
    out.push_back(
        {std::string(reinterpret_cast<const char*>(e.key.data()), e.key.size()), e.last_used});
  }
  std::sort(out.begin(), out.end(),
            [](const candidate& a, const candidate& b) { return a.key < b.key; });
  return out;
}

}  // namespace

pack_export_result export_pack(program_cache& from, const std::filesystem::path& pack,
                               const pack_selection& selection,
                               const pack_progress_callback& progress,
                               std::optional<std::filesystem::path> notes_directory) {
  const std::vector<candidate> chosen = select(from, selection);
  // The compiler each entry was made with, where a note still names its key.
  if (!notes_directory) {
    if (const auto stats = from.statistics()) notes_directory = stats->directory();
  }
  std::map<std::string, std::string> identities;
  for (auto& note : detail::all_program_notes(notes_directory)) {
    std::string identity = compiler_identity_of(note.fields);
    if (!identity.empty()) identities.emplace(std::move(note.key_hex), std::move(identity));
  }

  detail::pack::writer out(pack);
  pack_export_result result;
  pack_progress p{pack_progress::stage::exporting, 0, chosen.size(), 0, 0};
  report(progress, p);
  for (const candidate& c : chosen) {
    // One entry at a time: read, written, dropped before the next is read.
    std::optional<object_code> code = from.get(c.key);
    if (!code) {
      if (!selection.keys.empty()) {
        throw invalid_argument("no entry " + detail::to_hex(c.key) + " in the " +
                               from.description() +
                               " cache: nothing exported (`cucore cache ls` lists the keys)");
      }
      ++result.skipped;
    } else {
      const auto it = identities.find(detail::to_hex(c.key));
      std::string_view identity;  // not `?:`, whose std::string temporary would dangle
      if (it != identities.end()) identity = it->second;
      p.bytes_done += out.add(c.key, *code, identity, c.last_used);
      ++result.entries;
      result.code_bytes += code->size();
      if (!identity.empty()) ++result.with_compiler_identity;
    }
    ++p.done;
    report(progress, p);
  }
  result.file_bytes = out.commit();
  return result;
}

namespace {

// Pass 1 of an import, and verify_pack: every record checked, in file order.
void verify_all(const detail::pack::reader& in, const pack_progress_callback& progress) {
  const auto& rows = in.rows();
  std::uint64_t total = 0;
  for (const auto& r : rows) total += r.compressed;
  pack_progress p{pack_progress::stage::verifying, 0, rows.size(), 0, total};
  report(progress, p);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const detail::pack::record r = in.read(i, /*with_code=*/false);
    if (!r.error.empty()) throw in.error_at(i, r.error);
    ++p.done;
    p.bytes_done += rows[i].compressed;
    report(progress, p);
  }
}

}  // namespace

pack_info verify_pack(const std::filesystem::path& pack, const pack_progress_callback& progress) {
  const detail::pack::reader in(pack);
  verify_all(in, progress);
  return in.info();
}

pack_import_result import_pack(program_cache& into, const std::filesystem::path& pack,
                               const pack_progress_callback& progress) {
  const detail::pack::reader in(pack);
  verify_all(in, progress);
  const auto& rows = in.rows();
  pack_import_result result;
  result.entries = rows.size();
  pack_progress p{pack_progress::stage::importing, 0, rows.size(), 0, 0};
  for (const auto& r : rows) p.bytes_total += r.compressed;
  report(progress, p);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    // Never replaced: a key the cache answers is left as it is.
    if (into.get(rows[i].key)) {
      ++result.already_present;
    } else {
      detail::pack::record r = in.read(i, /*with_code=*/true);
      if (!r.error.empty()) {
        // Checked a moment ago: the file changed under the import.
        throw in.error_at(i, r.error + "; it changed during the import, after " +
                                 std::to_string(result.added) + " entries were added");
      }
      into.put(rows[i].key, *r.code);
      ++result.added;
      result.bytes_added += r.code->size();
    }
    ++p.done;
    p.bytes_done += rows[i].compressed;
    report(progress, p);
  }
  return result;
}

}  // namespace cucore
