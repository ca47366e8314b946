// End-to-end tests of the cucore tool: each test runs the built binary (CUCORE_CLI_PATH) as a child
// process in a fresh directory and checks its exit status, stdout, stderr and the files it wrote.
// Real compiles with the toolkit's NVRTC, nvJitLink and libNVVM; no GPU needed. Every child gets
// CUCORE_CACHE_DIR pointed at a fresh directory of its test, so the default cache is never the
// user's ~/.cache.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "cli_support.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::describe;
using testing::kSaxpy;
using testing::kTemplate;
using testing::read_text;
using testing::run_result;
using testing::temp_dir;
using testing::write_text;

// ---------------------------------------------------------------------------------------------
// A minimal JSON reader: enough to prove the tool printed one well-formed value, and to read it.

struct json {
  enum class kind { null, boolean, number, string, array, object };
  kind type = kind::null;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<json> items;        // array elements, or object values
  std::vector<std::string> keys;  // object keys, parallel to items

  const json* find(std::string_view key) const {
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (keys[i] == key) return &items[i];
    }
    return nullptr;
  }
  // The member `key`; throws when there is none, so a test fails with the key's name.
  const json& operator[](std::string_view key) const {
    if (const json* member = find(key)) return *member;
    throw std::runtime_error("JSON object has no key \"" + std::string(key) + "\"");
  }
  bool is(kind k) const { return type == k; }
};

class json_reader {
 public:
  explicit json_reader(std::string_view text) : s_(text) {}

  // Exactly one value, with optional whitespace around it.
  json document() {
    json v = value();
    skip_space();
    if (i_ != s_.size()) fail("text after the value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("invalid JSON at offset " + std::to_string(i_) + ": " + what);
  }
  void skip_space() {
    while (i_ < s_.size() &&
           (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\r' || s_[i_] == '\t')) {
      ++i_;
    }
  }
  bool take(char c) {
    skip_space();
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c) {
    if (!take(c)) fail(std::string("expected '") + c + "'");
  }

  json value() {
    skip_space();
    if (i_ == s_.size()) fail("unexpected end");
    json v;
    const char c = s_[i_];
    if (c == '{') {
      v.type = json::kind::object;
      ++i_;
      if (take('}')) return v;
      do {
        skip_space();
        v.keys.push_back(string());
        expect(':');
        v.items.push_back(value());
      } while (take(','));
      expect('}');
    } else if (c == '[') {
      v.type = json::kind::array;
      ++i_;
      if (take(']')) return v;
      do {
        v.items.push_back(value());
      } while (take(','));
      expect(']');
    } else if (c == '"') {
      v.type = json::kind::string;
      v.string = string();
    } else if (literal("true") || literal("false")) {
      v.type = json::kind::boolean;
      v.boolean = s_[i_ - 1] == 'e' && s_[i_ - 2] == 'u';
    } else if (literal("null")) {
      v.type = json::kind::null;
    } else {
      v.type = json::kind::number;
      v.number = number();
    }
    return v;
  }

  bool literal(std::string_view word) {
    if (s_.substr(i_, word.size()) != word) return false;
    i_ += word.size();
    return true;
  }

  double number() {
    static const std::regex grammar(R"(^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?)");
    std::match_results<std::string_view::const_iterator> m;
    if (!std::regex_search(s_.begin() + static_cast<long>(i_), s_.end(), m, grammar)) {
      fail("not a value");
    }
    const std::string text = m.str();
    i_ += text.size();
    return std::strtod(text.c_str(), nullptr);
  }

  unsigned hex4() {
    if (i_ + 4 > s_.size()) fail("short \\u escape");
    unsigned v = 0;
    for (int k = 0; k < 4; ++k) {
      const char h = s_[i_++];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= static_cast<unsigned>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<unsigned>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<unsigned>(h - 'A' + 10);
      } else {
        fail("bad hex digit");
      }
    }
    return v;
  }

  static void append_utf8(std::string& out, unsigned cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  std::string string() {
    if (i_ == s_.size() || s_[i_] != '"') fail("expected a string");
    ++i_;
    std::string out;
    while (true) {
      if (i_ == s_.size()) fail("unterminated string");
      const char c = s_[i_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("raw control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (i_ == s_.size()) fail("unterminated escape");
      switch (const char e = s_[i_++]) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          unsigned cp = hex4();
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (!literal("\\u")) fail("lone high surrogate");
            const unsigned low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("bad low surrogate");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          }
          append_utf8(out, cp);
          break;
        }
        default:
          fail(std::string("bad escape \\") + e);
      }
    }
  }

  std::string_view s_;
  std::size_t i_ = 0;
};

json parse_json(std::string_view text) {
  return json_reader(text).document();
}

// ---------------------------------------------------------------------------------------------
// Running the tool.

// Variables to set in the child's environment only (the test process keeps its own).
using environment = std::vector<std::pair<std::string, std::string>>;

constexpr const char* kArch = testing::kArch;

class Cli : public ::testing::Test {
 protected:
  // Writes `text` to `name` in the work directory.
  void file(const std::string& name, const std::string& text) { write_text(work_ / name, text); }
  std::string output(const std::string& name) const { return read_text(work_ / name); }
  bool exists(const std::string& name) const { return fs::exists(work_ / name); }

  // Runs `cucore args...` in the work directory, stdin from /dev/null, stdout and stderr captured.
  // CUCORE_CACHE_DIR is the test's cache directory unless `given` sets it.
  run_result cucore(const std::vector<std::string>& args, const environment& given = {}) {
    environment env = {{"CUCORE_CACHE_DIR", cache_.path().string()}};
    for (const auto& [given_name, value] : given) {
      const std::string& name = given_name;  // clang 14 cannot capture a structured binding
      auto same = [&](const auto& kv) { return kv.first == name; };
      if (auto it = std::find_if(env.begin(), env.end(), same); it != env.end()) {
        it->second = value;
      } else {
        env.emplace_back(name, value);
      }
    }
    std::vector<std::string> env_text;
    for (const auto& [name, value] : env) env_text.push_back(name + "=" + value);
    const std::vector<std::string> child_env = testing::environment_with({}, env_text);
    return runs_.run(args, work_.path(), &child_env);
  }

  // Whether `cucore info --json` sees a GPU (a test of the no-GPU path only makes sense without).
  bool has_gpu() {
    const run_result r = cucore({"info", "--json"});
    EXPECT_EQ(r.status, 0) << r.err;
    return !parse_json(r.out)["devices"].items.empty();
  }

  // Whether the NVRTC the tool loads is MAJOR.MINOR or newer (CI's wheels stage runs 13.5).
  bool nvrtc_at_least(int major, int minor) {
    const run_result r = cucore({"info", "--json"});
    EXPECT_EQ(r.status, 0) << r.err;
    const std::string v = parse_json(r.out)["nvrtc"]["version"].string;
    const auto dot = v.find('.');
    if (dot == std::string::npos) return false;
    const int have_major = std::atoi(v.substr(0, dot).c_str());
    const int have_minor = std::atoi(v.substr(dot + 1).c_str());
    return have_major > major || (have_major == major && have_minor >= minor);
  }

  // Runs a command that must succeed and print one JSON value; that value (null on failure).
  json json_of(const std::vector<std::string>& args, const environment& env = {}) {
    const run_result r = cucore(args, env);
    EXPECT_EQ(r.status, 0) << describe(r);
    try {
      return parse_json(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << describe(r);
      return {};
    }
  }

  // The files of the directory cache at `root` (entries only, not its temp files or memo).
  static std::vector<fs::path> entry_files(const fs::path& root) {
    std::vector<fs::path> files;
    std::error_code ec;
    for (const auto& shard : fs::directory_iterator(root / "entries", ec)) {
      for (const auto& entry : fs::directory_iterator(shard.path(), ec)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    }
    return files;
  }

  temp_dir work_;
  temp_dir captures_;  // apart from work_, so the tool's outputs are all that is there
  temp_dir cache_;     // CUCORE_CACHE_DIR: the default cache of every run
  testing::captured_runs runs_{CUCORE_CLI_PATH, captures_.path()};
};

// One fixture, named by what each group tests ("cli.Compile.CxxToPtx" in ctest).
using Compile = Cli;
using CompileCache = Cli;
using Key = Cli;
using Cache = Cli;
using Info = Cli;
using Usage = Cli;

bool is_elf(const std::string& bytes) {
  return bytes.starts_with(
      "\x7f"
      "ELF");
}

constexpr const char* kScaleIr =
    R"(target datalayout = "e-p:64:64:64-i1:8:8-i8:8:8-i16:16:16-i32:32:32-i64:64:64-i128:128:128-f32:32:32-f64:64:64-v16:16:16-v32:32:32-v64:64:64-v128:128:128-n16:32:64"
target triple = "nvptx64-nvidia-cuda"

declare i32 @llvm.nvvm.read.ptx.sreg.tid.x()

define void @scale(float addrspace(1)* %x, float %a) {
entry:
  %tid = call i32 @llvm.nvvm.read.ptx.sreg.tid.x()
  %idx = zext i32 %tid to i64
  %p = getelementptr float, float addrspace(1)* %x, i64 %idx
  %v = load float, float addrspace(1)* %p
  %r = fmul float %v, %a
  store float %r, float addrspace(1)* %p
  ret void
}

!nvvm.annotations = !{!0}
!0 = !{void (float addrspace(1)*, float)* @scale, !"kernel", i32 1}
!nvvmir.version = !{!1}
!1 = !{i32 2, i32 0}
)";

// ---------------------------------------------------------------------------------------------
// cucore compile

TEST_F(Compile, CxxToPtx) {
  file("saxpy.cu", kSaxpy);
  const auto r = cucore({"compile", "saxpy.cu", "--arch", kArch, "--target", "ptx"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(output("saxpy.ptx"), ".entry saxpy"));
  EXPECT_TRUE(contains(r.out, "saxpy.cu -> saxpy.ptx (")) << r.out;
  EXPECT_TRUE(contains(r.out, "ptx, sm_90, NVRTC, ")) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(Compile, CxxToCubinByDefault) {
  file("saxpy.cu", kSaxpy);
  const auto r = cucore({"compile", "saxpy.cu", "--arch=sm_90"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(is_elf(output("saxpy.cubin")));
  EXPECT_TRUE(contains(r.out, "saxpy.cu -> saxpy.cubin (")) << r.out;
}

TEST_F(Compile, CxxToLtoir) {
  file("saxpy.cu", kSaxpy);
  const auto r =
      cucore({"compile", "saxpy.cu", "--arch", kArch, "--target", "ltoir", "-o", "s.lto"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_FALSE(output("s.lto").empty());
  EXPECT_FALSE(exists("saxpy.ltoir")) << "-o names the output";
}

TEST_F(Compile, PtxWrittenByOneRunCompilesToCubin) {
  file("saxpy.cu", kSaxpy);
  ASSERT_EQ(cucore({"compile", "saxpy.cu", "--arch", kArch, "--target", "ptx"}).status, 0);
  const auto r = cucore(
      {"compile", "saxpy.ptx", "--code-type", "ptx", "--arch", kArch, "-o", "from_ptx.cubin"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(is_elf(output("from_ptx.cubin")));
  EXPECT_TRUE(contains(r.out, "nvJitLink") || contains(r.out, "driver")) << r.out;
}

TEST_F(Compile, NvvmToPtxByDefault) {
  file("scale.ll", kScaleIr);
  const auto r = cucore({"compile", "scale.ll", "--arch", kArch});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(output("scale.ptx"), ".entry scale"));
  EXPECT_TRUE(contains(r.out, "scale.ll -> scale.ptx (")) << r.out;
  EXPECT_TRUE(contains(r.out, "NVVM")) << r.out;
}

TEST_F(Compile, NvvmExtraModuleAndLibdevice) {
  file("uses_helper.ll", testing::data_file("uses_helper.ll"));
  file("helper.ll", testing::data_file("helper_module.ll"));
  auto r = cucore({"compile", "uses_helper.ll", "--arch", kArch, "--extra-module", "helper.ll"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(output("uses_helper.ptx"), ".entry twice"));
  EXPECT_FALSE(contains(output("uses_helper.ptx"), ".extern .func")) << "helper was compiled in";

  file("scale_sqrt.ll", testing::data_file("scale_sqrt.ll"));
  r = cucore({"compile", "scale_sqrt.ll", "--arch", kArch, "--libdevice"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_FALSE(contains(output("scale_sqrt.ptx"), "__nv_sqrtf")) << "libdevice resolved it";
}

TEST_F(Compile, JsonReport) {
  file("k.cu", kTemplate);
  const auto r = cucore({"compile", "k.cu", "--arch", kArch, "--target", "ptx", "--json",
                         "--name-expression", "k<float>"});
  ASSERT_EQ(r.status, 0) << describe(r);
  ASSERT_TRUE(r.out.ends_with("}\n")) << r.out;
  EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line";
  const json j = parse_json(r.out);
  ASSERT_TRUE(j.is(json::kind::object));
  EXPECT_EQ(j.keys.size(), 18u) << r.out;
  EXPECT_EQ(j.keys.front(), "ok");
  EXPECT_EQ(j["verify"].string, "not_verified") << "a miss is never verified";
  EXPECT_EQ(j["miss"]["reason"].string, "first_compile") << r.out;
  EXPECT_TRUE(j["ok"].is(json::kind::boolean) && j["ok"].boolean) << r.out;
  EXPECT_EQ(j["output"].string, "k.ptx");
  ASSERT_TRUE(j["bytes"].is(json::kind::number));
  EXPECT_EQ(j["bytes"].number, static_cast<double>(fs::file_size(work_ / "k.ptx")));
  EXPECT_TRUE(j["tile_ir_bytes"].is(json::kind::null)) << "no Tile code, no Tile IR alongside";
  EXPECT_EQ(j["source_type"].string, "c++");
  EXPECT_EQ(j["code_type"].string, "ptx");
  EXPECT_EQ(j["backend"].string, "NVRTC");
  EXPECT_EQ(j["arch"].string, "sm_90");
  ASSERT_TRUE(j["mangled_names"].is(json::kind::object));
  EXPECT_EQ(j["mangled_names"]["k<float>"].string, "_Z1kIfEvPT_");
  ASSERT_TRUE(j["compile_ms"].is(json::kind::number));
  EXPECT_GT(j["compile_ms"].number, 0.0);
  EXPECT_TRUE(j["log"].is(json::kind::string));
  EXPECT_TRUE(std::regex_match(j["key"].string, std::regex("[0-9a-f]{64}"))) << r.out;
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_TRUE(j["stored"].is(json::kind::boolean) && j["stored"].boolean) << r.out;
  EXPECT_FALSE(j.find("cache_skip")) << r.out;
  EXPECT_EQ(j["single_flight"].string, "compiled");
  EXPECT_TRUE(j["headers"].is(json::kind::null)) << "no #include: nothing tracked";
  EXPECT_TRUE(contains(output("k.ptx"), "_Z1kIfEvPT_"));
}

// "single_flight" says what this process did: compiled (it held the claim), hit, unclaimed
// (--no-single-flight), null without a cache. The single-flight options are checked as usage.
TEST_F(Compile, SingleFlightReport) {
  file("k.cu", kTemplate);
  auto flight = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"compile", "k.cu", "--arch", kArch, "--target", "ptx", "--json"};
    a.insert(a.end(), extra.begin(), extra.end());
    const auto r = cucore(a);
    EXPECT_EQ(r.status, 0) << describe(r);
    const json j = parse_json(r.out);
    return j["single_flight"].is(json::kind::null) ? std::string("null")
                                                   : j["single_flight"].string;
  };
  const std::string dir = (work_ / "c").string();
  EXPECT_EQ(flight({"--cache", dir}), "compiled");
  EXPECT_EQ(flight({"--cache", dir}), "hit");
  EXPECT_EQ(flight({"--cache", (work_ / "d").string(), "--no-single-flight"}), "unclaimed");
  EXPECT_EQ(flight({"--cache", "none"}), "null");
  EXPECT_EQ(flight({"--cache", "sqlite:" + (work_ / "c.db").string(), "--single-flight-wait", "0.5",
                    "--single-flight-lease", "2"}),
            "compiled");
  const auto bad = cucore({"compile", "k.cu", "--arch", kArch, "--single-flight-wait", "soon"});
  EXPECT_EQ(bad.status, 2) << describe(bad);
  EXPECT_TRUE(contains(bad.err, "--single-flight-wait: \"soon\" is not a number of seconds"))
      << bad.err;
}

TEST_F(Compile, HumanReportListsMangledNames) {
  file("k.cu", kTemplate);
  const auto r = cucore({"compile", "k.cu", "--arch", kArch, "--name-expression", "k<float>",
                         "--name-expression=k<int>"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "\n  k<float> = _Z1kIfEvPT_\n  k<int> = _Z1kIiEvPT_\n")) << r.out;
}

TEST_F(Compile, WarningsGoToStderrAndJsonEscapesThem) {
  file("w.cu", "#warning hello there\n__global__ void f() {}\n");
  auto r = cucore({"compile", "w.cu", "--arch", kArch, "--target", "ptx"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.err, "w.cu(1): warning")) << r.err;

  // The program name appears in the log: quotes, a backslash, a tab and a control character must
  // all survive the JSON round trip.
  const std::string name = "we\"ird\\na\tme\x01.cu";
  r = cucore({"compile", "w.cu", "--arch", kArch, "--target", "ptx", "--json", "--name", name});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "\\u0001")) << r.out;
  const json j = parse_json(r.out);
  EXPECT_TRUE(contains(j["log"].string, name + "(1): warning")) << j["log"].string;
  EXPECT_EQ(r.err, "") << "with --json the log is in the object";
}

TEST_F(Compile, SyntaxErrorPrintsTheLogWithFileAndLine) {
  file("bad.cu", "__global__ void f(int* p) {\n  int x = 1;\n  *p = x +;\n}\n");
  const auto r = cucore({"compile", "bad.cu", "--arch", kArch});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "bad.cu(3): error")) << r.err;
  EXPECT_TRUE(contains(r.err, "\nerror: NVRTC compilation failed")) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_FALSE(exists("bad.cubin"));
}

// --json prints one object whatever happens: {"ok": false, "error", "log"} on a failure, with the
// exit status and the stderr report of a run without --json. A line that cannot be parsed is
// reported on stderr alone.
TEST_F(Compile, JsonReportsFailuresAsOneObject) {
  auto failure = [&](const std::vector<std::string>& args, int status) {
    const auto r = cucore(args);
    EXPECT_EQ(r.status, status) << describe(r);
    EXPECT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line: " << r.out;
    json j;
    try {
      j = parse_json(r.out);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what() << "\n" << describe(r);
    }
    EXPECT_EQ(j.keys, (std::vector<std::string>{"ok", "error", "log"})) << r.out;
    EXPECT_TRUE(j["ok"].is(json::kind::boolean) && !j["ok"].boolean) << r.out;
    EXPECT_FALSE(r.err.empty()) << "stderr still says it";
    return j;
  };
  file("bad.cu", "__global__ void f(int* p) {\n  int x = 1;\n  *p = x +;\n}\n");
  json j = failure({"compile", "bad.cu", "--arch", kArch, "--json"}, 1);
  EXPECT_EQ(j["error"].string, "NVRTC compilation failed (NVRTC_ERROR_COMPILATION)");
  EXPECT_TRUE(contains(j["log"].string, "bad.cu(3): error")) << j["log"].string;
  EXPECT_FALSE(exists("bad.cubin"));

  j = failure({"compile", "missing.cu", "--arch", kArch, "--json"}, 1);
  EXPECT_TRUE(contains(j["error"].string, "\"missing.cu\": No such file or directory"))
      << j["error"].string;
  EXPECT_EQ(j["log"].string, "");

  // Usage errors found once the line is parsed: exit 2, the message in "error".
  file("k.cu", kTemplate);
  j = failure({"compile", "k.cu", "--arch", kArch, "--json", "-Xnvrtc", "-std=c++20"}, 2);
  EXPECT_TRUE(contains(j["error"].string, "--std")) << j["error"].string;
  j = failure({"compile", "--json", "--arch", kArch}, 2);
  EXPECT_EQ(j["error"].string, "compile needs a FILE");
  j = failure({"compile", "k.cu", "--json", "--arch", "sm90"}, 2);
  EXPECT_TRUE(contains(j["error"].string, "--arch")) << j["error"].string;
  j = failure({"compile", "k.cu", "--json", "--arch", kArch, "--ftz", "yes"}, 2);
  EXPECT_TRUE(contains(j["error"].string, "--ftz")) << j["error"].string;
  // An option NVRTC does not know is NVRTC's error, with its log.
  j = failure({"compile", "k.cu", "--json", "--arch", kArch, "-Xnvrtc", "--no-such-option"}, 1);
  EXPECT_EQ(j["error"].string, "NVRTC compilation failed (NVRTC_ERROR_INVALID_OPTION)");
  EXPECT_TRUE(contains(j["log"].string, "--no-such-option")) << j["log"].string;
  // No compiler at all.
  temp_dir empty;
  const auto r =
      cucore({"compile", "k.cu", "--arch", kArch, "--json"},
             {{"CUCORE_CUDA_HOME", empty.path().string()}, {"CUCORE_CUDA_HOME_ONLY", "1"}});
  EXPECT_EQ(r.status, 1) << describe(r);
  j = parse_json(r.out);
  EXPECT_FALSE(j["ok"].boolean);
  EXPECT_TRUE(contains(j["error"].string, "NVRTC")) << r.out;

  // Not parsed: stderr only.
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"compile", "k.cu", "--arch", kArch, "--json", "--frobnicate"},
           {"compile", "k.cu", "--json=yes"},
           {"compile", "k.cu", "--json", "--arch"}}) {
    const auto u = cucore(args);
    EXPECT_EQ(u.status, 2) << describe(u);
    EXPECT_EQ(u.out, "");
    EXPECT_TRUE(contains(u.err, "cucore compile --help")) << u.err;
  }
}

// CUTLASS and CuTe need NVRTC's -default-device: functions without an execution space are device
// functions. Without it NVRTC refuses them (and says to pass it).
TEST_F(Compile, DefaultDeviceCompilesUnannotatedFunctions) {
  file("dd.cu",
       "int twice(int x) { return 2 * x; }\n"
       "extern \"C\" __global__ void k(int* p) { *p = twice(*p); }\n");
  auto r = cucore({"compile", "dd.cu", "--arch", kArch, "--target", "ptx"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "-default-device")) << r.err;
  EXPECT_FALSE(exists("dd.ptx"));

  const json j = json_of(
      {"compile", "dd.cu", "--arch", kArch, "--target", "ptx", "--default-device", "--json"});
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_TRUE(contains(output("dd.ptx"), ".entry k")) << output("dd.ptx");
  EXPECT_EQ(json_of({"compile", "dd.cu", "--arch", kArch, "--target", "ptx", "--default-device",
                     "--json"})["cache"]
                .string,
            "hit");

  // The flag is in the key: `cucore key` agrees with compile, and differs without it.
  r = cucore({"key", "dd.cu", "--arch", kArch, "--target", "ptx", "--default-device"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, j["key"].string + "\n");
  const auto without = cucore({"key", "dd.cu", "--arch", kArch, "--target", "ptx"});
  ASSERT_EQ(without.status, 0) << describe(without);
  EXPECT_NE(without.out, r.out);
}

// -Xnvrtc OPT: NVRTC gets OPT as given, after every other flag, and the key hashes it.
TEST_F(Compile, XnvrtcReachesNvrtcAndTheKey) {
  file("sw.cu", testing::data_file("dense_switch.cu"));

  const std::vector<std::string> base = {"compile",  "sw.cu", "--arch", kArch,
                                         "--target", "ptx",   "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const json plain = json_of(base);
  EXPECT_FALSE(contains(output("sw.ptx"), "brx.idx"));
  // -jtd=0: a jump table for every switch. Both spellings of -Xnvrtc; NVRTC's two-element form.
  const json jump = json_of(with({"-Xnvrtc", "-jtd=0"}));
  EXPECT_EQ(jump["cache"].string, "miss");
  EXPECT_TRUE(contains(output("sw.ptx"), "brx.idx"));
  EXPECT_NE(jump["key"].string, plain["key"].string);
  EXPECT_EQ(json_of(with({"-Xnvrtc=-jtd=0"}))["cache"].string, "hit");
  EXPECT_EQ(json_of(base)["cache"].string, "hit");
  EXPECT_FALSE(contains(output("sw.ptx"), "brx.idx")) << "the hit without -Xnvrtc is the plain one";
  const json split = json_of(with({"-Xnvrtc", "--jump-table-density", "-Xnvrtc", "0"}));
  EXPECT_EQ(split["cache"].string, "miss") << "hashed as given, not as NVRTC reads it";
  EXPECT_TRUE(contains(output("sw.ptx"), "brx.idx"));

  // In `key --explain`: the last option fields, in command-line order.
  const auto r = cucore({"key", "sw.cu", "--arch", kArch, "--target", "ptx", "-Xnvrtc", "-jtd=0",
                         "-Xnvrtc", "--modify-stack-limit=false", "--explain"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\n  option +-jtd=0\n  option +--modify-stack-limit=false\n  name)")))
      << r.out;
}

// A toolkit root of scripts/fetch-cuda-versions.sh holding lib/LIBRARY ("13.5", "libnvrtc.so.13"),
// or "" after failing the test.
std::string cuda_root(const std::string& version, const std::string& library) {
  const char* dir = std::getenv("CUCORE_CUDA_VERSIONS_DIR");
  const fs::path versions = dir != nullptr && *dir != '\0' ? fs::path(dir)
                                                           : fs::path(CUCORE_TEST_DATA_DIR) / ".." /
                                                                 ".." / ".cache" / "cuda-versions";
  const fs::path root = versions / version / "root";
  if (!fs::exists(root / "lib" / library)) {
    ADD_FAILURE() << "no NVRTC " << version << " toolkit root at " << root
                  << ": run scripts/fetch-cuda-versions.sh (or set CUCORE_CUDA_VERSIONS_DIR to a "
                     "directory holding "
                  << version << "/root)";
    return {};
  }
  return root.string();
}
std::string cuda_13_5_root() {
  return cuda_root("13.5", "libnvrtc.so.13");
}
std::string cuda_12_9_root() {
  return cuda_root("12.9", "libnvrtc.so.12");
}

// --target tile-ir and --tile-ir-output with NVRTC 13.5: miss then hit, the bytes of an uncached
// compile, the Tile IR of a cubin compile from the same entry.
TEST_F(Compile, TileIrWithNvrtc13_5MissThenHitWithTheUncachedBytes) {
  const std::string root = cuda_13_5_root();
  if (root.empty()) return;
  const environment nvrtc_13_5 = {{"CUCORE_CUDA_HOME", root}, {"CUCORE_CUDA_HOME_ONLY", "1"}};
  file("k.cu", testing::data_file("mixed_tile.cu"));
  const std::vector<std::string> base = {"compile", "k.cu",  "--arch",        "sm_100",
                                         "--std",   "c++20", "--enable-tile", "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const json plain_ir =
      json_of(with({"--target", "tile-ir", "--cache", "none", "-o", "plain.tile_ir"}), nvrtc_13_5);
  EXPECT_EQ(plain_ir["code_type"].string, "tile_ir");
  EXPECT_TRUE(output("plain.tile_ir").starts_with(std::string_view("\x7fTileIR", 7)));
  EXPECT_TRUE(contains(output("plain.tile_ir"), "tile_copy"));
  for (const char* outcome : {"miss", "hit"}) {
    SCOPED_TRACE(outcome);
    const json j = json_of(with({"--target", "tile-ir"}), nvrtc_13_5);
    EXPECT_EQ(j["cache"].string, outcome);
    EXPECT_EQ(j["output"].string, "k.tile_ir");
    EXPECT_EQ(output("k.tile_ir"), output("plain.tile_ir"));
  }
  const json plain = json_of(
      with({"--cache", "none", "-o", "plain.cubin", "--tile-ir-output", "plain-alongside.tile_ir"}),
      nvrtc_13_5);
  EXPECT_EQ(plain["tile_ir_bytes"].number, static_cast<double>(output("plain.tile_ir").size()));
  EXPECT_EQ(output("plain-alongside.tile_ir"), output("plain.tile_ir"));
  std::string cubin_key;
  for (const char* outcome : {"miss", "hit"}) {
    SCOPED_TRACE(outcome);
    const json j = json_of(with({"--tile-ir-output", "k.alongside"}), nvrtc_13_5);
    EXPECT_EQ(j["cache"].string, outcome);
    EXPECT_EQ(j["code_type"].string, "cubin");
    EXPECT_EQ(output("k.cubin"), output("plain.cubin"));
    EXPECT_EQ(output("k.alongside"), output("plain.tile_ir")) << "Tile IR from the same entry";
    cubin_key = j["key"].string;
  }
  // A cubin of the same program without Tile code has another key, and no Tile IR to write.
  const json simt =
      json_of({"compile", "k.cu", "--arch", "sm_100", "--std", "c++20", "--simt-only", "--json"},
              nvrtc_13_5);
  EXPECT_NE(simt["key"].string, cubin_key);
  EXPECT_TRUE(simt["tile_ir_bytes"].is(json::kind::null));
  const auto none = cucore({"compile", "k.cu", "--arch", "sm_100", "--std", "c++20", "--simt-only",
                            "--tile-ir-output", "none.tile_ir"},
                           nvrtc_13_5);
  EXPECT_EQ(none.status, 1) << describe(none);
  EXPECT_TRUE(contains(none.err, "--tile-ir-output: the compile made no Tile IR")) << none.err;
  const auto both = cucore(with({"--target", "tile-ir", "--tile-ir-output", "x"}), nvrtc_13_5);
  EXPECT_EQ(both.status, 2) << describe(both);
}

// The options of NVRTC 13.1+ reach the key as NVRTC's flags; NVRTC 13.0 (the default toolkit)
// refuses each by name, and the tile-ir target names the version it needs.
TEST_F(Compile, Nvrtc13_1OptionsReachTheKeyAndNvrtc13_0RefusesThem) {
  file("k.cu", kSaxpy);
  const auto r = cucore({"key", "k.cu", "--arch", kArch, "--Wreorder", "--warning-as-error",
                         "reorder", "--warning-as-error", "conversion", "--enable-tile",
                         "--default-tile", "--diagnose-implicit-tile-var", "--explain"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(
      r.out,
      std::regex(R"(\n  option +--warning-as-error=reorder,conversion\n  option +--Wreorder\n)"
                 R"(  option +--enable-tile\n  option +-default-tile\n)"
                 R"(  option +--diagnose-implicit-tile-var\n  tile_ir +alongside\n)")))
      << r.out;
  const auto tile = cucore({"compile", "k.cu", "--arch", kArch, "--enable-tile"});
  const auto target = cucore({"compile", "k.cu", "--arch", kArch, "--target", "tile-ir"});
  if (nvrtc_at_least(13, 1)) {
    // An NVRTC that knows them (CI's wheels stage runs 13.5): the compile takes the option, and a
    // program without Tile code enabled has no Tile IR to give (TileIr* tests: the rest).
    EXPECT_EQ(tile.status, 0) << describe(tile);
    EXPECT_EQ(target.status, 1) << describe(target);
    EXPECT_TRUE(contains(target.err, "Tile code is not enabled")) << target.err;
  } else {
    EXPECT_EQ(tile.status, 1) << describe(tile);
    EXPECT_TRUE(contains(tile.err, "unrecognized option --enable-tile found")) << tile.err;
    EXPECT_EQ(target.status, 2) << describe(target);
    EXPECT_TRUE(contains(target.err, "the tile_ir target needs NVRTC 13.1 or newer")) << target.err;
  }
}

// An -Xnvrtc option that an option of the tool covers is a usage error naming both; one that hands
// options to a tool inside NVRTC compiles, uncached.
TEST_F(Compile, XnvrtcRefusesWhatAnOptionCovers) {
  file("k.cu", kTemplate);
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"-Xnvrtc", "-std=c++20"},
       "-Xnvrtc \"-std=c++20\" is NVRTC's option for program_options::std: set std instead (on "
       "the cucore command line: --std)"},
      {{"-Xnvrtc=-I/tmp"}, "(on the cucore command line: -I), so that the cache key tracks"},
      {{"-Xnvrtc", "-DX=1"}, "program_options::define_macro"},
      {{"-Xnvrtc", "-include=pre.h"}, "command line: --pre-include"},
      {{"-Xnvrtc", "-default-device"}, "command line: --default-device"},
      {{"-Xnvrtc", "--pch-dir=/tmp"}, "command line: --pch-dir"},
      {{"-Xnvrtc", "-time=t.csv"}, "command line: --time"},
      {{"-Xnvrtc", "-arch=sm_80"}, "command line: --arch"},
      {{"-Xnvrtc", "-jtd=50", "-Xnvrtc", " -w"}, "-Xnvrtc \" -w\" has a control character or"},
      {{"-Xnvrtc", "--optix-ir"}, "OptiX IR"},
      {{"--Xnvrtc", "-w"}, "unknown option \"--Xnvrtc\" (the option is -Xnvrtc, with one dash)"},
      {{"-Xnvrtc"}, "option -Xnvrtc needs a value (OPT)"},
      {{"-Xnvrtc="}, "option -Xnvrtc needs a non-empty value (OPT)"},
      {{"-Xnvrtcx"}, "unknown option \"-Xnvrtcx\""},
  };
  for (const auto& [extra, message] : refused) {
    for (const char* command : {"compile", "key"}) {
      std::vector<std::string> args = {command, "k.cu", "--arch", kArch};
      args.insert(args.end(), extra.begin(), extra.end());
      const auto r = cucore(args);
      EXPECT_EQ(r.status, 2) << describe(r);
      EXPECT_TRUE(contains(r.err, message)) << r.err;
    }
  }
  EXPECT_FALSE(exists("k.cubin"));

  // -Xcudafe passes the next element to NVRTC's front end: compiled, never cached.
  const std::vector<std::string> cudafe = {
      "compile", "k.cu",     "--arch",  kArch,
      "-Xnvrtc", "-Xcudafe", "-Xnvrtc", "--display_error_number"};
  auto r = cucore(cudafe);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, ", not cached)")) << r.out;
  EXPECT_TRUE(contains(r.err,
                       "note: not cached: -Xnvrtc \"-Xcudafe\" \"--display_error_number\": they "
                       "pass options to a tool inside NVRTC"))
      << r.err;
  EXPECT_TRUE(entry_files(cache_.path()).empty());
  std::vector<std::string> key = cudafe;
  key[0] = "key";
  r = cucore(key);
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "error: no cache key: -Xnvrtc \"-Xcudafe\"")) << r.err;

  // An option not in the table of NVRTC's options (one NVRTC 13.0 takes but does not document):
  // compiled, never cached, the reason said; no guessing from its name.
  r = cucore({"compile", "k.cu", "--arch", kArch, "-Xnvrtc", "--no-lineinfo-inlined-at"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, ", not cached)")) << r.out;
  EXPECT_TRUE(contains(r.err,
                       "note: not cached: -Xnvrtc \"--no-lineinfo-inlined-at\": it is not an "
                       "NVRTC option cucore knows"))
      << r.err;
  EXPECT_TRUE(entry_files(cache_.path()).empty());
}

// --header NAME=FILE: an in-memory header with FILE's bytes, which the key hashes.
TEST_F(Compile, HeaderOptionGivesAnInMemoryHeader) {
  file("v.h", "#define V 77\n");
  file("h.cu", "#include \"cfg.cuh\"\nextern \"C\" __global__ void w(int* p) { *p = V; }\n");
  const std::vector<std::string> args = {"compile", "h.cu",     "--arch",      kArch,   "--target",
                                         "ptx",     "--header", "cfg.cuh=v.h", "--json"};
  json j = json_of(args);
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_EQ(j["headers"]["in_memory"].number, 1);
  EXPECT_TRUE(contains(output("h.ptx"), ", 77;"));
  EXPECT_EQ(json_of(args)["cache"].string, "hit");
  file("v.h", "#define V 78\n");
  EXPECT_EQ(json_of(args)["cache"].string, "miss");
  EXPECT_TRUE(contains(output("h.ptx"), ", 78;"));

  for (const auto& [extra, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--header", "cfg.cuh"}, "--header cfg.cuh: give NAME=FILE"},
           {{"--header", "=v.h"}, "--header =v.h: give NAME=FILE"},
           {{"--header", "a.h=v.h", "--header", "a.h=v.h"},
            "--header \"a.h\" repeats headers[0]: give each name once"}}) {
    std::vector<std::string> bad = {"compile", "h.cu", "--arch", kArch};
    bad.insert(bad.end(), extra.begin(), extra.end());
    const auto r = cucore(bad);
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_TRUE(contains(r.err, message)) << r.err;
  }
  const auto r = cucore({"compile", "h.cu", "--arch", kArch, "--header", "cfg.cuh=missing.h"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "cannot read \"missing.h\"")) << r.err;
}

TEST_F(Compile, MacrosAndIncludePathsReachTheCompiler) {
  file("value.cu",
       "#ifndef VALUE\n#define VALUE 7\n#endif\n"
       "extern \"C\" __global__ void w(int* p) { *p = VALUE; }\n");
  auto ptx_with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"compile", "value.cu", "--arch", kArch, "--target", "ptx"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = cucore(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    return output("value.ptx");
  };
  EXPECT_TRUE(contains(ptx_with({}), ", 7;"));
  EXPECT_TRUE(contains(ptx_with({"-D", "VALUE=42"}), ", 42;"));
  EXPECT_TRUE(contains(ptx_with({"-DVALUE=43"}), ", 43;"));
  EXPECT_TRUE(contains(ptx_with({"--define-macro=VALUE=44"}), ", 44;"));
  EXPECT_TRUE(contains(ptx_with({"-D", "VALUE=40+5"}), ", 45;"));

  fs::create_directory(work_ / "inc");
  file("inc/answer.h", "#define ANSWER 46\n");
  file("include.cu",
       "#include \"answer.h\"\nextern \"C\" __global__ void w(int* p) { *p = ANSWER; }\n");
  const std::vector<std::vector<std::string>> spellings = {{"-I", "inc"}, {"-Iinc"}};
  for (const auto& include : spellings) {
    std::vector<std::string> args = {"compile", "include.cu", "--arch", kArch, "--target", "ptx"};
    args.insert(args.end(), include.begin(), include.end());
    const auto r = cucore(args);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(output("include.ptx"), ", 46;"));
  }
}

TEST_F(Compile, UnsupportedTargetNamesTheSupportedOnes) {
  file("scale.ll", kScaleIr);
  const auto r = cucore({"compile", "scale.ll", "--arch", kArch, "--target", "cubin"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "supported: ptx, ltoir")) << r.err;
  EXPECT_FALSE(exists("scale.cubin"));
}

TEST_F(Compile, OptionsTheCodeTypeRefusesAreUsageErrors) {
  file("scale.ll", kScaleIr);
  auto r = cucore({"compile", "scale.ll", "--arch", kArch, "--lineinfo"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "lineinfo")) << r.err;

  r = cucore({"compile", "scale.ll", "--arch", kArch, "--name-expression", "scale"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--name-expression")) << r.err;
}

TEST_F(Compile, MissingArchWithoutGpuSaysToPassArch) {
  if (has_gpu()) GTEST_SKIP() << "a GPU provides the default arch";
  file("saxpy.cu", kSaxpy);
  const auto r = cucore({"compile", "saxpy.cu"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "no arch given")) << r.err;
  EXPECT_TRUE(contains(r.err, "--arch")) << r.err;
}

TEST_F(Compile, BadArchIsAUsageError) {
  file("saxpy.cu", kSaxpy);
  const auto r = cucore({"compile", "saxpy.cu", "--arch", "sm90"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--arch")) << r.err;
}

// NVRTC says only "invalid value for --gpu-architecture": the tool names the value and the
// architectures the loaded NVRTC compiles for.
TEST_F(Compile, AnArchNvrtcDoesNotCompileForNamesTheSupportedOnes) {
  file("saxpy.cu", kSaxpy);
  auto r = cucore({"compile", "saxpy.cu", "--arch", "sm_9999"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--arch: arch \"sm_9999\" is not an architecture NVRTC")) << r.err;
  EXPECT_TRUE(contains(r.err, "sm_90")) << r.err;
  EXPECT_FALSE(exists("saxpy.cubin"));
  r = cucore({"compile", "saxpy.cu", "--arch", "compute_9999", "--target", "ptx", "--json"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(parse_json(r.out)["error"].string, "arch \"compute_9999\"")) << r.out;
}

TEST_F(Compile, MissingFile) {
  const auto r = cucore({"compile", "missing.cu", "--arch", kArch});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "\"missing.cu\": No such file or directory")) << r.err;
}

TEST_F(Compile, NoFileOrTwoFilesAreUsageErrors) {
  EXPECT_EQ(cucore({"compile", "--arch", kArch}).status, 2);
  file("a.cu", kSaxpy);
  file("b.cu", kSaxpy);
  const auto r = cucore({"compile", "a.cu", "b.cu", "--arch", kArch});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "b.cu")) << r.err;
}

TEST_F(Compile, UnknownOptionIsAUsageError) {
  file("saxpy.cu", kSaxpy);
  const auto r = cucore({"compile", "saxpy.cu", "--arch", kArch, "--frobnicate"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "unknown option \"--frobnicate\"")) << r.err;
  EXPECT_TRUE(contains(r.err, "cucore compile --help")) << r.err;
  EXPECT_FALSE(exists("saxpy.cubin"));
}

TEST_F(Compile, ValuesAreParsedStrictly) {
  file("saxpy.cu", kSaxpy);
  auto r = cucore({"compile", "saxpy.cu", "--arch", kArch, "--maxrregcount", "12x"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--maxrregcount: \"12x\" is not an integer")) << r.err;

  r = cucore({"compile", "saxpy.cu", "--arch", kArch, "--diag-suppress", ""});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--diag-suppress")) << r.err;

  r = cucore({"compile", "saxpy.cu", "--arch", kArch, "--ftz", "yes"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--ftz")) << r.err;

  r = cucore({"compile", "saxpy.cu", "--arch"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--arch needs a value")) << r.err;

  // Good values of the same options compile.
  r = cucore({"compile",
              "saxpy.cu",
              "--arch",
              kArch,
              "--maxrregcount",
              "32",
              "--diag-suppress",
              "177",
              "--ftz",
              "true",
              "--prec-div=false",
              "--fmad",
              "true",
              "--dopt",
              "on",
              "-G",
              "--use-fast-math",
              "--rdc",
              "--ptxas-options",
              "-v",
              "--std",
              "c++17"});
  EXPECT_EQ(r.status, 0) << describe(r);
}

TEST_F(Compile, UnknownExtensionAsksForCodeType) {
  file("kernel.txt", kSaxpy);
  auto r = cucore({"compile", "kernel.txt", "--arch", kArch});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--code-type")) << r.err;

  r = cucore({"compile", "kernel.txt", "--arch", kArch, "--code-type", "c++"});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(is_elf(output("kernel.cubin")));
}

TEST_F(Compile, WithoutToolkitNamesNvrtcAndWhereItLooked) {
  temp_dir empty;
  file("saxpy.cu", kSaxpy);
  const auto r =
      cucore({"compile", "saxpy.cu", "--arch", kArch},
             {{"CUCORE_CUDA_HOME", empty.path().string()}, {"CUCORE_CUDA_HOME_ONLY", "1"}});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "NVRTC")) << r.err;
  EXPECT_TRUE(contains(r.err, empty.path().string() + "/lib")) << r.err;
}

// ---------------------------------------------------------------------------------------------
// cucore compile with a cache

// The one-line kernel with two instantiations most cache tests compile.
std::vector<std::string> compile_k(std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"compile",  "k.cu",
                                   "--arch",   kArch,
                                   "--json",   "--name-expression",
                                   "k<float>", "--name-expression=k<int>"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

bool is_key(const std::string& text) {
  return std::regex_match(text, std::regex("[0-9a-f]{64}"));
}

TEST_F(CompileCache, MissThenHitInTwoProcessesWithTheDefaultCache) {
  file("k.cu", kTemplate);
  const json first = json_of(compile_k({"-o", "first.cubin"}));
  const json second = json_of(compile_k({"-o", "second.cubin"}));
  EXPECT_EQ(first["cache"].string, "miss");
  EXPECT_EQ(second["cache"].string, "hit");
  EXPECT_TRUE(is_key(first["key"].string)) << first["key"].string;
  EXPECT_EQ(first["key"].string, second["key"].string);
  EXPECT_TRUE(is_elf(output("first.cubin")));
  EXPECT_EQ(output("first.cubin"), output("second.cubin")) << "a hit writes the same bytes";
  EXPECT_EQ(second["bytes"].number, first["bytes"].number);
  // Name expressions work on a hit: the cached entry keeps the symbol mapping.
  EXPECT_EQ(second["mangled_names"]["k<float>"].string, "_Z1kIfEvPT_");
  EXPECT_EQ(second["mangled_names"]["k<int>"].string, "_Z1kIiEvPT_");
  EXPECT_EQ(second["backend"].string, "NVRTC");
  EXPECT_EQ(second["code_type"].string, "cubin");
  EXPECT_FALSE(second.find("cache_skip_reason"));
  // The default cache is $CUCORE_CACHE_DIR, a directory cache.
  EXPECT_EQ(entry_files(cache_.path()).size(), 1u);
}

TEST_F(CompileCache, HumanReportSaysMissThenHit) {
  file("k.cu", kTemplate);
  const std::vector<std::string> args = {"compile",           "k.cu",    "--arch", kArch,
                                         "--name-expression", "k<float>"};
  auto r = cucore(args);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(NVRTC, [0-9.]+ ms, cache miss\)\n)")))
      << r.out;
  r = cucore(args);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(NVRTC, [0-9.]+ ms, cache hit\)\n)"))) << r.out;
  EXPECT_TRUE(contains(r.out, "\n  k<float> = _Z1kIfEvPT_\n")) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(CompileCache, SqliteAndDirectoryCachesGiveTheSameKey) {
  file("k.cu", kTemplate);
  temp_dir caches;
  const std::string reference = json_of(compile_k())["key"].string;
  ASSERT_TRUE(is_key(reference));
  const std::string expected = output("k.cubin");
  for (const std::string& spec : std::vector<std::string>{
           "sqlite:" + (caches.path() / "cache.db").string(), (caches.path() / "plain").string(),
           "dir:" + (caches.path() / "prefixed").string()}) {
    SCOPED_TRACE(spec);
    const json first = json_of(compile_k({"--cache", spec, "-o", "a.cubin"}));
    const json second = json_of(compile_k({"--cache", spec, "-o", "b.cubin"}));
    EXPECT_EQ(first["cache"].string, "miss");
    EXPECT_EQ(second["cache"].string, "hit");
    EXPECT_EQ(first["key"].string, reference) << "the key does not depend on the backend";
    EXPECT_EQ(second["key"].string, reference);
    EXPECT_EQ(output("a.cubin"), expected);
    EXPECT_EQ(output("b.cubin"), expected);
    EXPECT_EQ(second["mangled_names"]["k<int>"].string, "_Z1kIiEvPT_");
  }
  EXPECT_TRUE(fs::exists(caches.path() / "cache.db"));
  EXPECT_EQ(entry_files(caches.path() / "plain").size(), 1u);
  EXPECT_EQ(entry_files(caches.path() / "prefixed").size(), 1u);
  EXPECT_EQ(entry_files(cache_.path()).size(), 1u) << "only the run without --cache used it";
}

TEST_F(CompileCache, NoneAndMemory) {
  file("k.cu", kTemplate);
  for (int run = 0; run < 2; ++run) {
    const json j = json_of(compile_k({"--cache", "none"}));
    EXPECT_EQ(j["cache"].string, "off");
    EXPECT_TRUE(j["key"].is(json::kind::null));
  }
  EXPECT_TRUE(entry_files(cache_.path()).empty());
  const auto r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "none"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_FALSE(contains(r.out, "cache")) << r.out;

  // An in-memory cache lives as long as the process: every run of the tool misses.
  for (int run = 0; run < 2; ++run) {
    const json j = json_of(compile_k({"--cache", "memory"}));
    EXPECT_EQ(j["cache"].string, "miss");
    EXPECT_TRUE(is_key(j["key"].string));
  }
  EXPECT_TRUE(entry_files(cache_.path()).empty());
}

// The names in the work directory, sorted.
std::vector<std::string> names_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST_F(CompileCache, BadSpecsAreUsageErrors) {
  file("k.cu", kTemplate);
  const bool had_root_file = fs::exists("/cucore-spec-test.db");  // sqlite:// made it
  // Each of these once became a directory (sqlite://NAME and dir://NAME: /NAME) and a normal miss.
  for (const char* spec :
       {"sqlite:", "dir:", "redis:/127.0.0.1:6379/0", "REDIS:127.0.0.1", "bogus://x",
        "sqlite3:k.db", "memory:", "None:", "sqlite://cucore-spec-test.db",
        "dir://cucore-spec-test", "C:\\cache", "file:///tmp/x", "rediss://127.0.0.1",
        "redis://127.0.0.1:port", "dir:d+redis:/host", "none+redis://127.0.0.1",
        "bogus:x+redis://127.0.0.1"}) {
    const auto before = names_in(work_.path());
    for (const char* command : {"compile", "key"}) {
      const auto r = cucore({command, "k.cu", "--arch", kArch, "--cache", spec});
      EXPECT_EQ(r.status, 2) << command << " --cache " << spec << ": " << describe(r);
      EXPECT_TRUE(contains(r.err, "--cache ")) << r.err;
    }
    const auto r = cucore({"cache", "stats", "--cache", spec});
    EXPECT_EQ(r.status, 2) << "cache stats --cache " << spec << ": " << describe(r);
    EXPECT_EQ(names_in(work_.path()), before) << spec << " created something";
  }
  if (!had_root_file) {
    EXPECT_FALSE(fs::exists("/cucore-spec-test.db"));
  }
  // What the message says: the scheme, the accepted forms, how to name such a directory.
  auto r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "bogus://x"});
  EXPECT_TRUE(contains(r.err, "--cache bogus://x: \"bogus:\" is not a cache scheme")) << r.err;
  EXPECT_TRUE(contains(r.err, "sqlite:FILE")) << r.err;
  EXPECT_TRUE(contains(r.err, "./bogus://x or dir:bogus://x")) << r.err;
  r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "sqlite://c.db"});
  EXPECT_TRUE(contains(r.err, "write sqlite:c.db")) << r.err;
  EXPECT_TRUE(contains(r.err, "sqlite:///ABS/PATH")) << r.err;
  EXPECT_FALSE(exists("c.db"));
  // A password in a refused spec is not echoed.
  r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "dir:d+redis://:hunter2@host:bad"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_FALSE(contains(r.err, "hunter2")) << r.err;
  r = cucore({"cache", "config", "max_size", "--cache", "bogus:x"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_FALSE(exists("bogus:x"));
  r = cucore({"cache", "config", "max_size", "--cache", "d+redis://:hunter2@host"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_FALSE(contains(r.err, "hunter2")) << r.err;
}

TEST_F(CompileCache, SchemesAndWordsAreReadInAnyCase) {
  file("k.cu", kTemplate);
  // REDIS:// is Redis (nothing listens on port 1: a miss, and no ./REDIS: directory).
  json j = json_of(compile_k({"--cache", "REDIS://127.0.0.1:1/0"}));
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_FALSE(exists("REDIS:"));
  j = json_of(compile_k({"--cache", "SQLite:c.db"}));
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_TRUE(fs::is_regular_file(work_.path() / "c.db"));
  EXPECT_EQ(json_of(compile_k({"--cache", "Dir:d"}))["cache"].string, "miss");
  EXPECT_EQ(entry_files(work_.path() / "d").size(), 1u);
  EXPECT_EQ(json_of(compile_k({"--cache", "NONE"}))["cache"].string, "off");
  EXPECT_EQ(json_of(compile_k({"--cache", "Memory"}))["cache"].string, "miss");
  EXPECT_EQ(json_of(compile_k({"--cache", "MEMORY+Redis://127.0.0.1:1/0"}))["cache"].string,
            "miss");
  EXPECT_FALSE(exists("NONE"));
  EXPECT_FALSE(exists("Memory"));
}

TEST_F(CompileCache, DirectoriesWhoseNamesHoldAColon) {
  file("k.cu", kTemplate);
  fs::create_directories(work_.path() / "abs");
  const std::vector<std::string> specs = {"./a:b",    "dir:c:d",    "dir:memory",
                                          "sub/v1:x", "my_cache:1", (work_ / "abs/x:y").string()};
  for (const std::string& spec : specs) {
    EXPECT_EQ(json_of(compile_k({"--cache", spec}))["cache"].string, "miss") << spec;
  }
  for (const char* dir : {"a:b", "c:d", "memory", "sub/v1:x", "my_cache:1", "abs/x:y"}) {
    EXPECT_EQ(entry_files(work_.path() / dir).size(), 1u) << dir;
  }
  // sqlite:///abs is the absolute path /abs.
  const std::string db = (work_.path() / "abs.db").string();
  EXPECT_EQ(json_of(compile_k({"--cache", "sqlite://" + db}))["cache"].string, "miss");
  EXPECT_TRUE(fs::is_regular_file(db));
}

TEST_F(CompileCache, AMalformedRemoteCacheVariableIsAUsageError) {
  file("k.cu", kTemplate);
  for (const char* url : {"bogus://x", "redis:/127.0.0.1", "redis://127.0.0.1:port"}) {
    const auto r = cucore({"compile", "k.cu", "--arch", kArch}, {{"CUCORE_REMOTE_CACHE", url}});
    EXPECT_EQ(r.status, 2) << url << ": " << describe(r);
    EXPECT_TRUE(contains(r.err, "$CUCORE_REMOTE_CACHE")) << r.err;
    EXPECT_FALSE(exists("k.cubin"));
  }
  // An explicit --cache is taken as given: the variable is not read.
  const auto r = cucore({"compile", "k.cu", "--arch", kArch, "--cache", "none"},
                        {{"CUCORE_REMOTE_CACHE", "bogus://x"}});
  EXPECT_EQ(r.status, 0) << describe(r);
  // In any case, it is Redis.
  const json j = json_of(compile_k(), {{"CUCORE_REMOTE_CACHE", "REDIS://127.0.0.1:1/0"}});
  EXPECT_EQ(j["cache"].string, "miss");
}

// A kernel storing V from the header its first line includes.
std::string stores_v(const std::string& include_line) {
  return include_line + "\nextern \"C\" __global__ void w(int* p) { *p = V; }\n";
}

// An #include whose name NVRTC builds from a macro it predefines (__CUDACC_VER_MAJOR__, 13 here):
// NVRTC finds the header (kVersionedHeader), the key cannot know the name.
constexpr const char* kStringizedInclude =
    "#define STR2(x) #x\n#define STR(x) STR2(x)\n#include STR(__CUDACC_VER_MAJOR__.cuh)";
constexpr const char* kVersionedHeader = "13.cuh";

TEST_F(CompileCache, InputsTheKeyCannotSeeCompileUncachedWithANote) {
  file(kVersionedHeader, "#define V 46\n");
  file("m.cu", stores_v(kStringizedInclude));
  auto r = cucore({"compile", "m.cu", "--arch", kArch, "--target", "ptx"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(output("m.ptx"), ", 46;"));
  EXPECT_TRUE(contains(r.out, ", not cached)")) << r.out;
  EXPECT_TRUE(contains(r.err, "note: not cached: m.cu includes a header through a macro")) << r.err;
  EXPECT_TRUE(contains(r.err, "m.cu:3: #include STR(__CUDACC_VER_MAJOR__.cuh)")) << r.err;
  EXPECT_TRUE(contains(r.err, "; pass --extra-digest or --cache none\n")) << r.err;
  EXPECT_FALSE(contains(r.err, "program_cache_key_inputs")) << "the library's advice: " << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "said once: " << r.err;

  const json j = json_of({"compile", "m.cu", "--arch", kArch, "--target", "ptx", "--json"});
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_TRUE(j["key"].is(json::kind::null));
  EXPECT_TRUE(j["headers"].is(json::kind::null));
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "STR(__CUDACC_VER_MAJOR__.cuh)"))
      << j["cache_skip_reason"].string;
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "--extra-digest"));

  // --libdevice reads libdevice.10.bc.
  file("scale.ll", kScaleIr);
  const json n = json_of({"compile", "scale.ll", "--arch", kArch, "--libdevice", "--json"});
  EXPECT_EQ(n["cache"].string, "skipped");
  EXPECT_TRUE(contains(n["cache_skip_reason"].string, "--libdevice"));

  EXPECT_TRUE(entry_files(cache_.path()).empty());
}

TEST_F(CompileCache, ExtraDigestMakesThoseInputsCacheable) {
  file(kVersionedHeader, "#define V 46\n");
  file("m.cu", stores_v(kStringizedInclude));
  auto args = [](const std::string& digest, const std::string& out) {
    return std::vector<std::string>{"compile", "m.cu",   "--arch", kArch, "--target",
                                    "ptx",     "--json", "-o",     out,   "--extra-digest",
                                    digest};
  };
  const json first = json_of(args("00C0ffee", "a.ptx"));
  const json second = json_of(args("00c0FFEE", "b.ptx"));  // the same bytes
  EXPECT_EQ(first["cache"].string, "miss");
  EXPECT_EQ(second["cache"].string, "hit");
  EXPECT_TRUE(is_key(first["key"].string));
  EXPECT_EQ(first["key"].string, second["key"].string);
  EXPECT_TRUE(contains(output("a.ptx"), ", 46;"));
  EXPECT_EQ(output("a.ptx"), output("b.ptx"));
  ASSERT_TRUE(first["headers"].is(json::kind::object)) << "the rest of the closure is tracked";

  // Another digest (the header changed): another key, a miss, the new header's value.
  file(kVersionedHeader, "#define V 48\n");
  const json third = json_of(args("01", "c.ptx"));
  EXPECT_EQ(third["cache"].string, "miss");
  EXPECT_NE(third["key"].string, first["key"].string);
  EXPECT_TRUE(contains(output("c.ptx"), ", 48;"));

  // `cucore key` agrees, and lists what the digest vouches for.
  auto r = cucore({"key", "m.cu", "--arch", kArch, "--target", "ptx", "--extra-digest", "01"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, third["key"].string + "\n");
  r = cucore(
      {"key", "m.cu", "--arch", kArch, "--target", "ptx", "--extra-digest", "01", "--explain"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\n  untracked_include +.*STR\(__CUDACC_VER_MAJOR__\.cuh\))")))
      << r.out;

  // A digest on inputs that need none is mixed in all the same.
  file("k.cu", kTemplate);
  const json plain = json_of(compile_k());
  const json salted = json_of(compile_k({"--extra-digest", "ab"}));
  EXPECT_EQ(salted["cache"].string, "miss");
  EXPECT_NE(salted["key"].string, plain["key"].string);
  EXPECT_EQ(json_of(compile_k({"--extra-digest", "AB"}))["cache"].string, "hit");
}

// The issue's case: a kernel and its header in one directory, compiled from another. The quoted
// #include is found beside FILE (the default program name is FILE as given), the header is in the
// key, and a cached result is always the bytes a compile without the cache gives.
TEST_F(CompileCache, QuotedIncludeBesideFileIsFoundAndTracked) {
  temp_dir src;
  const std::string kernel = (src.path() / "k.cu").string();
  write_text(src.path() / "h.cuh", "#define V 7\n");
  write_text(src.path() / "k.cu", stores_v("#include \"h.cuh\""));
  auto compile = [&](const std::string& out, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"compile", kernel, "--arch", kArch,   "--target",
                                     "ptx",     "-o",   out,      "--json"};
    args.insert(args.end(), extra.begin(), extra.end());
    return json_of(args);
  };
  const json miss = compile("miss.ptx");
  EXPECT_EQ(miss["cache"].string, "miss");
  ASSERT_TRUE(miss["headers"].is(json::kind::object)) << "headers: not tracked";
  EXPECT_GE(miss["headers"]["tracked"].number, 1);
  for (const char* count : {"absent", "in_memory", "hashed"}) {
    EXPECT_TRUE(miss["headers"][count].is(json::kind::number)) << count;
  }
  EXPECT_TRUE(miss["headers"]["stat_fast_path"].is(json::kind::boolean));
  EXPECT_TRUE(contains(output("miss.ptx"), ", 7;"));

  const json hit = compile("hit.ptx");
  EXPECT_EQ(hit["cache"].string, "hit");
  EXPECT_EQ(hit["key"].string, miss["key"].string);
  ASSERT_TRUE(hit["headers"].is(json::kind::object)) << "a hit reports the headers too";
  EXPECT_GE(hit["headers"]["tracked"].number, 1);
  EXPECT_EQ(compile("none.ptx", {"--cache", "none"})["cache"].string, "off");
  EXPECT_EQ(output("hit.ptx"), output("none.ptx"));
  EXPECT_EQ(output("miss.ptx"), output("none.ptx"));

  // Edit the header (same size): a miss, and the bytes of a fresh uncached compile.
  write_text(src.path() / "h.cuh", "#define V 8\n");
  const json edited = compile("edited.ptx");
  EXPECT_EQ(edited["cache"].string, "miss");
  EXPECT_NE(edited["key"].string, miss["key"].string);
  EXPECT_EQ(compile("fresh.ptx", {"--cache", "none"})["cache"].string, "off");
  EXPECT_TRUE(contains(output("fresh.ptx"), ", 8;"));
  EXPECT_EQ(output("edited.ptx"), output("fresh.ptx"));
  EXPECT_EQ(compile("again.ptx")["cache"].string, "hit");
  EXPECT_EQ(output("again.ptx"), output("fresh.ptx"));

  // The human report says so too, with nothing on stderr.
  const auto r = cucore({"compile", kernel, "--arch", kArch, "--target", "ptx", "-o", "h.ptx"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, kernel + " -> h.ptx (")) << r.out;
  EXPECT_TRUE(contains(r.out, ", cache hit)")) << r.out;
  EXPECT_EQ(r.err, "");
}

TEST_F(CompileCache, IncludePathAndPreIncludeHeadersAreTracked) {
  fs::create_directory(work_ / "inc");
  file("inc/answer.h", "#define V 46\n");
  file("angle.cu", stores_v("#include <answer.h>"));
  const std::vector<std::string> args = {"compile", "angle.cu", "--arch", kArch,   "--target",
                                         "ptx",     "-I",       "inc",    "--json"};
  const json first = json_of(args);
  EXPECT_EQ(first["cache"].string, "miss");
  EXPECT_FALSE(first.find("cache_skip_reason"));
  EXPECT_GE(first["headers"]["tracked"].number, 1);
  EXPECT_EQ(json_of(args)["cache"].string, "hit");
  EXPECT_TRUE(contains(output("angle.ptx"), ", 46;"));
  file("inc/answer.h", "#define V 47\n");
  EXPECT_EQ(json_of(args)["cache"].string, "miss");
  EXPECT_TRUE(contains(output("angle.ptx"), ", 47;"));
  EXPECT_EQ(json_of(args)["cache"].string, "hit");

  file("pre.h", "#define V 50\n");
  file("plain.cu", stores_v(""));
  const std::vector<std::string> pre = {"compile", "plain.cu",      "--arch", kArch,   "--target",
                                        "ptx",     "--pre-include", "pre.h",  "--json"};
  EXPECT_EQ(json_of(pre)["cache"].string, "miss");
  EXPECT_TRUE(contains(output("plain.ptx"), ", 50;"));
  file("pre.h", "#define V 51\n");
  EXPECT_EQ(json_of(pre)["cache"].string, "miss");
  EXPECT_TRUE(contains(output("plain.ptx"), ", 51;"));
  EXPECT_EQ(json_of(pre)["cache"].string, "hit");
}

// --name still overrides the default, and its directory is where quoted #includes are looked up;
// --no-source-include turns that lookup off.
TEST_F(Compile, NameDirectoryAndNoSourceInclude) {
  fs::create_directories(work_ / "a");
  fs::create_directories(work_ / "b");
  file("a/h.cuh", "#define V 1\n");
  file("b/h.cuh", "#define V 2\n");
  file("a/k.cu", stores_v("#include \"h.cuh\""));
  auto r = cucore({"compile", "a/k.cu", "--arch", kArch, "--target", "ptx", "-o", "a.ptx"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(output("a.ptx"), ", 1;"));
  r = cucore(
      {"compile", "a/k.cu", "--arch", kArch, "--target", "ptx", "-o", "b.ptx", "--name", "b/k.cu"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(output("b.ptx"), ", 2;"));

  r = cucore({"compile", "a/k.cu", "--arch", kArch, "--target", "ptx", "--no-source-include"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "a/k.cu(1): catastrophic error")) << r.err;
  EXPECT_TRUE(contains(r.err, "h.cuh")) << r.err;
  // ... unless -I names the directory again.
  r = cucore({"compile", "a/k.cu", "--arch", kArch, "--target", "ptx", "--no-source-include", "-I",
              "b", "-o", "i.ptx"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(output("i.ptx"), ", 2;"));
}

// The toolkit's headers (CCCL: <cuda/...>, CUB, Thrust) compile with no flags; --no-toolkit-include
// takes them away, and is c++ only.
TEST_F(Compile, ToolkitHeadersNeedNoFlags) {
  file("c.cu",
       "#include <cuda/std/complex>\n"
       "extern \"C\" __global__ void f(float* p) {\n"
       "  cuda::std::complex<float> c(p[0], p[1]);\n"
       "  p[2] = (c * c).real();\n"
       "}\n");
  const std::vector<std::string> args = {"compile", "c.cu", "--arch", kArch, "--json"};
  const json miss = json_of(args);
  EXPECT_EQ(miss["cache"].string, "miss");
  EXPECT_TRUE(is_elf(output("c.cubin")));
  ASSERT_TRUE(miss["headers"].is(json::kind::object));
  EXPECT_GT(miss["headers"]["tracked"].number, 10) << "the CCCL headers are in the key";
  const json hit = json_of(args);
  EXPECT_EQ(hit["cache"].string, "hit");
  EXPECT_EQ(hit["headers"]["tracked"].number, miss["headers"]["tracked"].number);

  auto r = cucore({"compile", "c.cu", "--arch", kArch, "--no-toolkit-include", "-o", "no.cubin"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "cuda/std/complex")) << r.err;
  EXPECT_TRUE(contains(r.err, "NVRTC compilation failed")) << r.err;
  EXPECT_FALSE(exists("no.cubin"));

  // Refused by name for code NVRTC does not compile, like every c++ option.
  file("scale.ll", kScaleIr);
  r = cucore({"compile", "scale.ll", "--arch", kArch, "--no-toolkit-include"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "toolkit_include_path")) << r.err;
  r = cucore({"key", "scale.ll", "--arch", kArch, "--no-source-include"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "no_source_include")) << r.err;
}

TEST_F(CompileCache, MalformedExtraDigestIsAUsageError) {
  file("k.cu", kTemplate);
  auto r = cucore({"compile", "k.cu", "--arch", kArch, "--extra-digest", "abc"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--extra-digest: \"abc\" has an odd number")) << r.err;
  r = cucore({"compile", "k.cu", "--arch", kArch, "--extra-digest", "a-"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--extra-digest: \"a-\" is not hexadecimal")) << r.err;
  r = cucore({"key", "k.cu", "--arch", kArch, "--extra-digest", "zz"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_FALSE(exists("k.cubin"));
}

TEST_F(CompileCache, PtxAndNvvmHitsToo) {
  file("saxpy.cu", kSaxpy);
  ASSERT_EQ(
      cucore({"compile", "saxpy.cu", "--arch", kArch, "--target", "ptx", "--cache", "none"}).status,
      0);
  const std::vector<std::string> ptx = {"compile", "saxpy.ptx", "--arch", kArch, "--json"};
  const json miss = json_of(ptx);
  const std::string cubin = output("saxpy.cubin");
  const json hit = json_of(ptx);
  EXPECT_EQ(miss["cache"].string, "miss");
  EXPECT_EQ(hit["cache"].string, "hit");
  EXPECT_EQ(hit["backend"].string, miss["backend"].string) << "named from the key on a hit";
  EXPECT_EQ(output("saxpy.cubin"), cubin);

  file("scale.ll", kScaleIr);
  const std::vector<std::string> nvvm = {"compile", "scale.ll", "--arch", kArch, "--json"};
  EXPECT_EQ(json_of(nvvm)["cache"].string, "miss");
  const json nvvm_hit = json_of(nvvm);
  EXPECT_EQ(nvvm_hit["cache"].string, "hit");
  EXPECT_EQ(nvvm_hit["backend"].string, "NVVM");
  EXPECT_TRUE(contains(output("scale.ptx"), ".entry scale"));
}

// Issue 3, item 8: a process whose lookup hits never loads a compiler library. LD_DEBUG=files makes
// the dynamic loader name every library it opens, on stderr.
TEST_F(CompileCache, AHitLoadsNoCompilerLibrary) {
  const environment debug = {{"LD_DEBUG", "files"}};
  auto loaded = [](const run_result& r) {
    std::string libraries;
    for (const char* lib : {"libnvrtc", "libnvJitLink", "libnvvm"}) {
      if (contains(r.err, lib)) libraries += std::string(libraries.empty() ? "" : ", ") + lib;
    }
    return libraries;
  };

  file("k.cu", kTemplate);
  auto r = cucore(compile_k(), debug);
  ASSERT_EQ(r.status, 0) << describe(r);
  ASSERT_TRUE(contains(loaded(r), "libnvrtc")) << "LD_DEBUG shows a compile's libraries\n" << r.err;
  r = cucore(compile_k(), debug);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["cache"].string, "hit");
  EXPECT_EQ(parse_json(r.out)["mangled_names"]["k<int>"].string, "_Z1kIiEvPT_");
  EXPECT_EQ(loaded(r), "") << "a c++ hit loaded a compiler";

  // The key the tool derives itself (--extra-digest) uses the same remembered versions.
  EXPECT_EQ(cucore(compile_k({"--extra-digest", "0f"})).status, 0);
  r = cucore(compile_k({"--extra-digest", "0f"}), debug);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["cache"].string, "hit");
  EXPECT_EQ(loaded(r), "") << "a hit with --extra-digest loaded a compiler";

  // PTX: naming the backend of a hit must not load nvJitLink either.
  file("saxpy.cu", kSaxpy);
  ASSERT_EQ(cucore({"compile", "saxpy.cu", "--arch", kArch, "--target", "ptx"}).status, 0);
  const std::vector<std::string> ptx = {"compile", "saxpy.ptx", "--arch", kArch, "--json"};
  ASSERT_EQ(cucore(ptx).status, 0);
  r = cucore(ptx, debug);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["cache"].string, "hit");
  EXPECT_EQ(loaded(r), "") << "a ptx hit loaded a compiler";

  file("scale.ll", kScaleIr);
  const std::vector<std::string> nvvm = {"compile", "scale.ll", "--arch", kArch, "--json"};
  ASSERT_EQ(cucore(nvvm).status, 0);
  r = cucore(nvvm, debug);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["cache"].string, "hit");
  EXPECT_EQ(loaded(r), "") << "an nvvm hit loaded a compiler";
}

// The same for the SQLite backend: its compiler version memo lives beside the database file.
TEST_F(CompileCache, ASqliteHitLoadsNoCompilerLibrary) {
  file("k.cu", kTemplate);
  const auto args = compile_k({"--cache", "sqlite:" + (cache_.path() / "cache.db").string()});
  ASSERT_EQ(cucore(args).status, 0);
  const auto r = cucore(args, {{"LD_DEBUG", "files"}});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["cache"].string, "hit");
  EXPECT_FALSE(contains(r.err, "libnvrtc"))
      << "a hit in the SQLite cache loaded NVRTC (does sqlite_program_cache override "
         "compiler_version_memo()?)";
}

TEST_F(CompileCache, ACacheThatCannotBeOpenedDoesNotFailTheCompile) {
  file("k.cu", kTemplate);
  file("not-a-directory", "x");
  const json j = json_of(compile_k({"--cache", (work_ / "not-a-directory").string()}));
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "cannot open the cache"))
      << j["cache_skip_reason"].string;
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "not-a-directory"));
  EXPECT_TRUE(is_elf(output("k.cubin")));

  // `cucore cache` has nothing to fall back to: it fails.
  const auto r = cucore({"cache", "ls", "--cache", (work_ / "not-a-directory").string()});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "not-a-directory")) << r.err;
}

// ---------------------------------------------------------------------------------------------
// cucore key

TEST_F(Key, IsTheKeyCompileUses) {
  file("k.cu", kTemplate);
  const std::vector<std::string> options = {
      "k.cu", "--arch", kArch, "--name-expression", "k<float>", "-D", "X=1", "--target", "ptx"};
  std::vector<std::string> key_args = {"key"};
  key_args.insert(key_args.end(), options.begin(), options.end());
  std::vector<std::string> compile_args = {"compile", "--json"};
  compile_args.insert(compile_args.end(), options.begin(), options.end());

  const auto r = cucore(key_args);
  ASSERT_EQ(r.status, 0) << describe(r);
  ASSERT_TRUE(is_key(r.out.substr(0, r.out.size() - 1))) << r.out;
  EXPECT_FALSE(exists("k.ptx")) << "key compiles nothing";
  EXPECT_TRUE(entry_files(cache_.path()).empty()) << "nor caches anything";
  EXPECT_EQ(r.out, json_of(compile_args)["key"].string + "\n");

  key_args.push_back("--json");
  const json j = json_of(key_args);
  EXPECT_EQ(j.keys, std::vector<std::string>{"key"});
  EXPECT_EQ(j["key"].string + "\n", r.out);

  // Another option, another key; repeated or reordered name expressions, the same.
  const auto other = cucore({"key", "k.cu", "--arch", kArch, "--name-expression", "k<float>", "-D",
                             "X=2", "--target", "ptx"});
  EXPECT_NE(other.out, r.out);
  const auto same = cucore({"key", "k.cu", "--target", "ptx", "-D", "X=1", "--name-expression",
                            "k<float>", "--arch", kArch, "--name-expression", "k<float>"});
  EXPECT_EQ(same.out, r.out);
}

// The command-line conventions the README documents, as CLI11 parses them (key: no compile
// needed): spellings of one option give one key, values may start with '-', repeated options keep
// their order, "--" ends the options; malformed spellings are usage errors naming them.
TEST_F(Key, CommandLineConventions) {
  file("k.cu", kTemplate);
  file("-k.cu", kTemplate);
  fs::create_directory(work_ / "inc");
  auto key = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = {"key", "k.cu", "--arch", kArch, "--target", "ptx"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = cucore(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    return r.out;
  };
  const std::string include = key({"-I", "inc"});
  EXPECT_EQ(key({"-Iinc"}), include);
  EXPECT_EQ(key({"--include-path", "inc"}), include);
  EXPECT_EQ(key({"--include-path=inc"}), include);
  EXPECT_NE(key({}), include);

  const std::string ptxas = key({"--ptxas-options", "-v"});
  EXPECT_EQ(key({"--ptxas-options=-v"}), ptxas);
  EXPECT_NE(key({}), ptxas);
  // The value that looks like an option is the value, not the flag it spells.
  EXPECT_EQ(key({"--name-expression", "--json"}).find('{'), std::string::npos);

  EXPECT_NE(key({"-D", "A=1", "-D", "A=2"}), key({"-D", "A=2", "-D", "A=1"}));
  EXPECT_EQ(key({"--arch", "sm_52", "--arch", kArch}), key({}));  // the last one wins

  // After "--", "-k.cu" is FILE; before it, an unknown option.
  auto r = cucore({"key", "--arch", kArch, "--target", "ptx", "--", "-k.cu"});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(is_key(r.out.substr(0, r.out.size() - 1))) << r.out;
  r = cucore({"key", "--arch", kArch, "--target", "ptx", "-k.cu"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "unknown option \"-k.cu\"")) << r.err;

  const std::vector<std::pair<std::vector<std::string>, std::string>> errors = {
      {{"--json=yes"}, "option --json takes no value"},
      {{"-Gx"}, "unknown option \"-Gx\""},
      {{"--std="}, "option --std needs a non-empty value (STD)"},
      {{"-D", ""}, "option -D needs a non-empty value"},
      {{"--frobnicate=1"}, "unknown option \"--frobnicate\""},
      {{"-I"}, "option -I needs a value (DIR)"},
  };
  for (const auto& [extra, message] : errors) {
    std::vector<std::string> args = {"key", "k.cu", "--arch", kArch};
    args.insert(args.end(), extra.begin(), extra.end());
    r = cucore(args);
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_TRUE(contains(r.err, message)) << r.err;
    EXPECT_TRUE(contains(r.err, "Run 'cucore key --help' for usage.")) << r.err;
  }
}

// Like compile, key takes the compiler's version from the cache's memo: once the cache has seen
// the compiler, deriving a key loads no compiler library, and the key is the same either way.
// Every option of program_options on the command line, and the NVRTC flag it gives: the "option"
// fields of `key --json --explain` (what the key hashes, which is what NVRTC gets), without the
// toolkit's include directories.
TEST_F(Key, EveryCompilerOptionGivesItsNvrtcFlag) {
  file("k.cu", kTemplate);
  file("h.cuh", "#define H 1\n");
  auto options_of = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"key",    "k.cu",      "--arch",
                                     kArch,    "--target",  "ptx",
                                     "--json", "--explain", "--no-toolkit-include"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<std::string> out;
    const json j = json_of(args);
    if (!j.is(json::kind::object)) return out;
    for (const json& f : j["fields"].items) {
      if (f["label"].string == "option") out.push_back(f["payload"].string);
    }
    return out;
  };
  const std::vector<std::string> plain = options_of({});
  EXPECT_EQ(plain, std::vector<std::string>{"-arch=sm_90"});
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> table = {
      // Preprocessor
      {{"-I", "inc"}, {"--include-path=inc"}},
      {{"-D", "X=1", "-DY"}, {"--define-macro=X=1", "--define-macro=Y"}},
      {{"-U", "X"}, {"--undefine-macro=X"}},
      {{"--pre-include", "h.cuh"}, {"--pre-include=h.cuh"}},
      {{"--no-source-include"}, {"--no-source-include"}},
      // Language
      {{"--std", "c++20"}, {"--std=c++20"}},
      {{"--default-device"}, {"--device-as-default-execution-space"}},
      {{"--builtin-move-forward", "false"}, {"--builtin-move-forward=false"}},
      {{"--builtin-initializer-list=false"}, {"--builtin-initializer-list=false"}},
      {{"--device-int128"}, {"--device-int128"}},
      {{"--device-float128"}, {"--device-float128"}},
      {{"--restrict"}, {"--restrict"}},
      {{"--extensible-whole-program"}, {"--extensible-whole-program"}},
      {{"--minimal"}, {"--minimal"}},
      // Code generation
      {{"-G"}, {"--device-debug"}},
      {{"--lineinfo"}, {"--generate-line-info"}},
      {{"--maxrregcount", "32"}, {"--maxrregcount=32"}},
      {{"--use-fast-math"}, {"--use_fast_math"}},
      {{"--ftz", "true"}, {"--ftz=true"}},
      {{"--prec-div", "false"}, {"--prec-div=false"}},
      {{"--prec-sqrt", "false"}, {"--prec-sqrt=false"}},
      {{"--fmad", "false"}, {"--fmad=false"}},
      {{"--rdc"}, {"--relocatable-device-code=true"}},
      {{"--dlink-time-opt"}, {"--dlink-time-opt"}},
      {{"--gen-opt-lto"}, {"--gen-opt-lto"}},
      {{"--ptxas-options", "-v"}, {"--ptxas-options=-v"}},
      {{"--dopt", "on"}, {"--dopt=on"}},
      {{"--Ofast-compile", "min"}, {"--Ofast-compile=min"}},
      {{"--extra-device-vectorization"}, {"--extra-device-vectorization"}},
      {{"--split-compile", "0"}, {"--split-compile=0"}},
      {{"--frandom-seed", "7"}, {"--frandom-seed=7"}},
      {{"--no-compiler-cache"}, {"--no-cache"}},
      {{"--fdevice-syntax-only"}, {"--fdevice-syntax-only"}},
      {{"--numba-debug"}, {"--numba-debug"}},
      // Tile code (NVRTC 13.1+)
      {{"--enable-tile"}, {"--enable-tile"}},
      {{"--tile-only"}, {"--tile-only"}},
      {{"--simt-only"}, {"--simt-only"}},
      {{"--default-tile"}, {"-default-tile"}},
      {{"--diagnose-implicit-tile-var"}, {"--diagnose-implicit-tile-var"}},
      // Diagnostics
      {{"--disable-warnings"}, {"--disable-warnings"}},
      {{"--diag-error", "20", "--diag-error", "21"}, {"--diag-error=20,21"}},
      {{"--diag-suppress", "177"}, {"--diag-suppress=177"}},
      {{"--diag-warn", "3"}, {"--diag-warn=3"}},
      {{"--no-display-error-number"}, {"--no-display-error-number"}},
      {{"--warning-as-error", "reorder", "--warning-as-error", "conversion"},
       {"--warning-as-error=reorder,conversion"}},
      {{"--Wreorder"}, {"--Wreorder"}},
      {{"--brief-diagnostics", "true"}, {"--brief-diagnostics=true"}},
      {{"--optimization-info", "inline"}, {"--optimization-info=inline"}},
      // Precompiled headers (the ones the key can take without an --extra-digest)
      {{"--pch-verbose", "false"}, {"--pch-verbose=false"}},
      {{"--pch-messages", "false"}, {"--pch-messages=false"}},
      {{"--instantiate-templates-in-pch", "false"}, {"--instantiate-templates-in-pch=false"}},
      {{"--no-auto-pch"}, {}},  // cucore's own: no NVRTC flag, no key field
      {{"--pch", "--extra-digest", "00"}, {"--pch"}},
      {{"--use-pch", "a.pch", "--extra-digest", "00"}, {"--use-pch=a.pch"}},
      {{"--pch-dir", "/tmp", "--extra-digest", "00"}, {"--pch-dir=/tmp"}},
      // Anything else, last
      {{"-Xnvrtc", "-jtd=50", "--std", "c++17"}, {"--std=c++17", "-jtd=50"}},
  };
  fs::create_directory(work_ / "inc");
  for (const auto& [extra, flags] : table) {
    SCOPED_TRACE(extra.front());
    std::vector<std::string> expected = {"-arch=sm_90"};
    expected.insert(expected.end(), flags.begin(), flags.end());
    EXPECT_EQ(options_of(extra), expected);
  }
  // --header NAME=FILE: no flag; the header's name and contents are in the key.
  const json j =
      json_of({"key", "k.cu", "--arch", kArch, "--json", "--explain", "--header", "cfg.cuh=h.cuh"});
  bool header = false;
  for (const json& f : j["fields"].items) {
    header = header || (f["label"].string == "memory_header" &&
                        f["payload"].string.starts_with("cfg.cuh (12 bytes, sha256 "));
  }
  EXPECT_TRUE(header) << "no memory_header field for cfg.cuh";
}

// The options whose files the key cannot see or whose side effects a hit would skip: key refuses
// them naming the option; compile compiles without the cache and says why, and the file appears.
TEST_F(Key, OptionsTheKeyCannotCoverAreNamed) {
  file("k.cu", kTemplate);
  const std::vector<std::pair<std::vector<std::string>, std::string>> refused = {
      {{"--time", "t.csv"}, "no cache key: --time (writes compile timings to a file)"},
      {{"--fdevice-time-trace", "t.json"}, "no cache key: --fdevice-time-trace (writes"},
      {{"--create-pch", "a.pch"}, "no cache key: --create-pch (writes a precompiled header)"},
      {{"--pch", "--pch-dir", "p"},
       "no cache key: --pch and --pch-dir make NVRTC read precompiled headers"},
      {{"--use-pch", "a.pch"}, "no cache key: --use-pch make"},
  };
  for (const auto& [extra, message] : refused) {
    std::vector<std::string> args = {"key", "k.cu", "--arch", kArch};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto r = cucore(args);
    EXPECT_EQ(r.status, 2) << describe(r);
    EXPECT_TRUE(contains(r.err, message)) << r.err;
    EXPECT_FALSE(contains(r.err, "program_options")) << r.err;
  }
  auto r = cucore({"compile", "k.cu", "--arch", kArch, "--time", "t.csv", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  json j = parse_json(r.out);
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_EQ(j["cache_skip_reason"].string,
            "--time (writes compile timings to a file): a cache hit would skip that compile-time "
            "side effect (an extra_digest does not change that); pass --cache none to compile "
            "without the cache");
  EXPECT_TRUE(exists("t.csv"));
  fs::create_directory(work_ / "p");
  r = cucore({"compile", "k.cu", "--arch", kArch, "--pch", "--pch-dir", "p", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  j = parse_json(r.out);
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "; pass --extra-digest or --cache none"))
      << r.out;
  EXPECT_TRUE(entry_files(cache_.path()).empty());
}

TEST_F(Key, UsesTheCachesCompilerVersionsAndLoadsNoCompiler) {
  file("k.cu", kTemplate);
  const std::vector<std::string> key_args = {"key", "k.cu", "--arch", kArch};
  const std::string db = "sqlite:" + (cache_.path() / "cache.db").string();
  for (const std::string& spec : {std::string(), db}) {
    SCOPED_TRACE(spec.empty() ? "the default cache" : spec);
    std::vector<std::string> with_cache = key_args;
    if (!spec.empty()) with_cache.insert(with_cache.end(), {"--cache", spec});
    const auto first = cucore(with_cache);  // asks NVRTC and remembers its version
    ASSERT_EQ(first.status, 0) << describe(first);
    const auto again = cucore(with_cache, {{"LD_DEBUG", "files"}});
    ASSERT_EQ(again.status, 0) << describe(again);
    EXPECT_EQ(again.out, first.out);
    EXPECT_FALSE(contains(again.err, "libnvrtc")) << "key loaded NVRTC with a warm memo";
    std::vector<std::string> uncached = key_args;
    uncached.insert(uncached.end(), {"--cache", "none"});
    const auto installed = cucore(uncached, {{"LD_DEBUG", "files"}});
    ASSERT_EQ(installed.status, 0) << describe(installed);
    EXPECT_EQ(installed.out, first.out) << "the memo and the installed NVRTC disagree";
    EXPECT_TRUE(contains(installed.err, "libnvrtc")) << "--cache none asks the installed NVRTC";
  }
}

TEST_F(Key, ExplainListsTheFields) {
  file("k.cu", kTemplate);
  auto r = cucore({"key", "k.cu", "--arch", kArch, "--explain", "--name-expression", "k<int>"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const auto first_newline = r.out.find('\n');
  ASSERT_NE(first_newline, std::string::npos);
  EXPECT_TRUE(is_key(r.out.substr(0, first_newline))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(^[0-9a-f]{64}\n  schema +cucore-key-)")))
      << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  option +-arch=sm_90\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  nvrtc +[0-9]+\.[0-9]+)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  name +s:k<int>\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  options_name +k\.cu\n)"))) << r.out;

  const json j =
      json_of({"key", "k.cu", "--arch", kArch, "--explain", "--json", "--extra-digest", "beef"});
  EXPECT_TRUE(is_key(j["key"].string));
  const json& fields = j["fields"];
  ASSERT_TRUE(fields.is(json::kind::array));
  ASSERT_FALSE(fields.items.empty());
  EXPECT_EQ(fields.items[0]["label"].string, "schema");
  bool arch = false;
  for (const json& f : fields.items) {
    EXPECT_EQ(f.keys, (std::vector<std::string>{"label", "payload"}));
    arch = arch || (f["label"].string == "option" && f["payload"].string == "-arch=sm_90");
  }
  EXPECT_TRUE(arch) << "no -arch=sm_90 option field";
  EXPECT_EQ(fields.items.back()["label"].string, "extra_digest");
}

TEST_F(Key, InputsTheKeyCannotSeeNeedAnExtraDigest) {
  file(kVersionedHeader, "#define V 46\n");
  file("m.cu", stores_v(kStringizedInclude));
  auto r = cucore({"key", "m.cu", "--arch", kArch});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "error: no cache key: m.cu includes a header through a macro"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "STR(__CUDACC_VER_MAJOR__.cuh)")) << r.err;
  EXPECT_TRUE(contains(r.err, "--extra-digest")) << r.err;
  EXPECT_EQ(r.out, "");
  r = cucore({"key", "m.cu", "--arch", kArch, "--extra-digest", "00"});
  EXPECT_EQ(r.status, 0) << describe(r);

  file("scale.ll", kScaleIr);
  r = cucore({"key", "scale.ll", "--arch", kArch, "--libdevice"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "no cache key: --libdevice")) << r.err;

  r = cucore({"key", "--arch", kArch});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "key needs a FILE")) << r.err;
  r = cucore({"key", "m.cu", "--arch", kArch, "-o", "x"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "unknown option \"-o\"")) << r.err;
}

// Every header is a line of --explain: found ones with size and SHA-256, candidates looked at and
// absent as such; and key's default program name is compile's (FILE as given), so the keys agree
// for a FILE in another directory.
TEST_F(Key, ExplainListsEveryHeader) {
  temp_dir src;
  const std::string kernel = (src.path() / "k.cu").string();
  fs::create_directory(work_ / "first");
  fs::create_directory(work_ / "second");
  const std::string header = "#include <b.cuh>\n#define V 3\n";
  write_text(src.path() / "h.cuh", header);
  file("second/b.cuh", "#define B 1\n");
  write_text(src.path() / "k.cu", stores_v("#include \"h.cuh\""));
  const std::vector<std::string> options = {kernel, "--arch", kArch, "--target", "ptx",
                                            "-I",   "first",  "-I",  "second"};
  std::vector<std::string> args = {"key", "--explain"};
  args.insert(args.end(), options.begin(), options.end());
  const auto r = cucore(args);
  ASSERT_EQ(r.status, 0) << describe(r);
  const std::string h = (src.path() / "h.cuh").string();
  const auto options_name = r.out.find("\n  options_name ");
  ASSERT_NE(options_name, std::string::npos) << r.out;
  EXPECT_EQ(r.out.substr(r.out.find_first_not_of(' ', options_name + 15), kernel.size() + 1),
            kernel + "\n")
      << "the program name is FILE as given\n"
      << r.out;
  EXPECT_TRUE(contains(r.out, h + " (" + std::to_string(header.size()) + " bytes, sha256 "))
      << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\n  header +[^\n]*h\.cuh \()" + std::to_string(header.size()) +
                        R"( bytes, sha256 [0-9a-f]{64}\)\n)")))
      << r.out;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex(R"(\n  header_absent +first/b\.cuh \(absent\)\n)")))
      << r.out;
  EXPECT_TRUE(
      std::regex_search(r.out, std::regex(R"(\n  header +second/b\.cuh \(12 bytes, sha256 )")))
      << r.out;
  // One line per field, payloads in one column.
  std::size_t column = std::string::npos;
  std::size_t lines = 0;
  std::size_t pos = r.out.find('\n') + 1;
  while (pos < r.out.size()) {
    const std::size_t end = r.out.find('\n', pos);
    ASSERT_NE(end, std::string::npos);
    const std::string line = r.out.substr(pos, end - pos);
    ASSERT_TRUE(line.starts_with("  ")) << line;
    const std::size_t payload = line.find_first_not_of(' ', line.find(' ', 2));
    if (column == std::string::npos) column = payload;
    EXPECT_EQ(payload, column) << line;
    ++lines;
    pos = end + 1;
  }
  EXPECT_GT(lines, 10u);

  // --json: the same fields, and the headers summary.
  args.push_back("--json");
  const json j = json_of(args);
  bool listed = false;
  for (const json& f : j["fields"].items) {
    listed = listed || (f["label"].string == "header" && f["payload"].string.starts_with(h + " ("));
  }
  EXPECT_TRUE(listed) << "no header field for " << h;
  EXPECT_GE(j["headers"]["tracked"].number, 2);
  EXPECT_GE(j["headers"]["absent"].number, 1);

  // The key compile uses, from another directory too.
  std::vector<std::string> compile_args = {"compile", "--json"};
  compile_args.insert(compile_args.end(), options.begin(), options.end());
  const json compiled = json_of(compile_args);
  EXPECT_EQ(compiled["key"].string, j["key"].string);
  EXPECT_EQ(compiled["headers"]["tracked"].number, j["headers"]["tracked"].number);
}

// ---------------------------------------------------------------------------------------------
// cucore cache

TEST_F(Cache, LsShowExtract) {
  file("k.cu", kTemplate);
  const json compiled = json_of(compile_k());
  const std::string key = compiled["key"].string;
  ASSERT_TRUE(is_key(key));

  auto r = cucore({"cache", "ls"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_match(
      r.out,
      std::regex(
          key +
          R"(  cubin  [0-9]+  k\.cu  [0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}Z\n)")))
      << r.out;

  const json ls = json_of({"cache", "ls", "--json"});
  ASSERT_TRUE(ls.is(json::kind::array));
  ASSERT_EQ(ls.items.size(), 1u);
  EXPECT_EQ(ls.items[0]["key"].string, key);
  EXPECT_EQ(ls.items[0]["code_type"].string, "cubin");
  EXPECT_EQ(ls.items[0]["payload_bytes"].number, compiled["bytes"].number);
  EXPECT_GT(ls.items[0]["stored_bytes"].number, ls.items[0]["payload_bytes"].number);
  EXPECT_EQ(ls.items[0]["name"].string, "k.cu");
  EXPECT_EQ(ls.items[0]["symbols"].number, 2);
  EXPECT_TRUE(ls.items[0]["last_used"].string.ends_with("Z"));

  r = cucore({"cache", "show", key});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "key        " + key + "\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "code type  cubin\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "name       k.cu\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "\n  k<float> = _Z1kIfEvPT_\n  k<int> = _Z1kIiEvPT_\n")) << r.out;

  const json show = json_of({"cache", "show", key, "--json"});
  EXPECT_EQ(show["key"].string, key);
  EXPECT_EQ(show["payload_bytes"].number, compiled["bytes"].number);
  EXPECT_EQ(show["symbols"]["k<int>"].string, "_Z1kIiEvPT_");

  r = cucore({"cache", "extract", key, "-o", "exported.cubin"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(output("exported.cubin"), output("k.cubin"));
  EXPECT_TRUE(contains(r.out, "-> exported.cubin (")) << r.out;

  // Not there, and not a key.
  const std::string absent(64, '0');
  r = cucore({"cache", "show", absent});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "no entry " + absent)) << r.err;
  r = cucore({"cache", "extract", absent, "-o", "nothing.cubin"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_FALSE(exists("nothing.cubin"));
  r = cucore({"cache", "show", "xyz"});
  EXPECT_EQ(r.status, 2) << describe(r);
  r = cucore({"cache", "show"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "cache show needs a KEYHEX")) << r.err;
  r = cucore({"cache", "extract", key});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "-o")) << r.err;
}

// Looking at an entry is not a lookup: show and extract leave the hit and miss counts as they
// were, on a directory and an SQLite cache (each cucore run is a process of its own).
TEST_F(Cache, ShowAndExtractCountNothing) {
  file("k.cu", kTemplate);
  for (const std::string& spec :
       {cache_.path().string(), "sqlite:" + (cache_.path() / "c.db").string()}) {
    SCOPED_TRACE(spec);
    const std::string key = json_of(compile_k({"--cache", spec}))["key"].string;
    ASSERT_TRUE(is_key(key));
    ASSERT_EQ(json_of(compile_k({"--cache", spec}))["cache"].string, "hit");
    const json before = json_of({"cache", "stats", "--json", "--cache", spec})["statistics"];
    ASSERT_EQ(before["local"]["hits"].number, 1);
    ASSERT_EQ(before["local"]["misses"].number, 1);
    auto r = cucore({"cache", "show", key, "--cache", spec});
    ASSERT_EQ(r.status, 0) << describe(r);
    r = cucore({"cache", "extract", key, "-o", "looked.cubin", "--cache", spec});
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_EQ(output("looked.cubin"), output("k.cubin"));
    r = cucore({"cache", "show", std::string(64, '0'), "--cache", spec});
    EXPECT_EQ(r.status, 1) << describe(r);
    const json after = json_of({"cache", "stats", "--json", "--cache", spec})["statistics"];
    EXPECT_EQ(after["local"]["hits"].number, 1);
    EXPECT_EQ(after["local"]["misses"].number, 1);
    EXPECT_EQ(after["compile_hits"].number, 1);
  }
}

TEST_F(Cache, LsAndShowWorkOnSqlite) {
  file("k.cu", kTemplate);
  const std::string spec = "sqlite:" + (cache_.path() / "c.db").string();
  const std::string key = json_of(compile_k({"--cache", spec}))["key"].string;
  const json ls = json_of({"cache", "ls", "--json", "--cache", spec});
  ASSERT_EQ(ls.items.size(), 1u);
  EXPECT_EQ(ls.items[0]["key"].string, key);
  EXPECT_EQ(
      json_of({"cache", "show", key, "--json", "--cache", spec})["symbols"]["k<float>"].string,
      "_Z1kIfEvPT_");
  const json stats = json_of({"cache", "stats", "--json", "--cache", spec});
  EXPECT_EQ(stats["backend"].string, "sqlite");
  EXPECT_EQ(stats["file"].string, (cache_.path() / "c.db").string());
  EXPECT_EQ(stats["entries"].number, 1);
}

TEST_F(Cache, VerifyFindsAndRemovesADamagedEntry) {
  file("k.cu", kTemplate);
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  const std::string good = output("k.cubin");

  auto r = cucore({"cache", "verify", "--json"});
  EXPECT_EQ(r.status, 0) << describe(r);
  json j = parse_json(r.out);
  EXPECT_EQ(j.keys, (std::vector<std::string>{"entries", "ok", "corrupt", "removed", "moved_aside",
                                              "notes"}));
  EXPECT_EQ(j["entries"].number, 1);
  EXPECT_EQ(j["ok"].number, 1);
  EXPECT_EQ(j["corrupt"].number, 0);
  EXPECT_EQ(j["removed"].number, 0);
  r = cucore({"cache", "verify"});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, "1 entries, 1 ok, 0 corrupt, 0 removed\n");

  auto damage = [&] {
    const auto files = entry_files(cache_.path());
    ASSERT_EQ(files.size(), 1u);
    std::string bytes = read_text(files[0]);
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x01);
    write_text(files[0], bytes);
  };
  damage();
  r = cucore({"cache", "verify", "--json"});
  EXPECT_EQ(r.status, 1) << "damage found: " << describe(r);
  j = parse_json(r.out);
  EXPECT_EQ(j["entries"].number, 1);
  EXPECT_EQ(j["ok"].number, 0);
  EXPECT_EQ(j["corrupt"].number, 1);
  EXPECT_EQ(j["removed"].number, 1);
  EXPECT_TRUE(entry_files(cache_.path()).empty());
  r = cucore({"cache", "verify"});
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, "0 entries, 0 ok, 0 corrupt, 0 removed\n");

  // The next compile misses, recompiles the same bytes and stores them again.
  j = json_of(compile_k());
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_EQ(output("k.cubin"), good);

  // A damaged entry found by a compile (no verify) is a miss too, never the damaged bytes.
  damage();
  j = json_of(compile_k());
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_EQ(output("k.cubin"), good);
  EXPECT_EQ(json_of(compile_k())["cache"].string, "hit");
  EXPECT_EQ(output("k.cubin"), good);
}

// A directory where an entry belongs (issue 21, item 3): the compile misses, its store clears the
// directory (saying so), the next compile hits, and the statistics count one drop, not one per
// lookup. verify removes another one, says what it removed, and finds nothing on the next run.
TEST_F(Cache, ADirectoryWhereAnEntryBelongsIsClearedByTheStoreAndByVerify) {
  file("k.cu", kTemplate);
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  auto block = [&] {
    const auto files = entry_files(cache_.path());
    EXPECT_EQ(files.size(), 1u);
    if (files.size() != 1u) return fs::path();
    fs::remove(files[0]);
    fs::create_directories(files[0] / "inside");
    write_text(files[0] / "inside/file", "x");
    return files[0];
  };
  const fs::path first = block();
  auto r = cucore(compile_k());
  EXPECT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["cache"].string, "miss");
  EXPECT_TRUE(contains(r.err, first.string() + " is a directory, not an entry")) << r.err;
  EXPECT_TRUE(contains(r.err, "removed " + first.string())) << r.err;
  EXPECT_EQ(json_of(compile_k())["cache"].string, "hit");
  const json local = json_of({"cache", "stats", "--json"})["statistics"]["local"];
  EXPECT_EQ(local["corrupt_dropped"].number, 1);
  EXPECT_EQ(local["puts"].number, 2);

  const fs::path second = block();
  r = cucore({"cache", "verify"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_EQ(r.out, "removed " + second.string() +
                       " (a directory, not an entry, 3 items with what was inside)\n"
                       "1 entries, 0 ok, 1 corrupt, 1 removed\n")
      << describe(r);
  r = cucore({"cache", "verify", "--json"});
  EXPECT_EQ(r.status, 0) << describe(r);
  const json j = parse_json(r.out);
  EXPECT_EQ(j["corrupt"].number, 0);
  EXPECT_EQ(j["notes"].items.size(), 0u);
  EXPECT_EQ(json_of(compile_k())["cache"].string, "miss");
  EXPECT_EQ(json_of(compile_k())["cache"].string, "hit");
}

TEST_F(Cache, StatsTrimClear) {
  file("k.cu", kTemplate);
  file("saxpy.cu", kSaxpy);
  json stats = json_of({"cache", "stats", "--json"});
  EXPECT_EQ(stats["entries"].number, 0);
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  ASSERT_EQ(json_of({"compile", "saxpy.cu", "--arch", kArch, "--json"})["cache"].string, "miss");

  stats = json_of({"cache", "stats", "--json"});
  EXPECT_EQ(stats["description"].string, "directory " + cache_.path().string());
  EXPECT_EQ(stats["backend"].string, "directory");
  EXPECT_EQ(stats["root"].string, cache_.path().string());
  EXPECT_EQ(stats["entries"].number, 2);
  EXPECT_GT(stats["size_bytes"].number, 0);
  auto r = cucore({"cache", "stats"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "root     " + cache_.path().string() + "\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "entries  2\n")) << r.out;

  // A cap above the total removes nothing.
  r = cucore({"cache", "trim", "--max-size", "1G", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(parse_json(r.out)["removed"].number, 0);
  r = cucore({"cache", "trim", "--max-size", "1"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "removed 2 entries; 0 left")) << r.out;
  EXPECT_EQ(json_of({"cache", "ls", "--json"}).items.size(), 0u);
  EXPECT_EQ(cucore({"cache", "ls"}).out, "");

  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  r = cucore({"cache", "clear"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "removed 1 entry (")) << r.out;
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 0);
  EXPECT_EQ(json_of(compile_k())["cache"].string, "miss");
  const json cleared = json_of({"cache", "clear", "--json"});
  EXPECT_EQ(cleared["removed"].number, 1);
  EXPECT_EQ(cleared["entries"].number, 0);

  for (const char* bad : {"1X", "-1", "K", "99999999999G"}) {
    r = cucore({"cache", "trim", "--max-size", bad});
    EXPECT_EQ(r.status, 2) << bad << ": " << describe(r);
    EXPECT_TRUE(contains(r.err, "--max-size")) << r.err;
  }
  r = cucore({"cache", "trim"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--max-size")) << r.err;
}

// --ptxas-options naming an options file (a relative path; issue 39): ptxas reads it and the key
// does not, so the compile runs without the cache (option_file), and each edit of the file gives
// what ptxas makes of it.
TEST_F(Cache, PtxasOptionsFileCompilesWithoutTheCache) {
  file("t.cu", "extern \"C\" __global__ void k(int* o) { o[0] = 47; }\n");
  file("ptxas.opts", "--maxrregcount=32\n");
  const std::vector<std::string> args = {
      "compile", "t.cu", "--arch", kArch, "--target", "cubin", "--ptxas-options=-optf=ptxas.opts",
      "--json"};
  for (int round = 0; round < 2; ++round) {
    const json j = json_of(args);
    EXPECT_EQ(j["cache"].string, "skipped");
    EXPECT_TRUE(j["cache_skip_reason"].string.starts_with("option_file: "))
        << j["cache_skip_reason"].string;
    EXPECT_TRUE(contains(j["cache_skip_reason"].string, "ptxas.opts"))
        << j["cache_skip_reason"].string;
  }
  file("ptxas.opts", "--no-such-ptxas-option\n");
  const run_result r = cucore(args);
  EXPECT_NE(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out + r.err, "no-such-ptxas-option")) << describe(r);
  const json s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["skips"]["option_file"].number, 3);
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 0);
  // An ordinary ptxas option goes through the cache: no skip.
  const std::vector<std::string> plain = {
      "compile", "t.cu", "--arch", kArch, "--target", "cubin", "--ptxas-options=-v", "--json"};
  const json p = json_of(plain);
  EXPECT_EQ(p["cache"].string, "miss");
  EXPECT_TRUE(p["stored"].is(json::kind::boolean) && p["stored"].boolean)
      << p["cache_skip_reason"].string;
}

// Inputs no key can cover (issue 39, classes 3 and 4): a procfs file whose contents change without
// its identity (the host's name in another UTS namespace) and a probe of a per-process name. The
// tool compiles them through the store gate: miss, not stored, the reason named, never a hit.
TEST_F(Cache, ProcessViewInputsAreCompiledNeverStored) {
  file("proc.cu",
       "__device__ int\n#include \"/proc/sys/kernel/ostype\"\n= 1;\n"
       "extern \"C\" __global__ void k(int* o) { o[0] = 1; }\n");
  file("stdin.cu",
       "#if __has_include(\"/dev/stdin\")\n__device__ int v = 2;\n#else\n__device__ int v = 1;\n"
       "#endif\nextern \"C\" __global__ void k(int* o) { o[0] = v; }\n");
  for (const char* name : {"proc.cu", "stdin.cu"}) {
    for (int round = 0; round < 2; ++round) {
      const json j = json_of({"compile", name, "--arch", kArch, "--target", "ptx", "--json"});
      EXPECT_EQ(j["cache"].string, "miss") << name << " round " << round;
      EXPECT_TRUE(j["stored"].is(json::kind::boolean) && !j["stored"].boolean) << name;
      EXPECT_EQ(j["cache_skip"].string, "process_view_input") << name;
    }
  }
  const json s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["skips"]["process_view_input"].number, 4);
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 0);
}

// A header modified less than its timestamp granularity before the key was made (here: an mtime in
// the future, deterministically) is compiled but not stored; --json and the statistics say why.
// Once its mtime is old and it has settled, the next compile stores.
TEST_F(Cache, TooNewHeaderIsCompiledNotStored) {
  file("h.cuh", "#define V 47\n");
  file("t.cu", "#include \"h.cuh\"\nextern \"C\" __global__ void k(int* o) { o[0] = V; }\n");
  const fs::path header = work_ / "h.cuh";
  const auto set_mtime = [&](time_t seconds) {
    const struct timespec times[2] = {{0, UTIME_OMIT}, {seconds, 0}};
    ASSERT_EQ(::utimensat(AT_FDCWD, header.c_str(), times, 0), 0);
  };
  set_mtime(::time(nullptr) + 3600);
  testing::settle(header, /*mtime_too=*/false);
  const std::vector<std::string> args = {"compile",  "t.cu", "--arch", kArch,
                                         "--target", "ptx",  "--json"};
  json j = json_of(args);
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_TRUE(j["stored"].is(json::kind::boolean) && !j["stored"].boolean);
  EXPECT_EQ(j["cache_skip"].string, "header_too_new");
  EXPECT_TRUE(j["cache_skip_reason"].string.starts_with("h.cuh was modified"))
      << j["cache_skip_reason"].string;
  EXPECT_EQ(json_of(args)["cache"].string, "miss") << "nothing was stored";
  json s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["skips"]["header_too_new"].number, 2);
  EXPECT_EQ(s["skips"]["header_changed"].number, 0);

  set_mtime(::time(nullptr) - 3600);
  testing::settle(header);
  j = json_of(args);
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_TRUE(j["stored"].boolean);
  EXPECT_FALSE(j.find("cache_skip"));
  EXPECT_EQ(json_of(args)["cache"].string, "hit");
}

// A walk reused from a manifest another process left (the same program and search, another
// arch): the store gate covers its headers. Before, a manifest read from disk kept grouped
// checks' paths only in their groups, so every header looked unkeyed and nothing was stored.
TEST_F(Cache, AManifestFromAnotherProcessCoversItsHeaders) {
  file("h.cuh", "#define V 5\n");
  file("t.cu", "#include \"h.cuh\"\nextern \"C\" __global__ void k(int* o) { o[0] = V; }\n");
  // Settled (2 s, the walk's rule): the first process persists its manifest.
  std::this_thread::sleep_for(std::chrono::milliseconds(2100));
  json j = json_of({"compile", "t.cu", "--arch", kArch, "--target", "ptx", "--json"});
  ASSERT_TRUE(j["stored"].boolean);
  j = json_of({"compile", "t.cu", "--arch", "sm_80", "--target", "ptx", "--json"});
  EXPECT_EQ(j["cache"].string, "miss");
  EXPECT_EQ(j["headers"]["reused_walk"].boolean, true) << "the manifest was not reused";
  EXPECT_TRUE(j["stored"].boolean) << j["cache_skip_reason"].string;
}

// Misses that explain themselves (docs/cache-keys.md): each process's miss names what differs from
// the last key stored for the program: a first compile, a header edited (its path), an option, the
// compiler (NVRTC 13.5's root); `cucore cache stats` groups the misses by reason.
TEST_F(Cache, AMissNamesWhatChanged) {
  file("h.cuh", "#define V 5\n");
  file("t.cu", "#include \"h.cuh\"\nextern \"C\" __global__ void k(int* o) { o[0] = V; }\n");
  testing::settle(work_ / "h.cuh");
  const std::vector<std::string> base = {"compile",  "t.cu", "--arch", kArch,
                                         "--target", "ptx",  "--json"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  json j = json_of(base);
  EXPECT_EQ(j["miss"]["reason"].string, "first_compile");
  EXPECT_TRUE(j["miss"]["nearest_key"].is(json::kind::null));
  const std::string first_key = j["key"].string;
  EXPECT_FALSE(json_of(base).find("miss")) << "a hit explains nothing";

  file("h.cuh", "#define V 6\n");
  testing::settle(work_ / "h.cuh");
  j = json_of(base);
  EXPECT_EQ(j["miss"]["reason"].string, "header_changed");
  EXPECT_NE(j["miss"]["reasons"].items.at(0)["detail"].string.find("h.cuh"), std::string::npos)
      << j["miss"]["reasons"].items.at(0)["detail"].string;
  EXPECT_EQ(j["miss"]["nearest_key"].string, first_key);

  j = json_of(with({"-D", "N=2"}));
  EXPECT_EQ(j["miss"]["reason"].string, "option_changed");
  EXPECT_NE(j["miss"]["reasons"].items.at(0)["detail"].string.find("N=2"), std::string::npos)
      << j["miss"]["reasons"].items.at(0)["detail"].string;

  // Another compiler: NVRTC 12.9's root (whatever NVRTC 13 this build compiles with, the wheels'
  // 13.5 included, 12.9 is another one).
  const std::string root = cuda_12_9_root();
  if (!root.empty()) {
    j = json_of(with({"-D", "N=2"}), {{"CUCORE_CUDA_HOME", root}, {"CUCORE_CUDA_HOME_ONLY", "1"}});
    EXPECT_EQ(j["miss"]["reason"].string, "compiler_changed");
    EXPECT_NE(j["miss"]["reasons"].items.at(0)["detail"].string.find("12.9"), std::string::npos)
        << j["miss"]["reasons"].items.at(0)["detail"].string;
  }
  json s = json_of({"cache", "stats", "--json"})["statistics"]["misses_by_reason"];
  EXPECT_EQ(s["first_compile"].number, 1);
  EXPECT_EQ(s["header_changed"].number, 1);
  EXPECT_EQ(s["option_changed"].number, 1);
  EXPECT_EQ(s["compiler_changed"].number, root.empty() ? 0 : 1);
}

// The statistics the cache keeps across processes: each cucore run below is a process of its own.
TEST_F(Cache, StatsCountHitsMissesCompilesAndSkipsAcrossRunsAndZero) {
  file("k.cu", kTemplate);
  json s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["directory"].string, (cache_.path() / "stats").string());
  EXPECT_EQ(s["shards"].number, 0);
  EXPECT_TRUE(s["hit_rate"].is(json::kind::null));
  EXPECT_TRUE(s["compile_seconds_saved"].is(json::kind::null));
  EXPECT_TRUE(s["zeroed_at"].is(json::kind::null));

  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  ASSERT_EQ(json_of(compile_k())["cache"].string, "hit");
  ASSERT_EQ(json_of(compile_k())["cache"].string, "hit");
  file(kVersionedHeader, "#define V 46\n");
  file("m.cu", stores_v(kStringizedInclude));
  ASSERT_EQ(
      json_of({"compile", "m.cu", "--arch", kArch, "--target", "ptx", "--json"})["cache"].string,
      "skipped");

  s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_GE(s["shards"].number, 1);
  EXPECT_EQ(s["shards_ignored"].number, 0);
  const json& local = s["local"];
  EXPECT_EQ(local["hits"].number, 2);
  EXPECT_EQ(local["misses"].number, 1);
  EXPECT_NEAR(local["hit_rate"].number, 2.0 / 3, 1e-3);
  EXPECT_NEAR(s["hit_rate"].number, 2.0 / 3, 1e-3);
  EXPECT_EQ(local["puts"].number, 1);
  EXPECT_EQ(local["errors"].number, 0);
  EXPECT_EQ(local["corrupt_dropped"].number, 0);
  EXPECT_EQ(local["evictions"].number, 0);
  EXPECT_EQ(s.find("remote"), nullptr);
  EXPECT_EQ(s["compiles"].number, 1);
  EXPECT_EQ(s["compile_hits"].number, 2);
  EXPECT_GT(s["compile_seconds"].number, 0);
  EXPECT_NEAR(s["compile_seconds_saved"].number, 2 * s["compile_seconds"].number, 1e-5);
  EXPECT_EQ(s["skips"]["total"].number, 1);
  EXPECT_EQ(s["skips"]["needs_extra_digest"].number, 1);
  EXPECT_EQ(s["skips"]["uncacheable_options"].number, 0);
  EXPECT_EQ(s["skips"]["header_changed"].number, 0);
  EXPECT_EQ(s["skips"]["header_too_new"].number, 0);

  auto r = cucore({"cache", "stats"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "entries  1\n")) << r.out;
  EXPECT_TRUE(contains(r.out, " KiB (")) << r.out;
  EXPECT_TRUE(contains(r.out,
                       "lookups  2 hits, 1 miss (66.7 % hits), 1 put, 0 errors, 0 corrupt "
                       "dropped, 0 evictions\n"))
      << r.out;
  EXPECT_TRUE(contains(r.out, "compiles 1 compiled in ")) << r.out;
  EXPECT_TRUE(contains(r.out, ", 2 from the cache (about ")) << r.out;
  EXPECT_TRUE(contains(r.out, "skipped  1 (needs_extra_digest 1)\n")) << r.out;
  // One shard per process (pid % 16): as many as the runs above happened to use.
  EXPECT_TRUE(contains(r.out, "stats    ")) << r.out;
  EXPECT_TRUE(contains(r.out, " in " + (cache_.path() / "stats").string() + "\n")) << r.out;

  r = cucore({"cache", "stats", "--zero"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, "statistics of the directory " + cache_.path().string() + " cache zeroed\n");
  s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["local"]["hits"].number, 0);
  EXPECT_EQ(s["compiles"].number, 0);
  EXPECT_EQ(s["skips"]["total"].number, 0);
  EXPECT_EQ(s["zeroed_at"].type, json::kind::string);
  EXPECT_TRUE(contains(cucore({"cache", "stats"}).out, "; zeroed 20")) << "ISO time";
  // Entries are untouched, and counting goes on.
  ASSERT_EQ(json_of(compile_k())["cache"].string, "hit");
  s = json_of({"cache", "stats", "--json"})["statistics"];
  EXPECT_EQ(s["local"]["hits"].number, 1);
  EXPECT_EQ(s["compile_hits"].number, 1);
  EXPECT_TRUE(s["compile_seconds_saved"].is(json::kind::null)) << "no compile since the zero";
  const json z = json_of({"cache", "stats", "--zero", "--json"});
  EXPECT_TRUE(z["zeroed"].boolean);
  EXPECT_EQ(z["directory"].string, (cache_.path() / "stats").string());

  // An SQLite cache keeps them beside its file.
  const std::string db = "sqlite:" + (work_ / "c.db").string();
  ASSERT_EQ(json_of(compile_k({"--cache", db}))["cache"].string, "miss");
  ASSERT_EQ(json_of(compile_k({"--cache", db}))["cache"].string, "hit");
  s = json_of({"cache", "stats", "--json", "--cache", db})["statistics"];
  EXPECT_EQ(s["directory"].string, (work_ / "c.db.stats").string());
  EXPECT_EQ(s["local"]["hits"].number, 1);
  EXPECT_EQ(s["local"]["misses"].number, 1);
  EXPECT_EQ(s["compiles"].number, 1);

  r = cucore({"cache", "ls", "--zero"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "cache ls takes no --zero")) << r.err;

  // CUCORE_CACHE_STATS=0: a cache that keeps none (and so creates no stats directory).
  const std::string other = (work_ / "quiet").string();
  ASSERT_EQ(json_of(compile_k({"--cache", other}), {{"CUCORE_CACHE_STATS", "0"}})["cache"].string,
            "miss");
  EXPECT_TRUE(fs::exists(work_ / "quiet" / "entries"));
  EXPECT_FALSE(fs::exists(work_ / "quiet" / "stats"));
  EXPECT_TRUE(json_of({"cache", "stats", "--json", "--cache", other},
                      {{"CUCORE_CACHE_STATS", "0"}})["statistics"]
                  .is(json::kind::null));
  const json bad = json_of(compile_k({"--cache", other}), {{"CUCORE_CACHE_STATS", "maybe"}});
  EXPECT_EQ(bad["cache"].string, "skipped");
  EXPECT_TRUE(contains(bad["cache_skip_reason"].string, "$CUCORE_CACHE_STATS"))
      << bad["cache_skip_reason"].string;
}

TEST_F(Cache, BadCommandLines) {
  auto r = cucore({"cache"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "stats, ls, show, extract, export, import, verify, trim, clear"))
      << r.err;
  r = cucore({"cache", "frobnicate"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "unknown cache subcommand \"frobnicate\"")) << r.err;
  r = cucore({"cache", "ls", "--cache", "memory"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--cache memory")) << r.err;
  r = cucore({"cache", "stats", "--cache", "none"});
  EXPECT_EQ(r.status, 2) << describe(r);
  r = cucore({"cache", "ls", "--max-size", "1"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "cache ls takes no --max-size")) << r.err;
  r = cucore({"cache", "ls", "extra"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "\"extra\"")) << r.err;
  r = cucore({"cache", "stats", "--cache", "sqlite:"});
  EXPECT_EQ(r.status, 2) << describe(r);
}

TEST_F(Cache, ConfigSetsAPersistentSizeCap) {
  file("k.cu", kTemplate);
  auto r = cucore({"cache", "config"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "max_size = 5G (default)")) << r.out;
  r = cucore({"cache", "config", "max_size", "1K"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(fs::exists(cache_.path() / "cucore.conf"));
  r = cucore({"cache", "config", "max_size"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_EQ(r.out, "1K\n");
  // Enforced: a cubin entry is larger than 1 KiB, so it is not stored.
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 0);
  r = cucore({"cache", "config", "--unset", "max_size"});
  ASSERT_EQ(r.status, 0) << describe(r);
  ASSERT_EQ(json_of(compile_k())["cache"].string, "miss");
  EXPECT_EQ(json_of({"cache", "stats", "--json"})["entries"].number, 1);

  r = cucore({"cache", "config", "max_size", "lots"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "max_size")) << r.err;
  r = cucore({"cache", "config", "colour", "blue"});
  EXPECT_EQ(r.status, 2) << describe(r);
  r = cucore({"cache", "config", "max_size", "--cache", "sqlite:x.db"});
  EXPECT_EQ(r.status, 2) << describe(r);
  write_text(cache_.path() / "cucore.conf", "max_size = 1X\n");
  r = cucore({"cache", "stats"});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "cucore.conf:1:")) << r.err;
}

TEST_F(CompileCache, CachesOthersCanWriteAreRefusedUnlessShared) {
  file("k.cu", kTemplate);
  fs::create_directory(work_ / "open");
  ASSERT_EQ(::chmod((work_ / "open").c_str(), 0777), 0);
  json j = json_of(compile_k({"--cache", (work_ / "open").string()}));
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "world-writable"))
      << j["cache_skip_reason"].string;
  EXPECT_TRUE(is_elf(output("k.cubin")));

  fs::create_directory(work_ / "group");
  ASSERT_EQ(::chmod((work_ / "group").c_str(), 0775), 0);
  j = json_of(compile_k({"--cache", (work_ / "group").string()}));
  EXPECT_EQ(j["cache"].string, "skipped");
  EXPECT_TRUE(contains(j["cache_skip_reason"].string, "--shared-cache"))
      << j["cache_skip_reason"].string;
  auto r = cucore({"cache", "stats", "--cache", (work_ / "group").string()});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.err, "group-writable")) << r.err;

  j = json_of(compile_k({"--cache", (work_ / "group").string(), "--shared-cache"}));
  EXPECT_EQ(j["cache"].string, "miss");
  j = json_of(compile_k({"--cache", (work_ / "group").string()}), {{"CUCORE_CACHE_SHARED", "1"}});
  EXPECT_EQ(j["cache"].string, "hit");
  r = cucore({"cache", "stats", "--cache", (work_ / "group").string(), "--shared-cache"});
  EXPECT_EQ(r.status, 0) << describe(r);
}

// `cucore cache check` reads $CUCORE_CACHE_SHARED as opening the cache does (yes/true/on, any
// case), so that it never calls a group-writable key file a problem in a cache that opens shared.
TEST_F(Cache, CheckReadsCacheSharedAsOpeningDoes) {
  const fs::path group = work_ / "group";
  fs::create_directory(group);
  ASSERT_EQ(::chmod(group.c_str(), 0775), 0);
  write_text(group / "compiler-versions", "");
  ASSERT_EQ(::chmod((group / "compiler-versions").c_str(), 0664), 0);
  auto r = cucore({"cache", "check", "--cache", group.string()});
  EXPECT_EQ(r.status, 1) << describe(r);
  EXPECT_TRUE(contains(r.out, "writable by others")) << r.out;
  for (const char* yes : {"yes", "TRUE", "On", "1"}) {
    const environment shared = {{"CUCORE_CACHE_SHARED", yes}};
    r = cucore({"cache", "stats", "--cache", group.string()}, shared);
    EXPECT_EQ(r.status, 0) << yes << ": " << describe(r);
    r = cucore({"cache", "check", "--cache", group.string()}, shared);
    EXPECT_EQ(r.status, 0) << yes << ": " << describe(r);
    EXPECT_FALSE(contains(r.out, "writable by others")) << yes << ": " << r.out;
  }
}

// ---------------------------------------------------------------------------------------------
// cucore info

TEST_F(Info, ReportsNvrtcAndItsVersion) {
  const auto r = cucore({"info"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"((^|\n)NVRTC +[0-9]+\.[0-9]+ +/)"))) << r.out;
  EXPECT_TRUE(contains(r.out, "nvJitLink")) << r.out;
  EXPECT_TRUE(contains(r.out, "libNVVM")) << r.out;
  EXPECT_TRUE(contains(r.out, "CUDA driver")) << r.out;
}

TEST_F(Info, Json) {
  const auto r = cucore({"info", "--json"});
  ASSERT_EQ(r.status, 0) << describe(r);
  const json j = parse_json(r.out);
  for (const char* library : {"nvrtc", "nvjitlink", "nvvm", "driver"}) {
    const json& s = j[library];
    ASSERT_TRUE(s.is(json::kind::object)) << library;
    EXPECT_TRUE(s["found"].is(json::kind::boolean)) << library;
    for (const char* key : {"path", "version", "error"}) {
      EXPECT_TRUE(s[key].is(json::kind::string) || s[key].is(json::kind::null)) << library << key;
    }
  }
  EXPECT_TRUE(j["nvrtc"]["found"].boolean);
  EXPECT_TRUE(contains(j["nvrtc"]["path"].string, "libnvrtc.so"));
  EXPECT_TRUE(std::regex_match(j["nvrtc"]["version"].string, std::regex(R"([0-9]+\.[0-9]+)")));
  EXPECT_TRUE(j["libdevice"].is(json::kind::string) || j["libdevice"].is(json::kind::null));
  ASSERT_TRUE(j["devices"].is(json::kind::array));
  for (const json& d : j["devices"].items) {
    EXPECT_TRUE(d["ordinal"].is(json::kind::number));
    EXPECT_TRUE(d["arch"].string.starts_with("sm_"));
  }
  const std::string backend = j["linker_backend"].string;
  EXPECT_TRUE(backend == "nvJitLink" || backend == "driver") << backend;
}

TEST_F(Info, ListsTheToolkitIncludeDirectories) {
  const json j = json_of({"info", "--json"});
  const json& dirs = j["include_directories"];
  ASSERT_TRUE(dirs.is(json::kind::array));
  ASSERT_FALSE(dirs.items.empty()) << "NVRTC is found under a CUDA root in the tests";
  EXPECT_TRUE(dirs.items[0].string.ends_with("/include/cccl")) << dirs.items[0].string;
  for (const json& d : dirs.items) EXPECT_TRUE(fs::is_directory(d.string)) << d.string;

  const auto r = cucore({"info"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "\ninclude      " + dirs.items[0].string + "\n")) << r.out;
  for (std::size_t i = 1; i < dirs.items.size(); ++i) {
    EXPECT_TRUE(contains(r.out, "\n             " + dirs.items[i].string + "\n")) << r.out;
  }
}

TEST_F(Info, WithoutToolkitStillSucceeds) {
  temp_dir empty;
  const environment env = {{"CUCORE_CUDA_HOME", empty.path().string()},
                           {"CUCORE_CUDA_HOME_ONLY", "1"}};
  auto r = cucore({"info"}, env);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"((^|\n)NVRTC +not found)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\ninclude +none)"))) << r.out;

  r = cucore({"info", "--json"}, env);
  ASSERT_EQ(r.status, 0) << describe(r);
  const json j = parse_json(r.out);
  EXPECT_FALSE(j["nvrtc"]["found"].boolean);
  EXPECT_TRUE(j["nvrtc"]["path"].is(json::kind::null));
  EXPECT_FALSE(j["nvrtc"]["error"].string.empty());
  ASSERT_FALSE(j["nvrtc"]["searched"].items.empty());
  EXPECT_TRUE(j["nvrtc"]["searched"].items[0].string.starts_with(empty.path().string()));
  EXPECT_TRUE(j["include_directories"].items.empty());
}

TEST_F(Info, SaysWhereEachLibraryAndTheIncludeDirectoriesCameFrom) {
  const json j = json_of({"info", "--json"});
  const std::string source = j["nvrtc"]["source"].string;
  EXPECT_TRUE(source == "CUCORE_CUDA_HOME" || source == "CUDA_HOME" || source == "CUDA_PATH" ||
              source == "/usr/local/cuda" || source.starts_with("pip wheel in ") ||
              source == "loader path")
      << source;
  EXPECT_EQ(j["include_source"].string, source) << "headers and compiler from one root";
  EXPECT_TRUE(j["driver"]["source"].is(json::kind::null) ||
              j["driver"]["source"].string == "loader path");

  const auto r = cucore({"info"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "  (from " + source + ")\n")) << r.out;
  EXPECT_TRUE(contains(r.out, "\ninclude from " + source + "\n")) << r.out;
}

// A site-packages directory as NVIDIA's CUDA 13 wheels leave it: nvidia/cu13/{lib,include},
// here symbolic links to the toolkit the default search finds.
void make_wheel_site(const fs::path& site, const json& report) {
  const fs::path lib = site / "nvidia/cu13/lib";
  fs::create_directories(lib);
  const fs::path nvrtc = fs::canonical(report["nvrtc"]["path"].string);
  for (const auto& e : fs::directory_iterator(nvrtc.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.starts_with("libnvrtc-builtins.so.13")) fs::create_symlink(e.path(), lib / name);
  }
  fs::create_symlink(nvrtc, lib / "libnvrtc.so.13");
  fs::create_symlink(report["nvjitlink"]["path"].string, lib / "libnvJitLink.so.13");
  fs::create_symlink(report["nvvm"]["path"].string, lib / "libnvvm.so.4");
  fs::create_symlink(report["include_directories"].items.back().string,
                     site / "nvidia/cu13/include");
}

TEST_F(Info, FindsTheWheelsInCucoreCudaWheelsAndInTheVirtualEnvironment) {
  const json found = json_of({"info", "--json"});
  ASSERT_TRUE(found["nvrtc"]["found"].boolean && found["nvvm"]["found"].boolean &&
              !found["include_directories"].items.empty());
  temp_dir dir;
  const fs::path site = dir.path() / "site";
  make_wheel_site(site, found);
  const fs::path venv_site = dir.path() / "venv/lib/python3.11/site-packages";
  make_wheel_site(venv_site, found);

  struct place {
    environment env;
    fs::path site;
  };
  const std::vector<place> places = {
      {{{"CUCORE_CUDA_SEARCH", "wheels"}, {"CUCORE_CUDA_WHEELS", "/nonexistent:" + site.string()}},
       site},
      {{{"CUCORE_CUDA_SEARCH", "wheels"},
        {"CUCORE_CUDA_WHEELS", ""},
        {"VIRTUAL_ENV", (dir.path() / "venv").string()}},
       venv_site}};
  for (const auto& [env, where] : places) {
    const json j = json_of({"info", "--json"}, env);
    const std::string source = "pip wheel in " + where.string();
    for (const char* library : {"nvrtc", "nvjitlink", "nvvm"}) {
      EXPECT_TRUE(j[library]["found"].boolean) << library << " " << where;
      EXPECT_EQ(j[library]["source"].string, source) << library;
    }
    EXPECT_EQ(j["include_source"].string, source);
    ASSERT_FALSE(j["include_directories"].items.empty());
    EXPECT_EQ(j["include_directories"].items.back().string,
              (where / "nvidia/cu13/include").string());
    // The wheels' NVRTC compiles, with its own include directories.
    temp_dir work;
    std::ofstream(work.path() / "k.cu") << "#include <cuda/std/cstdint>\n"
                                           "extern \"C\" __global__ void k(cuda::std::uint32_t* x) "
                                           "{ *x = 1; }\n";
    environment compile_env = env;
    compile_env.emplace_back("CUCORE_CACHE_DIR", (work.path() / "cache").string());
    const auto r = cucore({"compile", (work.path() / "k.cu").string(), "--arch", "sm_80",
                           "--target", "ptx", "-o", (work.path() / "k.ptx").string()},
                          compile_env);
    EXPECT_EQ(r.status, 0) << describe(r);
  }
}

// A CUDA 12 root is selected as a 13 one is: the first root that has the library wins, whatever
// its major version, with no CUCORE_CUDA_HOME_ONLY (the 12.9 root of the version matrix,
// scripts/fetch-cuda-versions.sh). Its headers come with it, and it compiles.
TEST_F(Info, ACuda12RootIsSelectedAsA13OneIs) {
  const fs::path root = cucore::testing::cuda_version_root("12.9");
  for (const char* variable : {"CUCORE_CUDA_HOME", "CUDA_HOME"}) {
    SCOPED_TRACE(variable);
    // The default search order (the wheels-only CI stage sets CUCORE_CUDA_SEARCH=wheels).
    environment env = {
        {variable, root.string()}, {"CUCORE_CUDA_HOME_ONLY", ""}, {"CUCORE_CUDA_SEARCH", ""}};
    if (std::string(variable) != "CUCORE_CUDA_HOME") env.emplace_back("CUCORE_CUDA_HOME", "");
    const json j = json_of({"info", "--json"}, env);
    for (const char* library : {"nvrtc", "nvjitlink", "nvvm"}) {
      EXPECT_TRUE(j[library]["found"].boolean) << library << ": " << j[library]["error"].string;
      EXPECT_EQ(j[library]["source"].string, variable) << library;
    }
    EXPECT_EQ(j["nvrtc"]["version"].string, "12.9");
    EXPECT_EQ(j["nvjitlink"]["version"].string, "12.9");
    EXPECT_EQ(j["include_source"].string, variable);
    ASSERT_EQ(j["include_directories"].items.size(), 2u);
    EXPECT_EQ(j["include_directories"].items[0].string, (root / "include/cccl").string());
    temp_dir work;
    std::ofstream(work.path() / "k.cu") << "#include <cuda/std/cstdint>\n"
                                           "extern \"C\" __global__ void k(cuda::std::uint32_t* x) "
                                           "{ *x = 1; }\n";
    environment compile_env = env;
    compile_env.emplace_back("CUCORE_CACHE_DIR", (work.path() / "cache").string());
    const auto r = cucore({"key", "--explain", (work.path() / "k.cu").string(), "--arch", "sm_80"},
                          compile_env);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, "\n  nvrtc          12.9;")) << r.out;
    const auto c = cucore({"compile", (work.path() / "k.cu").string(), "--arch", "sm_80",
                           "--target", "ptx", "-o", (work.path() / "k.ptx").string()},
                          compile_env);
    EXPECT_EQ(c.status, 0) << describe(c);
  }
}

// CUDA 12's pip wheels, one directory per package under <site-packages>/nvidia (the 12.9 site of
// the version matrix is such a directory): searched after every CUDA 13 wheel directory, each
// library from its package, the headers from nvidia-cuda-cccl-cu12, -runtime-cu12, -nvcc-cu12.
TEST_F(Info, FindsCuda12PerPackageWheelsAfterTheCuda13Wheels) {
  const fs::path site = cucore::testing::cuda_versions_dir() / "12.9" / "site";
  ASSERT_TRUE(fs::is_directory(site / "nvidia/cuda_nvrtc/lib"))
      << site << ": run scripts/fetch-cuda-versions.sh";
  const std::string source = "pip wheel in " + site.string();
  const environment env = {{"CUCORE_CUDA_SEARCH", "wheels"},
                           {"CUCORE_CUDA_WHEELS", site.string()},
                           {"VIRTUAL_ENV", ""},
                           {"CONDA_PREFIX", ""}};
  // A build that took its headers from CUDA 13 wheels searches that site-packages last among the
  // wheels' directories (CI's wheels-only stage): its cu13 comes before every CUDA 12 directory.
  const json built_in = json_of({"info", "--json"}, {{"CUCORE_CUDA_SEARCH", "wheels"},
                                                     {"CUCORE_CUDA_WHEELS", ""},
                                                     {"VIRTUAL_ENV", ""},
                                                     {"CONDA_PREFIX", ""}});
  const json j = json_of({"info", "--json"}, env);
  if (built_in["nvrtc"]["found"].boolean) {
    EXPECT_EQ(j["nvrtc"]["path"].string, built_in["nvrtc"]["path"].string)
        << "a CUDA 12 wheel displaced the build's CUDA 13 wheels";
    GTEST_SKIP() << "this build searches its own CUDA 13 wheels ("
                 << built_in["nvrtc"]["source"].string
                 << "), which come before any CUDA 12 wheel: checked that they still win; the "
                    "CUDA 12 layout is checked in a build from a toolkit (the default preset)";
  }
  const std::map<std::string, std::string> files = {
      {"nvrtc", "nvidia/cuda_nvrtc/lib/libnvrtc.so.12"},
      {"nvjitlink", "nvidia/nvjitlink/lib/libnvJitLink.so.12"},
      {"nvvm", "nvidia/cuda_nvcc/nvvm/lib64/libnvvm.so"}};
  for (const auto& [library, file] : files) {
    EXPECT_TRUE(j[library]["found"].boolean) << library << ": " << j[library]["error"].string;
    EXPECT_EQ(j[library]["source"].string, source) << library;
    EXPECT_EQ(j[library]["path"].string, fs::canonical(site / file).string()) << library;
  }
  EXPECT_EQ(j["nvrtc"]["version"].string, "12.9");
  EXPECT_EQ(j["include_source"].string, source);
  std::vector<std::string> includes;
  for (const auto& d : j["include_directories"].items) includes.push_back(d.string);
  EXPECT_EQ(includes, (std::vector<std::string>{(site / "nvidia/cuda_cccl/include").string(),
                                                (site / "nvidia/cuda_runtime/include").string(),
                                                (site / "nvidia/cuda_nvcc/include").string()}));
  EXPECT_EQ(j["libdevice"].string,
            fs::canonical(site / "nvidia/cuda_nvcc/nvvm/libdevice/libdevice.10.bc").string());
  temp_dir work;
  std::ofstream(work.path() / "k.cu") << "#include <cub/block/block_reduce.cuh>\n"
                                         "extern \"C\" __global__ void k(int* x) {\n"
                                         "  using R = cub::BlockReduce<int, 32>;\n"
                                         "  __shared__ R::TempStorage s;\n"
                                         "  *x = R(s).Sum(x[threadIdx.x]);\n}\n";
  environment compile_env = env;
  compile_env.emplace_back("CUCORE_CACHE_DIR", (work.path() / "cache").string());
  const std::vector<std::string> args = {
      "compile", (work.path() / "k.cu").string(),   "--arch", "sm_80", "--json",
      "-o",      (work.path() / "k.cubin").string()};
  const json miss = json_of(args, compile_env);
  EXPECT_EQ(miss["cache"].string, "miss");
  EXPECT_EQ(json_of(args, compile_env)["cache"].string, "hit");

  // A CUDA 13 wheel directory wins even where the CUDA 12 one is listed first, and adding CUDA
  // 12's wheels changes nothing for the default search of this machine.
  const fs::path site13 = cucore::testing::cuda_versions_dir() / "13.5" / "site";
  ASSERT_TRUE(fs::is_directory(site13 / "nvidia/cu13/lib"))
      << site13 << ": run scripts/fetch-cuda-versions.sh";
  const json both =
      json_of({"info", "--json"}, {{"CUCORE_CUDA_SEARCH", "wheels"},
                                   {"CUCORE_CUDA_WHEELS", site.string() + ":" + site13.string()}});
  EXPECT_EQ(both["nvrtc"]["version"].string, "13.5");
  EXPECT_EQ(both["nvrtc"]["source"].string, "pip wheel in " + site13.string());
  const json plain = json_of({"info", "--json"});
  const char* wheels = std::getenv("CUCORE_CUDA_WHEELS");
  const json with12 =
      json_of({"info", "--json"},
              {{"CUCORE_CUDA_WHEELS", site.string() + ":" + (wheels != nullptr ? wheels : "")}});
  for (const char* library : {"nvrtc", "nvjitlink", "nvvm"}) {
    EXPECT_EQ(with12[library]["path"].string, plain[library]["path"].string) << library;
  }
  EXPECT_EQ(with12["include_source"].string, plain["include_source"].string);
}

TEST_F(Info, AnUnknownSearchSourceIsNamed) {
  const json j = json_of({"info", "--json"}, {{"CUCORE_CUDA_SEARCH", "wheels,/opt/cuda"}});
  EXPECT_FALSE(j["nvrtc"]["found"].boolean);
  EXPECT_TRUE(contains(j["nvrtc"]["error"].string, "CUCORE_CUDA_SEARCH"))
      << j["nvrtc"]["error"].string;
  EXPECT_TRUE(contains(j["nvrtc"]["error"].string, "\"/opt/cuda\"")) << j["nvrtc"]["error"].string;
  EXPECT_TRUE(j["include_directories"].items.empty());
}

// ---------------------------------------------------------------------------------------------
// Help, version and bad command lines

TEST_F(Usage, HelpListsCommands) {
  const std::vector<std::vector<std::string>> spellings = {{"--help"}, {"-h"}, {"help"}};
  for (const auto& args : spellings) {
    const auto r = cucore(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, "Usage: cucore COMMAND")) << r.out;
    for (const char* command : {"compile", "key", "cache", "info"}) {
      EXPECT_TRUE(contains(r.out, std::string("\n  ") + command + " ")) << command;
    }
  }
}

TEST_F(Usage, CompileHelpListsEveryOption) {
  const std::vector<std::vector<std::string>> spellings = {
      {"compile", "--help"}, {"help", "compile"}, {"compile", "-h"}};
  for (const auto& args : spellings) {
    const auto r = cucore(args);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, "Usage: cucore compile FILE")) << r.out;
    for (const char* option : {"-o, --output",
                               "--code-type",
                               "--target",
                               "--arch",
                               "--name NAME",
                               "--name-expression",
                               "--json",
                               "-I, --include-path",
                               "-D, --define-macro",
                               "-U, --undefine-macro",
                               "--pre-include",
                               "--no-source-include",
                               "--no-toolkit-include",
                               "--std",
                               "-G, --debug",
                               "--lineinfo",
                               "--maxrregcount",
                               "--use-fast-math",
                               "--ftz",
                               "--prec-div",
                               "--prec-sqrt",
                               "--fmad",
                               "--rdc",
                               "--ptxas-options",
                               "--diag-suppress",
                               "--disable-warnings",
                               "--dopt",
                               "--extra-device-vectorization",
                               "--libdevice",
                               "--extra-module",
                               "--cache SPEC",
                               "--extra-digest HEX",
                               "--header NAME=FILE",
                               "--default-device",
                               "--builtin-move-forward true|false",
                               "--builtin-initializer-list true|false",
                               "--device-int128",
                               "--device-float128",
                               "--restrict",
                               "--extensible-whole-program",
                               "--minimal",
                               "--dlink-time-opt",
                               "--gen-opt-lto",
                               "--Ofast-compile 0|min|mid|max",
                               "--split-compile N",
                               "--frandom-seed SEED",
                               "--no-compiler-cache",
                               "--fdevice-syntax-only",
                               "--numba-debug",
                               "--diag-error N",
                               "--diag-warn N",
                               "--no-display-error-number",
                               "--brief-diagnostics true|false",
                               "--optimization-info KIND",
                               "--time FILE",
                               "--fdevice-time-trace FILE",
                               "--pch ",
                               "--create-pch FILE",
                               "--use-pch FILE",
                               "--pch-dir DIR",
                               "--pch-verbose true|false",
                               "--pch-messages true|false",
                               "--instantiate-templates-in-pch true|false",
                               "--no-auto-pch",
                               "-Xnvrtc OPT",
                               "-h, --help"}) {
      EXPECT_TRUE(contains(r.out, std::string("  ") + option)) << option;
    }
  }
}

TEST_F(Usage, InfoHelp) {
  const auto r = cucore({"info", "--help"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "Usage: cucore info")) << r.out;
  EXPECT_TRUE(contains(r.out, "  --json")) << r.out;
}

TEST_F(Usage, KeyHelp) {
  const auto r = cucore({"key", "--help"});
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(contains(r.out, "Usage: cucore key FILE")) << r.out;
  for (const char* option :
       {"--explain", "--json", "--code-type", "--target", "--arch", "--name NAME",
        "--name-expression", "-I, --include-path", "-D, --define-macro", "--ptxas-options",
        "--extra-module", "--extra-digest HEX", "--cache SPEC"}) {
    EXPECT_TRUE(contains(r.out, std::string("  ") + option)) << option;
  }
  // --cache is only where the compiler's version is remembered: the key does not depend on it.
  EXPECT_TRUE(contains(r.out, "the installed compilers are asked")) << r.out;
}

TEST_F(Usage, CacheHelpListsSubcommandsAndOptions) {
  const std::vector<std::vector<std::string>> spellings = {{"cache", "--help"}, {"help", "cache"}};
  for (const auto& args : spellings) {
    const auto r = cucore(args);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, "Usage: cucore cache SUBCOMMAND")) << r.out;
    for (const char* sub :
         {"stats", "ls", "show KEYHEX", "extract KEYHEX -o FILE", "export [--all | KEYHEX...",
          "import PACK", "verify", "trim --max-size N", "clear"}) {
      EXPECT_TRUE(contains(r.out, std::string("\n  ") + sub)) << sub;
    }
    for (const char* option :
         {"--cache SPEC", "--json", "-o, --output FILE", "--max-size N", "-h, --help"}) {
      EXPECT_TRUE(contains(r.out, std::string("  ") + option)) << option;
    }
    EXPECT_TRUE(contains(r.out, "sqlite:FILE")) << r.out;
  }
}

TEST_F(Usage, CacheSubcommandHelp) {
  for (const std::string sub :
       {"stats", "ls", "show", "extract", "export", "import", "verify", "trim", "clear"}) {
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"cache", sub, "--help"}, {"help", "cache", sub}, {"cache", "-h", sub}}) {
      const auto r = cucore(args);
      ASSERT_EQ(r.status, 0) << describe(r);
      EXPECT_TRUE(contains(r.out, "Usage: cucore cache " + sub)) << r.out;
      EXPECT_TRUE(contains(r.out, "  --cache SPEC")) << r.out;
      EXPECT_TRUE(contains(r.out, "  -h, --help")) << r.out;
      EXPECT_EQ(contains(r.out, "--max-size N "), sub == "trim") << r.out;
      EXPECT_EQ(contains(r.out, "-o, --output FILE"), sub == "extract" || sub == "export") << r.out;
    }
  }
  const auto r = cucore({"cache", "verify", "--help"});
  EXPECT_TRUE(contains(r.out, "Exit status: 0 nothing was damaged or stale; 1")) << r.out;
  EXPECT_TRUE(contains(r.out, "  --recompile")) << r.out;
}

TEST_F(Usage, Version) {
  const auto r = cucore({"--version"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out, "cucore " CUCORE_VERSION "\n");
}

TEST_F(Usage, BadCommandLines) {
  auto r = cucore({});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "Usage: cucore")) << r.err;

  r = cucore({"frobnicate"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "unknown command \"frobnicate\"")) << r.err;
  EXPECT_TRUE(contains(r.err, "cucore --help")) << r.err;

  r = cucore({"--frobnicate"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(r.err, "--frobnicate")) << r.err;

  r = cucore({"info", "extra"});
  EXPECT_EQ(r.status, 2) << describe(r);

  r = cucore({"help", "frobnicate"});
  EXPECT_EQ(r.status, 2) << describe(r);
}

}  // namespace
}  // namespace cucore
