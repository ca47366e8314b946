// `cucore compile`'s compiler options (cli_test; cli_test_support.hpp): -default-device, -Xnvrtc,
// Tile code with NVRTC 13.1+, in-memory headers, macros, include paths and the toolkit's headers.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cli_test_support.hpp"

namespace cucore::cli_tests {
namespace {

// ---------------------------------------------------------------------------------------------
// cucore compile: compiler options

// CUTLASS and CuTe need NVRTC's -default-device: functions without an execution space are device
// functions. Without it NVRTC refuses them (and says to pass it).
TEST_F(Compile, DefaultDeviceCompilesUnannotatedFunctions) {
  file("dd.cu",
       "int twice(int x) { return 2 * x; }\n"
       "extern \"C\" __global__ void k(int* p) { *p = twice(*p); }\n");
  auto r = expect_error(cucore({"compile", "dd.cu", "--arch", kArch, "--target", "ptx"}), 1,
                        "-default-device");
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
  const json plain = json_of(base);
  EXPECT_FALSE(contains(output("sw.ptx"), "brx.idx"));
  // -jtd=0: a jump table for every switch. Both spellings of -Xnvrtc; NVRTC's two-element form.
  const json jump = json_of(plus(base, {"-Xnvrtc", "-jtd=0"}));
  EXPECT_EQ(jump["cache"].string, "miss");
  EXPECT_TRUE(contains(output("sw.ptx"), "brx.idx"));
  EXPECT_NE(jump["key"].string, plain["key"].string);
  EXPECT_EQ(json_of(plus(base, {"-Xnvrtc=-jtd=0"}))["cache"].string, "hit");
  EXPECT_EQ(json_of(base)["cache"].string, "hit");
  EXPECT_FALSE(contains(output("sw.ptx"), "brx.idx")) << "the hit without -Xnvrtc is the plain one";
  const json split = json_of(plus(base, {"-Xnvrtc", "--jump-table-density", "-Xnvrtc", "0"}));
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

// --target tile-ir and --tile-ir-output with NVRTC 13.5: miss then hit, the bytes of an uncached
// compile, the Tile IR of a cubin compile from the same entry.
TEST_F(Compile, TileIrWithNvrtc13_5MissThenHitWithTheUncachedBytes) {
  const std::string root = cuda_13_5_root();
  if (root.empty()) return;
  const environment nvrtc_13_5 = {{"CUCORE_CUDA_HOME", root}, {"CUCORE_CUDA_HOME_ONLY", "1"}};
  file("k.cu", testing::data_file("mixed_tile.cu"));
  const std::vector<std::string> base = {"compile", "k.cu",  "--arch",        "sm_100",
                                         "--std",   "c++20", "--enable-tile", "--json"};
  const json plain_ir = json_of(
      plus(base, {"--target", "tile-ir", "--cache", "none", "-o", "plain.tile_ir"}), nvrtc_13_5);
  EXPECT_EQ(plain_ir["code_type"].string, "tile_ir");
  EXPECT_TRUE(output("plain.tile_ir").starts_with(std::string_view("\x7fTileIR", 7)));
  EXPECT_TRUE(contains(output("plain.tile_ir"), "tile_copy"));
  // Two compiles of `args`, a miss then a hit; `check` reads each one's report and outputs.
  auto miss_then_hit = [&](const std::vector<std::string>& args, const auto& check) {
    for (const char* outcome : {"miss", "hit"}) {
      SCOPED_TRACE(outcome);
      const json j = json_of(args, nvrtc_13_5);
      EXPECT_EQ(j["cache"].string, outcome);
      check(j);
    }
  };
  miss_then_hit(plus(base, {"--target", "tile-ir"}), [&](const json& j) {
    EXPECT_EQ(j["output"].string, "k.tile_ir");
    EXPECT_EQ(output("k.tile_ir"), output("plain.tile_ir"));
  });
  const json plain = json_of(plus(base, {"--cache", "none", "-o", "plain.cubin", "--tile-ir-output",
                                         "plain-alongside.tile_ir"}),
                             nvrtc_13_5);
  EXPECT_EQ(plain["tile_ir_bytes"].number, static_cast<double>(output("plain.tile_ir").size()));
  EXPECT_EQ(output("plain-alongside.tile_ir"), output("plain.tile_ir"));
  std::string cubin_key;
  miss_then_hit(plus(base, {"--tile-ir-output", "k.alongside"}), [&](const json& j) {
    EXPECT_EQ(j["code_type"].string, "cubin");
    EXPECT_EQ(output("k.cubin"), output("plain.cubin"));
    EXPECT_EQ(output("k.alongside"), output("plain.tile_ir")) << "Tile IR from the same entry";
    cubin_key = j["key"].string;
  });
  // A cubin of the same program without Tile code has another key, and no Tile IR to write.
  const json simt =
      json_of({"compile", "k.cu", "--arch", "sm_100", "--std", "c++20", "--simt-only", "--json"},
              nvrtc_13_5);
  EXPECT_NE(simt["key"].string, cubin_key);
  EXPECT_TRUE(simt["tile_ir_bytes"].is(json::kind::null));
  expect_error(cucore({"compile", "k.cu", "--arch", "sm_100", "--std", "c++20", "--simt-only",
                       "--tile-ir-output", "none.tile_ir"},
                      nvrtc_13_5),
               1, "--tile-ir-output: the compile made no Tile IR");
  const auto both =
      cucore(plus(base, {"--target", "tile-ir", "--tile-ir-output", "x"}), nvrtc_13_5);
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
  const error_cases refused = {
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
  for (const char* command : {"compile", "key"}) {
    expect_errors({command, "k.cu", "--arch", kArch}, refused);
  }
  EXPECT_FALSE(exists("k.cubin"));

  // Compiled without the cache, `note` on stderr saying why, nothing stored.
  auto not_cached = [&](const std::vector<std::string>& args, const std::string& note) {
    const auto r = cucore(args);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, ", not cached)")) << r.out;
    EXPECT_TRUE(contains(r.err, "note: not cached: -Xnvrtc " + note)) << r.err;
    EXPECT_TRUE(entry_files(cache_.path()).empty());
  };

  // -Xcudafe passes the next element to NVRTC's front end: compiled, never cached.
  const std::vector<std::string> cudafe = {
      "compile", "k.cu",     "--arch",  kArch,
      "-Xnvrtc", "-Xcudafe", "-Xnvrtc", "--display_error_number"};
  not_cached(cudafe,
             "\"-Xcudafe\" \"--display_error_number\": they pass options to a tool inside NVRTC");
  std::vector<std::string> key = cudafe;
  key[0] = "key";
  expect_error(cucore(key), 2, "error: no cache key: -Xnvrtc \"-Xcudafe\"");

  // An option not in the table of NVRTC's options (one NVRTC 13.0 takes but does not document):
  // compiled, never cached, the reason said; no guessing from its name.
  not_cached({"compile", "k.cu", "--arch", kArch, "-Xnvrtc", "--no-lineinfo-inlined-at"},
             "\"--no-lineinfo-inlined-at\": it is not an NVRTC option cucore knows");
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

  expect_errors({"compile", "h.cu", "--arch", kArch},
                {{{"--header", "cfg.cuh"}, "--header cfg.cuh: give NAME=FILE"},
                 {{"--header", "=v.h"}, "--header =v.h: give NAME=FILE"},
                 {{"--header", "a.h=v.h", "--header", "a.h=v.h"},
                  "--header \"a.h\" repeats headers[0]: give each name once"}});
  expect_error(cucore({"compile", "h.cu", "--arch", kArch, "--header", "cfg.cuh=missing.h"}), 1,
               "cannot read \"missing.h\"");
}

TEST_F(Compile, MacrosAndIncludePathsReachTheCompiler) {
  file("value.cu",
       "#ifndef VALUE\n#define VALUE 7\n#endif\n"
       "extern \"C\" __global__ void w(int* p) { *p = VALUE; }\n");
  auto ptx_with = [&](std::vector<std::string> extra) {
    const auto r = cucore(plus({"compile", "value.cu", "--arch", kArch, "--target", "ptx"}, extra));
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
    const auto r =
        cucore(plus({"compile", "include.cu", "--arch", kArch, "--target", "ptx"}, include));
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(output("include.ptx"), ", 46;"));
  }
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

  r = expect_error(
      cucore({"compile", "a/k.cu", "--arch", kArch, "--target", "ptx", "--no-source-include"}), 1,
      "a/k.cu(1): catastrophic error");
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

  auto r = expect_error(
      cucore({"compile", "c.cu", "--arch", kArch, "--no-toolkit-include", "-o", "no.cubin"}), 1,
      "cuda/std/complex");
  EXPECT_TRUE(contains(r.err, "NVRTC compilation failed")) << r.err;
  EXPECT_FALSE(exists("no.cubin"));

  // Refused by name for code NVRTC does not compile, like every c++ option.
  file("scale.ll", kScaleIr);
  expect_error(cucore({"compile", "scale.ll", "--arch", kArch, "--no-toolkit-include"}), 2,
               "toolkit_include_path");
  expect_error(cucore({"key", "scale.ll", "--arch", kArch, "--no-source-include"}), 2,
               "no_source_include");
}

}  // namespace
}  // namespace cucore::cli_tests
