#include "compile_options.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "common/environment.hpp"
#include "common/hex.hpp"
#include "common/text.hpp"
#include "cucore/error.hpp"

namespace cucore::cli {
namespace {

namespace fs = std::filesystem;

// The file name without directories, or the path itself when it has none ("dir/").
std::string basename_of(const std::string& path) {
  std::string name = fs::path(path).filename().string();
  return name.empty() ? path : name;
}

// The whole file, bytes as they are (NVVM bitcode is binary).
std::string read_file(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) throw cucore::error("cannot read \"" + path + "\": " + std::strerror(errno));
  std::string data;
  char buffer[1 << 16];
  while (std::size_t n = std::fread(buffer, 1, sizeof buffer, file.get())) data.append(buffer, n);
  // A directory opens fine and fails here, with EISDIR.
  if (std::ferror(file.get())) {
    throw cucore::error("cannot read \"" + path + "\": " + std::strerror(errno));
  }
  return data;
}

source_type source_type_of(const std::string& file, const std::optional<std::string>& given) {
  if (given) {
    try {
      return parse_source_type(*given);
    } catch (const cucore::invalid_argument& e) {
      throw usage_error(std::string("--code-type: ") + e.what());
    }
  }
  const std::string ext = detail::lower_case(fs::path(file).extension().string());
  if (ext == ".cu" || ext == ".cuh" || ext == ".cpp" || ext == ".cxx" || ext == ".cc") {
    return source_type::cxx;
  }
  if (ext == ".ptx") return source_type::ptx;
  if (ext == ".ll" || ext == ".bc" || ext == ".nvvm") return source_type::nvvm;
  throw usage_error("cannot tell what \"" + file +
                    "\" holds from its extension: pass --code-type c++, ptx or nvvm");
}

code_type target_of(source_type source, const std::optional<std::string>& given) {
  if (!given) return source == source_type::nvvm ? code_type::ptx : code_type::cubin;
  try {
    return parse_code_type(*given);
  } catch (const cucore::invalid_argument&) {
    // The library's message lists every code type; say what this source can become instead.
    std::string list;
    for (auto t : supported_targets(source))
      list += (list.empty() ? "" : ", ") + std::string(to_string(t));
    throw usage_error("--target: unknown target \"" + *given +
                      "\": " + std::string(to_string(source)) + " code compiles to " + list);
  }
}

// NAME or NAME=VALUE, split on the first '=' (the value may hold more).
macro to_macro(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == 0) throw usage_error("-D " + text + ": the macro has no name");
  if (eq == std::string::npos) return macro(text);
  return macro(text.substr(0, eq), text.substr(eq + 1));
}

// --header NAME=FILE: an in-memory header named NAME holding FILE's bytes.
include_header to_header(const std::string& text) {
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == text.size()) {
    throw usage_error("--header " + text +
                      ": give NAME=FILE, the name an #include writes and the file to read");
  }
  return {text.substr(0, eq), read_file(text.substr(eq + 1))};
}

// The compile server (docs/compile-server.md, "Clients"): a one-shot command uses a running
// server but starts none unless asked (--server, CUCORE_COMPILE_SERVER=on).
std::optional<compile_server_mode> compile_server_from(const arguments& args) {
  if (args.has("--server") && args.has("--no-server")) {
    throw usage_error("--server and --no-server exclude each other");
  }
  if (args.has("--server")) return compile_server_mode::on;
  if (args.has("--no-server")) return compile_server_mode::off;
  if (!env::text(env::variable::compile_server)) return compile_server_mode::automatic;
  return std::nullopt;
}

// A field whose option has a form of its own (option_form::custom).
void read_custom(const arguments& args, std::string_view field, program_options& o) {
  if (field == "define_macro") {
    for (const auto& d : args.all("-D")) o.define_macro.push_back(to_macro(d));
  } else if (field == "headers") {
    for (const auto& h : args.all("--header")) o.headers.push_back(to_header(h));
  } else if (field == "compile_server") {  // both its rows (--server, --no-server): one answer
    o.compile_server = compile_server_from(args);
  } else if (field == "extra_sources") {
    for (const auto& path : args.all("--extra-module")) {
      o.extra_sources.push_back({basename_of(path), read_file(path)});
    }
  } else {
    throw std::logic_error("no reading of program_options::" + std::string(field));
  }
}

program_options options_from(const arguments& args, const std::string& file) {
  program_options o;
  // FILE as given, not its basename: NVRTC looks up quoted #includes in the directory of the
  // program name, so headers beside FILE are found as nvcc finds them (from any directory).
  o.name = args.last("--name").value_or(file);
  o.arch = args.last("--arch");  // unset: the library takes the GPU's
  // The compiler's options, as the table the help is written from describes them. A field is set
  // only when its option is given, so an absent option emits nothing at all.
  using enum detail::option_form;
  for (const auto& f : detail::program_option_fields) {
    const std::string_view name = f.cli;
    auto boolean_field = [&]() -> std::optional<bool>& {
      return detail::field_member<std::optional<bool>>(o, f);
    };
    switch (f.form) {
      case heading:
        break;
      case flag:
        if (args.has(name)) boolean_field() = true;
        break;
      case off_flag:
        if (args.has(name)) boolean_field() = false;
        break;
      case boolean:
        if (auto v = args.last(name)) boolean_field() = parse_bool(name, *v);
        break;
      case on_off:
        if (auto v = args.last(name)) boolean_field() = parse_bool(name, *v, "on", "off");
        break;
      case integer:
        if (auto n = args.last(name)) {
          detail::field_member<std::optional<int>>(o, f) = parse_int(name, *n);
        }
        break;
      case integers:
        for (const auto& n : args.all(name)) {
          detail::field_member<std::vector<int>>(o, f).push_back(parse_int(name, n));
        }
        break;
      case text:
      case path:
        detail::field_member<std::optional<std::string>>(o, f) = args.last(name);
        break;
      case texts:
        detail::field_member<std::vector<std::string>>(o, f) = args.all(name);
        break;
      case custom:
        read_custom(args, f.name, o);
        break;
    }
  }
  return o;
}

// Each expression once, in command-line order (a JSON object cannot repeat a key).
std::vector<std::string> name_expressions(const arguments& args) {
  std::vector<std::string> unique;
  for (auto& e : args.all("--name-expression")) {
    if (std::find(unique.begin(), unique.end(), e) == unique.end()) unique.push_back(std::move(e));
  }
  return unique;
}

// The arch the compile will use, for the report. A malformed --arch is a usage error; no --arch
// and no GPU is an error of this machine, whose message says to pass --arch.
std::string arch_used(const program_options& options) {
  try {
    return resolve_arch(options.arch);
  } catch (const cucore::invalid_argument& e) {
    if (options.arch) throw usage_error(std::string("--arch: ") + e.what());
    throw;
  }
}

// Asks the library for the flags now, so an option the code type does not take, or an unsupported
// target, is a usage error (exit 2) before any file is read or compiler loaded.
void check_options(program_options options, const std::string& arch, source_type source,
                   code_type target) {
  options.arch = arch;
  try {
    (void)compiler_flags(options, source, target);
  } catch (const cucore::invalid_argument& e) {
    // "extra_nvrtc_options[1] \"-std=c++20\" is ...": the element is a -Xnvrtc here, and
    // "headers[1] \"cfg.cuh\" repeats headers[0]": the element is a --header here.
    std::string message = e.what();
    for (const auto& [element, option] :
         {std::pair<std::string_view, std::string_view>{"extra_nvrtc_options[", "-Xnvrtc "},
          {"headers[", "--header "}}) {
      if (!message.starts_with(element)) continue;
      if (const auto close = message.find("] "); close != std::string::npos) {
        message = std::string(option) + message.substr(close + 2);
      }
    }
    throw usage_error(message);
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// The library's advice to its callers at the end of an extra_digest_required message ("pass a
// fingerprint of those files' contents as program_cache_key_inputs::extra_digest (see ...), or
// compile without the cache."): the tool says it with its own options instead.
constexpr std::string_view library_advice = "pass a fingerprint of ";

// `text` without its trailing separators (", or ", "; ", " ", ".").
std::string trim_tail(std::string text) {
  while (!text.empty()) {
    if (text.ends_with(" or")) {
      text.resize(text.size() - 3);
    } else if (text.back() == ' ' || text.back() == ',' || text.back() == ';' ||
               text.back() == '.' || text.back() == ':') {
      text.pop_back();
    } else {
      break;
    }
  }
  return text;
}

// `text` with each word (a run of letters, digits and '_') outside parentheses that names a
// program_options field as its option (program_option_fields): "create_pch (writes a precompiled
// header) and time (...)", the fields whose key gates refused a key.
std::string with_fields_as_options(const std::string& text) {
  auto name_char = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; };
  std::string out;
  int depth = 0;
  for (std::size_t i = 0; i < text.size();) {
    if (depth > 0 || !name_char(text[i])) {
      depth += text[i] == '(' ? 1 : text[i] == ')' ? -1 : 0;
      out += text[i++];
      continue;
    }
    std::size_t end = i;
    while (end < text.size() && name_char(text[end])) ++end;
    const std::string_view word = std::string_view(text).substr(i, end - i);
    std::string_view as = word;
    for (const auto& f : detail::program_option_fields) {
      if (f.form != detail::option_form::heading && word == f.name) {
        as = f.cli;
        break;
      }
    }
    out += as;
    i = end;
  }
  return out;
}

}  // namespace

compile_inputs compile_inputs_from(const arguments& args, std::string_view command) {
  const auto& files = args.positionals();
  if (files.empty()) throw usage_error(std::string(command) + " needs a FILE");
  if (files.size() > 1) {
    throw usage_error(std::string(command) + " takes one FILE, but got also \"" + files[1] + "\"");
  }
  compile_inputs in;
  in.file = files[0];
  in.source = source_type_of(in.file, args.last("--code-type"));
  in.target = target_of(in.source, args.last("--target"));
  in.name_expressions = name_expressions(args);
  if (!in.name_expressions.empty() && in.source != source_type::cxx) {
    throw usage_error("--name-expression is for c++ code: " + std::string(to_string(in.source)) +
                      " symbols keep their own names");
  }
  (void)extra_digest_from(args);  // a malformed one is a usage error before any file is read
  in.options = options_from(args, in.file);
  in.arch = arch_used(in.options);
  check_options(in.options, in.arch, in.source, in.target);
  in.code = read_file(in.file);
  return in;
}

std::string decode_hex(std::string_view option, std::string_view text) {
  if (text.size() % 2 != 0) {
    throw usage_error(std::string(option) + ": \"" + std::string(text) + "\" has an odd number (" +
                      std::to_string(text.size()) + ") of hex digits: give two per byte");
  }
  std::string bytes;
  bytes.reserve(text.size() / 2);
  for (std::size_t i = 0; i < text.size(); i += 2) {
    const int hi = hex_digit(text[i]);
    const int lo = hex_digit(text[i + 1]);
    if (hi < 0 || lo < 0) {
      const std::size_t bad = hi < 0 ? i : i + 1;
      throw usage_error(std::string(option) + ": \"" + std::string(text) +
                        "\" is not hexadecimal (\"" + std::string(1, text[bad]) + "\" at offset " +
                        std::to_string(bad) + ")");
    }
    bytes += static_cast<char>(hi * 16 + lo);
  }
  return bytes;
}

std::string encode_hex(std::string_view bytes) {
  return detail::to_hex(bytes);
}

std::optional<std::string> extra_digest_from(const arguments& args) {
  const auto hex = args.last(extra_digest_option.name);
  if (!hex) return std::nullopt;
  return decode_hex(extra_digest_option.name, *hex);
}

program_cache_key_inputs key_inputs(const compile_inputs& in,
                                    std::optional<std::string> extra_digest) {
  program_cache_key_inputs inputs;
  inputs.code = in.code;
  inputs.code_type = in.source;
  inputs.options = in.options;
  inputs.options.arch = in.arch;
  inputs.target = in.target;
  inputs.name_expressions = in.name_expressions;
  inputs.extra_digest = std::move(extra_digest);
  return inputs;
}

cache_refusal cache_refusal_of(const compile_inputs& in, const cucore::invalid_argument& refusal) {
  cache_refusal out;
  out.extra_digest_helps = dynamic_cast<const extra_digest_required*>(&refusal) != nullptr;
  if (in.source == source_type::nvvm && in.options.use_libdevice.value_or(false) &&
      out.extra_digest_helps) {
    out.reason =
        "--libdevice links libdevice.10.bc, a file whose contents the cache key cannot see";
    return out;
  }
  std::string message = refusal.what();
  if (out.extra_digest_helps) {
    if (const auto advice = message.find(library_advice); advice != std::string::npos) {
      message = trim_tail(message.substr(0, advice));
    }
  }
  // The gates on options ("no program cache key for c++ with program_options time (writes ...):
  // ... Compile without the cache, or leave it unset."), in the tool's words: the options as the
  // command line spells them, the library's advice left to the command.
  static constexpr std::string_view no_key = "no program cache key for c++ with ";
  if (message.starts_with(no_key)) message.erase(0, no_key.size());
  if (const auto advice = message.find(". Compile without the cache");
      advice != std::string::npos) {
    message.resize(advice);
  }
  static constexpr std::string_view fields = "program_options ";
  if (message.starts_with(fields)) {
    message.erase(0, fields.size());
    // Only in the list of fields, up to the first ':' or " make".
    std::size_t end = std::min(message.find(':'), message.find(" make"));
    if (end == std::string::npos) end = message.size();
    message = with_fields_as_options(message.substr(0, end)) + message.substr(end);
  }
  static constexpr std::string_view extra_field = "extra_nvrtc_options ";
  if (message.starts_with(extra_field)) message.replace(0, extra_field.size(), "-Xnvrtc ");
  static constexpr std::string_view code_prefix = "the c++ code ";
  if (message.starts_with(code_prefix)) {
    message = in.file + " " + message.substr(code_prefix.size());
  }
  // Locations: "the program:2: #include STR(h.cuh)" is FILE's line 2.
  static constexpr std::string_view program_prefix = "the program:";
  for (auto at = message.find(program_prefix); at != std::string::npos;
       at = message.find(program_prefix, at + in.file.size() + 1)) {
    message.replace(at, program_prefix.size(), in.file + ":");
  }
  out.reason = trim_tail(std::move(message));
  return out;
}

json headers_json(const program_cache_key* key) {
  if (key == nullptr || !key->includes().tracked) return nullptr;
  const include_report& r = key->includes();
  return {{"tracked", r.files},
          {"absent", r.absent},
          {"in_memory", r.in_memory},
          {"hashed", r.hashed},
          {"stat_fast_path", r.stat_fast_path()},
          {"reused_walk", r.reused_walk},
          {"skipped", r.skipped}};
}

std::optional<std::string> backend_from_key(const program_cache_key& key, source_type source) {
  switch (source) {
    case source_type::cxx:
      return std::string(to_string(compiler_backend::nvrtc));
    case source_type::nvvm:
      return std::string(to_string(compiler_backend::nvvm));
    case source_type::ptx:
      for (const auto& field : key.explain()) {
        if (field.label == "linker_backend") return field.payload;
      }
      return std::nullopt;
  }
  return std::nullopt;
}

}  // namespace cucore::cli
