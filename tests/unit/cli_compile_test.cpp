// `cucore compile` (cli_test; cli_test_support.hpp): the outputs of each code type, the human and
// --json reports, compile errors, and the command lines it refuses.
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "cli_test_support.hpp"

namespace cucore::cli_tests {
namespace {

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
    const auto r =
        cucore(plus({"compile", "k.cu", "--arch", kArch, "--target", "ptx", "--json"}, extra));
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
  const auto r =
      expect_error(cucore({"compile", "bad.cu", "--arch", kArch}), 1, "bad.cu(3): error");
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

// ---------------------------------------------------------------------------------------------
// cucore compile: refused command lines and missing inputs

TEST_F(Compile, UnsupportedTargetNamesTheSupportedOnes) {
  file("scale.ll", kScaleIr);
  expect_error(cucore({"compile", "scale.ll", "--arch", kArch, "--target", "cubin"}), 2,
               "supported: ptx, ltoir");
  EXPECT_FALSE(exists("scale.cubin"));
}

TEST_F(Compile, OptionsTheCodeTypeRefusesAreUsageErrors) {
  file("scale.ll", kScaleIr);
  expect_error(cucore({"compile", "scale.ll", "--arch", kArch, "--lineinfo"}), 2, "lineinfo");

  expect_error(cucore({"compile", "scale.ll", "--arch", kArch, "--name-expression", "scale"}), 2,
               "--name-expression");
}

TEST_F(Compile, MissingArchWithoutGpuSaysToPassArch) {
  if (has_gpu()) GTEST_SKIP() << "a GPU provides the default arch";
  file("saxpy.cu", kSaxpy);
  const auto r = expect_error(cucore({"compile", "saxpy.cu"}), 1, "no arch given");
  EXPECT_TRUE(contains(r.err, "--arch")) << r.err;
}

TEST_F(Compile, BadArchIsAUsageError) {
  file("saxpy.cu", kSaxpy);
  expect_error(cucore({"compile", "saxpy.cu", "--arch", "sm90"}), 2, "--arch");
}

// NVRTC says only "invalid value for --gpu-architecture": the tool names the value and the
// architectures the loaded NVRTC compiles for.
TEST_F(Compile, AnArchNvrtcDoesNotCompileForNamesTheSupportedOnes) {
  file("saxpy.cu", kSaxpy);
  auto r = expect_error(cucore({"compile", "saxpy.cu", "--arch", "sm_9999"}), 2,
                        "--arch: arch \"sm_9999\" is not an architecture NVRTC");
  EXPECT_TRUE(contains(r.err, "sm_90")) << r.err;
  EXPECT_FALSE(exists("saxpy.cubin"));
  r = cucore({"compile", "saxpy.cu", "--arch", "compute_9999", "--target", "ptx", "--json"});
  EXPECT_EQ(r.status, 2) << describe(r);
  EXPECT_TRUE(contains(parse_json(r.out)["error"].string, "arch \"compute_9999\"")) << r.out;
}

TEST_F(Compile, MissingFile) {
  expect_error(cucore({"compile", "missing.cu", "--arch", kArch}), 1,
               "\"missing.cu\": No such file or directory");
}

TEST_F(Compile, NoFileOrTwoFilesAreUsageErrors) {
  EXPECT_EQ(cucore({"compile", "--arch", kArch}).status, 2);
  file("a.cu", kSaxpy);
  file("b.cu", kSaxpy);
  expect_error(cucore({"compile", "a.cu", "b.cu", "--arch", kArch}), 2, "b.cu");
}

TEST_F(Compile, UnknownOptionIsAUsageError) {
  file("saxpy.cu", kSaxpy);
  const auto r = expect_error(cucore({"compile", "saxpy.cu", "--arch", kArch, "--frobnicate"}), 2,
                              "unknown option \"--frobnicate\"");
  EXPECT_TRUE(contains(r.err, "cucore compile --help")) << r.err;
  EXPECT_FALSE(exists("saxpy.cubin"));
}

TEST_F(Compile, ValuesAreParsedStrictly) {
  file("saxpy.cu", kSaxpy);
  expect_errors({"compile", "saxpy.cu", "--arch", kArch},
                {{{"--maxrregcount", "12x"}, "--maxrregcount: \"12x\" is not an integer"},
                 {{"--diag-suppress", ""}, "--diag-suppress"},
                 {{"--ftz", "yes"}, "--ftz"}});

  expect_error(cucore({"compile", "saxpy.cu", "--arch"}), 2, "--arch needs a value");

  // Good values of the same options compile.
  const auto r = cucore({"compile",
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
  expect_error(cucore({"compile", "kernel.txt", "--arch", kArch}), 2, "--code-type");

  const auto r = cucore({"compile", "kernel.txt", "--arch", kArch, "--code-type", "c++"});
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

}  // namespace
}  // namespace cucore::cli_tests
