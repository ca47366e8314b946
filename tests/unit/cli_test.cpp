// End-to-end tests of the cucore tool: each test runs the built binary (CUCORE_CLI_PATH) as a child
// process in a fresh directory and checks its exit status, stdout, stderr and the files it wrote.
// Real compiles with the toolkit's NVRTC, nvJitLink and libNVVM; no GPU needed.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "test_support.hpp"

extern char** environ;

namespace cucore {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::read_text;
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

struct run_result {
  int status = -1;  // the exit status, or 128 + the signal that killed it
  std::string out;
  std::string err;
};

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
  run_result cucore(const std::vector<std::string>& args, const environment& env = {}) {
    const std::string tag = std::to_string(runs_++);
    const std::string out_path = (captures_ / ("stdout." + tag)).string();
    const std::string err_path = (captures_ / ("stderr." + tag)).string();

    std::vector<std::string> argv_text = {CUCORE_CLI_PATH};
    argv_text.insert(argv_text.end(), args.begin(), args.end());
    std::vector<std::string> env_text;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string_view entry(*e);
      const bool overridden = std::any_of(env.begin(), env.end(), [&](const auto& kv) {
        return entry.starts_with(kv.first + "=");
      });
      if (!overridden) env_text.emplace_back(entry);
    }
    for (const auto& [name, value] : env) env_text.push_back(name + "=" + value);

    auto pointers = [](std::vector<std::string>& strings) {
      std::vector<char*> p;
      for (auto& s : strings) p.push_back(s.data());
      p.push_back(nullptr);
      return p;
    };
    auto argv = pointers(argv_text);
    auto envp = pointers(env_text);

    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addchdir_np(&actions, work_.path().c_str());
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    posix_spawn_file_actions_addopen(&actions, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
    pid_t pid = 0;
    const int spawned = posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    run_result r;
    if (spawned != 0) {
      ADD_FAILURE() << "cannot run " << CUCORE_CLI_PATH << ": " << std::strerror(spawned);
      return r;
    }
    int wstatus = 0;
    while (::waitpid(pid, &wstatus, 0) == -1 && errno == EINTR) {
    }
    r.status = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    r.out = read_text(out_path);
    r.err = read_text(err_path);
    return r;
  }

  // Whether `cucore info --json` sees a GPU (a test of the no-GPU path only makes sense without).
  bool has_gpu() {
    const run_result r = cucore({"info", "--json"});
    EXPECT_EQ(r.status, 0) << r.err;
    return !parse_json(r.out)["devices"].items.empty();
  }

  temp_dir work_;
  temp_dir captures_;  // apart from work_, so the tool's outputs are all that is there
  int runs_ = 0;
};

// One fixture, named by what each group tests ("cli.Compile.CxxToPtx" in ctest).
using Compile = Cli;
using Info = Cli;
using Usage = Cli;

std::string describe(const run_result& r) {
  return "exit status " + std::to_string(r.status) + "\n--- stdout:\n" + r.out + "\n--- stderr:\n" +
         r.err;
}

bool is_elf(const std::string& bytes) {
  return bytes.starts_with(
      "\x7f"
      "ELF");
}

constexpr const char* kSaxpy =
    R"(extern "C" __global__ void saxpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";

constexpr const char* kTemplate = "template <class T> __global__ void k(T* x) { *x = T(1); }\n";

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
  EXPECT_EQ(j.keys.size(), 9u) << r.out;
  EXPECT_EQ(j["output"].string, "k.ptx");
  ASSERT_TRUE(j["bytes"].is(json::kind::number));
  EXPECT_EQ(j["bytes"].number, static_cast<double>(fs::file_size(work_ / "k.ptx")));
  EXPECT_EQ(j["source_type"].string, "c++");
  EXPECT_EQ(j["code_type"].string, "ptx");
  EXPECT_EQ(j["backend"].string, "NVRTC");
  EXPECT_EQ(j["arch"].string, "sm_90");
  ASSERT_TRUE(j["mangled_names"].is(json::kind::object));
  EXPECT_EQ(j["mangled_names"]["k<float>"].string, "_Z1kIfEvPT_");
  ASSERT_TRUE(j["compile_ms"].is(json::kind::number));
  EXPECT_GT(j["compile_ms"].number, 0.0);
  EXPECT_TRUE(j["log"].is(json::kind::string));
  EXPECT_TRUE(contains(output("k.ptx"), "_Z1kIfEvPT_"));
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

TEST_F(Info, WithoutToolkitStillSucceeds) {
  temp_dir empty;
  const environment env = {{"CUCORE_CUDA_HOME", empty.path().string()},
                           {"CUCORE_CUDA_HOME_ONLY", "1"}};
  auto r = cucore({"info"}, env);
  ASSERT_EQ(r.status, 0) << describe(r);
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"((^|\n)NVRTC +not found)"))) << r.out;

  r = cucore({"info", "--json"}, env);
  ASSERT_EQ(r.status, 0) << describe(r);
  const json j = parse_json(r.out);
  EXPECT_FALSE(j["nvrtc"]["found"].boolean);
  EXPECT_TRUE(j["nvrtc"]["path"].is(json::kind::null));
  EXPECT_FALSE(j["nvrtc"]["error"].string.empty());
  ASSERT_FALSE(j["nvrtc"]["searched"].items.empty());
  EXPECT_TRUE(j["nvrtc"]["searched"].items[0].string.starts_with(empty.path().string()));
}

// ---------------------------------------------------------------------------------------------
// Help, version and bad command lines

TEST_F(Usage, HelpListsCommands) {
  const std::vector<std::vector<std::string>> spellings = {{"--help"}, {"-h"}, {"help"}};
  for (const auto& args : spellings) {
    const auto r = cucore(args);
    EXPECT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, "Usage: cucore COMMAND")) << r.out;
    EXPECT_TRUE(contains(r.out, "\n  compile ")) << r.out;
    EXPECT_TRUE(contains(r.out, "\n  info ")) << r.out;
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
