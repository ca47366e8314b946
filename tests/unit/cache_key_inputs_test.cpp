// make_program_cache_key: the inputs besides program_options (code, code type, target, name
// expressions, extra_digest, NVVM modules), the compiler probes, the installed libraries, and the
// same key in another process.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "cache_key_test_support.hpp"
#include "cucore/toolkit.hpp"
#include "test_support.hpp"

extern char** environ;  // NOLINT

namespace cucore {
namespace {

using namespace cucore::testing;  // NOLINT: the key tests' fixtures

// ---------------------------------------------------------------------------------------------
// The other inputs

TEST(MakeProgramCacheKey, CodeChangesTheKey) {
  for (auto type : kAllTypes) {
    auto in = base(type);
    const std::string changed = std::string(in.code) + " ";
    auto other = base(type);
    other.code = changed;
    EXPECT_NE(key(in), key(other)) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, CodeTypeChangesTheKey) {
  // Same code text, options and target: only the code type differs.
  auto cxx = base(source_type::cxx);
  auto ptx = base(source_type::ptx);
  ptx.code = cxx.code;
  auto nvvm = base(source_type::nvvm);
  nvvm.code = cxx.code;
  nvvm.target = code_type::ptx;
  auto cxx_ptx = cxx;
  cxx_ptx.target = code_type::ptx;
  EXPECT_NE(key(cxx), key(ptx));
  EXPECT_NE(key(cxx_ptx), key(nvvm));
}

TEST(MakeProgramCacheKey, TargetChangesTheKey) {
  std::set<program_cache_key> keys;
  for (auto target : {code_type::ptx, code_type::cubin, code_type::ltoir}) {
    auto in = base();
    in.target = target;
    keys.insert(key(in));
  }
  EXPECT_EQ(keys.size(), 3u);
  auto ptx = base(source_type::nvvm);
  auto lto = base(source_type::nvvm);
  lto.target = code_type::ltoir;
  EXPECT_NE(key(ptx), key(lto));
}

TEST(MakeProgramCacheKey, TargetMatrixIsCheckTarget) {
  for (auto type : kAllTypes) {
    for (auto target : {code_type::ptx, code_type::cubin, code_type::ltoir, code_type::fatbin,
                        code_type::object, code_type::library}) {
      auto in = base(type);
      in.target = target;
      const auto ok = supported_targets(type);
      if (std::find(ok.begin(), ok.end(), target) != ok.end()) {
        EXPECT_NO_THROW((void)key(in)) << type_name(type) << " -> " << to_string(target);
      } else {
        auto msg = refusal(in);
        EXPECT_TRUE(contains(msg, to_string(target))) << msg;
        EXPECT_TRUE(contains(msg, "supported")) << msg;
      }
    }
  }
  // Unlike cuda.core, ptx -> ptx is refused: no backend turns PTX into PTX.
  auto in = base(source_type::ptx);
  in.target = code_type::ptx;
  EXPECT_TRUE(contains(refusal(in), "cubin"));
}

TEST(MakeProgramCacheKey, LinkTimeOptimizationIsImpliedByLtoirTarget) {
  auto a = base();
  a.target = code_type::ltoir;
  auto b = a;
  b.options.link_time_optimization = true;
  EXPECT_EQ(key(a), key(b)) << "NVRTC gets the same flags, so the same key";
}

TEST(MakeProgramCacheKey, NameExpressionsAreASet) {
  auto a = base();
  a.name_expressions = {"k<int>", "k<float>", "v"};
  auto b = base();
  b.name_expressions = {"v", "k<float>", "k<int>"};
  auto c = base();
  c.name_expressions = {"v", "k<float>", "k<int>", "v"};
  EXPECT_EQ(key(a), key(b));
  EXPECT_EQ(key(a), key(c)) << "repeats map to the same symbols";

  auto d = base();
  d.name_expressions = {"k<int>", "k<float>"};
  auto e = base();
  e.name_expressions = {"k<int>", "k<float>", "w"};
  EXPECT_NE(key(a), key(d));
  EXPECT_NE(key(a), key(e));
  EXPECT_NE(key(base()), key(d));
  // No concatenation ambiguity: {"ab"} is not {"a", "b"}.
  auto f = base();
  f.name_expressions = {"ab"};
  auto g = base();
  g.name_expressions = {"a", "b"};
  EXPECT_NE(key(f), key(g));
}

TEST(MakeProgramCacheKey, NameExpressionsMustBeNonEmptyText) {
  auto in = base();
  in.name_expressions = {"k", ""};
  auto msg = refusal(in);
  EXPECT_TRUE(contains(msg, "name_expressions[1]")) << msg;
  in.name_expressions = {std::string("k\0x", 3)};
  msg = refusal(in);
  EXPECT_TRUE(contains(msg, "NUL")) << msg;
}

// A binding's byte-string expressions (Python's b"k") key apart from the same text, as cuda.core's
// keys do; a text-only key is what it always was (the golden key pins that).
TEST(MakeProgramCacheKey, ByteNameExpressionsKeyApartFromText) {
  auto text = base();
  text.name_expressions = {"k<int>"};
  auto bytes = base();
  bytes.byte_name_expressions = {"k<int>"};
  auto both = base();
  both.name_expressions = {"k<int>"};
  both.byte_name_expressions = {"k<int>"};
  EXPECT_NE(key(text), key(bytes));
  EXPECT_NE(key(text), key(both));
  EXPECT_NE(key(bytes), key(both));
  EXPECT_NE(key(bytes), key(base()));
  EXPECT_EQ(payloads(key(bytes), "name"), std::vector<std::string>{"b:k<int>"});
  EXPECT_EQ(payloads(key(both), "name"), (std::vector<std::string>{"b:k<int>", "s:k<int>"}));
  auto repeated = base();
  repeated.byte_name_expressions = {"k<int>", "k<int>"};
  EXPECT_EQ(key(repeated), key(bytes)) << "a set, like name_expressions";
  bytes.byte_name_expressions = {"k", ""};
  auto msg = refusal(bytes);
  EXPECT_TRUE(contains(msg, "byte_name_expressions[1]")) << msg;
  for (auto type : {source_type::ptx, source_type::nvvm}) {
    auto in = base(type);
    in.byte_name_expressions = {"k", ""};
    EXPECT_EQ(key(in), key(base(type))) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, NameExpressionsIgnoredOutsideCxx) {
  for (auto type : {source_type::ptx, source_type::nvvm}) {
    auto in = base(type);
    in.name_expressions = {"k", "", std::string("a\0b", 3)};
    EXPECT_EQ(key(in), key(base(type))) << type_name(type);
    EXPECT_TRUE(payloads(key(in), "names_count").empty());
  }
}

TEST(MakeProgramCacheKey, ExtraDigest) {
  auto none = base();
  auto empty = base();
  empty.extra_digest = "";
  auto a = base();
  a.extra_digest = std::string(32, '\0');
  auto b = base();
  b.extra_digest = std::string(31, '\0') + '\x01';
  std::set<program_cache_key> keys = {key(none), key(empty), key(a), key(b)};
  EXPECT_EQ(keys.size(), 4u);
  for (auto type : {source_type::ptx, source_type::nvvm}) {
    auto with = base(type);
    with.extra_digest = "x";
    EXPECT_NE(key(with), key(base(type))) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, ProgramNameChangesTheKey) {
  for (auto type : kAllTypes) {
    auto in = base(type);
    in.options.name = "other";
    EXPECT_NE(key(in), key(base(type))) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, NvvmExtraSourcesInCallerOrder) {
  auto a = base(source_type::nvvm);
  a.options.extra_sources = {{"x", "define void @x() { ret void }"},
                             {"y", "define void @y() { ret void }"}};
  auto b = a;
  std::swap(b.options.extra_sources[0], b.options.extra_sources[1]);
  EXPECT_NE(key(a), key(b)) << "modules are added in order";
  auto renamed = a;
  renamed.options.extra_sources[0].name = "z";
  EXPECT_NE(key(a), key(renamed));
  // Name/code boundaries cannot be shifted.
  auto c = base(source_type::nvvm);
  c.options.extra_sources = {{"ab", "c"}};
  auto d = base(source_type::nvvm);
  d.options.extra_sources = {{"a", "bc"}};
  EXPECT_NE(key(c), key(d));
}

TEST(MakeProgramCacheKey, NvvmAcceptsBitcodeWithNul) {
  auto in = base(source_type::nvvm);
  const std::string bitcode("BC\xC0\xDE\0\0\x01", 7);
  in.code = bitcode;
  EXPECT_NO_THROW((void)key(in));
  auto other = base(source_type::nvvm);
  const std::string bitcode2("BC\xC0\xDE\0\0\x02", 7);
  other.code = bitcode2;
  EXPECT_NE(key(in), key(other));
}

TEST(MakeProgramCacheKey, RefusesNulInTextCodeAndEmptyCode) {
  for (auto type : {source_type::cxx, source_type::ptx}) {
    auto in = base(type);
    const std::string code("__global__ void k() {}\0", 23);
    in.code = code;
    auto msg = refusal(in);
    EXPECT_TRUE(contains(msg, "NUL")) << msg;
  }
  for (auto type : kAllTypes) {
    auto in = base(type);
    in.code = "";
    EXPECT_TRUE(contains(refusal(in), "empty"));
  }
}

// NVRTC takes an empty program name as "default_program" (and so does cuda.core): accepted, keyed
// as the name the result carries.
TEST(MakeProgramCacheKey, EmptyProgramNameIsAcceptedAndKeyed) {
  for (auto type : kAllTypes) {
    auto in = base(type);
    in.options.name = "";
    EXPECT_NE(key(in), key(base(type))) << type_name(type);
    EXPECT_EQ(payloads(key(in), "options_name"), std::vector<std::string>{""});
  }
}

TEST(MakeProgramCacheKey, RefusesUnknownCodeType) {
  auto in = base();
  in.code_type = static_cast<source_type>(42);
  auto msg = refusal(in);
  EXPECT_TRUE(contains(msg, "42")) << msg;
}

TEST(MakeProgramCacheKey, RefusesInvalidArch) {
  auto in = base();
  in.options.arch = "sm_9";
  auto msg = refusal(in);
  EXPECT_TRUE(contains(msg, "sm_9")) << msg;
}

TEST(MakeProgramCacheKey, UnresolvedArchWithoutGpu) {
  auto in = base();
  in.options.arch.reset();
  if (toolkit::device_count() > 0) {
    auto resolved = base();
    resolved.options.arch = toolkit::current_device_arch();
    EXPECT_EQ(key(in), key(resolved)) << "arch defaults to the current device's";
    GTEST_SKIP() << "a GPU is present: arch resolves";
  }
  for (auto type : kAllTypes) {
    in = base(type);
    in.options.arch.reset();
    auto msg = refusal(in);
    EXPECT_TRUE(contains(msg, "arch")) << msg;
  }
}

// ---------------------------------------------------------------------------------------------
// Probes

TEST(MakeProgramCacheKey, NvrtcVersionChangesOnlyCxxKeys) {
  fixed_probes other = kProbes;
  other.nvrtc_result.value = "13.1";
  EXPECT_NE(key(base(), other), key(base()));
  EXPECT_EQ(key(base(source_type::ptx), other), key(base(source_type::ptx)));
  EXPECT_EQ(key(base(source_type::nvvm), other), key(base(source_type::nvvm)));
  fixed_probes build = kProbes;
  build.nvrtc_result.value = "13.0;release=V13.0.88;build=CL-1";
  fixed_probes build2 = kProbes;
  build2.nvrtc_result.value = "13.0;release=V13.0.89;build=CL-2";
  EXPECT_NE(key(base(), build), key(base(), build2));
}

TEST(MakeProgramCacheKey, NvvmVersionsChangeOnlyNvvmKeys) {
  fixed_probes lib = kProbes;
  lib.nvvm_result.value = "lib=2.1;ir=2.0.3.2";
  fixed_probes ir = kProbes;
  ir.nvvm_result.value = "lib=2.0;ir=2.0.3.3";
  const auto k = key(base(source_type::nvvm));
  EXPECT_NE(key(base(source_type::nvvm), lib), k);
  EXPECT_NE(key(base(source_type::nvvm), ir), k);
  EXPECT_NE(key(base(source_type::nvvm), lib), key(base(source_type::nvvm), ir));
  EXPECT_EQ(key(base(), lib), key(base()));
  EXPECT_EQ(key(base(source_type::ptx), ir), key(base(source_type::ptx)));
}

TEST(MakeProgramCacheKey, LinkerProbeChangesOnlyPtxKeys) {
  const auto k = key(base(source_type::ptx));
  fixed_probes bump = kProbes;
  bump.linker_result.version = "13.1";
  EXPECT_NE(key(base(source_type::ptx), bump), k);
  // Backend flip with the same version text.
  fixed_probes flip = kProbes;
  flip.linker_result.backend = linker_backend::driver;
  EXPECT_NE(key(base(source_type::ptx), flip), k);
  for (auto type : {source_type::cxx, source_type::nvvm}) {
    fixed_probes failed = kProbes;
    failed.linker_result = {false, linker_backend::driver, "", "library_not_found"};
    EXPECT_EQ(key(base(type), failed), key(base(type))) << type_name(type);
    EXPECT_EQ(key(base(type), bump), key(base(type))) << type_name(type);
    EXPECT_EQ(key(base(type), fixed_probes::driver()), key(base(type))) << type_name(type);
  }
}

TEST(MakeProgramCacheKey, DriverVersionMattersOnlyUnderTheDriverLinker) {
  auto in = base(source_type::ptx);
  EXPECT_NE(key(in, fixed_probes::driver("13000")), key(in, fixed_probes::driver("13010")));
  EXPECT_NE(key(in, fixed_probes::driver("13000;file=libcuda.so.580.65.06")),
            key(in, fixed_probes::driver("13000;file=libcuda.so.580.82.07")));
  // Under nvJitLink the linker probe carries nvJitLink's identity only: the driver is no input.
  EXPECT_EQ(payloads(key(in), "linker_backend"), std::vector<std::string>{"nvJitLink"});
  EXPECT_EQ(payloads(key(in), "linker_version"), std::vector<std::string>{"13.0"});
}

TEST(MakeProgramCacheKey, ProbeFailureFailsClosed) {
  struct probe_case {
    source_type type;
    fixed_probes failed;
    const char* label;
  };
  fixed_probes nvrtc_failed = kProbes;
  nvrtc_failed.nvrtc_result = {false, "library_not_found"};
  fixed_probes nvvm_failed = kProbes;
  nvvm_failed.nvvm_result = {false, "library_not_found"};
  fixed_probes linker_failed = kProbes;
  linker_failed.linker_result = {false, linker_backend::nvjitlink, "", "library_not_found"};
  for (const auto& c : {probe_case{source_type::cxx, nvrtc_failed, "nvrtc_probe_failed"},
                        probe_case{source_type::nvvm, nvvm_failed, "nvvm_probe_failed"},
                        probe_case{source_type::ptx, linker_failed, "linker_probe_failed"}}) {
    SCOPED_TRACE(type_name(c.type));
    const auto working = key(base(c.type));
    const auto failed = key(base(c.type), c.failed);
    EXPECT_NE(failed, working);
    EXPECT_EQ(failed, key(base(c.type), c.failed)) << "stable across calls";
    EXPECT_EQ(labels(failed)[1], c.label);
    EXPECT_EQ(failed.explain()[1].payload, "library_not_found");
    // A failure never collides with a working probe whose value is the failure text.
    fixed_probes lookalike = kProbes;
    lookalike.nvrtc_result.value = "library_not_found";
    lookalike.nvvm_result.value = "library_not_found";
    lookalike.linker_result.version = "library_not_found";
    EXPECT_NE(failed, key(base(c.type), lookalike));
    // Different failure kinds differ.
    fixed_probes other = c.failed;
    other.nvrtc_result.value = "other";
    other.nvvm_result.value = "other";
    other.linker_result.failure = "other";
    EXPECT_NE(failed, key(base(c.type), other));
  }
}

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

}  // namespace
}  // namespace cucore
