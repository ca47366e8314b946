// make_program_cache_key: gates, then SHA-256 over labelled, length-prefixed fields. The field
// order and framing are the key schema: any change to them (or to compiler_flags()) must bump
// kSchema.
#include "cucore/cache/key.hpp"

#include "common/sha256.hpp"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <initializer_list>

#include "cucore/error.hpp"

namespace cucore {
namespace {

constexpr std::string_view kSchema = "cucore-key-1";
constexpr std::string_view kHexDigits = "0123456789abcdef";

using digest = std::array<std::byte, program_cache_key::size>;

digest sha256(std::string_view data) {
  return detail::sha256(std::as_bytes(std::span<const char>(data.data(), data.size())));
}

std::string to_hex(std::span<const std::byte> bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (std::byte b : bytes) {
    const auto v = static_cast<unsigned>(b);
    out += kHexDigits[v >> 4];
    out += kHexDigits[v & 0xF];
  }
  return out;
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

// Feeds labelled fields to one SHA-256 and records them for explain().
class field_hasher {
 public:
  field_hasher() : fields_(std::make_shared<std::vector<key_field>>()) {}

  void add(std::string_view label, std::string_view payload) {
    add_raw(label, payload);
    fields_->push_back({std::string(label), render(payload)});
  }
  void add(std::string_view label, std::size_t count) { add(label, std::to_string(count)); }

  // A content field (source code): its SHA-256 is the payload. One pass over the bytes serves
  // both the key and explain(), which shows short text as is, else the size and the full digest
  // (comparable with `sha256sum`).
  void add_content(std::string_view label, std::string_view content) {
    const digest d = sha256(content);
    const std::string_view payload(reinterpret_cast<const char*>(d.data()), d.size());
    add_raw(label, payload);
    fields_->push_back({std::string(label), shown_as_is(content)
                                                ? std::string(content)
                                                : "<" + std::to_string(content.size()) +
                                                      " bytes, sha256 " + to_hex(d) + ">"});
  }

  digest finish() { return hasher_.finish(); }
  std::shared_ptr<const std::vector<key_field>> fields() const { return fields_; }

 private:
  // The framing: label ASCII bytes, payload length as 8 big-endian bytes, payload bytes.
  void add_raw(std::string_view label, std::string_view payload) {
    std::array<unsigned char, 8> length{};
    const auto n = static_cast<std::uint64_t>(payload.size());
    for (std::size_t i = 0; i < length.size(); ++i) {
      length[i] = static_cast<unsigned char>(n >> (8 * (length.size() - 1 - i)));
    }
    update(label.data(), label.size());
    update(length.data(), length.size());
    update(payload.data(), payload.size());
  }

  void update(const void* data, std::size_t size) {
    hasher_.update(std::span(static_cast<const std::byte*>(data), size));
  }

  // The framed fields are short (source code enters as its digest): the local SHA-256, which
  // needs no libcrypto initialisation (common/sha256.hpp).
  detail::sha256_hasher hasher_;
  std::shared_ptr<std::vector<key_field>> fields_;
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
std::string quoted(std::string_view text, std::size_t limit = 80) {
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

// Where NVRTC can read a file through the code itself: #include (and __has_include) of a quoted or
// macro-expanded name resolves against the directory of options.name or the current directory, and
// an absolute path anywhere. An angle-bracket relative name only searches the include_path (gated
// on its own) and NVRTC's built-in headers.
//
// This is a conservative scan, not a preprocessor: it splices lines, blanks comments and literals,
// then looks at directives and __has_include. Anything it cannot prove harmless (a directive inside
// a block that #if would skip, an unusual form) counts as reaching a file.
class include_scanner {
 public:
  explicit include_scanner(std::string_view code) : code_(code) {}

  // The first external reference: "line N: <directive text>", or empty.
  std::string find_external() {
    // Fast path: every form that reaches a file spells "include", "import" or "embed", unless a
    // line splice cuts the word.
    const bool splices = code_.find("\\\n") != std::string_view::npos ||
                         code_.find("\\\r\n") != std::string_view::npos;
    if (!splices && code_.find("include") == std::string_view::npos &&
        code_.find("import") == std::string_view::npos &&
        code_.find("embed") == std::string_view::npos) {
      return {};
    }
    splice(code_);
    blank_comments_and_literals();
    std::size_t pos = 0;
    while (pos <= clean_.size()) {
      std::size_t end = clean_.find('\n', pos);
      if (end == std::string::npos) end = clean_.size();
      if (auto hit = check_directive(pos, end); !hit.empty()) return hit;
      pos = end + 1;
    }
    return check_has_include();
  }

 private:
  static bool ident_char(char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' ||
           static_cast<unsigned char>(c) >= 0x80;
  }
  static bool space(char c) { return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r'; }

  // Translation phase 2: removes backslash-newline, remembering where each splice was (copying
  // the text between backslashes in bulk: this runs over every source that includes anything).
  void splice(std::string_view code) {
    text_.reserve(code.size());
    std::size_t from = 0;
    for (;;) {
      const std::size_t backslash = code.find('\\', from);
      if (backslash == std::string_view::npos) break;
      std::size_t j = backslash + 1;
      if (j < code.size() && code[j] == '\r') ++j;
      if (j < code.size() && code[j] == '\n') {
        text_.append(code, from, backslash - from);
        splices_.push_back(text_.size());
        from = j + 1;
      } else {
        text_.append(code, from, backslash + 1 - from);
        from = backslash + 1;
      }
    }
    text_.append(code, from);
  }

  // The physical line (from 1) of `offset` in the spliced text: the newlines before it, plus the
  // ones splices removed at or before it. Only for messages, so counted when asked.
  std::size_t line_of(std::size_t offset) const {
    const auto newlines = std::count(text_.begin(), text_.begin() + offset, '\n');
    const auto spliced =
        std::upper_bound(splices_.begin(), splices_.end(), offset) - splices_.begin();
    return 1 + static_cast<std::size_t>(newlines) + static_cast<std::size_t>(spliced);
  }

  // A copy of the text, same length, where each comment (newlines included: phase 3 makes a comment
  // one space) and the contents of each string and character literal are spaces.
  void blank_comments_and_literals() {
    clean_ = text_;
    const std::size_t n = text_.size();
    auto blank = [&](std::size_t from, std::size_t to) {
      for (std::size_t k = from; k < to && k < n; ++k) clean_[k] = ' ';
    };
    std::size_t i = 0;
    while (i < n) {
      const char c = text_[i];
      if (c == '/' && i + 1 < n && text_[i + 1] == '/') {
        std::size_t end = text_.find('\n', i);
        if (end == std::string::npos) end = n;
        blank(i, end);
        i = end;
      } else if (c == '/' && i + 1 < n && text_[i + 1] == '*') {
        std::size_t end = text_.find("*/", i + 2);
        end = (end == std::string::npos) ? n : end + 2;
        blank(i, end);
        i = end;
      } else if (c == '"' && raw_prefix(i)) {
        i = skip_raw_string(i, blank);
      } else if (c == '"' || c == '\'') {
        // Ends at the closing quote or, unterminated (or a digit separator), at the line's end:
        // a literal never hides a line from the directive scan.
        std::size_t k = i + 1;
        while (k < n && text_[k] != c && text_[k] != '\n')
          k += (text_[k] == '\\' && k + 1 < n && text_[k + 1] != '\n') ? 2 : 1;
        blank(i + 1, std::min(k, n));
        i = (k < n && text_[k] == c) ? k + 1 : k;
      } else {
        ++i;
      }
    }
  }

  // Whether the '"' at `quote` opens a raw string: preceded by R, itself alone or after u8/u/U/L.
  bool raw_prefix(std::size_t quote) const {
    if (quote == 0 || text_[quote - 1] != 'R') return false;
    std::size_t start = quote - 1;
    while (start > 0 && ident_char(text_[start - 1])) --start;
    const std::string_view prefix(text_.data() + start, quote - 1 - start);
    return prefix.empty() || prefix == "u8" || prefix == "u" || prefix == "U" || prefix == "L";
  }

  template <class Blank>
  std::size_t skip_raw_string(std::size_t quote, Blank& blank) const {
    const std::size_t n = text_.size();
    std::size_t open = quote + 1;
    while (open < n && open - quote <= 17 && text_[open] != '(' && !space(text_[open]) &&
           text_[open] != '\n' && text_[open] != ')' && text_[open] != '\\' && text_[open] != '"') {
      ++open;
    }
    if (open >= n || text_[open] != '(') return quote + 1;  // not a valid raw string: go on
    const std::string terminator = ")" + text_.substr(quote + 1, open - quote - 1) + "\"";
    std::size_t end = text_.find(terminator, open + 1);
    end = (end == std::string::npos) ? n : end + terminator.size() - 1;
    blank(quote + 1, end);
    return end + 1;
  }

  std::string report(std::size_t from, std::size_t to) const {
    std::string line(text_.substr(from, to - from));
    std::replace(line.begin(), line.end(), '\n', ' ');
    auto first = line.find_first_not_of(" \t\r\v\f");
    line = first == std::string::npos ? std::string() : line.substr(first);
    while (!line.empty() && space(line.back())) line.pop_back();
    return "line " + std::to_string(line_of(from)) + ": " + quoted(line);
  }

  std::size_t skip_space(std::size_t i, std::size_t end) const {
    while (i < end && space(clean_[i])) ++i;
    return i;
  }

  // An argument that only searches the include path: <relative/name>.
  bool harmless_header_name(std::size_t i, std::size_t end) const {
    if (i >= end || clean_[i] != '<') return false;
    const std::size_t close = clean_.find('>', i + 1);
    if (close == std::string::npos || close >= end || close == i + 1) return false;
    return clean_[i + 1] != '/';
  }

  std::string check_directive(std::size_t begin, std::size_t end) const {
    std::size_t i = skip_space(begin, end);
    if (i >= end) return {};
    if (clean_[i] == '#') {
      ++i;
    } else if (clean_[i] == '%' && i + 1 < end && clean_[i + 1] == ':') {
      i += 2;
    } else if (clean_[i] == '?' && i + 2 < end && clean_[i + 1] == '?' && clean_[i + 2] == '=') {
      i += 3;
    } else {
      return {};
    }
    i = skip_space(i, end);
    std::size_t word_end = i;
    while (word_end < end && ident_char(clean_[word_end])) ++word_end;
    const std::string_view word(clean_.data() + i, word_end - i);
    if (word != "include" && word != "include_next" && word != "import" && word != "embed") {
      return {};
    }
    if (word != "embed" && harmless_header_name(skip_space(word_end, end), end)) return {};
    return report(begin, end);
  }

  // __has_include, __has_include_next and __has_embed, in one pass over the text: the first whose
  // argument is not a harmless <relative/name>.
  std::string check_has_include() const {
    std::size_t pos = 0;
    while ((pos = clean_.find("__has_", pos)) != std::string::npos) {
      std::size_t after = pos + 6;
      while (after < clean_.size() && ident_char(clean_[after])) ++after;
      const std::string_view name(clean_.data() + pos, after - pos);
      const bool whole = pos == 0 || !ident_char(clean_[pos - 1]);
      if (whole &&
          (name == "__has_include" || name == "__has_include_next" || name == "__has_embed")) {
        std::size_t i = after;
        while (i < clean_.size() && (space(clean_[i]) || clean_[i] == '\n')) ++i;
        bool harmless = false;
        if (name != "__has_embed" && i < clean_.size() && clean_[i] == '(') {
          ++i;
          while (i < clean_.size() && (space(clean_[i]) || clean_[i] == '\n')) ++i;
          harmless = harmless_header_name(i, clean_.size());
        }
        if (!harmless) {
          std::size_t from = clean_.rfind('\n', pos);
          from = (from == std::string::npos) ? 0 : from + 1;
          std::size_t to = clean_.find('\n', pos);
          if (to == std::string::npos) to = clean_.size();
          return report(from, to);
        }
      }
      pos = after;
    }
    return {};
  }

  std::string_view code_;
  std::string text_;                  // spliced
  std::string clean_;                 // spliced, comments and literal contents blanked
  std::vector<std::size_t> splices_;  // offsets in text_ where a backslash-newline was removed
};

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

  if (in.extra_digest) return;
  std::vector<std::string> external;
  if (!o.include_path.empty()) external.emplace_back("include_path");
  if (!o.pre_include.empty()) external.emplace_back("pre_include");
  if (o.pch.value_or(false)) external.emplace_back("pch");
  if (o.use_pch) external.emplace_back("use_pch");
  if (o.pch_dir) external.emplace_back("pch_dir");
  if (!external.empty()) {
    throw extra_digest_required(
        "program_options " + join(external) +
        " make NVRTC read files (headers, precompiled headers) whose contents "
        "a cache key cannot see: " +
        std::string(kUseExtraDigest) + ".");
  }
  if (o.name.find_first_of("/\\") != std::string::npos) {
    throw extra_digest_required(
        "program_options::name " + quoted(o.name) +
        " has a directory component, which NVRTC searches for quoted #includes: files a cache key "
        "cannot see. Use a name without '/' or '\\', or " +
        std::string(kUseExtraDigest) + ".");
  }
  if (auto where = include_scanner(in.code).find_external(); !where.empty()) {
    throw extra_digest_required(
        "the c++ code can read a file a cache key cannot see (" + where +
        "): NVRTC resolves a quoted or macro #include, and __has_include, against the directory of "
        "options.name or the current directory, and an absolute path anywhere. Include only "
        "<headers> from include_path, or " +
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

void check_name_expressions(const std::vector<std::string>& names) {
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty()) {
      throw invalid_argument("name_expressions[" + std::to_string(i) +
                             "] is empty: give a kernel or variable name expression");
    }
    if (names[i].find('\0') != std::string::npos) {
      throw invalid_argument("name_expressions[" + std::to_string(i) + "] " + quoted(names[i]) +
                             " contains a NUL byte");
    }
  }
}

}  // namespace

// -----------------------------------------------------------------------------------------------
// program_cache_key

program_cache_key::program_cache_key(const std::array<std::byte, size>& digest) : digest_(digest) {}

program_cache_key::program_cache_key(const std::array<std::byte, size>& digest,
                                     std::shared_ptr<const std::vector<key_field>> fields) noexcept
    : digest_(digest), fields_(std::move(fields)) {}

program_cache_key program_cache_key::from_hex(std::string_view hex) {
  if (hex.size() != 2 * size) {
    throw invalid_argument("program cache key " + quoted(hex) + " is not " +
                           std::to_string(2 * size) + " hexadecimal digits (it has " +
                           std::to_string(hex.size()) + " characters)");
  }
  auto nibble = [&](std::size_t i) {
    const char c = hex[i];
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    throw invalid_argument("program cache key " + quoted(hex) + " has " +
                           quoted(std::string_view(&hex[i], 1)) + " at position " +
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

const std::vector<key_field>& program_cache_key::explain() const noexcept {
  static const std::vector<key_field> none;
  return fields_ ? *fields_ : none;
}

std::strong_ordering operator<=>(const program_cache_key& a, const program_cache_key& b) noexcept {
  const int c = std::memcmp(a.digest_.data(), b.digest_.data(), program_cache_key::size);
  return c < 0 ? std::strong_ordering::less
               : (c > 0 ? std::strong_ordering::greater : std::strong_ordering::equal);
}

// -----------------------------------------------------------------------------------------------
// make_program_cache_key

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
  if (in.options.name.empty()) {
    throw invalid_argument(
        "program_options::name is empty: give the program a name (the default "
        "is \"default_program\")");
  }
  check_extra_sources(in);

  program_options options = in.options;
  switch (type) {
    case source_type::cxx:
      check_nvrtc_gates(in);
      check_name_expressions(in.name_expressions);
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

  if (type == source_type::cxx) {
    // compile() maps each distinct expression once: order and repeats do not change the output.
    std::vector<std::string> tags;
    tags.reserve(in.name_expressions.size());
    for (const auto& name : in.name_expressions) tags.push_back("s:" + name);
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
  if (in.extra_digest) h.add("extra_digest", *in.extra_digest);

  return program_cache_key(h.finish(), h.fields());
}

}  // namespace cucore

std::size_t std::hash<cucore::program_cache_key>::operator()(
    const cucore::program_cache_key& key) const noexcept {
  // The digest is uniformly distributed: its first bytes are as good a hash as any.
  std::size_t out = 0;
  std::memcpy(&out, key.bytes().data(), sizeof(out));
  return out;
}
