// make_program_cache_key against the installed libraries and across processes, and ptxas options
// that name files.
#include "cucore/cache/key.hpp"

#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>

#include "cache_key_test_support.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/toolkit.hpp"
#include "test_support.hpp"

extern char** environ;  // NOLINT

namespace cucore {
namespace {

using namespace testing;  // cache_key_test_support.hpp and the shared test helpers

// ---------------------------------------------------------------------------------------------
// The installed libraries

TEST(InstalledCompilerProbes, ReportTheLoadedLibraries) {
  const auto& probes = installed_compiler_probes();
  EXPECT_EQ(&probes, &installed_compiler_probes());
  const auto nvrtc = probes.nvrtc();
  if (toolkit::status(toolkit::library::nvrtc).found) {
    ASSERT_TRUE(nvrtc.ok) << nvrtc.value;
    EXPECT_TRUE(nvrtc.value.starts_with(toolkit::nvrtc_version().to_string() + ";release=V"))
        << nvrtc.value;
    EXPECT_TRUE(contains(nvrtc.value, ";build=CL-")) << nvrtc.value;
  } else {
    EXPECT_FALSE(nvrtc.ok);
    EXPECT_EQ(nvrtc.value, "library_not_found");
  }
  const auto nvvm = probes.nvvm();
  if (toolkit::status(toolkit::library::nvvm).found) {
    ASSERT_TRUE(nvvm.ok) << nvvm.value;
    const auto v = toolkit::nvvm_version();
    EXPECT_TRUE(nvvm.value.starts_with("lib=" + v.library.to_string() + ";ir=" + v.ir.to_string() +
                                       "." + v.debug_metadata.to_string() + ";release=V"))
        << nvvm.value;
    EXPECT_TRUE(contains(nvvm.value, ";build=CL-")) << nvvm.value;
  } else {
    EXPECT_FALSE(nvvm.ok);
  }
  const auto link = probes.linker();
  EXPECT_EQ(link.backend, linker::which_backend());
  if (link.backend == linker_backend::nvjitlink) {
    ASSERT_TRUE(link.ok) << link.failure;
    EXPECT_TRUE(link.version.starts_with(toolkit::nvjitlink_version().to_string() + ";release=V"))
        << link.version;
    EXPECT_FALSE(contains(link.version, "libcuda")) << "nvJitLink keys do not depend on the driver";
  } else if (toolkit::status(toolkit::library::driver).found) {
    ASSERT_TRUE(link.ok) << link.failure;
    EXPECT_TRUE(contains(link.version, ";file=libcuda")) << link.version;
  } else {
    EXPECT_FALSE(link.ok);
    EXPECT_EQ(link.failure, "library_not_found");
  }
  // Stable within the process.
  EXPECT_EQ(probes.nvrtc().value, nvrtc.value);
  EXPECT_EQ(probes.nvvm().value, nvvm.value);
  EXPECT_EQ(probes.linker().version, link.version);
}

// The probes are the only environment input: the installed probes' key equals the key of fixed
// probes holding the same values.
TEST(InstalledCompilerProbes, AreTheOnlyEnvironmentInput) {
  const auto& installed = installed_compiler_probes();
  fixed_probes copy;
  copy.nvrtc_result = installed.nvrtc();
  copy.nvvm_result = installed.nvvm();
  copy.linker_result = installed.linker();
  for (auto type : kAllTypes) {
    const auto in = base(type);
    EXPECT_EQ(make_program_cache_key(in), key(in, copy)) << type_name(type);
    EXPECT_EQ(make_program_cache_key(in), make_program_cache_key(in)) << type_name(type);
  }
}

// ---------------------------------------------------------------------------------------------
// Across processes

constexpr const char* kChildEnv = "CUCORE_KEY_TEST_CHILD_OUT";

std::string keys_for_cross_process_check() {
  std::string out;
  auto add = [&](const program_cache_key_inputs& in, const compiler_probes& p) {
    out += make_program_cache_key(in, p).hex() + "\n";
  };
  auto cxx = base();
  cxx.name_expressions = {"k2", "k1"};
  cxx.options.define_macro = {"A", macro{"B", "2"}};
  cxx.options.ftz = true;
  auto nvvm = base(source_type::nvvm);
  nvvm.options.extra_sources = {{"m", "x"}};
  for (const auto* in : {&cxx, &nvvm}) {
    add(*in, kProbes);
    add(*in, installed_compiler_probes());
  }
  add(base(source_type::ptx), kProbes);
  add(base(source_type::ptx), installed_compiler_probes());
  return out;
}

// Runs only in the child process started by SameKeyInAnotherProcess.
TEST(CacheKeyChildProcess, WriteKeys) {
  const char* path = std::getenv(kChildEnv);
  if (path == nullptr) GTEST_SKIP() << "helper of MakeProgramCacheKey.SameKeyInAnotherProcess";
  cucore::testing::write_text(path, keys_for_cross_process_check());
}

TEST(MakeProgramCacheKey, SameKeyInAnotherProcess) {
  temp_dir dir;
  const std::string out = (dir / "keys.txt").string();
  std::string exe = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string filter = "--gtest_filter=CacheKeyChildProcess.WriteKeys";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (std::strncmp(*e, kChildEnv, std::strlen(kChildEnv)) != 0) env_strings.emplace_back(*e);
  }
  env_strings.push_back(std::string(kChildEnv) + "=" + out);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<char*> argv = {exe.data(), filter.data(), nullptr};

  pid_t pid = 0;
  ASSERT_EQ(::posix_spawn(&pid, exe.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  const std::string theirs = cucore::testing::read_text(out);
  EXPECT_FALSE(theirs.empty());
  EXPECT_EQ(theirs, keys_for_cross_process_check());
}

// ---------------------------------------------------------------------------------------------
// ptxas options that name files (issue 39): ptxas reads or writes them, the key does not walk
// them, so every spelling bypasses (option_file); ptxas's ordinary options do not.

TEST(MakeProgramCacheKey, PtxasOptionsNamingFilesBypass) {
  const std::vector<std::vector<std::string>> naming = {
      {"--options-file=opts.txt"},
      {"-optf=opts.txt"},
      {"-optf=/abs/opts.txt,other.txt"},
      {"--options-file", "opts.txt"},
      {"-optf", "../opts.txt"},
      {"-v", "-optf=opts.txt"},
      {"--maxrregcount=32", "--options-file=opts.txt"},
      {"--output-file=out.o"},
      {"-o=out.o"},
      {"-o", "out.o"},
      {"opts.txt"},                         // no option: ptxas reads it as a PTX input file
      {" -v"},                              // the same (ptxas: "Input file ' -v'")
      {"-O", "2"},                          // -O takes no separate value: "2" is an input file
      {"--compiler-stats-file=stats.txt"},  // hidden options of the built-in ptxas
      {"--apply-controls=c.txt"},
      {"-v,-optf=opts.txt"},  // one argument, as NVRTC passes it (ptxas fails it; still bypassed)
      {"-v -optf=opts.txt"},
      {"--help"},
      {"-ofoo.o"},
  };
  for (const source_type type : {source_type::cxx, source_type::ptx}) {
    for (const auto& options : naming) {
      SCOPED_TRACE(std::string(type_name(type)) + ": " + options.front());
      auto in = base(type);
      in.options.ptxas_options = options;
      const program_cache_key k = key(in);
      ASSERT_TRUE(k.bypass().has_value());
      EXPECT_EQ(k.bypass()->reason, cache_skip_reason::option_file);
      EXPECT_TRUE(contains(k.bypass()->why, "ptxas_options")) << k.bypass()->why;
      EXPECT_TRUE(contains(k.bypass()->why, "without the cache")) << k.bypass()->why;
    }
  }
  // The why names the option and the file.
  auto in = base();
  in.options.ptxas_options = {"-optf", "my_opts.txt"};
  const std::string why = key(in).bypass()->why;
  EXPECT_TRUE(contains(why, "\"-optf\"")) << why;
  EXPECT_TRUE(contains(why, "my_opts.txt")) << why;
  EXPECT_TRUE(contains(why, "--options-file")) << why;
  in.options.ptxas_options = {"--output-file=written.o"};
  const std::string writes = key(in).bypass()->why;
  EXPECT_TRUE(contains(writes, "written.o")) << writes;
  EXPECT_TRUE(contains(writes, "write")) << writes;
}

TEST(MakeProgramCacheKey, OrdinaryPtxasOptionsDoNotBypass) {
  const std::vector<std::vector<std::string>> ordinary = {
      {"-v"},
      {"--verbose"},
      {"--maxrregcount=32"},
      {"-maxrregcount=32"},
      {"--maxrregcount", "32"},
      {"-O3"},
      {"-O=3"},
      {"-O0"},
      {"--opt-level=2"},
      {"--opt-level", "2"},
      {"--warn-on-spills"},
      {"-warn-spills"},
      {"-v", "--warn-on-local-memory-usage", "-Werror"},
      {"-m64"},
      {"--fmad", "false"},
      {"--entry=k"},
      {"-e", "k"},
      {"--allow-expensive-optimizations=true"},
      {"-Ofc=max"},
      {"--device-debug"},
      {"-lineinfo"},
      {"--def-load-cache"},
  };
  for (const source_type type : {source_type::cxx, source_type::ptx}) {
    for (const auto& options : ordinary) {
      SCOPED_TRACE(std::string(type_name(type)) + ": " + options.front());
      auto in = base(type);
      in.options.ptxas_options = options;
      const program_cache_key k = key(in);
      EXPECT_FALSE(k.bypass().has_value()) << k.bypass()->why;
    }
  }
}

}  // namespace
}  // namespace cucore
