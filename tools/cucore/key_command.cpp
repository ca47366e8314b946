// cucore key: the program cache key `cucore compile` uses for the same command line, and what it
// was built from.
#include <algorithm>
#include <exception>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "cache_spec.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "compile_options.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "json_output.hpp"

namespace cucore::cli {
namespace {

constexpr auto options =
    join_options(std::to_array<option_spec>({
                     {"--explain", "", "", "list the labelled fields the key was built from"},
                     {"--json", "", "", "print the key (and its fields) as one JSON object"},
                 }),
                 compilation_options, compiler_options,
                 std::to_array<option_spec>({
                     {"", "", "", "Cache key"},
                     extra_digest_option,
                     cache_option,
                     shared_cache_option,
                 }));

constexpr std::string_view description =
    "Prints the program cache key of compiling FILE with these options: 64 hex digits, the key\n"
    "`cucore compile` looks up for the same command line (its --json \"key\"), and what\n"
    "`cucore cache ls` lists. It takes every option of compile that goes into the key, with the\n"
    "same defaults (the program name is FILE as given). The key is the SHA-256 of labelled\n"
    "fields: the key schema, the compiler's version, the code type and target, the source's\n"
    "SHA-256, the compiler flags, the name expressions, the program name, the headers the code\n"
    "can include and the --extra-digest. --explain lists them, one per line (label, then\n"
    "payload): each header as \"header  PATH (N bytes, sha256 HEX)\", each place looked at where\n"
    "none was as \"header_absent  PATH (absent)\". --json --explain adds \"fields\"; --json adds\n"
    "compile's \"headers\" object when the key tracks headers.\n"
    "\n"
    "Inputs the key cannot see (an #include through a function-like macro, --libdevice, --pch,\n"
    "--use-pch, --pch-dir) are refused unless --extra-digest HEX is given: bytes that change\n"
    "when those files do (for example their SHA-256). Files a hit would not write (--time,\n"
    "--fdevice-time-trace, --create-pch) and -Xnvrtc -Xcudafe or -Xnvvm are refused always, as\n"
    "are an -Xnvrtc option NVRTC's documented options do not include and --use-bundled-headers.\n"
    "\n"
    "The compiler's version comes from what the cache remembers, as compile's does, so a key for\n"
    "a compiler the cache has seen loads no compiler library; with memory or none, or a cache\n"
    "that cannot be opened, the installed compilers are asked. The key is the same either way.\n"
    "It stores no entry (it may create the cache, and record the compiler's version there).\n"
    "\n" CUCORE_CLI_CACHE_SPEC_HELP
    "\n"
    "\n"
    "Exit status: 0 printed; 1 FILE cannot be read, or no --arch and no GPU; 2 bad command line,\n"
    "or inputs the key cannot cover.";

// A payload on one line: control characters (a newline in a file name) as \xNN.
std::string one_line(std::string_view text) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto b = static_cast<unsigned char>(c);
    if (b < 0x20 || b == 0x7f) {
      out += "\\x";
      out += digits[b >> 4];
      out += digits[b & 0xF];
    } else {
      out += c;
    }
  }
  return out;
}

void print_json(const program_cache_key& key, bool explain) {
  json out = {{"key", key.hex()}};
  if (key.includes().tracked) out["headers"] = headers_json(&key);
  if (explain) {
    json fields = json::array();
    for (const auto& field : key.explain()) {
      fields.push_back({{"label", field.label}, {"payload", field.payload}});
    }
    out["fields"] = std::move(fields);
  }
  write_json(out);
}

void print_human(const program_cache_key& key, bool explain) {
  std::cout << key.hex() << '\n';
  if (!explain) return;
  // Labels are short and payloads (header paths) long: the payloads start in one column, and a
  // long one runs on rather than wrapping, so every field stays one line.
  std::size_t width = 0;
  for (const auto& field : key.explain()) width = std::max(width, field.label.size());
  std::string out;
  for (const auto& field : key.explain()) {
    out += "  " + field.label + std::string(width + 2 - field.label.size(), ' ') +
           one_line(field.payload) + '\n';
  }
  std::cout << out;
}

int run(const arguments& args) {
  const compile_inputs in = compile_inputs_from(args, "key");
  const program_cache_key_inputs inputs = key_inputs(in, extra_digest_from(args));
  // The compiler identities compile uses with this cache: remembered beside a persistent cache
  // (no compiler library loaded), else the installed libraries' (the same answers). "none" opens
  // nothing; probes_for() of an in-memory cache asks the installed libraries.
  const std::string spec = cache_spec_from(args);  // a malformed spec is a usage error
  std::unique_ptr<program_cache> cache;
  try {
    cache = open_cache(spec, args);
  } catch (const std::exception& e) {
    cucore::log(log_level::debug, std::string("key: the cache cannot be opened (") + e.what() +
                                      "); asking the installed compilers");
  }
  std::optional<program_cache_key> key;
  try {
    key =
        cache ? make_program_cache_key(inputs, probes_for(*cache)) : make_program_cache_key(inputs);
  } catch (const cucore::invalid_argument& e) {
    // What compile would skip the cache for: a usage error naming the cause.
    const cache_refusal refusal = cache_refusal_of(in, e);
    throw usage_error("no cache key: " + refusal.reason +
                      (refusal.extra_digest_helps ? "; pass --extra-digest HEX" : ""));
  }
  if (args.has("--json")) {
    print_json(*key, args.has("--explain"));
  } else {
    print_human(*key, args.has("--explain"));
  }
  return exit_success;
}

}  // namespace

const command key_command{
    "key",
    "key FILE [options]",
    "print the cache key of a compile, and what it is made of",
    description,
    options,
    run,
    nullptr,
};

}  // namespace cucore::cli
