// The command-line tests' shared pieces (cli_*_test.cpp, one program: cli_test): a minimal JSON
// reader for the tool's --json, the Cli fixture, and the sources, toolkit roots and command lines
// several groups of tests use. Each test runs the built binary (CUCORE_CLI_PATH) as a child process
// in a fresh directory and checks its exit status, stdout, stderr and the files it wrote. Real
// compiles with the toolkit's NVRTC, nvJitLink and libNVVM; no GPU needed. Every child gets
// CUCORE_CACHE_DIR pointed at a fresh directory of its test, so the default cache is never the
// user's ~/.cache.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <regex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli_support.hpp"
#include "test_support.hpp"

// Not in an anonymous namespace: the fixture is one class in every source of cli_test, as
// GoogleTest requires of the tests of one suite.
namespace cucore::cli_tests {

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

inline json parse_json(std::string_view text) {
  return json_reader(text).document();
}

// ---------------------------------------------------------------------------------------------
// Running the tool.

// Variables to set in the child's environment only (the test process keeps its own).
using environment = std::vector<std::pair<std::string, std::string>>;

// `args` with `more` after them.
inline std::vector<std::string> plus(std::vector<std::string> args,
                                     const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// Options to add to a command line, each with what the tool must say of them on stderr.
using error_cases = std::vector<std::pair<std::vector<std::string>, std::string>>;

inline constexpr const char* kArch = testing::kArch;

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

  // `r`, after checking that it exited with `status` (2: a usage error) and said `message` on
  // stderr.
  static run_result expect_error(run_result r, int status, const std::string& message) {
    EXPECT_EQ(r.status, status) << describe(r);
    EXPECT_TRUE(contains(r.err, message)) << r.err;
    return r;
  }

  // Each case's options after `base`: a failure with `status`, saying the case's message.
  void expect_errors(const std::vector<std::string>& base, const error_cases& cases,
                     int status = 2) {
    for (const auto& [extra, message] : cases) {
      expect_error(cucore(plus(base, extra)), status, message);
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

// ---------------------------------------------------------------------------------------------
// Sources, toolkit roots and command lines of several groups of tests.

inline bool is_elf(const std::string& bytes) {
  return bytes.starts_with(
      "\x7f"
      "ELF");
}

inline constexpr const char* kScaleIr =
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

// A toolkit root of scripts/fetch-cuda-versions.sh holding lib/LIBRARY ("13.5", "libnvrtc.so.13"),
// or "" after failing the test.
inline std::string cuda_root(const std::string& version, const std::string& library) {
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

inline std::string cuda_13_5_root() {
  return cuda_root("13.5", "libnvrtc.so.13");
}

inline std::string cuda_12_9_root() {
  return cuda_root("12.9", "libnvrtc.so.12");
}

// The one-line kernel with two instantiations most cache tests compile.
inline std::vector<std::string> compile_k(const std::vector<std::string>& extra = {}) {
  return plus({"compile", "k.cu", "--arch", kArch, "--json", "--name-expression", "k<float>",
               "--name-expression=k<int>"},
              extra);
}

inline bool is_key(const std::string& text) {
  return std::regex_match(text, std::regex("[0-9a-f]{64}"));
}

// A kernel storing V from the header its first line includes.
inline std::string stores_v(const std::string& include_line) {
  return include_line + "\nextern \"C\" __global__ void w(int* p) { *p = V; }\n";
}

// An #include whose name NVRTC builds from a macro it predefines (__CUDACC_VER_MAJOR__, 13 here):
// NVRTC finds the header (kVersionedHeader), the key cannot know the name.
inline constexpr const char* kStringizedInclude =
    "#define STR2(x) #x\n#define STR(x) STR2(x)\n#include STR(__CUDACC_VER_MAJOR__.cuh)";

inline constexpr const char* kVersionedHeader = "13.cuh";

}  // namespace cucore::cli_tests
