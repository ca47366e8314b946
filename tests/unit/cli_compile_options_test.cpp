// End-to-end tests of `cucore compile`'s options (cli_test_support.hpp runs the tool): NVRTC
// versions and -Xnvrtc, headers, macros and include paths, and the usage errors.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli_test_support.hpp"

namespace cucore {
namespace {

namespace fs = std::filesystem;
using namespace testing;  // cli_test_support.hpp and the shared test helpers

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

}  // namespace
}  // namespace cucore
