#include "key/macro_text.hpp"

namespace cucore::detail {

namespace {

bool ident_start_c(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
bool ident_char(char c) {
  return ident_start_c(c) || (c >= '0' && c <= '9');
}

}  // namespace

// The arguments of a macro call whose '(' is at `open` in `text`: split at top-level commas,
// trimmed; `end` is set past the closing ')'. nullopt when the call is not closed.
std::optional<std::vector<std::string>> macro_call_arguments(const std::string& text,
                                                             std::size_t open, std::size_t& end) {
  std::vector<std::string> args(1);
  int depth = 0;
  for (std::size_t i = open + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '(') ++depth;
    if (c == ')' && depth-- == 0) {
      end = i + 1;
      for (auto& a : args) {
        const auto first = a.find_first_not_of(' ');
        a = first == std::string::npos ? std::string() : a.substr(first);
        while (!a.empty() && a.back() == ' ') a.pop_back();
      }
      return args;
    }
    if (c == ',' && depth == 0) {
      args.emplace_back();
    } else {
      args.back() += c;
    }
  }
  return std::nullopt;
}

// The body of `macro` with its parameters replaced by `args` (# stringizes, ## pastes); false
// when the call does not fit the parameter list.
bool substitute_macro_call(const function_macro_definition& macro,
                           const std::vector<std::string>& args, std::string& out) {
  const auto& params = macro.parameters;
  const bool variadic = !params.empty() && params.back() == "...";
  const std::size_t named = variadic ? params.size() - 1 : params.size();
  const bool empty_call = args.size() == 1 && args[0].empty();
  if (!(args.size() == named || (variadic && args.size() >= named) || (named == 0 && empty_call))) {
    return false;
  }
  auto argument = [&](const std::string& id) -> std::optional<std::string> {
    for (std::size_t p = 0; p < named; ++p) {
      if (params[p] == id) return p < args.size() ? args[p] : std::string();
    }
    if (variadic && id == "__VA_ARGS__") {
      std::string rest;
      for (std::size_t p = named; p < args.size(); ++p) rest += (p > named ? "," : "") + args[p];
      return rest;
    }
    return std::nullopt;
  };
  const std::string& body = macro.body;
  out.clear();
  for (std::size_t i = 0; i < body.size();) {
    const char c = body[i];
    if (c == '#' && i + 1 < body.size() && body[i + 1] == '#') {  // paste: drop blanks around
      while (!out.empty() && out.back() == ' ') out.pop_back();
      i += 2;
      while (i < body.size() && body[i] == ' ') ++i;
      continue;
    }
    if (c == '#') {  // stringize the next parameter
      std::size_t j = i + 1;
      while (j < body.size() && body[j] == ' ') ++j;
      std::size_t k = j;
      while (k < body.size() && ident_char(body[k])) ++k;
      const auto arg = argument(body.substr(j, k - j));
      if (!arg || arg->find_first_of("\"\\") != std::string::npos) return false;
      out += '"' + *arg + '"';
      i = k;
      continue;
    }
    if (ident_start_c(c)) {
      std::size_t k = i;
      while (k < body.size() && ident_char(body[k])) ++k;
      const std::string id = body.substr(i, k - i);
      const auto arg = argument(id);
      out += arg ? *arg : id;
      i = k;
      continue;
    }
    out += c;
    ++i;
  }
  return true;
}

// A header name from an expansion: "name" or <name> (blanks around trimmed, and blanks before
// the '>', which NVRTC drops: measured); nullopt otherwise.
std::optional<std::pair<include_form, std::string>> header_name_of(std::string text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return std::nullopt;
  const auto last = text.find_last_not_of(" \t");
  text = text.substr(first, last - first + 1);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"' &&
      text.find('"', 1) == text.size() - 1) {
    return std::make_pair(include_form::quoted, text.substr(1, text.size() - 2));
  }
  if (text.size() >= 2 && text.front() == '<' && text.back() == '>' &&
      text.find('>') == text.size() - 1) {
    std::string name = text.substr(1, text.size() - 2);
    while (!name.empty() && (name.back() == ' ' || name.back() == '\t')) name.pop_back();
    return std::make_pair(include_form::angle, std::move(name));
  }
  return std::nullopt;
}

}  // namespace cucore::detail
