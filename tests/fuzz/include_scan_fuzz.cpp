// libFuzzer target for scan_includes on arbitrary bytes: never a crash, and the invariants of a
// conservative scan:
// - every line lies within the text; header names hold no line end;
// - whatever the scan finds, may_reference_files allows;
// - an independent oracle: the text line-spliced and comment-stripped by a trivial stripper
//   (comments become NUL bytes, which compilers and the scan read as blanks; newlines kept;
//   literals not understood) yields no quoted or angle reference that the scan of the original
//   text misses. Names with a NUL are left out: the stripper cuts through header names, and
//   those names are its own making; so are names with a backslash (see splice_strictly).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "key/conditional_scan.hpp"
#include "key/include_scanner.hpp"

namespace {

using cucore::detail::include_form;
using cucore::detail::include_reference;
using cucore::detail::include_scan;

// The strict reading's phase 2, as a text with no splice left for the scan to find: each
// remaining backslash (and the '/' of ??/) becomes \x01, so the scan does not splice again.
std::string splice_strictly(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && text.substr(i + 1, 1) == "\n") {
      ++i;
    } else if (text[i] == '\\' && text.substr(i + 1, 2) == "\r\n") {
      i += 2;
    } else if (text[i] == '\\' || (text[i] == '/' && out.size() >= 2 && out.ends_with("??"))) {
      out += '\x01';
    } else {
      out += text[i];
    }
  }
  return out;
}

std::string strip_comments(std::string text) {
  std::size_t i = 0;
  while (i + 1 < text.size()) {
    if (text[i] == '/' && text[i + 1] == '/') {
      for (; i < text.size() && text[i] != '\n'; ++i) text[i] = '\0';
    } else if (text[i] == '/' && text[i + 1] == '*') {
      std::size_t end = text.find("*/", i + 2);
      end = end == std::string::npos ? text.size() : end + 2;
      for (; i < end; ++i) {
        if (text[i] != '\n') text[i] = '\0';
      }
    } else {
      ++i;
    }
  }
  return text;
}

bool found(const include_scan& scan, const include_reference& r) {
  return std::any_of(scan.references.begin(), scan.references.end(), [&](const auto& o) {
    return std::tie(o.kind, o.form, o.name) == std::tie(r.kind, r.form, r.name);
  });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const include_scan scan = cucore::detail::scan_includes(text);

  const auto lines = static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  for (const auto& r : scan.references) {
    if (r.line < 1 || r.line > lines) std::abort();
    if (r.form != include_form::computed && r.name.find_first_of("\r\n") != std::string::npos) {
      std::abort();
    }
  }
  for (const auto& d : scan.definitions) {
    if (d.line < 1 || d.line > lines || d.name.empty() || d.body.empty()) std::abort();
  }
  if ((!scan.references.empty() || !scan.definitions.empty()) &&
      !cucore::detail::may_reference_files(text)) {
    std::abort();
  }

  const include_scan stripped =
      cucore::detail::scan_includes(strip_comments(splice_strictly(text)));
  for (const auto& r : stripped.references) {
    if (r.form == include_form::computed ||
        r.name.find_first_of(std::string_view("\0\x01", 2)) != std::string::npos) {
      continue;
    }
    if (!found(scan, r)) std::abort();
  }

  // The macro names a text may define are a superset of the definitions the scan found.
  const std::vector<std::string> defined = cucore::detail::defined_names(text);
  const auto is_defined = [&](const std::string& name) {
    return std::binary_search(defined.begin(), defined.end(), name);
  };
  for (const auto& d : scan.definitions) {
    if (!is_defined(d.name)) std::abort();
  }
  for (const auto& d : scan.function_definitions) {
    if (!is_defined(d.name)) std::abort();
  }

  // The #if structure: lines within the text, and every kept condition decided with only the
  // reserved names definable, and never decided otherwise with more names definable (monotone).
  using cucore::detail::truth;
  const auto structure = cucore::detail::scan_conditionals(text);
  const auto reserved_only = [](std::string_view n) {
    return cucore::detail::reserved_identifier(n);
  };
  const auto some = [](std::string_view n) {
    return cucore::detail::reserved_identifier(n) || n.size() % 2 == 1;
  };
  for (const auto& g : structure.groups) {
    if (!structure.known || g.first_line < 1 || g.first_line > lines + 1 ||
        (g.first_line <= g.last_line && g.last_line > lines)) {
      std::abort();
    }
    const truth least = cucore::detail::evaluate_condition(g.condition, reserved_only);
    if (least == truth::unknown || static_cast<std::uint8_t>(least) != g.when_undefined) {
      std::abort();
    }
    const truth more = cucore::detail::evaluate_condition(g.condition, some);
    if (more != truth::unknown && more != least) std::abort();
  }
  return 0;
}
