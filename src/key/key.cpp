// make_program_cache_key: gates, then SHA-256 over labelled, length-prefixed fields. The field
// order and framing are the key schema: any change to them (or to compiler_flags()) must bump
// kSchema.
#include "cucore/cache/key.hpp"

#include "common/hex.hpp"
#include "common/sha256.hpp"
#include "key/compiler_environment.hpp"
#include "key/include_scanner.hpp"
#include "key/include_tracking.hpp"
#include "key/memoized_probes.hpp"
#include "key/observation_gate.hpp"
#include "key/time_macros.hpp"
#include "key/walk_manifest.hpp"
#include "program/extra_nvrtc_options.hpp"
#include "program/nvrtc_option_table.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <mutex>

#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"

namespace cucore {
namespace {

using detail::to_hex;

constexpr std::string_view kSchema = "cucore-key-2";
constexpr std::string_view kHexDigits = "0123456789abcdef";

using digest = std::array<std::byte, program_cache_key::size>;

digest sha256(std::string_view data) {
  return detail::sha256(std::as_bytes(std::span<const char>(data.data(), data.size())));
}

// Whether explain() shows a payload as is: short printable ASCII.
bool shown_as_is(std::string_view payload) {
  constexpr std::size_t kMaxShown = 160;
  return payload.size() <= kMaxShown && std::all_of(payload.begin(), payload.end(), [](char c) {
           return static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7F;
         });
}

// A payload as people read it in explain().
std::string render(std::string_view payload) {
  constexpr std::size_t kMaxHex = 32;
  if (shown_as_is(payload)) return std::string(payload);
  const auto* first = reinterpret_cast<const std::byte*>(payload.data());
  if (payload.size() <= kMaxHex) {
    return "<" + std::to_string(payload.size()) +
           " bytes: " + to_hex(std::span(first, payload.size())) + ">";
  }
  return "<" + std::to_string(payload.size()) + " bytes, sha256 " +
         to_hex(sha256(payload)).substr(0, 12) + "...>";
}

// A field as hashed, kept for explain(), which renders it only when asked (a hit never does).
struct recorded_field {
  enum class form : std::uint8_t { raw, shown, content };
  std::string_view label;  // a string literal: every label is one (no allocation per field)
  std::string payload;     // raw: the payload; shown: the text to show; content: the source if
                           // shown as is, else empty
  form how = form::raw;
  std::size_t content_size = 0;
  digest content_digest{};

  key_field rendered() const {
    switch (how) {
      case form::raw:
        return {std::string(label), render(payload)};
      case form::shown:
        return {std::string(label), payload};
      case form::content:
        if (content_size == payload.size() && shown_as_is(payload)) {
          return {std::string(label), payload};
        }
        return {std::string(label), "<" + std::to_string(content_size) + " bytes, sha256 " +
                                        to_hex(content_digest) + ">"};
    }
    return {std::string(label), payload};
  }
};

// Feeds labelled fields to one SHA-256 and records them for explain().
class field_hasher {
 public:
  field_hasher() {
    fields_.reserve(32);
    framed_.reserve(1024);
  }

  // Labels are string literals: explain() keeps them by reference.
  void add(std::string_view label, std::string_view payload) {
    add_raw(label, payload);
    fields_.push_back({label, std::string(payload), recorded_field::form::raw});
  }
  void add(std::string_view label, std::size_t count) { add(label, std::to_string(count)); }

  // A content field (source code): its SHA-256 is the payload. One pass over the bytes serves
  // both the key and explain(), which shows short text as is, else the size and the full digest
  // (comparable with `sha256sum`).
  void add_content(std::string_view label, std::string_view content) {
    const digest d = sha256(content);
    const std::string_view payload(reinterpret_cast<const char*>(d.data()), d.size());
    add_raw(label, payload);
    recorded_field f{label, {}, recorded_field::form::content, content.size(), d};
    if (shown_as_is(content)) f.payload = content;
    fields_.push_back(std::move(f));
  }

  // A field whose payload people read as `shown`.
  void add_shown(std::string_view label, std::string_view payload, std::string shown) {
    add_raw(label, payload);
    fields_.push_back({label, std::move(shown), recorded_field::form::shown});
  }

  std::size_t field_count() const { return fields_.size(); }
  digest finish() const {
    detail::sha256_hasher hasher;
    hasher.update(std::as_bytes(std::span<const char>(framed_.data(), framed_.size())));
    return hasher.finish();
  }
  std::vector<recorded_field> take_fields() { return std::move(fields_); }

 private:
  // The framing: label ASCII bytes, payload length as 8 big-endian bytes, payload bytes.
  void add_raw(std::string_view label, std::string_view payload) {
    framed_.append(label);
    const auto n = static_cast<std::uint64_t>(payload.size());
    for (int i = 7; i >= 0; --i) framed_.push_back(static_cast<char>(n >> (8 * i)));
    framed_.append(payload);
  }

  // The framed fields are short (source code enters as its digest): gathered, then hashed in
  // one call, by the local SHA-256, which needs no libcrypto start-up (common/sha256.hpp).
  std::string framed_;
  std::vector<recorded_field> fields_;
};

// ---------------------------------------------------------------------------------------------
// Gates.

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += (i + 1 == items.size()) ? " and " : ", ";
    out += items[i];
  }
  return out;
}

// Text fit for a message: at most `limit` characters, non-printable bytes escaped.
std::string in_quotes(std::string_view text, std::size_t limit = 80) {
  std::string out = "\"";
  for (std::size_t i = 0; i < text.size() && i < limit; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
      out += static_cast<char>(c);
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHexDigits[c >> 4];
      out += kHexDigits[c & 0xF];
    }
  }
  if (text.size() > limit) out += "...";
  return out + "\"";
}

constexpr std::string_view kUseExtraDigest =
    "pass a fingerprint of those files' contents as program_cache_key_inputs::extra_digest (see "
    "cucore::make_program_cache_key), or compile without the cache";

std::string hex_of(const std::array<std::byte, 32>& d) {
  return to_hex(d);
}

// The headers the compile can read (include_tracking.hpp), folded into the key after the program
// name: each in-memory header (all of them: NVRTC gets them all), then the closure in walk order
// (as its digest: include_closure::digest). Returns the closure, whose lines explain() renders
// on demand at `notes_at`.
std::shared_ptr<const detail::include_closure> add_headers(
    field_hasher& h, const program_cache_key_inputs& in, const program_options& o,
    const std::vector<std::string>& flags, const compiler_probes& probes, include_report& report,
    std::size_t& notes_at, detail::tracked_includes& walk) {
  if (!o.headers.empty()) {
    h.add("memory_headers_count", o.headers.size());
    for (const auto& header : o.headers) {
      const auto d = sha256(header.contents);
      h.add_shown(
          "memory_header",
          header.name + '\0' + std::string(reinterpret_cast<const char*>(d.data()), d.size()),
          header.name + " (" + std::to_string(header.contents.size()) + " bytes, sha256 " +
              hex_of(d) + ")");
    }
  }
  if (!detail::may_read_headers(in.code, o)) return nullptr;
  detail::include_search search = detail::search_of(o, flags);
  search.nvrtc_directory = [] { return detail::nvrtc_library_directory(); };
  const auto memo_file = probes.header_digest_memo();
  walk = detail::track_includes(in.code, search, &detail::header_memo_for(memo_file));
  const detail::tracked_includes& tracked = walk;
  const detail::include_closure& closure = *tracked.closure;
  if (!closure.unresolved.empty() && !in.extra_digest) {
    std::string list;
    for (std::size_t i = 0; i < closure.unresolved.size() && i < 3; ++i) {
      list += (i ? "; " : "") + in_quotes(std::string_view(closure.unresolved[i]), 160);
    }
    if (closure.unresolved.size() > 3) {
      list += " and " + std::to_string(closure.unresolved.size() - 3) + " more";
    }
    throw extra_digest_required(
        "the c++ code includes a header through a macro whose value cucore cannot work out (" +
        list +
        "): the key would not know which file the compiler reads. Write the header name in the "
        "#include, define the macro as a plain \"name\" or <name> (in the code, a header or "
        "define_macro), or " +
        std::string(kUseExtraDigest) + ".");
  }
  report.tracked = true;
  report.files = closure.files;
  report.absent = closure.absent;
  report.in_memory = closure.in_memory;
  report.hashed = tracked.hashed;
  report.reused_walk = tracked.from_manifest;
  report.vouched = closure.unresolved;
  report.skipped = closure.skipped;
  h.add("headers_count", closure.entries.size());
  notes_at = h.field_count();
  const std::string_view digest(reinterpret_cast<const char*>(closure.digest.data()),
                                closure.digest.size());
  h.add_shown("headers", digest,
              "<" + std::to_string(closure.entries.size()) + " entries above, sha256 " +
                  hex_of(closure.digest) + ">");
  for (const auto& v : closure.unresolved) {
    h.add_shown("untracked_include", v, v + " (covered by extra_digest)");
  }
  return tracked.closure;
}

// explain()'s line for each closure entry.
std::vector<key_field> header_notes(const detail::include_closure& closure) {
  std::vector<key_field> out;
  out.reserve(closure.entries.size());
  for (const auto& e : closure.entries) {
    switch (e.what) {
      case detail::closure_entry::kind::file:
        out.push_back({"header", e.path + " (" + std::to_string(e.size) + " bytes, sha256 " +
                                     hex_of(e.digest) + ")"});
        break;
      case detail::closure_entry::kind::absent:
        out.push_back({"header_absent", e.path + " (absent)"});
        break;
      case detail::closure_entry::kind::in_memory:
        out.push_back({"header_in_memory", e.path + " (in memory)"});
        break;
    }
  }
  return out;
}

void check_nvrtc_gates(const program_cache_key_inputs& in) {
  const program_options& o = in.options;
  std::vector<std::string> side_effects;
  if (o.create_pch) side_effects.emplace_back("create_pch (writes a precompiled header)");
  if (o.time) side_effects.emplace_back("time (writes compile timings to a file)");
  if (o.fdevice_time_trace) {
    side_effects.emplace_back("fdevice_time_trace (writes a time-trace file)");
  }
  if (!side_effects.empty()) {
    throw invalid_argument(
        "no program cache key for c++ with program_options " + join(side_effects) +
        ": a cache hit would skip that compile-time side effect (an extra_digest does not change "
        "that). Compile without the cache, or leave " +
        (side_effects.size() == 1 ? "it" : "them") + " unset.");
  }
  // Options for NVRTC's front end or optimizer (-Xcudafe, -Xnvvm) may read or write any file.
  if (const auto passed = detail::tool_passthrough_options(o.extra_nvrtc_options);
      !passed.empty()) {
    std::string list;
    for (const auto& p : passed) list += (list.empty() ? "" : " ") + in_quotes(p);
    throw invalid_argument(
        "no program cache key for c++ with extra_nvrtc_options " + list +
        ": they pass options to a tool inside NVRTC (its front end or optimizer), which can make "
        "it read and write files a cache key cannot see (an extra_digest does not change that). "
        "Compile without the cache, or leave them out.");
  }
  // Every other option must be one the table knows, with no effect a hit would skip.
  if (const std::string why = detail::nvrtc_options_uncacheable(o.extra_nvrtc_options);
      !why.empty()) {
    throw invalid_argument("no program cache key for c++ with extra_nvrtc_options " + why +
                           " (an extra_digest does not change that). Compile without the cache, "
                           "or leave it out.");
  }

  // Headers, -I, -include and the program name's directory are tracked (include_tracking.hpp);
  // precompiled headers are not: NVRTC reads and writes them in ways no scan can see.
  if (in.extra_digest) return;
  std::vector<std::string> external;
  if (o.pch.value_or(false)) external.emplace_back("pch");
  if (o.use_pch) external.emplace_back("use_pch");
  if (o.pch_dir) external.emplace_back("pch_dir");
  if (!external.empty()) {
    throw extra_digest_required("program_options " + join(external) +
                                " make NVRTC read precompiled headers whose contents a cache key "
                                "cannot see: " +
                                std::string(kUseExtraDigest) + ".");
  }
}

void check_extra_sources(const program_cache_key_inputs& in) {
  if (in.code_type == source_type::nvvm || in.options.extra_sources.empty()) return;
  throw invalid_argument(
      "program_options::extra_sources is only supported for nvvm programs, not " +
      std::string(to_string(in.code_type)) +
      (in.code_type == source_type::cxx
           ? ": #include the extra code, or compile it separately to LTO-IR and link with "
             "cucore::linker"
           : ": link the extra modules with cucore::linker"));
}

// PTX under the driver linker: refuses what the driver cannot do, drops what it ignores.
void apply_driver_linker_rules(program_options& o) {
  std::vector<std::string> refused;
  if (o.time) refused.emplace_back("time");
  if (!o.ptxas_options.empty()) refused.emplace_back("ptxas_options");
  if (o.split_compile) refused.emplace_back("split_compile");
  if (!refused.empty()) {
    throw invalid_argument("program_options " + join(refused) +
                           " cannot be used for ptx with the driver linker (the linker in use "
                           "because nvJitLink is not available): they need nvJitLink. Install "
                           "nvJitLink, or leave them unset.");
  }
  // The driver linker has no such options: they cannot change its output.
  o.ftz.reset();
  o.prec_div.reset();
  o.prec_sqrt.reset();
  o.fma.reset();
}

void check_name_expressions(const std::vector<std::string>& names, std::string_view field) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) {
      throw invalid_argument(std::string(field) + "[" + std::to_string(i) +
                             "] is empty: give a kernel or variable name expression");
    }
    if (names[i].find('\0') != std::string::npos) {
      throw invalid_argument(std::string(field) + "[" + std::to_string(i) + "] " +
                             in_quotes(names[i]) + " contains a NUL byte");
    }
  }
}

}  // namespace

// "PATH NUL mtime_ns size" of the file at `path` as stat() finds it now, or "PATH NUL absent": a
// cubin with line information holds the mtimes of its source files.
static std::string file_time(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return path + '\0' + "absent";
  return path + '\0' +
         std::to_string(static_cast<std::int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 +
                        st.st_mtim.tv_nsec) +
         ' ' + std::to_string(static_cast<std::int64_t>(st.st_size));
}

// -----------------------------------------------------------------------------------------------
// program_cache_key

program_cache_key::program_cache_key(const std::array<std::byte, size>& digest) : digest_(digest) {}

struct program_cache_key::details {
  std::vector<recorded_field> fields;
  include_report includes;
  std::optional<cache_bypass> bypass;
  // The closure's lines go after fields[notes_at - 1].
  std::shared_ptr<const detail::include_closure> closure;
  std::size_t notes_at = 0;
  // What the walk found at each path it stat'd, and when it began: check_store() compares.
  std::shared_ptr<const detail::walk_manifest> walk;
  std::int64_t walk_started_ns = 0;
  // What else the observation gate needs (check_store(observed_inputs)).
  std::string program_name;
  std::vector<std::string> memory_headers;
  bool extra_digest = false;
  mutable std::once_flag rendered;
  mutable std::vector<key_field> all;

  // explain(): rendered on the first call.
  const std::vector<key_field>& explained() const {
    std::call_once(rendered, [this] {
      std::vector<key_field> notes;
      if (closure) notes = header_notes(*closure);
      all.reserve(fields.size() + notes.size());
      for (std::size_t i = 0; i < fields.size(); ++i) {
        if (i == notes_at && closure) {
          all.insert(all.end(), std::make_move_iterator(notes.begin()),
                     std::make_move_iterator(notes.end()));
        }
        all.push_back(fields[i].rendered());
      }
    });
    return all;
  }
};

program_cache_key::program_cache_key(const std::array<std::byte, size>& digest,
                                     std::shared_ptr<const details> details) noexcept
    : digest_(digest), details_(std::move(details)) {}

program_cache_key program_cache_key::from_hex(std::string_view hex) {
  if (hex.size() != 2 * size) {
    throw invalid_argument("program cache key " + in_quotes(hex) + " is not " +
                           std::to_string(2 * size) + " hexadecimal digits (it has " +
                           std::to_string(hex.size()) + " characters)");
  }
  auto nibble = [&](std::size_t i) {
    const char c = hex[i];
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw invalid_argument("program cache key " + in_quotes(hex) + " has " +
                           in_quotes(std::string_view(&hex[i], 1)) + " at position " +
                           std::to_string(i) + ", which is not a hexadecimal digit");
  };
  std::array<std::byte, size> digest{};
  for (std::size_t i = 0; i < size; ++i) {
    digest[i] = static_cast<std::byte>((nibble(2 * i) << 4) | nibble(2 * i + 1));
  }
  return program_cache_key(digest);
}

std::string program_cache_key::hex() const {
  return to_hex(digest_);
}

const std::vector<key_field>& program_cache_key::explain() const {
  static const std::vector<key_field> none;
  return details_ ? details_->explained() : none;
}

const include_report& program_cache_key::includes() const noexcept {
  static const include_report none;
  return details_ ? details_->includes : none;
}

const std::optional<cache_bypass>& program_cache_key::bypass() const noexcept {
  static const std::optional<cache_bypass> none;
  return details_ ? details_->bypass : none;
}

namespace {

// A file's stamps for people: seconds since the epoch with nanoseconds.
std::string stamp(std::int64_t ns) {
  constexpr std::int64_t kSecond = 1'000'000'000;
  std::string frac = std::to_string(((ns % kSecond) + kSecond) % kSecond);
  frac.insert(0, 9 - frac.size(), '0');
  return std::to_string(ns >= 0 ? ns / kSecond : (ns - kSecond + 1) / kSecond) + "." + frac;
}

// A duration for people: "4 ms", "2.004 s".
std::string span_text(std::int64_t ns) {
  if (ns < 1'000'000) return std::to_string(ns) + " ns";
  if (ns < 1'000'000'000) return std::to_string(ns / 1'000'000) + " ms";
  std::string ms = std::to_string(ns / 1'000'000 % 1000);
  ms.insert(0, 3 - ms.size(), '0');
  return std::to_string(ns / 1'000'000'000) + "." + ms + " s";
}

}  // namespace

std::optional<store_refusal> program_cache_key::check_store() const {
  if (!details_ || !details_->walk) return std::nullopt;
  const auto problem = detail::store_problem_of(*details_->walk, details_->walk_started_ns);
  if (!problem) return std::nullopt;
  if (problem->changed) {
    return store_refusal{
        cache_skip_reason::header_changed, problem->path,
        problem->path +
            " changed during the compile (it is not the file it was when the key was made: "
            "written, replaced, created or removed while the compiler ran): the result is not "
            "stored"};
  }
  const std::int64_t granularity = detail::timestamp_granularity_ns(problem->id);
  return store_refusal{
      cache_skip_reason::header_too_new, problem->path,
      problem->path + " was modified (mtime " + stamp(problem->id.mtime_ns) + ", ctime " +
          stamp(problem->id.ctime_ns) + ") less than " + span_text(granularity) +
          " (its timestamps' granularity) before the key was made at " +
          stamp(details_->walk_started_ns) +
          ": a change during the compile might not have shown in its stat fields, so the result "
          "is not stored (a compile once the file has settled is)"};
}

std::optional<store_refusal> program_cache_key::check_store(
    const detail::observed_inputs& seen, std::span<const std::byte> output) const {
  if (auto refusal = check_store()) return refusal;
  if (const std::string clock = detail::clock_in_output(
          seen, std::string_view(reinterpret_cast<const char*>(output.data()), output.size()));
      !clock.empty()) {
    return store_refusal{
        cache_skip_reason::time_macros,
        {},
        "the output holds the text of the compile's own clock (\"" + clock +
            "\"): __DATE__ or __TIME__ was used, spelled in a way the key's scan does not see "
            "(a name pasted from one-character pieces), so the result is not stored"};
  }
  detail::key_coverage coverage;
  if (details_) {
    coverage.walk = details_->walk.get();
    coverage.program_name = details_->program_name;
    coverage.memory_headers = details_->memory_headers;
    coverage.extra_digest = details_->extra_digest;
  }
  return detail::check_observed_inputs(seen, coverage);
}

std::strong_ordering operator<=>(const program_cache_key& a, const program_cache_key& b) noexcept {
  const int c = std::memcmp(a.digest_.data(), b.digest_.data(), program_cache_key::size);
  return c < 0 ? std::strong_ordering::less
               : (c > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
}

// -----------------------------------------------------------------------------------------------
// make_program_cache_key

namespace {

// The time-macro tokens of the whole unit: the program text and its closure (files, in-memory
// headers, pre-includes), every option string the compiler gets (-D values, extra options) and
// NVRTC_APPEND_FLAGS, which NVRTC appends to them (docs/cache-keys.md, "The clock").
detail::time_tokens unit_time_tokens(std::string_view code, const detail::include_closure* closure,
                                     const std::vector<std::string>& flags) {
  detail::time_tokens unit = closure ? closure->time_macros : detail::scan_time_tokens(code);
  for (const auto& flag : flags) unit.merge(detail::scan_time_tokens(flag));
  // The value the compilers were loaded with, as the key names it (keyed_environment).
  constexpr std::string_view appended = "NVRTC_APPEND_FLAGS=";
  for (const auto& variable : detail::keyed_environment()) {
    if (variable.starts_with(appended)) {
      unit.merge(detail::scan_time_tokens(std::string_view(variable).substr(appended.size())));
    }
  }
  return unit;
}

}  // namespace

program_cache_key make_program_cache_key(const program_cache_key_inputs& in,
                                         const compiler_probes& probes) {
  const source_type type = in.code_type;
  if (type != source_type::cxx && type != source_type::ptx && type != source_type::nvvm) {
    throw invalid_argument("program_cache_key_inputs::code_type has the unknown value " +
                           std::to_string(static_cast<int>(type)) +
                           ": use source_type::cxx, ptx or nvvm");
  }
  check_target(type, in.target);
  if (in.code.empty()) {
    throw invalid_argument("program code is empty: pass the " + std::string(to_string(type)) +
                           " source text");
  }
  if (type != source_type::nvvm && in.code.find('\0') != std::string_view::npos) {
    throw invalid_argument(std::string(to_string(type)) +
                           " code contains a NUL byte: pass text (only nvvm accepts bitcode)");
  }
  check_extra_sources(in);

  program_options options = in.options;
  switch (type) {
    case source_type::cxx:
      check_nvrtc_gates(in);
      check_name_expressions(in.name_expressions, "name_expressions");
      check_name_expressions(in.byte_name_expressions, "byte_name_expressions");
      break;
    case source_type::nvvm:
      if (options.use_libdevice.value_or(false) && !in.extra_digest) {
        throw extra_digest_required(
            "program_options::use_libdevice=true links libdevice (libdevice.10.bc from the "
            "toolkit), a file whose contents a cache key cannot see: pass a fingerprint of it (for "
            "example the SHA-256 of the file at cucore::toolkit::libdevice_path()) as "
            "program_cache_key_inputs::extra_digest, or compile without the cache.");
      }
      break;
    case source_type::ptx:
      break;
  }

  // The compiler's identity: only the backend this code type uses.
  field_hasher h;
  h.add("schema", kSchema);
  switch (type) {
    case source_type::cxx: {
      const version_probe p = probes.nvrtc();
      h.add(p.ok ? "nvrtc" : "nvrtc_probe_failed", p.value);
      break;
    }
    case source_type::nvvm: {
      const version_probe p = probes.nvvm();
      h.add(p.ok ? "nvvm" : "nvvm_probe_failed", p.value);
      break;
    }
    case source_type::ptx: {
      const linker_probe p = probes.linker();
      if (p.ok) {
        h.add("linker_backend", to_string(p.backend));
        h.add("linker_version", p.version);
        // Without a working probe the key is tainted already: no driver rules then.
        if (p.backend == linker_backend::driver) apply_driver_linker_rules(options);
      } else {
        h.add("linker_probe_failed", p.failure);
      }
      break;
    }
  }

  options.arch = resolve_arch(options.arch);
  const std::vector<std::string> flags = compiler_flags(options, type, in.target);

  h.add("code_type", to_string(type));
  h.add("target_type", to_string(in.target));
  h.add_content("code", in.code);
  h.add("option_count", flags.size());
  for (const auto& flag : flags) h.add("option", flag);
  // Its entry holds the Tile IR alongside the PTX, cubin or LTO-IR: apart from the entries of a
  // cucore that stored these flags' outputs without it.
  if (type == source_type::cxx && in.target != cucore::code_type::tile_ir &&
      detail::compiles_tile_code(flags)) {
    h.add("tile_ir", "alongside");
  }

  if (type == source_type::cxx) {
    // compile() maps each distinct expression once: order and repeats do not change the output.
    // Text and byte-string expressions are tagged apart (byte_name_expressions).
    std::vector<std::string> tags;
    tags.reserve(in.name_expressions.size() + in.byte_name_expressions.size());
    for (const auto& name : in.name_expressions) tags.push_back("s:" + name);
    for (const auto& name : in.byte_name_expressions) tags.push_back("b:" + name);
    std::sort(tags.begin(), tags.end());
    tags.erase(std::unique(tags.begin(), tags.end()), tags.end());
    h.add("names_count", tags.size());
    for (const auto& tag : tags) h.add("name", tag);
  }
  if (type == source_type::nvvm) {
    // Caller order: it is the order the modules are added to the program.
    h.add("extra_sources_count", options.extra_sources.size());
    for (const auto& module : options.extra_sources) {
      h.add("extra_source_name", module.name);
      h.add_content("extra_source_code", module.code);
    }
    if (options.use_libdevice.value_or(false)) h.add("use_libdevice", "1");
  }
  h.add("options_name", options.name);
  include_report includes;
  std::shared_ptr<const detail::include_closure> closure;
  std::size_t notes_at = 0;
  detail::tracked_includes walk;
  if (type == source_type::cxx) {
    closure = add_headers(h, in, options, flags, probes, includes, notes_at, walk);
  }
  // The context the output depends on (detail/compiler_environment.hpp): the working directory
  // where NVRTC writes it into the output, the variables the compilers read.
  if (type == source_type::cxx && detail::embeds_working_directory(flags, in.target)) {
    h.add("working_directory", detail::working_directory());
  }
  if (type == source_type::cxx && detail::embeds_file_times(flags, in.target)) {
    // The program's own file (its name, as NVRTC stats it) and every header read.
    h.add("file_time", file_time(options.name));
    if (closure) {
      for (const auto& e : closure->entries) {
        if (e.what == detail::closure_entry::kind::file) h.add("file_time", file_time(e.path));
      }
    }
  }
  for (const auto& variable : detail::keyed_environment()) h.add("environment", variable);
  std::optional<cache_bypass> bypass;
  if (auto why = detail::environment_bypass()) {
    bypass = cache_bypass{cache_skip_reason::compiler_environment, *why};
  } else if (std::string why = detail::ptxas_arguments_name_files(options.ptxas_options);
             !why.empty()) {
    // Every code type whose compile runs ptxas with them: c++ (NVRTC's --ptxas-options) and ptx
    // (nvJitLink's -Xptxas=); compiler_flags() refuses them for nvvm and the driver linker.
    bypass =
        cache_bypass{cache_skip_reason::option_file, "program_options::ptxas_options " + why +
                                                         ": the compile runs without the cache"};
  } else if (type == source_type::cxx && !detail::sloppiness_allows("time_macros") &&
             detail::may_use_time_macros(unit_time_tokens(in.code, closure.get(), flags))) {
    bypass = cache_bypass{
        cache_skip_reason::time_macros,
        "the program, a header it includes or an option uses __TIME__, __DATE__ or "
        "__TIMESTAMP__ or may form one by pasting (##), which expand to the time of the compile: "
        "set CUCORE_SLOPPINESS=time_macros to cache it anyway (a hit then keeps the first "
        "compile's time)"};
  }
  if (in.extra_digest) h.add("extra_digest", *in.extra_digest);

  const digest d = h.finish();
  auto details = std::make_shared<program_cache_key::details>();
  details->fields = h.take_fields();
  details->includes = std::move(includes);
  details->bypass = std::move(bypass);
  details->closure = std::move(closure);
  details->notes_at = notes_at;
  details->walk = std::move(walk.checks);
  details->walk_started_ns = walk.started_ns;
  details->program_name = options.name;
  for (const auto& header : options.headers) details->memory_headers.push_back(header.name);
  // The extra_digest vouches for files only where the key asked for one because of them (a
  // drop-in's digest of its verbatim options vouches for nothing).
  details->extra_digest =
      in.extra_digest.has_value() &&
      (options.pch.value_or(false) || options.use_pch || options.pch_dir ||
       options.use_libdevice.value_or(false) || !details->includes.vouched.empty());
  return program_cache_key(d, std::move(details));
}

}  // namespace cucore

std::size_t std::hash<cucore::program_cache_key>::operator()(
    const cucore::program_cache_key& key) const noexcept {
  // The digest is uniformly distributed: its first bytes are as good a hash as any.
  std::size_t out = 0;
  std::memcpy(&out, key.bytes().data(), sizeof(out));
  return out;
}
