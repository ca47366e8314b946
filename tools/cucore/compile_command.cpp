// cucore compile: one source file in, one compiled file out, through cucore::program.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "cache_spec.hpp"
#include "command_line.hpp"
#include "commands.hpp"
#include "compile_options.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/cache/program_cache.hpp"
#include "cucore/cache/single_flight.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/log.hpp"
#include "cucore/object_code.hpp"
#include "cucore/options.hpp"
#include "cucore/program.hpp"
#include "json_output.hpp"

namespace cucore::cli {
namespace {

namespace fs = std::filesystem;

constexpr auto options = join_options(
    std::to_array<option_spec>({
        {"-o", "--output", "OUT", "output file (default: FILE's stem + \".\" + target, here)"},
        {"--tile-ir-output", "", "OUT",
         "also write the Tile IR compiled with the target (c++ with --enable-tile)"},
    }),
    compilation_options,
    std::to_array<option_spec>({
        {"--json", "", "", "print the result as one JSON object"},
    }),
    compiler_options,
    std::to_array<option_spec>({
        {"", "", "", "Cache"},
        cache_option,
        shared_cache_option,
        extra_digest_option,
        {"--no-single-flight", "", "", "every process that misses compiles (no waiting)"},
        {"--single-flight-wait", "", "SECONDS",
         "wait at most this long for another process's compile (default 45)"},
        {"--single-flight-lease", "", "SECONDS",
         "a Redis claim expires after this long if its holder dies (default 30)"},
        {"--verify", "", "",
         "a hit is compiled again, uncached, and compared: a stale entry is removed and the "
         "fresh result written (CUCORE_VERIFY=1; docs/verify.md)"},
        {"--verify-rate", "", "RATE", "verify this fraction of hits, from 0 to 1"},
    }));

constexpr std::string_view description =
    "Compiles FILE and writes the result: CUDA C++ with NVRTC, NVVM IR with libNVVM, PTX with\n"
    "nvJitLink (or the driver linker). What FILE holds comes from its extension: .cu .cuh .cpp\n"
    ".cxx .cc are c++, .ptx is ptx, .ll .bc .nvvm are nvvm; --code-type overrides it. Targets:\n"
    "c++ to ptx, cubin or ltoir; ptx to cubin; nvvm to ptx or ltoir. Options a code type does not\n"
    "take are refused by name.\n"
    "\n"
    "Headers (c++), searched as nvcc does: a quoted #include beside the file that includes it\n"
    "(for FILE itself, the directory of the program name: FILE as given, unless --name; not with\n"
    "--no-source-include), then the -I directories in order, then the toolkit's include\n"
    "directories (include/cccl and include: CUB, Thrust, <cuda/...>; see `cucore info`) unless\n"
    "--no-toolkit-include. An #include <name> skips the first step.\n"
    "\n"
    "Results are cached: a second compile of the same source with the same options and compiler\n"
    "is read from the cache (\"cache hit\") without loading the compiler; the time reported is\n"
    "then the lookup's. The key covers the headers the code can include (-I, --pre-include,\n"
    "quoted and <> #includes, the toolkit's): each file's path and SHA-256, and the places\n"
    "looked at where none was, so editing or adding a header is a miss (`cucore key --explain`\n"
    "lists them). --json adds \"key\" (what `cucore cache show` takes); \"cache\": hit, miss,\n"
    "off (--cache none) or skipped (with \"cache_skip_reason\"); \"stored\": whether this\n"
    "compile put its result in the cache (a miss whose headers were each, after the compile,\n"
    "the file they were when the key was made and not modified just before: else \"cache_skip\":\n"
    "header_changed or header_too_new and \"cache_skip_reason\" say which file and why); and\n"
    "\"headers\": null, or\n"
    "{\"tracked\": header files in the key, \"absent\": candidates found absent, \"in_memory\":\n"
    "0 here, \"hashed\": files read (the others were known by their identity),\n"
    "\"stat_fast_path\": none was read, \"reused_walk\": an earlier walk's manifest held,\n"
    "\"skipped\": includes in #if groups that are never entered}; on a miss this process\n"
    "compiled, \"miss\": {\"reason\": first_compile, source_changed, header_changed,\n"
    "headers_changed, option_changed, compiler_changed, environment_changed,\n"
    "working_directory_changed or other, \"reasons\": [{\"kind\", \"detail\"}] (which header,\n"
    "option, variable; what differs from the last key stored for this program name or source),\n"
    "\"nearest_key\"}; \"verify\": not_verified,\n"
    "verified or mismatch (--verify, --verify-rate, CUCORE_VERIFY: a hit compiled again and\n"
    "compared; a mismatch is a stale hit: its entry is removed, the fresh result written, and\n"
    "\"verify_report\" names a report file).\n"
    "\n"
    // clang-format off
    CUCORE_CLI_CACHE_SPEC_HELP "\n"
    // clang-format on
    "\n"
    "Inputs the cache key cannot see (an #include through a function-like macro, --libdevice,\n"
    "--pch, --use-pch, --pch-dir) need --extra-digest HEX, bytes that change when those files\n"
    "do (for example the SHA-256 of the files, from sha256sum). Without it such a compile is not\n"
    "cached (a note on stderr says why; --json reports \"cache\": \"skipped\"). Files a hit\n"
    "would not write (--time, --fdevice-time-trace, --create-pch) and -Xnvrtc -Xcudafe or\n"
    "-Xnvvm (options for tools inside NVRTC, which may read or write any file) are never cached,\n"
    "nor is an -Xnvrtc option NVRTC's documented options do not include, or\n"
    "-Xnvrtc --use-bundled-headers=DIR (NVRTC installs headers into DIR and reads them there;\n"
    "--use-bundled-headers, without a value, is cached: cucore installs them and walks them).\n"
    "-Xnvrtc refuses an option that an option above covers (-Xnvrtc -std=c++20: use --std). A\n"
    "cache that cannot be opened or written to never fails the compile.\n"
    "\n"
    "Single-flight: when several processes (on this machine through a directory or SQLite\n"
    "cache, across machines through Redis) miss the same key at once, one compiles and the\n"
    "others wait for its entry, for at most --single-flight-wait seconds, then compile\n"
    "themselves. A compile that fails or a process that dies lets the waiters compile at once.\n"
    "CUCORE_SINGLE_FLIGHT=0 and CUCORE_SINGLE_FLIGHT_WAIT=SECONDS set the defaults.\n"
    "--json reports \"single_flight\": hit, compiled, waited (read another process's compile:\n"
    "\"cache\" is then hit), took_over, gave_up or unclaimed (--no-single-flight), or null\n"
    "without a cache.\n"
    "\n"
    "--json prints one JSON object whatever the outcome: on success the report above with\n"
    "\"ok\": true; on failure {\"ok\": false, \"error\": the message, \"log\": the compiler's\n"
    "log or \"\"} (the message also goes to stderr). Only a line that cannot be parsed (an\n"
    "unknown option, a flag given a value, an option without its value or with an empty one)\n"
    "is reported on stderr alone.\n"
    "\n"
    "Exit status: 0 compiled; 1 compilation failed (the compiler's log goes to stderr) or a CUDA\n"
    "library is missing; 2 bad command line.";

// What the cache did for this compile: a library outcome, or the tool's "skipped" (a cache was
// asked for, but the inputs or the cache itself did not allow it).
struct cache_report {
  std::string outcome = "off";  // off, hit, miss, skipped
  std::optional<program_cache_key> key;
  std::string skip_reason;
  std::optional<flight_outcome> flight;     // what single-flight did (with a cache)
  bool stored = false;                      // a miss whose result was put
  std::optional<store_refusal> not_stored;  // a miss check_store() kept out of the cache
  verify_outcome verify = verify_outcome::not_verified;  // verify mode's finding on a hit
  std::optional<std::string> verify_report;              // a mismatch's report file
  std::optional<miss_explanation> miss;                  // why a miss missed
};

struct compiled {
  object_code code;
  cache_report cache;
};

// The backend's name for the report. On a hit it comes from the key: asking the program would
// load nvJitLink for ptx, and a hit must load no compiler.
std::string backend_name(const program& prog, const cache_report& cache, source_type source) {
  if (cache.outcome == "hit" && cache.key) {
    if (auto name = backend_from_key(*cache.key, source)) return *name;
  }
  return std::string(to_string(prog.backend()));
}

// Compiles with the key the tool derives itself (--extra-digest included), through the library's
// one cached compile (program::compile with a key): the same lookup, single-flight, observed
// store gate, store and statistics as every other front end.
object_code compile_with_key(program& prog, const compile_inputs& in, program_cache& cache,
                             cache_report& report) {
  object_code code = prog.compile(in.target, in.name_expressions, cache, *report.key);
  report.outcome = prog.last_cache_outcome() == cache_outcome::hit ? "hit" : "miss";
  report.flight = prog.last_flight_outcome();
  report.stored = prog.last_stored();
  report.not_stored = prog.last_store_refusal();
  report.verify = prog.last_verify();
  report.miss = prog.last_miss_explanation();
  report.verify_report = prog.last_verify_report();
  return code;
}

// --no-single-flight and --single-flight-wait, applied to `cache`.
void apply_single_flight(const arguments& args, program_cache& cache) {
  single_flight_options o = cache.single_flight();
  if (args.has("--no-single-flight")) o.enabled = false;
  auto seconds_of = [&](std::string_view option) -> std::optional<std::chrono::milliseconds> {
    const auto text = args.last(option);
    if (!text) return std::nullopt;
    double seconds = -1;
    std::size_t used = 0;
    try {
      seconds = std::stod(*text, &used);
    } catch (const std::exception&) {
    }
    if (used != text->size() || !(seconds >= 0) || seconds > 86400) {
      throw usage_error(std::string(option) + ": \"" + *text +
                        "\" is not a number of seconds from 0 to 86400");
    }
    return std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  };
  if (const auto wait = seconds_of("--single-flight-wait")) o.max_wait = *wait;
  if (const auto lease = seconds_of("--single-flight-lease")) {
    o.lease = std::max(*lease, std::chrono::milliseconds(1));
  }
  cache.set_single_flight(o);
}

compiled compile(program& prog, const compile_inputs& in, const arguments& args) {
  cache_report report;
  const std::string spec = cache_spec_from(args);
  if (is_no_cache(spec)) {
    return {prog.compile(in.target, in.name_expressions), report};
  }
  auto skip = [&](std::string reason) {
    report.outcome = "skipped";
    report.skip_reason = std::move(reason);
    return compiled{prog.compile(in.target, in.name_expressions), report};
  };
  std::unique_ptr<program_cache> cache;
  try {
    cache = open_cache(spec, args);
  } catch (const std::exception& e) {
    return skip("cannot open the cache: " + std::string(e.what()));
  }
  apply_single_flight(args, *cache);
  // The tool derives the key itself (not program::compile(..., cache)): it takes --extra-digest,
  // and a refusal is reported in the tool's words, then the compile goes on without the cache.
  const program_cache_key_inputs inputs = key_inputs(in, extra_digest_from(args));
  try {
    report.key = make_program_cache_key(inputs, probes_for(*cache));
  } catch (const cucore::invalid_argument& e) {
    const cache_refusal refusal = cache_refusal_of(in, e);
    if (auto stats = cache->statistics()) {
      stats->record_skip(refusal.extra_digest_helps ? cache_skip_reason::needs_extra_digest
                                                    : cache_skip_reason::uncacheable_options);
    }
    return skip(refusal.reason + (refusal.extra_digest_helps
                                      ? "; pass --extra-digest or --cache none"
                                      : "; pass --cache none to compile without the cache"));
  }
  if (const auto& bypass = report.key->bypass()) {
    if (auto stats = cache->statistics()) stats->record_skip(bypass->reason);
    return skip(std::string(to_string(bypass->reason)) + ": " + bypass->why);
  }
  object_code code = compile_with_key(prog, in, *cache, report);
  return {std::move(code), report};
}

void print_json(const std::string& output, const compiled& c, const compile_inputs& in,
                const std::string& backend, double ms, const std::string& log) {
  const object_code& result = c.code;
  json mangled_names = json::object();
  for (const auto& e : in.name_expressions) mangled_names[e] = result.symbol(e);
  json out = {
      {"ok", true},
      {"output", output},
      {"bytes", result.size()},
      {"tile_ir_bytes", result.tile_ir() ? json(result.tile_ir()->size()) : json(nullptr)},
      {"source_type", to_string(in.source)},
      {"code_type", to_string(result.type())},
      {"backend", backend},
      {"arch", in.arch},
      {"mangled_names", std::move(mangled_names)},
      {"compile_ms", rounded(ms, 3)},
      {"log", log},
      {"key", c.cache.key ? json(c.cache.key->hex()) : json(nullptr)},
      {"cache", c.cache.outcome},
  };
  if (c.cache.outcome == "skipped") out["cache_skip_reason"] = c.cache.skip_reason;
  out["stored"] = c.cache.stored;
  if (c.cache.not_stored) {
    out["cache_skip"] = std::string(to_string(c.cache.not_stored->reason));
    out["cache_skip_reason"] = c.cache.not_stored->message;
  }
  out["single_flight"] = c.cache.flight ? json(to_string(*c.cache.flight)) : json(nullptr);
  if (c.cache.miss) {
    json reasons = json::array();
    for (const auto& r : c.cache.miss->reasons) {
      reasons.push_back({{"kind", std::string(to_string(r.kind))}, {"detail", r.detail}});
    }
    out["miss"] = {
        {"reason", std::string(to_string(c.cache.miss->kind()))},
        {"reasons", std::move(reasons)},
        {"nearest_key",
         c.cache.miss->nearest_key.empty() ? json(nullptr) : json(c.cache.miss->nearest_key)}};
  }
  out["verify"] = std::string(to_string(c.cache.verify));
  if (c.cache.verify_report) out["verify_report"] = *c.cache.verify_report;
  out["headers"] = headers_json(c.cache.key ? &*c.cache.key : nullptr);
  write_json(out);
}

int compile_and_report(const arguments& args) {
  (void)cache_spec_from(args);  // a malformed --cache is a usage error before any file is read
  const compile_inputs in = compile_inputs_from(args, "compile");

  const std::string output = args.last("-o").value_or(fs::path(in.file).stem().string() + "." +
                                                      std::string(to_string(in.target)));
  if (std::error_code ec; fs::equivalent(in.file, output, ec)) {
    throw usage_error("the output \"" + output + "\" is FILE itself: name another with -o");
  }
  if (args.has("--tile-ir-output") && in.target == code_type::tile_ir) {
    throw usage_error(
        "--tile-ir-output is for the ptx, cubin and ltoir targets: with --target tile-ir the "
        "output (-o) is the Tile IR");
  }

  program_options options = in.options;
  if (const auto rate = args.last("--verify-rate")) {
    std::size_t used = 0;
    double value = -1;
    try {
      value = std::stod(*rate, &used);
    } catch (const std::exception&) {
    }
    if (used != rate->size() || !(value >= 0 && value <= 1)) {
      throw usage_error("--verify-rate: \"" + *rate + "\" is not a fraction from 0 to 1");
    }
    options.verify = value;
  }
  if (args.has("--verify")) options.verify = 1.0;
  // One compile and exit: a sampled hit is checked before the output is written, whatever the
  // rate (a mismatch writes the fresh result).
  options.verify_in_background = false;
  program prog(in.code, in.source, options);
  const auto start = std::chrono::steady_clock::now();
  compiled c = [&] {
    try {
      return compile(prog, in, args);
    } catch (const cucore::invalid_argument& e) {
      // A value the compiler refused, such as an --arch the loaded NVRTC does not compile for:
      // a usage error like the values checked before the compile.
      const std::string what = e.what();
      throw usage_error(what.starts_with("arch \"") ? "--arch: " + what : what);
    }
  }();
  const std::chrono::duration<double, std::milli> elapsed =
      std::chrono::steady_clock::now() - start;
  c.code.write(output);
  if (const auto tile_output = args.last("--tile-ir-output")) {
    const std::optional<object_code> tile_ir = c.code.tile_ir();
    if (!tile_ir) {
      throw error("--tile-ir-output: the compile made no Tile IR alongside the " +
                  std::string(to_string(in.target)) +
                  ": the program needs Tile code (__tile_global__) and --enable-tile (or --target "
                  "tile-ir with --tile-only)");
    }
    tile_ir->write(*tile_output);
  }
  const std::string backend = backend_name(prog, c.cache, in.source);

  if (args.has("--json")) {
    print_json(output, c, in, backend, elapsed.count(), prog.log());
    return exit_success;
  }
  const object_code& result = c.code;
  std::cout << in.file << " -> " << output << " (" << result.size() << " bytes, "
            << to_string(result.type()) << ", " << in.arch << ", " << backend << ", " << std::fixed
            << std::setprecision(1) << elapsed.count() << " ms";
  if (c.cache.outcome == "hit" || c.cache.outcome == "miss") {
    std::cout << ", cache " << c.cache.outcome;
    if (c.cache.flight && *c.cache.flight != flight_outcome::hit &&
        *c.cache.flight != flight_outcome::compiled &&
        *c.cache.flight != flight_outcome::unclaimed) {
      std::cout << " (" << to_string(*c.cache.flight) << ")";  // waited, took_over, gave_up
    }
  } else if (c.cache.outcome == "skipped") {
    std::cout << ", not cached";
  }
  std::cout << ")\n";
  for (const auto& e : in.name_expressions) {
    std::cout << "  " << e << " = " << result.symbol(e) << '\n';
  }
  // Said once, here; with --json the reason is in the object.
  if (c.cache.outcome == "skipped") {
    std::cerr << "note: not cached: " << c.cache.skip_reason << '\n';
  }
  // Warnings: the compile succeeded, but the user should see them.
  if (const std::string& log = prog.log(); !log.empty()) {
    std::cerr << log;
    if (log.back() != '\n') std::cerr << '\n';
  }
  return exit_success;
}

// --json's object for a compile that failed: what main() says on stderr, and the compiler's log.
void print_failure_json(const std::string& error, const std::string& log) {
  write_json({{"ok", false}, {"error", error}, {"log", log}});
}

int run(const arguments& args) {
  if (!args.has("--json")) return compile_and_report(args);
  // With --json, every outcome is one object on stdout. main() still reports the failure on
  // stderr and picks the exit status, as without --json.
  try {
    return compile_and_report(args);
  } catch (const cucore::compile_error& e) {
    print_failure_json(e.backend() + " compilation failed (" + e.status() + ")", e.log());
    throw;
  } catch (const std::exception& e) {
    print_failure_json(e.what(), "");
    throw;
  }
}

}  // namespace

const command compile_command{
    "compile",
    "compile FILE [options]",
    "compile CUDA C++, PTX or NVVM IR to ptx, cubin or ltoir",
    description,
    options,
    run,
    nullptr,
};

}  // namespace cucore::cli
