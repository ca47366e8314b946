// `cucore key` (cli_test; cli_test_support.hpp): the key compile uses, the command-line
// conventions, every compiler option's NVRTC flag, --explain's fields and headers, and the inputs
// and options no key can cover.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "cli_test_support.hpp"

namespace cucore::cli_tests {
namespace {

// ---------------------------------------------------------------------------------------------
// cucore key

TEST_F(Key, IsTheKeyCompileUses) {
  file("k.cu", kTemplate);
  const std::vector<std::string> options = {
      "k.cu", "--arch", kArch, "--name-expression", "k<float>", "-D", "X=1", "--target", "ptx"};
  std::vector<std::string> key_args = plus({"key"}, options);
  const std::vector<std::string> compile_args = plus({"compile", "--json"}, options);

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
    const auto r = cucore(plus({"key", "k.cu", "--arch", kArch, "--target", "ptx"}, extra));
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
  expect_error(cucore({"key", "--arch", kArch, "--target", "ptx", "-k.cu"}), 2,
               "unknown option \"-k.cu\"");

  const error_cases errors = {
      {{"--json=yes"}, "option --json takes no value"},
      {{"-Gx"}, "unknown option \"-Gx\""},
      {{"--std="}, "option --std needs a non-empty value (STD)"},
      {{"-D", ""}, "option -D needs a non-empty value"},
      {{"--frobnicate=1"}, "unknown option \"--frobnicate\""},
      {{"-I"}, "option -I needs a value (DIR)"},
  };
  for (const auto& [extra, message] : errors) {
    r = expect_error(cucore(plus({"key", "k.cu", "--arch", kArch}, extra)), 2, message);
    EXPECT_TRUE(contains(r.err, "Run 'cucore key --help' for usage.")) << r.err;
  }
}

// Every option of program_options on the command line, and the NVRTC flag it gives: the "option"
// fields of `key --json --explain` (what the key hashes, which is what NVRTC gets), without the
// toolkit's include directories.
TEST_F(Key, EveryCompilerOptionGivesItsNvrtcFlag) {
  file("k.cu", kTemplate);
  file("h.cuh", "#define H 1\n");
  auto options_of = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> out;
    const json j = json_of(plus({"key", "k.cu", "--arch", kArch, "--target", "ptx", "--json",
                                 "--explain", "--no-toolkit-include"},
                                extra));
    if (!j.is(json::kind::object)) return out;
    for (const json& f : j["fields"].items) {
      if (f["label"].string == "option") out.push_back(f["payload"].string);
    }
    return out;
  };
  const std::vector<std::string> plain = options_of({});
  EXPECT_EQ(plain, std::vector<std::string>{"-arch=sm_90"});
  fs::create_directory(work_ / "inc");
  auto expect_flags = [&](const std::vector<std::string>& extra,
                          const std::vector<std::string>& flags) {
    SCOPED_TRACE(extra.front());
    EXPECT_EQ(options_of(extra), plus({"-arch=sm_90"}, flags));
  };
  // The options NVRTC spells as cucore does, in groups: preprocessor, language, code generation,
  // Tile code (NVRTC 13.1+), diagnostics.
  for (const char* same :
       {"--no-source-include", "--builtin-initializer-list=false", "--device-int128",
        "--device-float128", "--restrict", "--extensible-whole-program", "--minimal",
        "--dlink-time-opt", "--gen-opt-lto", "--extra-device-vectorization",
        "--fdevice-syntax-only", "--numba-debug", "--enable-tile", "--tile-only", "--simt-only",
        "--diagnose-implicit-tile-var", "--disable-warnings", "--no-display-error-number",
        "--Wreorder"}) {
    expect_flags({same}, {same});
  }
  // "OPTION VALUE", which NVRTC gets as OPTION=VALUE: the same groups, then precompiled headers
  // (the options the key can take without an --extra-digest).
  for (const char* given : {"--pre-include h.cuh",
                            "--std c++20",
                            "--builtin-move-forward false",
                            "--maxrregcount 32",
                            "--ftz true",
                            "--prec-div false",
                            "--prec-sqrt false",
                            "--fmad false",
                            "--ptxas-options -v",
                            "--dopt on",
                            "--Ofast-compile min",
                            "--split-compile 0",
                            "--frandom-seed 7",
                            "--diag-suppress 177",
                            "--diag-warn 3",
                            "--brief-diagnostics true",
                            "--optimization-info inline",
                            "--pch-verbose false",
                            "--pch-messages false",
                            "--instantiate-templates-in-pch false"}) {
    const std::string_view text = given;
    const std::string option(text.substr(0, text.find(' ')));
    const std::string value(text.substr(text.find(' ') + 1));
    expect_flags({option, value}, {option + "=" + value});
  }
  // The rest: other names, several values, an option that is cucore's own.
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> table = {
      {{"-I", "inc"}, {"--include-path=inc"}},
      {{"-D", "X=1", "-DY"}, {"--define-macro=X=1", "--define-macro=Y"}},
      {{"-U", "X"}, {"--undefine-macro=X"}},
      {{"--default-device"}, {"--device-as-default-execution-space"}},
      {{"-G"}, {"--device-debug"}},
      {{"--lineinfo"}, {"--generate-line-info"}},
      {{"--use-fast-math"}, {"--use_fast_math"}},
      {{"--rdc"}, {"--relocatable-device-code=true"}},
      {{"--no-compiler-cache"}, {"--no-cache"}},
      {{"--default-tile"}, {"-default-tile"}},
      {{"--diag-error", "20", "--diag-error", "21"}, {"--diag-error=20,21"}},
      {{"--warning-as-error", "reorder", "--warning-as-error", "conversion"},
       {"--warning-as-error=reorder,conversion"}},
      {{"--no-auto-pch"}, {}},  // cucore's own: no NVRTC flag, no key field
      {{"--pch", "--extra-digest", "00"}, {"--pch"}},
      {{"--use-pch", "a.pch", "--extra-digest", "00"}, {"--use-pch=a.pch"}},
      {{"--pch-dir", "/tmp", "--extra-digest", "00"}, {"--pch-dir=/tmp"}},
      // Anything else, last
      {{"-Xnvrtc", "-jtd=50", "--std", "c++17"}, {"--std=c++17", "-jtd=50"}},
  };
  for (const auto& [extra, flags] : table) expect_flags(extra, flags);
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
  const error_cases refused = {
      {{"--time", "t.csv"}, "no cache key: --time (writes compile timings to a file)"},
      {{"--fdevice-time-trace", "t.json"}, "no cache key: --fdevice-time-trace (writes"},
      {{"--create-pch", "a.pch"}, "no cache key: --create-pch (writes a precompiled header)"},
      {{"--pch", "--pch-dir", "p"},
       "no cache key: --pch and --pch-dir make NVRTC read precompiled headers"},
      {{"--use-pch", "a.pch"}, "no cache key: --use-pch make"},
  };
  for (const auto& [extra, message] : refused) {
    const auto r = expect_error(cucore(plus({"key", "k.cu", "--arch", kArch}, extra)), 2, message);
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

// Like compile, key takes the compiler's version from the cache's memo: once the cache has seen
// the compiler, deriving a key loads no compiler library, and the key is the same either way.
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
  expect_error(cucore({"key", "scale.ll", "--arch", kArch, "--libdevice"}), 2,
               "no cache key: --libdevice");

  expect_error(cucore({"key", "--arch", kArch}), 2, "key needs a FILE");
  expect_error(cucore({"key", "m.cu", "--arch", kArch, "-o", "x"}), 2, "unknown option \"-o\"");
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
  std::vector<std::string> args = plus({"key", "--explain"}, options);
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
  const json compiled = json_of(plus({"compile", "--json"}, options));
  EXPECT_EQ(compiled["key"].string, j["key"].string);
  EXPECT_EQ(compiled["headers"]["tracked"].number, j["headers"]["tracked"].number);
}

}  // namespace
}  // namespace cucore::cli_tests
