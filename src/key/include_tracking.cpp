// Include tracking's entry points (include_tracking.hpp): the search a compile's options give, and
// the walk's closure (include_walker.hpp) digested for the key, or one an earlier walk left whose
// stats still hold (walk_manifest.hpp).
#include "key/include_tracking.hpp"

#include <algorithm>
#include <array>

#include "common/sha256.hpp"
#include "key/include_walker.hpp"
#include "key/walk_manifest.hpp"

namespace cucore::detail {

include_search search_of(const program_options& options, const std::vector<std::string>& flags) {
  include_search s;
  s.program_dir = dir_of(options.name);
  s.source_include = !options.no_source_include.value_or(false);
  constexpr std::string_view kInclude = "--include-path=";
  for (const auto& flag : flags) {
    if (flag.starts_with(kInclude)) s.include_path.push_back(flag.substr(kInclude.size()));
  }
  s.pre_include = options.pre_include;
  s.headers = &options.headers;
  s.defines = &options.define_macro;
  s.undefines = &options.undefine_macro;
  return s;
}

bool may_read_headers(std::string_view code, const program_options& options) {
  if (!options.pre_include.empty() || !options.headers.empty()) return true;
  for (const auto& m : options.define_macro) {
    if (m.name == "__GNUC__" || m.name == "__QNX__") return true;
  }
  for (const auto& name : options.undefine_macro) {
    if (name == "__CUDACC_RTC__") return true;
  }
  return may_reference_files(code);
}

namespace {

void frame(std::string& out, std::string_view label, std::string_view payload) {
  out.append(label);
  const auto n = static_cast<std::uint64_t>(payload.size());
  for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>(n >> (8 * i)));
  out.append(payload);
}

// include_closure::digest: hundreds of entries for CCCL, hashed in one pass once per walk.
std::array<std::byte, 32> digest_of(const std::vector<closure_entry>& entries) {
  std::string framed;
  framed.reserve(entries.size() * 112);
  std::string payload;
  for (const auto& e : entries) {
    switch (e.what) {
      case closure_entry::kind::file:
        payload.assign(e.path);
        payload.push_back('\0');
        payload.append(reinterpret_cast<const char*>(e.digest.data()), e.digest.size());
        frame(framed, "header", payload);
        break;
      case closure_entry::kind::absent:
        frame(framed, "header_absent", e.path);
        break;
      case closure_entry::kind::in_memory:
        frame(framed, "header_in_memory", e.path);
        break;
    }
  }
  return sha256(std::as_bytes(std::span<const char>(framed.data(), framed.size())));
}

}  // namespace

tracked_includes track_includes(std::string_view code, const include_search& search,
                                header_digest_memo* memo) {
  // Before the first stat: a file changed after this shows a newer stamp (store_problem_of).
  const std::int64_t started = now_ns();
  const std::string inputs = walk_inputs(code, search, current_directory());
  if (auto m = manifests().find(inputs)) {
    if (still_valid(*m, search)) return {m->closure, 0, true, m, started};
  }
  header_digest_memo& digests = memo != nullptr ? *memo : header_memo_for(std::nullopt);
  // A persistent cache: the manifest an earlier process left, before the memo is even loaded.
  std::optional<manifest_location> persistent;
  if (digests.file()) persistent = manifest_for(*digests.file(), inputs);
  if (persistent) {
    if (std::shared_ptr<const walk_manifest> m = load_manifest(*persistent);
        m && still_valid(*m, search)) {
      std::shared_ptr<const include_closure> closure = m->closure;
      manifests().put(inputs, m);
      return {std::move(closure), 0, true, std::move(m), started};
    }
  }
  include_walker w(search, digests);
  tracked_includes out;
  out.started_ns = started;
  include_closure closure = w.run(code);
  closure.digest = digest_of(closure.entries);
  out.closure = std::make_shared<const include_closure>(std::move(closure));
  out.hashed = w.hashed();
  // The checks are kept whether or not the walk may be reused: a compile is stored only if they
  // still hold when it has finished.
  auto m = std::make_shared<walk_manifest>();
  m->checks = w.take_checks();
  m->closure = out.closure;
  m->nvrtc_directory = w.nvrtc_directory();
  group_checks(*m);
  if (w.manifest_ok()) {
    if (persistent) save_manifest(*persistent, *m);
    manifests().put(inputs, m);
  }
  out.checks = std::move(m);
  return out;
}
}  // namespace cucore::detail
