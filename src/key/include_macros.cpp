// The includes a walk (include_walker.hpp) finds named through macros: #include MACRO and
// __has_include(MACRO), resolved with every definition the closure (or -D) holds, and the
// header-name calls of __has_include wrappers.
#include <algorithm>

#include "key/include_walker.hpp"
#include "key/macro_text.hpp"
#include "key/preprocessor_tokens.hpp"

namespace cucore::detail {

void include_walker::index_definitions(const scanned_file& data) {
  for (const auto& d : data.scan.definitions) object_definitions_[d.name].push_back(&d.body);
  for (const auto& d : data.scan.function_definitions) function_definitions_[d.name].push_back(&d);
}

std::vector<std::string> include_walker::definitions_of(const std::string& name) const {
  std::vector<std::string> bodies;
  if (search_.defines != nullptr) {
    for (const auto& m : *search_.defines) {
      if (m.name == name) bodies.push_back(m.value.value_or("1"));
    }
  }
  if (auto it = object_definitions_.find(name); it != object_definitions_.end()) {
    for (const std::string* body : it->second) bodies.push_back(*body);
  }
  return bodies;
}

std::vector<const function_macro_definition*> include_walker::function_definitions_of(
    const std::string& name) const {
  auto it = function_definitions_.find(name);
  return it == function_definitions_.end() ? std::vector<const function_macro_definition*>{}
                                           : it->second;
}

bool include_walker::expand(const std::string& text, int depth,
                            std::vector<std::string>& results) const {
  constexpr std::size_t kMaxAlternatives = 256;
  if (depth > 16) return false;
  std::vector<std::string> partial{std::string()};
  std::size_t i = 0;
  while (i < text.size()) {
    if (!pp::ident_start(text[i])) {
      // Strings, numbers and punctuation are copied (a header name's characters).
      std::size_t j = i + 1;
      if (text[i] >= '0' && text[i] <= '9') {
        while (j < text.size() && pp::ident_char(text[j])) ++j;
      }
      for (auto& p : partial) p.append(text, i, j - i);
      i = j;
      continue;
    }
    std::size_t j = i;
    while (j < text.size() && pp::ident_char(text[j])) ++j;
    const std::string id = text.substr(i, j - i);
    i = j;
    std::size_t open = j;
    while (open < text.size() && text[open] == ' ') ++open;
    const bool called = open < text.size() && text[open] == '(';
    const auto bodies = definitions_of(id);
    const auto functions =
        called ? function_definitions_of(id) : decltype(function_definitions_of(id)){};
    std::vector<std::string> alternatives;
    if (!functions.empty()) {
      // Object-like definitions too would read the call's text differently: not worked out.
      if (!bodies.empty()) return false;
      std::size_t end = 0;
      const auto args = macro_call_arguments(text, open, end);
      if (!args) return false;
      for (const auto* f : functions) {
        std::string substituted;
        if (!substitute_macro_call(*f, *args, substituted)) return false;
        if (!expand(substituted, depth + 1, alternatives)) return false;
      }
      i = end;
    } else if (bodies.empty()) {
      if (reserved_name(id)) return false;  // perhaps predefined: its value is unknown here
      for (auto& p : partial) p += id;
      continue;
    } else {
      for (const auto& body : bodies) {
        if (!expand(body, depth + 1, alternatives)) return false;
      }
    }
    std::vector<std::string> grown;
    for (const auto& p : partial) {
      for (const auto& a : alternatives) {
        grown.push_back(p + a);
        if (grown.size() > kMaxAlternatives) return false;
      }
    }
    partial = std::move(grown);
  }
  for (auto& p : partial) {
    results.push_back(std::move(p));
    if (results.size() > kMaxAlternatives) return false;
  }
  return true;
}

void include_walker::resolve_wrapper_calls() {
  auto has_wrapper = [](const node& n) {
    return n.data && !n.data->wrappers.wrapper_parameters.empty();
  };
  bool any = bare_has_include_ || has_wrapper(top_);
  for (std::size_t i = 0; !any && i < nodes_.size(); ++i) any = has_wrapper(nodes_[i]);
  if (!any) return;
  auto resolve_calls = [&](const node& n) {
    if (!n.data) return;
    for (const auto& call : n.data->wrappers.header_calls)
      resolve_name(n, call, call.name, call.form);
  };
  if (!calls_done_top_) {
    calls_done_top_ = true;
    resolve_calls(top_);
  }
  for (; calls_done_ < nodes_.size(); ++calls_done_) {
    const node n = nodes_[calls_done_];
    resolve_calls(n);
  }
}

void include_walker::resolve_computed() {
  for (std::size_t c = 0; c < computed_.size(); ++c) {
    const pending_reference p = computed_[c];  // copy: resolving may add more
    const node& wrapper_from = node_at(p.node_index);
    // A bare __has_include (#ifdef __has_include, or an alias #define HI __has_include): an
    // alias is called like a wrapper, so its calls are taken as wrapper calls too.
    if ((p.ref.kind == include_kind::has_include || p.ref.kind == include_kind::has_include_next) &&
        p.ref.name.empty()) {
      bare_has_include_ = true;
      continue;
    }
    // __has_include(PARAM) in a function-like macro: its names come from the calls.
    if ((p.ref.kind == include_kind::has_include || p.ref.kind == include_kind::has_include_next) &&
        wrapper_from.data &&
        std::find(wrapper_from.data->wrappers.wrapper_parameters.begin(),
                  wrapper_from.data->wrappers.wrapper_parameters.end(),
                  p.ref.name) != wrapper_from.data->wrappers.wrapper_parameters.end()) {
      continue;
    }
    std::vector<std::string> expansions;
    const node& from = node_at(p.node_index);  // stays valid: nodes_ is a deque
    bool ok = !p.ref.name.empty() && expand(p.ref.name, 0, expansions);
    std::vector<std::pair<include_form, std::string>> names;
    for (const auto& e : expansions) {
      auto name = header_name_of(e);
      if (!name) {
        ok = false;
        break;
      }
      names.push_back(std::move(*name));
    }
    const std::string where = (from.path == "<program>" ? std::string("the program") : from.path) +
                              ":" + std::to_string(p.ref.line) + ": " + spelled(p.ref);
    if (!ok) {
      unresolved_.insert(where);
      continue;
    }
    // Once per route (node) and name: a route continues #include_next from its own place.
    const std::string route = std::to_string(p.node_index) + '\n' + where + '\n';
    for (const auto& [form, name] : names) {
      if (!resolved_computed_.insert(route + name).second) continue;
      resolve_name(from, p.ref, name, form);
    }
  }
}

std::string include_walker::spelled(const include_reference& ref) {
  switch (ref.kind) {
    case include_kind::include:
      return "#include " + ref.name;
    case include_kind::include_next:
      return "#include_next " + ref.name;
    case include_kind::import:
      return "#import " + ref.name;
    case include_kind::embed:
      return "#embed " + ref.name;
    case include_kind::has_include:
      return "__has_include(" + ref.name + ")";
    case include_kind::has_include_next:
      return "__has_include_next(" + ref.name + ")";
    case include_kind::has_embed:
      return "__has_embed(" + ref.name + ")";
  }
  return ref.name;
}

}  // namespace cucore::detail
