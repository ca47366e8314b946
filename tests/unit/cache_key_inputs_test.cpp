// make_program_cache_key: the inputs other than the options (sources, headers, targets), and the
// compiler probes' part in the key.
#include "cucore/cache/key.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <utility>

#include "cache_key_test_support.hpp"
#include "cucore/cache/statistics.hpp"
#include "cucore/error.hpp"
#include "cucore/toolkit.hpp"
#include "test_support.hpp"

namespace cucore {
namespace {

using namespace testing;  // cache_key_test_support.hpp and the shared test helpers

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

}  // namespace
}  // namespace cucore
