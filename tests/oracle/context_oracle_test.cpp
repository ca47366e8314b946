// The context oracle: what NVRTC's output depends on besides the files it reads (issue 31).
//
// 1. A getenv/secure_getenv interposer (getenv_spy.so, LD_PRELOAD) on uncached compiles in child
//    processes lists the variables THIS NVRTC, libNVVM and nvJitLink read: each must be in the
//    key's table (src/key/compiler_environment.cpp: keyed, bypassing or measured harmless), so a
//    compiler that reads a new variable fails here instead of going stale.
// 2. For a few kernels and option sets, uncached compiles in child processes (context_compile:
//    the key is derived in the same process and context as the compile) under pairs of contexts
//    that differ in one thing: the working directory, the clock (faketime), each variable of the
//    table, TMPDIR, umask, HOME, $PWD, a relative vs an absolute program name. For each pair:
//    equal outputs (PTX with NVRTC's PID-bearing _INTERNAL_ names masked), or different keys, or a
//    bypass. CUCORE_CONTEXT_ORACLE_FULL=1 runs every context against every kernel and option set.
// 3. The reproductions of issue 31 through the library, `cucore compile` and `cucore run`.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cucore/cache/in_memory.hpp"
#include "cucore/cache/key.hpp"
#include "cucore/program.hpp"
#include "key/compiler_environment.hpp"
#include "oracle_support.hpp"
#include "test_support.hpp"

namespace fs = std::filesystem;
using cucore::testing::contains;
using cucore::testing::temp_dir;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void write_file(const fs::path& p, std::string_view text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

bool have_program(const std::string& name) {
  std::string out;
  return cucore::oracle::run_process({"sh", "-c", "command -v " + name}, {}, out) == 0;
}

// What differs from the baseline context.
struct context {
  std::string label = "baseline";
  std::string cwd = "a";         // under the scratch directory
  bool absolute_name = false;    // the program name as an absolute path
  std::vector<std::string> set;  // NAME=VALUE
  std::string faketime;          // a faketime time specification
  std::string umask;             // e.g. "077"
};

struct kernel {
  std::string label;
  std::string file;  // under the scratch directory's a/ (and bb/): the source
  std::string code;
};

struct option_set {
  std::string label;
  std::string target;
  std::vector<std::string> options;
};

struct child_result {
  int status = 0;
  std::string key;
  std::string bypass;
  std::string output;
  std::string log;
};

// A sanitizer build's child with a preloaded (uninstrumented) library: allowed.
std::string asan_options() {
  const char* v = std::getenv("ASAN_OPTIONS");
  return std::string("ASAN_OPTIONS=") + (v && *v ? std::string(v) + ":" : "") +
         "verify_asan_link_order=0";
}

class ContextOracle : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // The baseline has none of the table's variables: each context sets one. Nor an opt-in to
    // caching time macros (with it, the oracle finds the __TIME__ kernel stale, as it should).
    ::unsetenv("CUCORE_SLOPPINESS");
    for (const auto& v : cucore::detail::compiler_environment()) {
      if (v.name != "PWD") ::unsetenv(std::string(v.name).c_str());
    }
  }

  ContextOracle() {
    fs::create_directories(dir_ / "a");
    fs::create_directories(dir_ / "bb");
    fs::create_directories(dir_ / "tmp2");
    fs::create_directories(dir_ / "home2");
  }

  // The source in both working directories (a header beside it too, when given).
  void place(const kernel& k) {
    for (const char* d : {"a", "bb"}) write_file(dir_ / d / k.file, k.code);
  }

  child_result run(const kernel& k, const option_set& o, const context& c,
                   const std::vector<std::string>& prefix = {}) {
    static int counter = 0;
    const std::string n = std::to_string(++counter);
    const fs::path cwd = dir_ / c.cwd;
    std::vector<std::string> argv = {"env", asan_options()};
    argv.insert(argv.end(), c.set.begin(), c.set.end());
    argv.insert(argv.end(), prefix.begin(), prefix.end());
    if (!c.faketime.empty()) argv.insert(argv.end(), {"faketime", "-f", c.faketime});
    if (!c.umask.empty()) {
      argv.insert(argv.end(), {"sh", "-c", "umask " + c.umask + " && exec \"$@\"", "sh"});
    }
    const std::string name = c.absolute_name ? (cwd / k.file).string() : k.file;
    argv.insert(argv.end(), {CUCORE_CONTEXT_COMPILE, (cwd / k.file).string(), name, o.target,
                             (dir_ / ("key" + n)).string(), (dir_ / ("out" + n)).string(), "c++"});
    argv.insert(argv.end(), o.options.begin(), o.options.end());
    child_result r;
    r.status = cucore::oracle::run_process(argv, cwd, r.log);
    std::istringstream key(read_file(dir_ / ("key" + n)));
    std::getline(key, r.key);
    std::getline(key, r.bypass);
    r.output = read_file(dir_ / ("out" + n));
    return r;
  }

  // Equal outputs (masked), different keys, or a bypass: else a stale hit a cache would serve.
  void check_pair(const kernel& k, const option_set& o, const child_result& a, const context& c) {
    const child_result b = run(k, o, c);
    ++pairs_;
    ASSERT_FALSE(a.key.empty()) << "baseline: no key\n" << a.log;
    ASSERT_FALSE(b.key.empty()) << c.label << ": no key\n" << b.log;
    if (a.key != b.key || a.bypass != "-" || b.bypass != "-") {
      ++keyed_apart_;
      return;
    }
    const bool same = a.status == b.status && masked(a.output) == masked(b.output);
    EXPECT_TRUE(same) << "stale: " << k.label << " / " << o.label << " / " << c.label
                      << ": equal keys, no bypass, but the outputs differ (status " << a.status
                      << " vs " << b.status << ")\n"
                      << b.log;
  }

  // NVRTC writes the compiling process's PID into libcu++'s internal names
  // (_INTERNAL_<zeros>_<len>_<name>_<8 hex>_<pid>: nvrtc-observed.md). PTX only: text.
  static std::string masked(const std::string& s) {
    static const std::regex internal("_INTERNAL_[A-Za-z0-9_]+");
    return std::regex_replace(s, internal, "_INTERNAL_");
  }

  // Contexts, each differing from the baseline in one thing.
  std::vector<context> contexts(bool environment_sweep) {
    std::vector<context> out;
    context c;
    c.label = "working directory bb/";
    c.cwd = "bb";
    out.push_back(c);
    c = {};
    c.label = "absolute program name";
    c.absolute_name = true;
    out.push_back(c);
    if (faketime_) {
      c = {};
      c.label = "clock: a day later (faketime)";
      c.faketime = "+1d";
      out.push_back(c);
    }
    for (const auto& [name, value] : environment_values()) {
      if (!environment_sweep) break;
      c = {};
      c.label = name + "=" + value;
      c.set = {name + "=" + value};
      out.push_back(c);
    }
    if (environment_sweep) {
      for (const auto& [label, assignment] : std::vector<std::pair<std::string, std::string>>{
               {"TMPDIR", "TMPDIR=" + (dir_ / "tmp2").string()},
               {"HOME", "HOME=" + (dir_ / "home2").string()},
               {"PWD", "PWD=/"}}) {
        c = {};
        c.label = label;
        c.set = {assignment};
        out.push_back(c);
      }
      c = {};
      c.label = "umask 077";
      c.umask = "077";
      out.push_back(c);
    }
    return out;
  }

  // A changing value for each variable of the table.
  std::vector<std::pair<std::string, std::string>> environment_values() {
    const std::map<std::string, std::string> values = {
        {"NV_NVVM_VERSION", "nvvm-latest"},
        {"LLVM_OVERRIDE_PRODUCER", "x"},
        {"NVRTC_APPEND_FLAGS", "-DCUCORE_CONTEXT_ORACLE=1"},
        {"NVRTC_PCH_HEAP_SIZE", "1048576"},
        {"EDG_BASE", (dir_ / "tmp2").string()},
        {"EDG_MODULES_PATH", (dir_ / "tmp2").string()},
        {"DUMP_KNOBS_TO_FILE", (dir_ / "tmp2" / "knobs").string()},
        {"AS_SECURE_LOG_FILE", (dir_ / "tmp2" / "as.log").string()},
    };
    std::vector<std::pair<std::string, std::string>> out;
    for (const auto& v : cucore::detail::compiler_environment()) {
      const std::string name(v.name);
      if (name == "PWD" || name == "TMPDIR") continue;  // contexts of their own
      const auto it = values.find(name);
      out.emplace_back(name, it == values.end() ? "1" : it->second);
    }
    return out;
  }

  temp_dir scratch_;
  fs::path dir_ = scratch_.path();
  bool faketime_ = have_program("faketime");
  int pairs_ = 0;
  int keyed_apart_ = 0;
};

const kernel kPlain{"plain", "k.cu",
                    "extern \"C\" __global__ void k(float* x) { x[threadIdx.x] += 1.0f; }\n"};
const kernel kCub{"CUB block reduce", "cub.cu",
                  "#include <cub/block/block_reduce.cuh>\n"
                  "extern \"C\" __global__ void r(const int* in, int* out) {\n"
                  "  using reduce = cub::BlockReduce<int, 128>;\n"
                  "  __shared__ typename reduce::TempStorage s;\n"
                  "  const int v = reduce(s).Sum(in[threadIdx.x]);\n"
                  "  if (threadIdx.x == 0) *out = v;\n"
                  "}\n"};
const kernel kClock{"__DATE__ __TIME__", "t.cu",
                    "__device__ const char stamp[] = __DATE__ \" \" __TIME__;\n"
                    "extern \"C\" __global__ void t(char* out) { out[threadIdx.x] = "
                    "stamp[threadIdx.x]; }\n"};

const option_set kCubin{"cubin", "cubin", {}};
const option_set kLineinfo{"--lineinfo ptx", "ptx", {"lineinfo"}};
const option_set kDebug{"-G cubin", "cubin", {"debug"}};
const option_set kLtoir{"ltoir", "ltoir", {}};

bool full_matrix() {
  const char* v = std::getenv("CUCORE_CONTEXT_ORACLE_FULL");
  return v != nullptr && *v != '\0' && std::string(v) != "0";
}

}  // namespace

// Every variable the compilers read is in the key's table.
TEST_F(ContextOracle, EveryVariableTheCompilersReadIsInTheTable) {
  place(kCub);
  place(kPlain);
  const fs::path log = dir_ / "getenv.log";
  const std::vector<std::string> spy = {"LD_PRELOAD=" + std::string(CUCORE_GETENV_SPY),
                                        "CUCORE_GETENV_SPY_LOG=" + log.string()};
  // NVRTC: a CUB kernel with --lineinfo (PTX), a plain one with -G (cubin) and as LTO-IR.
  for (const auto& [k, o] : std::vector<std::pair<kernel, option_set>>{
           {kCub, kLineinfo}, {kPlain, kDebug}, {kPlain, kLtoir}}) {
    const child_result r = run(k, o, {}, spy);
    ASSERT_EQ(r.status, 0) << k.label << " / " << o.label << "\n" << r.log;
  }
  // libNVVM (NVVM IR to PTX) and nvJitLink (PTX to cubin).
  std::string out;
  const std::string nvvm_ir = std::string(CUCORE_TEST_DATA_DIR) + "/scale.ll";
  const std::string ptx = (dir_ / "plain.ptx").string();
  {
    const child_result r = run(kPlain, {"ptx", "ptx", {}}, {});
    ASSERT_EQ(r.status, 0) << r.log;
    write_file(ptx, r.output);
  }
  for (const auto& [source, kind, target] :
       std::vector<std::tuple<std::string, std::string, std::string>>{{nvvm_ir, "nvvm", "ptx"},
                                                                      {ptx, "ptx", "cubin"}}) {
    std::vector<std::string> argv = {"env", asan_options()};
    argv.insert(argv.end(), spy.begin(), spy.end());
    argv.insert(argv.end(), {CUCORE_CONTEXT_COMPILE, source, "m", target,
                             (dir_ / "k-link").string(), (dir_ / "o-link").string(), kind});
    ASSERT_EQ(cucore::oracle::run_process(argv, dir_, out), 0) << kind << "\n" << out;
  }
  std::set<std::string> libraries;
  std::set<std::string> unlisted;
  std::istringstream lines(read_file(log));
  for (std::string line; std::getline(lines, line);) {
    const auto space = line.find(' ');
    ASSERT_NE(space, std::string::npos) << line;
    libraries.insert(line.substr(0, space));
    const std::string name = line.substr(space + 1);
    if (cucore::detail::find_compiler_variable(name) == nullptr) unlisted.insert(name);
  }
  // The interposer saw the compilers (it cannot pass by seeing nothing).
  EXPECT_TRUE(libraries.count("libnvrtc")) << read_file(log);
  EXPECT_TRUE(contains(read_file(log), "NV_NVVM_VERSION")) << read_file(log);
  std::string list;
  for (const auto& u : unlisted) list += " " + u;
  EXPECT_TRUE(unlisted.empty())
      << "the compilers read variables the key's table (src/key/compiler_environment.cpp) does "
         "not list: measure each (does it change an output, or write a file?) and add it:"
      << list;
}

// Pairs of contexts: equal outputs, different keys, or a bypass.
TEST_F(ContextOracle, PairsOfContextsGiveEqualOutputsOrDifferentKeys) {
  const bool full = full_matrix();
  struct cell {
    kernel k;
    option_set o;
    bool sweep;  // every variable of the table, TMPDIR, HOME, PWD, umask
  };
  std::vector<cell> matrix = {
      {kPlain, kCubin, full}, {kPlain, kLineinfo, full}, {kPlain, kDebug, full},
      {kPlain, kLtoir, true}, {kClock, kCubin, false},
  };
  matrix.push_back({kCub, kLineinfo, full});
  if (full) {
    matrix.push_back({kCub, {"ptx", "ptx", {}}, true});
    matrix.push_back({kCub, kLtoir, true});
  }
  for (const auto& [k, o, sweep] : matrix) {
    place(k);
    const child_result a = run(k, o, {});
    ASSERT_EQ(a.status, 0) << k.label << " / " << o.label << "\n" << a.log;
    for (const context& c : contexts(sweep)) check_pair(k, o, a, c);
  }
  if (!faketime_) {
    std::cout << "note: faketime is not installed (scripts/setup.sh installs it): the clock "
                 "contexts did not run\n";
  }
  std::cout << pairs_ << " pairs of contexts, " << keyed_apart_
            << " keyed apart or bypassed, the rest equal\n";
}

// -----------------------------------------------------------------------------------------------
// The reproductions of issue 31.

// __TIME__ / __DATE__ in the program and in a header: the library bypasses the cache, reason
// time_macros (a hit would return the first compile's time); opting in caches it.
TEST_F(ContextOracle, TimeMacrosBypassTheCacheInTheLibrary) {
  const fs::path dir = dir_ / "a";
  write_file(dir / "stamp.h", "#define STAMP __TIME__\n");
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"program", kClock.code},
      {"header",
       "#include \"stamp.h\"\n__device__ const char s[] = STAMP;\n"
       "extern \"C\" __global__ void t(char* o) { o[0] = s[threadIdx.x]; }\n"},
      {"spliced", "__device__ const char s[] = __TI\\\nME__;\n"},
  };
  for (const auto& [label, code] : cases) {
    cucore::program_options options;
    options.name = (dir / "t.cu").string();
    options.arch = "sm_90";
    cucore::in_memory_program_cache cache;
    cucore::program p(code, cucore::source_type::cxx, options);
    p.compile(cucore::code_type::ptx, {}, &cache);
    EXPECT_EQ(p.last_cache_outcome(), cucore::cache_outcome::off) << label;
    EXPECT_EQ(cache.size(), 0u) << label;
    p.compile(cucore::code_type::ptx, {}, &cache);
    EXPECT_EQ(p.last_cache_outcome(), cucore::cache_outcome::off) << label;
    cucore::program_cache_key_inputs in;
    in.code = code;
    in.options = options;
    in.target = cucore::code_type::ptx;
    const auto key = cucore::make_program_cache_key(in);
    ASSERT_TRUE(key.bypass()) << label;
    EXPECT_EQ(key.bypass()->reason, cucore::cache_skip_reason::time_macros) << label;
    // Opted in: cached as any other program.
    ::setenv("CUCORE_SLOPPINESS", "time_macros", 1);
    EXPECT_FALSE(cucore::make_program_cache_key(in).bypass()) << label;
    ::unsetenv("CUCORE_SLOPPINESS");
  }
  // A longer identifier or a mention in a string is not the macro: only the exact token counts
  // (mentions in comments and strings are taken, a superset).
  cucore::program_cache_key_inputs plain;
  plain.code = "__device__ int MY__TIME__X;\n";
  plain.options.arch = "sm_90";
  EXPECT_FALSE(cucore::make_program_cache_key(plain).bypass());
}

// The working directory enters the key where NVRTC writes it: --lineinfo, -G, LTO-IR.
TEST_F(ContextOracle, WorkingDirectoryIsKeyedWhereTheOutputEmbedsIt) {
  const fs::path here = fs::current_path();
  const auto key_in = [&](const fs::path& cwd, bool lineinfo, bool debug, cucore::code_type t) {
    fs::current_path(cwd);
    cucore::program_cache_key_inputs in;
    in.code = kPlain.code;
    in.options.name = "k.cu";
    in.options.arch = "sm_90";
    in.options.lineinfo = lineinfo;
    in.options.debug = debug;
    in.target = t;
    const auto key = cucore::make_program_cache_key(in);
    fs::current_path(here);
    return key;
  };
  using cucore::code_type;
  EXPECT_NE(key_in(dir_ / "a", true, false, code_type::ptx),
            key_in(dir_ / "bb", true, false, code_type::ptx));
  EXPECT_NE(key_in(dir_ / "a", false, true, code_type::cubin),
            key_in(dir_ / "bb", false, true, code_type::cubin));
  EXPECT_NE(key_in(dir_ / "a", false, false, code_type::ltoir),
            key_in(dir_ / "bb", false, false, code_type::ltoir));
  // Measured equal: a plain PTX or cubin does not name the directory, and its key does not.
  EXPECT_EQ(key_in(dir_ / "a", false, false, code_type::cubin),
            key_in(dir_ / "bb", false, false, code_type::cubin));

  // Through program::compile with one cache: the second directory misses and names itself.
  cucore::in_memory_program_cache cache;
  std::string ptx[2];
  int i = 0;
  for (const char* d : {"a", "bb"}) {
    fs::current_path(dir_ / d);
    cucore::program_options options;
    options.name = "k.cu";
    options.arch = "sm_90";
    options.lineinfo = true;
    cucore::program p(kPlain.code, cucore::source_type::cxx, options);
    const auto out = p.compile(cucore::code_type::ptx, {}, &cache);
    fs::current_path(here);
    EXPECT_EQ(p.last_cache_outcome(), cucore::cache_outcome::miss) << d;
    ptx[i++] = std::string(reinterpret_cast<const char*>(out.code().data()), out.code().size());
  }
  EXPECT_TRUE(contains(ptx[1], (dir_ / "bb").string())) << ptx[1];
}

// NV_NVVM_VERSION and LLVM_OVERRIDE_PRODUCER change outputs: in the key; absent differs from
// empty; DUMP_KNOBS_TO_FILE (which makes NVRTC write a file) bypasses.
TEST_F(ContextOracle, CompilerEnvironmentIsKeyed) {
  cucore::program_cache_key_inputs in;
  in.code = kPlain.code;
  in.options.arch = "sm_90";
  in.target = cucore::code_type::ltoir;
  const auto base = cucore::make_program_cache_key(in);
  for (const char* name : {"NV_NVVM_VERSION", "LLVM_OVERRIDE_PRODUCER"}) {
    ::setenv(name, "", 1);
    const auto empty = cucore::make_program_cache_key(in);
    ::setenv(name, "nvvm-latest", 1);
    const auto set = cucore::make_program_cache_key(in);
    ::unsetenv(name);
    EXPECT_NE(base, empty) << name;
    EXPECT_NE(base, set) << name;
    EXPECT_NE(empty, set) << name;
    EXPECT_EQ(base, cucore::make_program_cache_key(in)) << name;
  }
  ::setenv("DUMP_KNOBS_TO_FILE", (dir_ / "knobs").c_str(), 1);
  const auto knobs = cucore::make_program_cache_key(in);
  ::unsetenv("DUMP_KNOBS_TO_FILE");
  ASSERT_TRUE(knobs.bypass());
  EXPECT_EQ(knobs.bypass()->reason, cucore::cache_skip_reason::compiler_environment);
}

// NVRTC reads LLVM_OVERRIDE_PRODUCER once per process (measured: set after the first compile it
// changes nothing; set from a process's start it changes the LTO-IR). A key made with the new
// value would store the old value's output under it: a stale hit for the next process that sets
// it from its start. A keyed variable changed since the compilers were loaded bypasses.
TEST_F(ContextOracle, AVariableChangedAfterTheCompilersLoadedBypasses) {
  ::unsetenv("LLVM_OVERRIDE_PRODUCER");
  // LTO-IR names the working directory: every compile here runs in one.
  write_file(dir_ / "p" / "k.cu", kPlain.code);
  struct in_directory {
    std::filesystem::path was = std::filesystem::current_path();
    explicit in_directory(const std::filesystem::path& d) { std::filesystem::current_path(d); }
    ~in_directory() {
      std::filesystem::current_path(was);
      ::unsetenv("LLVM_OVERRIDE_PRODUCER");
    }
  } here(dir_ / "p");
  cucore::program_options o;
  o.arch = "sm_90";
  o.name = "k.cu";
  const auto compile = [&] {
    cucore::program p(kPlain.code, cucore::source_type::cxx, o);
    const auto out = p.compile(cucore::code_type::ltoir);
    return std::string(reinterpret_cast<const char*>(out.code().data()), out.size());
  };
  // A fresh process's LTO-IR, with the variable from its start or without it.
  const auto fresh = [&](const std::vector<std::string>& env) {
    std::vector<std::string> argv = {"env"};
    argv.insert(argv.end(), env.begin(), env.end());
    argv.insert(argv.end(), {CUCORE_CLI_PATH, "compile", "k.cu", "--arch", "sm_90", "--target",
                             "ltoir", "--cache", "none", "-o", "k.ltoir"});
    std::string said;
    EXPECT_EQ(cucore::oracle::run_process(argv, dir_ / "p", said), 0) << said;
    return read_file(dir_ / "p" / "k.ltoir");
  };
  const std::string before = compile();  // the compilers are loaded now, if not before
  cucore::program_cache_key_inputs in;
  in.code = kPlain.code;
  in.options = o;
  in.target = cucore::code_type::ltoir;
  ASSERT_FALSE(cucore::make_program_cache_key(in).bypass());

  ::setenv("LLVM_OVERRIDE_PRODUCER", "cucore-context-oracle", 1);
  const auto key = cucore::make_program_cache_key(in);
  const std::string after = compile();
  ::unsetenv("LLVM_OVERRIDE_PRODUCER");
  ASSERT_TRUE(key.bypass());
  EXPECT_EQ(key.bypass()->reason, cucore::cache_skip_reason::compiler_environment);
  EXPECT_TRUE(contains(key.bypass()->why, "LLVM_OVERRIDE_PRODUCER")) << key.bypass()->why;
  EXPECT_EQ(after, before) << "NVRTC took the new value in this process: the bypass is needless";
  // A process with the value from its start compiles another output, which a key made with the
  // value must not answer with `after`; without it, the same as here.
  EXPECT_EQ(fresh({}), before);
  EXPECT_NE(fresh({"LLVM_OVERRIDE_PRODUCER=cucore-context-oracle"}), after);
  // Set back as it was at load: keyed as before, no bypass.
  EXPECT_FALSE(cucore::make_program_cache_key(in).bypass());
}

// `cucore compile`: __TIME__ is skipped with the reason; --lineinfo in two directories misses.
TEST_F(ContextOracle, CommandLine) {
  const std::string cache = "dir:" + (dir_ / "cache").string();
  std::string out;
  write_file(dir_ / "a" / "t.cu", kClock.code);
  write_file(dir_ / "a" / "stamp.h", "#define STAMP __DATE__\n");
  write_file(dir_ / "a" / "h.cu",
             "#include \"stamp.h\"\n__device__ const char s[] = STAMP;\n"
             "extern \"C\" __global__ void t(char* o) { o[0] = s[threadIdx.x]; }\n");
  for (const char* file : {"t.cu", "h.cu"}) {
    out.clear();
    ASSERT_EQ(cucore::oracle::run_process({CUCORE_CLI_PATH, "compile", file, "--arch", "sm_90",
                                           "--target", "ptx", "--cache", cache, "--json"},
                                          dir_ / "a", out),
              0)
        << out;
    EXPECT_TRUE(contains(out, "\"skipped\"")) << file << ": " << out;
    EXPECT_TRUE(contains(out, "time_macros")) << file << ": " << out;
  }
  std::string second;
  for (const char* d : {"a", "bb"}) {
    write_file(dir_ / d / "k.cu", kPlain.code);
    out.clear();
    ASSERT_EQ(cucore::oracle::run_process(
                  {CUCORE_CLI_PATH, "compile", "k.cu", "--arch", "sm_90", "--target", "ptx",
                   "--lineinfo", "--cache", cache, "--json", "-o", "k.ptx"},
                  dir_ / d, out),
              0)
        << out;
    EXPECT_TRUE(contains(out, "\"miss\"")) << d << ": " << out;
  }
  EXPECT_TRUE(contains(read_file(dir_ / "bb" / "k.ptx"), (dir_ / "bb").string()));
}

// `cucore run` (the NVRTC drop-in): --lineinfo in two directories misses and names the second;
// __DATE__ under two fake clocks gives each clock's date, never the first compile's.
TEST_F(ContextOracle, CucoreRun) {
  const std::string cache = "dir:" + (dir_ / "cache").string();
  const auto run_in = [&](const std::string& d, const std::string& file,
                          const std::vector<std::string>& clock, std::string& log) {
    std::vector<std::string> argv = {"env", asan_options(), "CUCORE_LOG=info"};
    argv.insert(argv.end(), clock.begin(), clock.end());
    argv.insert(argv.end(), {CUCORE_CLI_PATH, "run", "--cache", cache, "--", CUCORE_CONTEXT_NVRTC,
                             file, file, "out.ptx", "-arch=sm_90"});
    if (file == "k.cu") argv.push_back("-lineinfo");
    return cucore::oracle::run_process(argv, dir_ / d, log);
  };
  std::string log[2];
  int i = 0;
  for (const char* d : {"a", "bb"}) {
    write_file(dir_ / d / "k.cu", kPlain.code);
    ASSERT_EQ(run_in(d, "k.cu", {}, log[i]), 0) << log[i];
    ++i;
  }
  EXPECT_TRUE(contains(log[0], "miss")) << log[0];
  EXPECT_FALSE(contains(log[1], "hit")) << log[1];
  EXPECT_TRUE(contains(read_file(dir_ / "bb" / "out.ptx"), (dir_ / "bb").string()));

  if (!faketime_) GTEST_SKIP() << "faketime is not installed (scripts/setup.sh installs it)";
  write_file(dir_ / "a" / "t.cu", kClock.code);
  for (const char* date : {"2020-01-02 03:04:05", "2021-06-07 08:09:10"}) {
    std::string l;
    ASSERT_EQ(run_in("a", "t.cu", {"faketime", date}, l), 0) << l;
    const std::string ptx = read_file(dir_ / "a" / "out.ptx");
    // __DATE__ is "Jan  2 2020" / "Jun  7 2021": its bytes are in the PTX's string constant.
    // PTX writes it as decimal bytes: "2020" is "50, 48, 50, 48".
    std::string year;
    for (const char c : std::string(date).substr(0, 4)) {
      year += (year.empty() ? "" : ", ") + std::to_string(static_cast<int>(c));
    }
    EXPECT_TRUE(contains(ptx, year)) << date << ": " << ptx;
    EXPECT_TRUE(contains(l, "bypass")) << l;
    EXPECT_FALSE(contains(l, "info: hit")) << l;
  }
}
