// Why a key missed: the difference of two keys' fields (key/miss_explanation.hpp).
#include "key/miss_explanation.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <unordered_set>

#include "common/sha256.hpp"

namespace cucore::detail {

namespace {

// The lines of an encoded field list, by content.
std::unordered_set<std::string_view> lines_of(std::string_view text) {
  std::unordered_set<std::string_view> out;
  out.reserve(1024);
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    out.insert(line);
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

// The differing lines by label: their payloads (still escaped: shown as kept).
using by_label = std::map<std::string, std::vector<std::string>, std::less<>>;

by_label only_in(std::string_view text, const std::unordered_set<std::string_view>& other) {
  by_label out;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    if (!other.count(line)) {
      const auto tab = line.find('\t');
      if (tab != std::string_view::npos) {
        out[std::string(line.substr(0, tab))].emplace_back(line.substr(tab + 1));
      }
    }
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  return out;
}

// A header field's payload is "PATH (N bytes, sha256 HEX)": the path and the rest.
std::pair<std::string, std::string> header_parts(const std::string& payload) {
  const auto open = payload.rfind(" (");
  if (open == std::string::npos) return {payload, {}};
  return {payload.substr(0, open), payload.substr(open + 2, payload.size() - open - 3)};
}

std::string short_digest(const std::string& rest) {
  const auto at = rest.find("sha256 ");
  return at == std::string::npos ? rest : rest.substr(at + 7, 12) + "...";
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& i : items) out += (out.empty() ? "" : ", ") + i;
  return out;
}

int rank(miss_kind k) {
  // What a person changed before what follows from it (a new compiler brings new toolkit
  // headers; an option, other headers).
  switch (k) {
    case miss_kind::compiler_changed:
      return 0;
    case miss_kind::option_changed:
      return 1;
    case miss_kind::source_changed:
      return 2;
    case miss_kind::header_changed:
      return 3;
    case miss_kind::headers_changed:
      return 4;
    case miss_kind::environment_changed:
      return 5;
    case miss_kind::working_directory_changed:
      return 6;
    default:
      return 7;
  }
}

}  // namespace

miss_explanation explain_miss(std::string_view before, std::string_view before_hex,
                              std::string_view now) {
  miss_explanation out;
  if (before.empty()) {
    out.reasons.push_back({miss_kind::first_compile, "no earlier compile of this program known"});
    return out;
  }
  out.nearest_key = std::string(before_hex);
  const by_label gone = only_in(before, lines_of(now));
  const by_label came = only_in(now, lines_of(before));
  const auto of = [](const by_label& m, std::string_view label) {
    const auto it = m.find(label);
    return it == m.end() ? std::vector<std::string>{} : it->second;
  };
  const auto changed = [&](std::string_view label) {
    return gone.count(label) != 0 || came.count(label) != 0;
  };
  const auto change_text = [&](std::string_view label) {
    const auto g = of(gone, label);
    const auto c = of(came, label);
    if (g.empty()) return "added " + joined(c);
    if (c.empty()) return "removed " + joined(g);
    return joined(g) + " -> " + joined(c);
  };
  std::set<std::string, std::less<>> explained;
  const auto add = [&](miss_kind kind, std::string detail,
                       std::initializer_list<const char*> labels) {
    out.reasons.push_back({kind, std::move(detail)});
    for (const char* l : labels) explained.insert(l);
  };
  // Headers: the same path with other contents, then the set of headers found.
  std::map<std::string, std::string> old_headers, new_headers;
  for (const auto& p : of(gone, "header")) old_headers.insert(header_parts(p));
  for (const auto& p : of(came, "header")) new_headers.insert(header_parts(p));
  std::vector<std::string> found, lost;
  for (const auto& [path, rest] : new_headers) {
    const auto it = old_headers.find(path);
    if (it == old_headers.end()) {
      found.push_back(path);
    } else {
      add(miss_kind::header_changed,
          path + ": sha256 " + short_digest(it->second) + " -> " + short_digest(rest),
          {"header", "headers", "headers_count"});
    }
  }
  for (const auto& [path, rest] : old_headers) {
    if (!new_headers.count(path)) lost.push_back(path);
  }
  if (!found.empty() || !lost.empty() || changed("header_absent") || changed("header_in_memory")) {
    std::string detail;
    if (!found.empty()) detail += "now found: " + joined(found);
    if (!lost.empty()) {
      detail += std::string(detail.empty() ? "" : "; ") + "no longer: " + joined(lost);
    }
    if (detail.empty()) detail = "the headers looked for and found absent changed";
    add(miss_kind::headers_changed, detail,
        {"header", "headers", "headers_count", "header_absent", "header_in_memory",
         "memory_headers_count"});
  }
  if (changed("code")) add(miss_kind::source_changed, "the program text changed", {"code"});
  for (const char* label :
       {"nvrtc", "nvvm", "linker_version", "linker_backend", "nvrtc_probe_failed",
        "nvvm_probe_failed", "linker_probe_failed", "schema"}) {
    if (changed(label)) add(miss_kind::compiler_changed, change_text(label), {label});
  }
  for (const char* label : {"option", "target_type", "code_type", "name", "options_name",
                            "extra_source_name", "use_libdevice", "tile_ir"}) {
    if (changed(label)) {
      add(miss_kind::option_changed,
          (std::string_view(label) == "option" ? std::string() : std::string(label) + " ") +
              change_text(label),
          {label, "option_count", "names_count", "extra_sources_count"});
    }
  }
  if (changed("environment")) {
    add(miss_kind::environment_changed, change_text("environment"), {"environment"});
  }
  if (changed("working_directory")) {
    add(miss_kind::working_directory_changed, change_text("working_directory"),
        {"working_directory"});
  }
  // Anything else that differs (a file time, an extra digest, a count).
  std::set<std::string, std::less<>> labels;
  for (const auto& [label, v] : gone) labels.insert(label);
  for (const auto& [label, v] : came) labels.insert(label);
  for (const auto& label : labels) {
    if (!explained.count(label)) {
      add(miss_kind::other, label + " " + change_text(label), {});
      explained.insert(label);
    }
  }
  if (out.reasons.empty()) {
    out.reasons.push_back({miss_kind::other,
                           "the same fields as the nearest key (its entry removed, evicted or "
                           "never stored)"});
  }
  std::stable_sort(
      out.reasons.begin(), out.reasons.end(),
      [](const miss_reason& x, const miss_reason& y) { return rank(x.kind) < rank(y.kind); });
  return out;
}

std::string encode_fields(const std::vector<key_field>& fields) {
  std::string out;
  const auto put = [&out](std::string_view s) {
    for (const char c : s) {
      if (c == '\\') {
        out += "\\\\";
      } else if (c == '\t') {
        out += "\\t";
      } else if (c == '\n') {
        out += "\\n";
      } else {
        out += c;
      }
    }
  };
  for (const auto& f : fields) {
    put(f.label);
    out += '\t';
    put(f.payload);
    out += '\n';
  }
  return out;
}

std::string describe_reasons(const miss_explanation& miss) {
  std::string text;
  for (const auto& r : miss.reasons) {
    text += (text.empty() ? "" : "; ") + std::string(to_string(r.kind)) + ": " + r.detail;
  }
  return text;
}

namespace {

std::string field(const std::vector<key_field>& fields, std::string_view label) {
  for (const auto& f : fields) {
    if (f.label == label) return f.payload;
  }
  return {};
}

}  // namespace

program_note_identity note_identity_of(const std::vector<key_field>& fields) {
  const std::string target = field(fields, "code_type") + "\n" + field(fields, "target_type");
  const auto hash = [&](const char* tag, const std::string& what) {
    const std::string id = std::string(tag) + "\n" + what + "\n" + target;
    const auto hex = sha256_hex(std::as_bytes(std::span<const char>(id.data(), id.size())));
    return std::string(hex.data(), 40);
  };
  return {hash("N", field(fields, "options_name")), hash("S", field(fields, "code"))};
}

}  // namespace cucore::detail
