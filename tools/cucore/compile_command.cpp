// cucore compile: one source file in, one compiled file out, through cucore::program.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "arguments.hpp"
#include "commands.hpp"
#include "cucore/error.hpp"
#include "cucore/object_code.hpp"
#include "cucore/options.hpp"
#include "cucore/program.hpp"
#include "json_writer.hpp"

namespace cucore::cli {
namespace {

namespace fs = std::filesystem;

constexpr option_spec options[] = {
    {"-o", "--output", "OUT", "output file (default: FILE's stem + \".\" + target, here)"},
    {"--code-type", "", "c++|ptx|nvvm", "what FILE holds (default: from its extension)"},
    {"--target", "", "ptx|cubin|ltoir", "what to produce (default: cubin; ptx from nvvm)"},
    {"--arch", "", "sm_XY", "GPU architecture (default: the GPU's)"},
    {"--name", "", "NAME", "program name in compiler messages (default: FILE's name)"},
    {"--name-expression", "", "EXPR", "c++: report EXPR's mangled name (repeatable)"},
    {"--json", "", "", "print the result as one JSON object"},
    {"", "", "", "Preprocessor (c++)"},
    {"-I", "--include-path", "DIR", "search DIR for headers (repeatable)"},
    {"-D", "--define-macro", "NAME[=VALUE]", "define a macro (repeatable)"},
    {"-U", "--undefine-macro", "NAME", "undefine a macro (repeatable)"},
    {"--pre-include", "", "FILE", "include FILE before the source (repeatable)"},
    {"--std", "", "STD", "language dialect: c++17, c++20, ..."},
    {"", "", "", "Code generation"},
    {"-G", "--debug", "", "device debug information"},
    {"--lineinfo", "", "", "line-number information (c++, ptx)"},
    {"--maxrregcount", "", "N", "at most N registers per thread (c++, ptx)"},
    {"--use-fast-math", "", "", "fast, less precise math (c++)"},
    {"--ftz", "", "true|false", "flush denormal floats to zero"},
    {"--prec-div", "", "true|false", "IEEE-rounded division"},
    {"--prec-sqrt", "", "true|false", "IEEE-rounded square root"},
    {"--fmad", "", "true|false", "contract multiply and add into FMA"},
    {"--rdc", "", "", "relocatable device code (c++)"},
    {"--ptxas-options", "", "OPT", "pass OPT to ptxas (repeatable; c++, ptx)"},
    {"--diag-suppress", "", "N", "suppress diagnostic number N (repeatable; c++)"},
    {"--disable-warnings", "", "", "no warnings (c++)"},
    {"--dopt", "", "on|off", "device code optimization (c++, nvvm)"},
    {"--extra-device-vectorization", "", "", "more aggressive vectorization (c++)"},
    {"", "", "", "NVVM IR"},
    {"--libdevice", "", "", "link libdevice, the CUDA math library"},
    {"--extra-module", "", "FILE", "another IR module to compile with FILE (repeatable)"},
};

constexpr std::string_view description =
    "Compiles FILE and writes the result: CUDA C++ with NVRTC, NVVM IR with libNVVM, PTX with\n"
    "nvJitLink (or the driver linker). What FILE holds comes from its extension: .cu .cuh .cpp\n"
    ".cxx .cc are c++, .ptx is ptx, .ll .bc .nvvm are nvvm; --code-type overrides it. Targets:\n"
    "c++ to ptx, cubin or ltoir; ptx to cubin; nvvm to ptx or ltoir. Options a code type does not\n"
    "take are refused by name.\n"
    "\n"
    "Exit status: 0 compiled; 1 compilation failed (the compiler's log goes to stderr) or a CUDA\n"
    "library is missing; 2 bad command line.";

std::string lower(std::string text) {
  std::transform(text.begin(), text.end(), text.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return text;
}

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
  const std::string ext = lower(fs::path(file).extension().string());
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

program_options options_from(const arguments& args, const std::string& file) {
  program_options o;
  o.name = args.last("--name").value_or(basename_of(file));
  o.arch = args.last("--arch");  // unset: the library takes the GPU's
  o.include_path = args.all("-I");
  for (const auto& d : args.all("-D")) o.define_macro.push_back(to_macro(d));
  o.undefine_macro = args.all("-U");
  o.pre_include = args.all("--pre-include");
  o.std = args.last("--std");

  // Flags set a field only when given, so an absent flag emits nothing at all.
  auto flag = [&](std::string_view name, std::optional<bool>& field) {
    if (args.has(name)) field = true;
  };
  auto boolean = [&](std::string_view name, std::optional<bool>& field) {
    if (auto v = args.last(name)) field = parse_bool(name, *v);
  };
  flag("-G", o.debug);
  flag("--lineinfo", o.lineinfo);
  flag("--use-fast-math", o.use_fast_math);
  flag("--rdc", o.relocatable_device_code);
  flag("--disable-warnings", o.disable_warnings);
  flag("--extra-device-vectorization", o.extra_device_vectorization);
  flag("--libdevice", o.use_libdevice);
  boolean("--ftz", o.ftz);
  boolean("--prec-div", o.prec_div);
  boolean("--prec-sqrt", o.prec_sqrt);
  boolean("--fmad", o.fma);
  if (auto v = args.last("--dopt")) o.device_code_optimize = parse_bool("--dopt", *v, "on", "off");
  if (auto n = args.last("--maxrregcount")) {
    o.max_register_count = parse_int("--maxrregcount", *n);
  }
  for (const auto& n : args.all("--diag-suppress")) {
    o.diag_suppress.push_back(parse_int("--diag-suppress", n));
  }
  o.ptxas_options = args.all("--ptxas-options");
  for (const auto& path : args.all("--extra-module")) {
    o.extra_sources.push_back({basename_of(path), read_file(path)});
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
    throw usage_error(e.what());
  }
}

void print_json(const std::string& output, const object_code& result, source_type source,
                std::string_view backend, const std::string& arch,
                const std::vector<std::string>& expressions, double ms, const std::string& log) {
  json_writer json;
  json.begin_object();
  json.key("output").value(output);
  json.key("bytes").value(result.size());
  json.key("source_type").value(to_string(source));
  json.key("code_type").value(to_string(result.type()));
  json.key("backend").value(backend);
  json.key("arch").value(arch);
  json.key("mangled_names").begin_object();
  for (const auto& e : expressions) json.key(e).value(result.symbol(e));
  json.end_object();
  json.key("compile_ms").value(ms);
  json.key("log").value(log);
  json.end_object();
  std::cout << json.str() << '\n';
}

int run(const arguments& args) {
  const auto& files = args.positionals();
  if (files.empty()) throw usage_error("compile needs a FILE");
  if (files.size() > 1)
    throw usage_error("compile takes one FILE, but got also \"" + files[1] + "\"");
  const std::string& file = files[0];

  const source_type source = source_type_of(file, args.last("--code-type"));
  const code_type target = target_of(source, args.last("--target"));
  const std::vector<std::string> expressions = name_expressions(args);
  if (!expressions.empty() && source != source_type::cxx) {
    throw usage_error("--name-expression is for c++ code: " + std::string(to_string(source)) +
                      " symbols keep their own names");
  }
  const program_options options = options_from(args, file);
  const std::string arch = arch_used(options);
  check_options(options, arch, source, target);

  const std::string output = args.last("-o").value_or(fs::path(file).stem().string() + "." +
                                                      std::string(to_string(target)));
  if (std::error_code ec; fs::equivalent(file, output, ec)) {
    throw usage_error("the output \"" + output + "\" is FILE itself: name another with -o");
  }

  program prog(read_file(file), source, options);
  const auto start = std::chrono::steady_clock::now();
  const object_code result = prog.compile(target, expressions);
  const std::chrono::duration<double, std::milli> elapsed =
      std::chrono::steady_clock::now() - start;
  result.write(output);

  const std::string_view backend = to_string(prog.backend());
  if (args.has("--json")) {
    print_json(output, result, source, backend, arch, expressions, elapsed.count(), prog.log());
    return exit_success;
  }
  std::cout << file << " -> " << output << " (" << result.size() << " bytes, "
            << to_string(result.type()) << ", " << arch << ", " << backend << ", " << std::fixed
            << std::setprecision(1) << elapsed.count() << " ms)\n";
  for (const auto& e : expressions) std::cout << "  " << e << " = " << result.symbol(e) << '\n';
  // Warnings: the compile succeeded, but the user should see them.
  if (const std::string& log = prog.log(); !log.empty()) {
    std::cerr << log;
    if (log.back() != '\n') std::cerr << '\n';
  }
  return exit_success;
}

}  // namespace

const command compile_command{
    "compile",
    "compile FILE [options]",
    "compile CUDA C++, PTX or NVVM IR to ptx, cubin or ltoir",
    description,
    options,
    run,
};

}  // namespace cucore::cli
