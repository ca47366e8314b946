// `cucore info` and the tool's help, version and bad command lines (cli_test;
// cli_test_support.hpp): the libraries found and where from (toolkit roots, CUDA 12 and 13 wheels),
// the include directories, and every command's usage text.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "cli_test_support.hpp"

namespace cucore::cli_tests {
namespace {

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

// A directory of its own holding k.cu, and the environment `given` with a cache in that directory.
struct kernel_dir {
  kernel_dir(const std::string& source, environment given) : env(std::move(given)) {
    write_text(dir.path() / "k.cu", source);
    env.emplace_back("CUCORE_CACHE_DIR", path("cache"));
  }
  std::string path(const char* name) const { return (dir.path() / name).string(); }
  // Compiles k.cu to k.ptx for sm_80.
  std::vector<std::string> ptx_compile() const {
    return {"compile", path("k.cu"), "--arch", "sm_80", "--target", "ptx", "-o", path("k.ptx")};
  }

  temp_dir dir;
  environment env;
};

constexpr const char* kCstdintKernel =
    "#include <cuda/std/cstdint>\n"
    "extern \"C\" __global__ void k(cuda::std::uint32_t* x) { *x = 1; }\n";

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
    const kernel_dir k(kCstdintKernel, env);
    const auto r = cucore(k.ptx_compile(), k.env);
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
    const kernel_dir k(kCstdintKernel, env);
    const auto r = cucore({"key", "--explain", k.path("k.cu"), "--arch", "sm_80"}, k.env);
    ASSERT_EQ(r.status, 0) << describe(r);
    EXPECT_TRUE(contains(r.out, "\n  nvrtc          12.9;")) << r.out;
    const auto c = cucore(k.ptx_compile(), k.env);
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
  const kernel_dir k(
      "#include <cub/block/block_reduce.cuh>\n"
      "extern \"C\" __global__ void k(int* x) {\n"
      "  using R = cub::BlockReduce<int, 32>;\n"
      "  __shared__ R::TempStorage s;\n"
      "  *x = R(s).Sum(x[threadIdx.x]);\n}\n",
      env);
  const std::vector<std::string> args = {"compile", k.path("k.cu"), "--arch",         "sm_80",
                                         "--json",  "-o",           k.path("k.cubin")};
  const json miss = json_of(args, k.env);
  EXPECT_EQ(miss["cache"].string, "miss");
  EXPECT_EQ(json_of(args, k.env)["cache"].string, "hit");

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
  expect_error(cucore({}), 2, "Usage: cucore");

  auto r = expect_error(cucore({"frobnicate"}), 2, "unknown command \"frobnicate\"");
  EXPECT_TRUE(contains(r.err, "cucore --help")) << r.err;

  expect_error(cucore({"--frobnicate"}), 2, "--frobnicate");

  r = cucore({"info", "extra"});
  EXPECT_EQ(r.status, 2) << describe(r);

  r = cucore({"help", "frobnicate"});
  EXPECT_EQ(r.status, 2) << describe(r);
}

}  // namespace
}  // namespace cucore::cli_tests
